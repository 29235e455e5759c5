"""HCAPO (a reconstruction, docs/methods.md#hcapo): a hindsight ratio of 1 is GRPO, golden values
with a table scorer, the clip, the outcome text only in scoring contexts, a clear error without
texts, and the tiny policy model as the scorer."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import make_groups

from agentrl.configuration import ConfigError
from agentrl.credit import compute_advantages, estimator_config
from agentrl.credit.batch import StepBatch

LN3 = math.log(3.0)
EPS = 1e-6


def text_batch() -> StepBatch:
    """Group 0: i0 won (two steps, responses "a", "b"), i1 lost (one step "c"); group 1: i0 won
    (one step), i1 lost (one step). Prompts ``"g{g} i{i} t{t}"``."""
    groups = make_groups(
        [
            [[("s", "a", 0.0), ("t", "b", 1.0)], [("s", "c", 0.0)]],
            [[("s", "a", 1.0)], [("s", "b", 0.0)]],
        ]
    )
    for g, group in enumerate(groups):
        for i, tr in enumerate(group.trajectories):
            tr.final_obs = "done" if tr.won else "stuck"
            for t, s in enumerate(tr.steps):
                s.prompt_text = f"g{g} i{i} t{t}"
                s.response_text = s.action
    return StepBatch.from_groups(groups)


class ConstantScorer:
    """The same log-prob whatever the context: the hindsight ratio is 1."""

    def score(self, contexts, responses):
        return np.full(len(contexts), -1.5)


class FirstStepScorer:
    """ℓ¹ − ℓ⁰ = Δ for the response "a" of ``g0 i0 t0`` under the outcome, 0 elsewhere; records
    the contexts it saw."""

    def __init__(self, delta: float):
        self.delta = delta
        self.contexts: list[str] = []

    def score(self, contexts, responses):
        self.contexts += list(contexts)
        return np.array(
            [
                -1.0 + (self.delta if c.startswith("g0 i0 t0\nOutcome:") else 0.0)
                for c, r in zip(contexts, responses)
            ]
        )


def hcapo(batch, scorer, **over):
    return compute_advantages("hcapo", batch, estimator_config("hcapo", over), scorer=scorer)


def test_hindsight_ratio_one_equals_grpo():
    batch = text_batch()
    np.testing.assert_array_equal(
        hcapo(batch, ConstantScorer()).step, compute_advantages("grpo", batch).step
    )


def test_golden_values_and_outcome_only_in_scoring_contexts():
    batch = text_batch()
    scorer = FirstStepScorer(LN3)
    out = hcapo(batch, scorer)
    # Trajectory g0 i0: ρ = (3, 1) → ρ̃ = (1.5, 0.5); GRPO of (1, 0): ±(0.5)/(√0.5 + ε).
    a = 0.5 / (math.sqrt(0.5) + EPS)
    np.testing.assert_allclose(out.step, [1.5 * a, 0.5 * a, -a, a, -a], rtol=1e-12)
    assert out.metrics["credit/rho_max"] == pytest.approx(1.5)
    assert scorer.contexts[:5] == ["g0 i0 t0", "g0 i0 t1", "g0 i1 t0", "g1 i0 t0", "g1 i1 t0"]
    assert scorer.contexts[5] == "g0 i0 t0\nOutcome: success. Final observation: done"
    assert scorer.contexts[7] == "g0 i1 t0\nOutcome: failure. Final observation: stuck"
    # ω = 0.5 keeps half the step term: A·(1 + 0.5(ρ̃ − 1)).
    half = hcapo(batch, FirstStepScorer(LN3), omega=0.5).step
    np.testing.assert_allclose(half[:2], [1.25 * a, 0.75 * a], rtol=1e-12)
    # Clip: Δ = ln 99 gives ρ̃ = (1.98, 0.02) → clipped to (1.98, 0.2).
    clipped = hcapo(batch, FirstStepScorer(math.log(99.0))).step
    np.testing.assert_allclose(clipped[:2], [1.98 * a, 0.2 * a], rtol=1e-12)
    unclipped = hcapo(batch, FirstStepScorer(math.log(99.0)), rho_clip=None).step
    np.testing.assert_allclose(unclipped[:2], [1.98 * a, 0.02 * a], rtol=1e-12)


def test_needs_texts_and_a_scorer():
    batch = text_batch()
    with pytest.raises(ValueError, match="needs a scorer"):
        compute_advantages("hcapo", batch)
    import dataclasses

    with pytest.raises(ValueError, match="needs its texts"):
        hcapo(dataclasses.replace(batch, texts=None), ConstantScorer())
    with pytest.raises(ConfigError, match=r"algo\.rho_clip"):
        estimator_config("hcapo", {"rho_clip": [2.0, 5.0]})


def test_with_the_tiny_policy_as_scorer():
    import torch

    from agentrl.model import ModelConfig, build_tiny_model, build_tokenizer
    from agentrl.model.scoring import PolicyScorer

    torch.manual_seed(0)
    tok = build_tokenizer(["g0 i0 t0 Outcome: success failure done stuck a b c"] * 4, 300)
    model = build_tiny_model(ModelConfig(), tok)
    batch = text_batch()
    out = hcapo(batch, PolicyScorer(model, tok, temperature=1.0))
    assert out.step.shape == (batch.n_steps,) and np.all(np.isfinite(out.step))
    assert out.metrics["credit/delta_std"] > 0
