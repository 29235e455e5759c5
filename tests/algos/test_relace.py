"""RELACE (a reconstruction, docs/methods.md#relace): golden values, Δ ≡ 0 reduction, success
mask, no outcome leak, slow reference = vectorised estimator, numerical edge cases, and the policy
scorer on the tiny model."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import math
import statistics

import numpy as np
import pytest
import torch
from helpers import make_groups
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrl.algos.relace import (
    RELACEConfig,
    anchor_local_advantage,
    outcome_text,
    relace_step_term,
    retrospective_weights,
)
from agentrl.configuration import ConfigError
from agentrl.credit import compute_advantages, estimator_config
from agentrl.credit.batch import Step, StepBatch, Trajectory, TrajectoryGroup
from agentrl.model import ModelConfig, build_tiny_model, build_tokenizer, encode_prompt
from agentrl.model.scoring import PolicyScorer

LN3 = math.log(3.0)


# ---------------------------------------------------------------------------- builders, scorers


def build(spec) -> list[TrajectoryGroup]:
    """Groups from ``spec[g][i] = (won, final_obs, [(anchor, reward, response), ...])``; the
    prompt of step t of trajectory i in group g is ``"g{g} i{i} t{t} at {anchor}"``."""
    groups = []
    for g, trajs in enumerate(spec):
        group = TrajectoryGroup(task=f"task {g}", seed=g)
        for i, (won, final_obs, steps) in enumerate(trajs):
            tr = Trajectory(won=won, final_obs=final_obs)
            for t, (anchor, reward, response) in enumerate(steps):
                tr.steps.append(
                    Step(
                        prompt_ids=[1],
                        response_ids=[2],
                        logprobs=[-0.5],
                        reward=float(reward),
                        terminated=t == len(steps) - 1,
                        truncated=False,
                        anchor=anchor,
                        action=response,
                        valid=True,
                        response_text=response,
                        prompt_text=f"g{g} i{i} t{t} at {anchor}",
                    )
                )
            group.trajectories.append(tr)
        groups.append(group)
    return groups


class TableScorer:
    """Deterministic dict lookup ``table[(context, response)] -> ℓ``; unknown pairs fail."""

    def __init__(self, table):
        self.table = table
        self.calls: list[tuple[list[str], list[str]]] = []

    def score(self, contexts, responses):
        self.calls.append((list(contexts), list(responses)))
        return np.array([self.table[(c, r)] for c, r in zip(contexts, responses)])


class HashScorer:
    """ℓ in (−4, 0] from a hash of the pair: any change of context changes the score."""

    def __init__(self, scale: float = 4.0):
        self.scale = scale

    def score(self, contexts, responses):
        out = []
        for c, r in zip(contexts, responses):
            h = int(hashlib.md5(f"{c}\x00{r}".encode()).hexdigest()[:8], 16)
            out.append(-self.scale * h / 2**32)
        return np.array(out)


class OutcomeBlindScorer:
    """ℓ depends on the context with any outcome text cut off, so Δ ≡ 0 exactly."""

    def score(self, contexts, responses):
        base = HashScorer()
        return base.score([c.split("\nOutcome:")[0] for c in contexts], responses)


class HugeDeltaScorer:
    """ℓ⁰ = 0 and ℓ¹ = ±1e4 (sign from a hash), to stress the stable normalisation."""

    def score(self, contexts, responses):
        out = []
        for c in contexts:
            if "\nOutcome:" not in c:
                out.append(0.0)
            else:
                out.append(1e4 if hashlib.md5(c.encode()).digest()[0] % 2 else -1e4)
        return np.array(out)


def relace_adv(batch, scorer, **overrides):
    return compute_advantages(
        "relace", batch, estimator_config("relace", overrides), scorer=scorer
    ).step


def grpo_adv(batch, norm_by_std=True):
    cfg = estimator_config("grpo", {"norm_by_std": norm_by_std})
    return compute_advantages("grpo", batch, cfg).step


# ---------------------------------------------------------------------------- 1. golden values

# One group of four trajectories (γ = 0.95, τ = 1, α = 0.3, ω = 1, mean_norm, clip (0.2, 5)):
#   i0 won : s (r 0) → t (r 1)     Δ = (ln 3, 0)
#   i1 lost: s (r 0) → t (r 0)     Δ = (0, ln 3)
#   i2 lost: s (r 0)               Δ = (0)
#   i3 won : s (r 0) → t (r 1)     Δ = (0, ln 3)
GOLDEN = [
    [
        (True, "done", [("s", 0, "a"), ("t", 1, "b")]),
        (False, "stuck", [("s", 0, "c"), ("t", 0, "c")]),
        (False, "", [("s", 0, "c")]),
        (True, "done", [("s", 0, "a"), ("t", 1, "b")]),
    ]
]
GOLDEN_DELTA = {(0, 0): LN3, (0, 1): 0.0, (1, 0): 0.0, (1, 1): LN3, (2, 0): 0.0}
GOLDEN_DELTA |= {(3, 0): 0.0, (3, 1): LN3}


def golden_scorer() -> TableScorer:
    table = {}
    for i, (won, obs, steps) in enumerate(GOLDEN[0]):
        # The augmented context is the prompt followed by exactly this outcome text.
        verdict = "success" if won else "failure"
        outcome = f"\nOutcome: {verdict}." + (f" Final observation: {obs}" if obs else "")
        for t, (anchor, _, resp) in enumerate(steps):
            prompt = f"g0 i{i} t{t} at {anchor}"
            table[(prompt, resp)] = -1.0
            table[(prompt + outcome, resp)] = -1.0 + GOLDEN_DELTA[(i, t)]
    return table


def test_golden_values():
    batch = StepBatch.from_groups(build(GOLDEN))
    scorer = TableScorer(golden_scorer())
    adv = relace_adv(batch, scorer)
    # w = exp(Δ)/mean_traj exp(Δ): i0 e = (3, 1) → w = (1.5, 0.5); i1, i3 → (0.5, 1.5); i2 → 1.
    # G (γ = .95): i0 = i3 = (.95, 1), i1 = (0, 0), i2 = (0).
    # G̃ = w·G: i0 (1.425, .5), i1 (0, 0), i2 (0), i3 (.475, 1.5).
    # Anchor s: {1.425, 0, 0, .475}, mean .475 → A^L = .95, −.475, −.475, 0.
    # Anchor t: {.5, 0, 1.5}, mean 2/3 → A^L = −1/6 (i0), −2/3 (i1), 5/6 (i3).
    # Smoothing, Ā_T = A_T, Ā_t = .7·A_t + .3·Ā_{t+1}:
    #   i0: Ā1 = −1/6, Ā0 = .665 − .05 = .615;  mask (won) → (.615, 0)
    #   i1: Ā1 = −2/3, Ā0 = −.3325 − .2 = −.5325
    #   i2: Ā0 = −.475
    #   i3: Ā1 = 5/6, Ā0 = 0 + .25 = .25
    # GRPO: returns (1, 0, 0, 1), mean .5, unbiased std √(1/3) → ±a, a = .5/(√(1/3) + 1e-6).
    a = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    expected = [a + 0.615, a + 0.0, -a - 0.5325, -a - 2 / 3, -a - 0.475, a + 0.25, a + 5 / 6]
    np.testing.assert_allclose(adv, expected, rtol=1e-12, atol=1e-12)
    # Two batched calls over all 7 steps: the originals first, then the augmented contexts.
    assert len(scorer.calls) == 2 and all(len(c[0]) == 7 for c in scorer.calls)
    assert scorer.calls[1][0][0] == "g0 i0 t0 at s\nOutcome: success. Final observation: done"
    assert scorer.calls[1][0][4] == "g0 i2 t0 at s\nOutcome: failure."


def test_golden_intermediates_clip_and_std_mode():
    batch = StepBatch.from_groups(build(GOLDEN))
    delta = np.array([LN3, 0.0, 0.0, LN3, 0.0, 0.0, LN3])
    terms = relace_step_term(batch, delta, RELACEConfig(w_clip=(0.8, 1.2)))
    # Unclipped w = (1.5, .5, .5, 1.5, 1, .5, 1.5) clipped to [.8, 1.2].
    np.testing.assert_allclose(terms["w"], [1.2, 0.8, 0.8, 1.2, 1.0, 0.8, 1.2])
    # One trajectory Δ = (ln 8, 0, 0): e = (8, 1, 1), mean 10/3 → w = (2.4, .3, .3).
    w = retrospective_weights(np.log([8.0, 1.0, 1.0]), np.zeros(3, dtype=np.int64), 1, 1.0)
    np.testing.assert_allclose(w, [2.4, 0.3, 0.3])
    # mean_std_norm on anchor s = {1.425, 0, 0, .475}: deviations (.95, −.475, −.475, 0),
    # Σdev² = 1.35375, unbiased var .45125; the singleton anchor u gives 0.
    values = np.array([1.425, 0.0, 0.0, 0.475, 7.0])
    local = anchor_local_advantage(values, np.array([0, 0, 0, 0, 1]), "mean_std_norm", 1e-6)
    sd = math.sqrt(0.45125) + 1e-6
    # (atol: the group is centred on a member first, which moves rounding by ~1e-17)
    np.testing.assert_allclose(
        local, [0.95 / sd, -0.475 / sd, -0.475 / sd, 0.0, 0.0], rtol=1e-7, atol=1e-12
    )


def test_outcome_text_truncates():
    assert (
        outcome_text(True, "  You won!  ", 512) == "\nOutcome: success. Final observation: You won!"
    )
    assert outcome_text(False, "abcdefgh", 3) == "\nOutcome: failure. Final observation: abc..."
    assert outcome_text(False, "abc", 0) == "\nOutcome: failure."


# ---------------------------------------------------------------------------- 2. Δ ≡ 0


def loop_local_of_returns(groups, gamma, mode, eps=1e-6):
    """Plain anchor-local advantage of discounted returns, by explicit loops."""
    rows, members = [], {}
    for g, group in enumerate(groups):
        for tr in group.trajectories:
            ret, rets = 0.0, []
            for s in reversed(tr.steps):
                ret = s.reward + gamma * ret
                rets.append(ret)
            for s, r in zip(tr.steps, reversed(rets)):
                rows.append(((g, s.anchor), r))
                members.setdefault((g, s.anchor), []).append(r)
    out = []
    for key, r in rows:
        vals = members[key]
        if len(vals) == 1:
            out.append(0.0)
            continue
        a = r - statistics.fmean(vals)
        out.append(a / (statistics.stdev(vals) + eps) if mode == "mean_std_norm" else a)
    return np.array(out)


SPEC2 = [
    [
        (True, "won", [("s", 0, "x"), ("t", 0, "y"), ("u", 1, "z")]),
        (False, "lost", [("s", 0, "x"), ("s", -0.1, "bad"), ("t", 0, "y")]),
        (True, "won", [("s", 0, "q"), ("u", 1, "z")]),
    ],
    [
        (False, "", [("s", 0, "x")]),
        (True, "won", [("s", 0.5, "x"), ("v", 1, "w")]),
    ],
]


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_zero_delta_reduces_to_anchor_local_returns(mode):
    groups = build(SPEC2)
    batch = StepBatch.from_groups(groups)
    out = compute_advantages(
        "relace",
        batch,
        estimator_config("relace", {"mode": mode, "alpha": 0.0, "success_mask": False}),
        scorer=OutcomeBlindScorer(),
    )
    assert out.metrics["credit/delta_std"] == 0.0 and out.metrics["credit/w_std"] == 0.0
    step_term = out.step - grpo_adv(batch)
    np.testing.assert_allclose(step_term, loop_local_of_returns(groups, 0.95, mode), atol=1e-12)
    terms = relace_step_term(batch, np.zeros(batch.n_steps), RELACEConfig(mode=mode))
    np.testing.assert_array_equal(terms["w"], 1.0)


# ---------------------------------------------------------------------------- 3. success mask


def test_success_mask_never_pushes_won_steps_down():
    rng = np.random.default_rng(0)
    for _ in range(20):
        spec = [
            [
                (
                    bool(rng.integers(2)),
                    "obs",
                    [
                        (str(rng.choice(list("ab"))), float(rng.choice([0, 1])), f"r{k}")
                        for k in range(int(rng.integers(1, 5)))
                    ],
                )
                for _ in range(4)
            ]
        ]
        batch = StepBatch.from_groups(build(spec))
        term = relace_adv(batch, HashScorer(), omega=1.0) - grpo_adv(batch)
        won = batch.traj_won[batch.step_traj]
        assert np.all(term[won] >= -1e-12)
        delta = HashScorer().score(batch.texts.prompts, batch.texts.responses)
        terms = relace_step_term(batch, delta, RELACEConfig())
        assert np.all(terms["step"][won] >= 0.0)
        np.testing.assert_array_equal(terms["step"][~won], terms["smoothed"][~won])


# ---------------------------------------------------------------------------- 4. no leak


def test_outcome_text_is_only_used_for_scoring():
    batch = StepBatch.from_groups(build(SPEC2))
    texts_before = copy.deepcopy(batch.texts)

    class Recording(HashScorer):
        def __init__(self):
            super().__init__()
            self.calls: list[list[str]] = []

        def score(self, contexts, responses):
            self.calls.append(list(contexts))
            return super().score(contexts, responses)

    scorer = Recording()
    out = compute_advantages("relace", batch, scorer=scorer)
    assert batch.texts == texts_before  # training contexts unchanged
    plain, augmented = scorer.calls
    assert plain == list(batch.texts.prompts)
    assert all("Outcome:" not in c for c in plain)
    assert all(a.startswith(p) and "\nOutcome: " in a for p, a in zip(plain, augmented))
    # The estimator returns numbers only: a float array and float metrics.
    assert {k for k, v in vars(out).items() if v is not None} == {"step", "metrics"}
    assert out.step.dtype == np.float64
    assert all(type(v) is float for v in out.metrics.values())


def test_missing_texts_is_a_clear_error():
    batch = dataclasses.replace(StepBatch.from_groups(build(SPEC2)), texts=None)
    with pytest.raises(ValueError, match=r"batch\.texts is None"):
        compute_advantages("relace", batch, scorer=HashScorer())
    with pytest.raises(ValueError, match="needs a scorer"):
        compute_advantages("relace", StepBatch.from_groups(build(SPEC2)))


def test_config_validation():
    with pytest.raises(ConfigError, match=r"algo\.w_clip"):
        estimator_config("relace", {"w_clip": [2.0, 5.0]})
    with pytest.raises(ConfigError, match=r"algo\.tau"):
        estimator_config("relace", {"tau": 0.0})
    with pytest.raises(ConfigError, match=r"algo\.mode"):
        estimator_config("relace", {"mode": "mean"})
    assert estimator_config("relace", {"w_clip": None}).w_clip is None


# ---------------------------------------------------------------------------- 5. slow reference


def reference_relace(groups, cfg: RELACEConfig, scorer) -> np.ndarray:
    """Per-step Python loops over the module's equations, scoring one pair at a time."""
    trajs = []  # (g, won, [(anchor, reward, delta)])
    for g, group in enumerate(groups):
        for tr in group.trajectories:
            verdict = "success" if tr.won else "failure"
            obs = tr.final_obs.strip() if cfg.max_obs_chars > 0 else ""
            if len(obs) > cfg.max_obs_chars:
                obs = obs[: cfg.max_obs_chars] + "..."
            outcome = f"\nOutcome: {verdict}." + (f" Final observation: {obs}" if obs else "")
            rows = []
            for s in tr.steps:
                l0 = scorer.score([s.prompt_text], [s.response_text])[0]
                l1 = scorer.score([s.prompt_text + outcome], [s.response_text])[0]
                rows.append((s.anchor, s.reward, l1 - l0))
            trajs.append((g, tr.won, rows))
    weighted, keys = [], []
    for g, _, rows in trajs:
        top = max(d / cfg.tau for _, _, d in rows)
        e = [math.exp(d / cfg.tau - top) for _, _, d in rows]
        mean_e = sum(e) / len(e)
        ret, rets = 0.0, []
        for _, r, _ in reversed(rows):
            ret = r + cfg.gamma * ret
            rets.insert(0, ret)
        for (anchor, _, _), ei, gi in zip(rows, e, rets):
            w = ei / mean_e
            if cfg.w_clip is not None:
                w = min(max(w, cfg.w_clip[0]), cfg.w_clip[1])
            weighted.append(w * gi)
            keys.append((g, anchor))
    members: dict = {}
    for k, v in zip(keys, weighted):
        members.setdefault(k, []).append(v)
    local = []
    for k, v in zip(keys, weighted):
        vals = members[k]
        if len(vals) == 1:
            local.append(0.0)
        elif cfg.mode == "mean_norm":
            local.append(v - sum(vals) / len(vals))
        else:
            local.append((v - sum(vals) / len(vals)) / (statistics.stdev(vals) + cfg.epsilon))
    # GRPO episode term per trajectory.
    by_group: dict = {}
    for g, _, rows in trajs:
        by_group.setdefault(g, []).append(sum(r for _, r, _ in rows))
    out, pos, seen = [], 0, {}
    for g, won, rows in trajs:
        rets = by_group[g]
        ret = rets[seen.get(g, 0)]
        seen[g] = seen.get(g, 0) + 1
        if len(rets) == 1:
            mean, sd = 0.0, 1.0
        else:
            mean, sd = sum(rets) / len(rets), statistics.stdev(rets)
        episode = (ret - mean) / (sd + cfg.epsilon) if cfg.norm_by_std else ret - mean
        seg = local[pos : pos + len(rows)]
        pos += len(rows)
        smooth = [0.0] * len(seg)
        for t in reversed(range(len(seg))):
            if t == len(seg) - 1:
                smooth[t] = seg[t]
            else:
                smooth[t] = (1 - cfg.alpha) * seg[t] + cfg.alpha * smooth[t + 1]
        # The mask applies after smoothing: the recursion runs on the unmasked values.
        for t in range(len(seg)):
            s = max(smooth[t], 0.0) if (cfg.success_mask and won) else smooth[t]
            out.append(episode + cfg.omega * s)
    return np.array(out)


step_st = st.tuples(st.sampled_from("abc"), st.sampled_from([0.0, 1.0, -0.1, 0.5]))
traj_st = st.tuples(
    st.booleans(),
    st.sampled_from(["", "you win", "a very long final observation " * 5]),
    st.lists(step_st, min_size=1, max_size=5),
)
spec_st = st.lists(st.lists(traj_st, min_size=1, max_size=4), min_size=1, max_size=3)
cfg_st = st.builds(
    RELACEConfig,
    gamma=st.sampled_from([0.95, 1.0, 0.5]),
    tau=st.sampled_from([0.3, 1.0, 4.0]),
    w_clip=st.sampled_from([None, (0.2, 5.0), (0.9, 1.1)]),
    mode=st.sampled_from(["mean_norm", "mean_std_norm"]),
    alpha=st.sampled_from([0.0, 0.3, 1.0]),
    omega=st.sampled_from([1.0, 2.5]),
    success_mask=st.booleans(),
    norm_by_std=st.booleans(),
    max_obs_chars=st.sampled_from([0, 8, 512]),
)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(spec=spec_st, cfg=cfg_st)
def test_reference_equals_vectorised(spec, cfg):
    spec = [
        [
            (won, obs, [(a, r, f"resp {a} {k}") for k, (a, r) in enumerate(steps)])
            for won, obs, steps in group
        ]
        for group in spec
    ]
    groups = build(spec)
    batch = StepBatch.from_groups(groups)
    fast = compute_advantages("relace", batch, cfg, scorer=HashScorer()).step
    np.testing.assert_allclose(fast, reference_relace(groups, cfg, HashScorer()), atol=1e-9)


# ---------------------------------------------------------------------------- 6. edge cases


EDGE = [
    [(True, "won", [("s", 1, "a")])],  # singleton group, one-step episode
    [(False, "x", [("s", 0, "a"), ("s", 0, "a")]), (False, "x", [("s", 0, "b")])],  # all equal
    [(True, "w", [("s", 0, "a"), ("t", 0, "b"), ("u", 1, "c")]), (True, "w", [("s", 1, "d")])],
    [(False, "", [("z", 0, "")])],  # empty response and final observation
]


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
@pytest.mark.parametrize("w_clip", [None, (0.2, 5.0)])
@pytest.mark.parametrize("tau", [1.0, 0.01])
def test_edge_cases_stay_finite(mode, w_clip, tau):
    batch = StepBatch.from_groups(build(EDGE))
    cfg = RELACEConfig(mode=mode, w_clip=w_clip, tau=tau)
    for scorer in (HugeDeltaScorer(), HashScorer(), OutcomeBlindScorer()):
        out = compute_advantages("relace", batch, cfg, scorer=scorer)
        assert np.all(np.isfinite(out.step))
        assert all(math.isfinite(v) for v in out.metrics.values())
    delta = np.where(np.arange(batch.n_steps) % 2 == 0, 1e4, -1e4)
    terms = relace_step_term(batch, delta, cfg)
    for v in terms.values():
        assert np.all(np.isfinite(v))
    if w_clip is None:  # the stable normalisation keeps the mean at 1 in every trajectory
        means = np.bincount(batch.step_traj, weights=terms["w"]) / batch.traj_len
        np.testing.assert_allclose(means, 1.0)
    # All-equal returns in group 1: no anchor-local signal.
    np.testing.assert_array_equal(terms["local"][batch.step_group == 1], 0.0)


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_epsilon_zero_gives_zero_for_all_equal_groups(mode):
    # Group 0: two identical winners (episode term and anchor groups all equal: 0/0 with
    # ε = 0); group 1: a winner and a loser, with Δ ≡ 0 so w ≡ 1.
    winner = (True, "ok", [("s", 0, "a"), ("t", 1, "b")])
    spec = [[winner, winner], [(True, "ok", [("u", 1, "a")]), (False, "no", [("u", 0, "b")])]]
    batch = StepBatch.from_groups(build(spec))
    adv = relace_adv(batch, OutcomeBlindScorer(), epsilon=0.0, mode=mode)  # NaN → error before
    np.testing.assert_array_equal(adv[:4], 0.0)
    # Group 1: A^GRPO = ±1/√2; anchor u: G = 1, 0 → A^L = ±0.5 (mean_norm) or ±1/√2; no
    # smoothing for one-step episodes; the success mask keeps the winner's positive term.
    local = 0.5 if mode == "mean_norm" else np.sqrt(0.5)
    np.testing.assert_allclose(adv[4:], [np.sqrt(0.5) + local, -np.sqrt(0.5) - local], rtol=1e-12)


def test_non_finite_scores_are_rejected():
    class Bad:
        def score(self, contexts, responses):
            return np.full(len(contexts), -np.inf)

    with pytest.raises(FloatingPointError, match="non-finite"):
        compute_advantages("relace", StepBatch.from_groups(build(EDGE)), scorer=Bad())


# ---------------------------------------------------------------------------- 7. PolicyScorer

CORPUS = ["push the box up", "move left then right", "Outcome: success failure", "up down"] * 20


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer(CORPUS, vocab_size=300)


@pytest.fixture(scope="module")
def model(tok):
    torch.manual_seed(0)
    return build_tiny_model(ModelConfig(hidden_size=32, intermediate_size=64), tok)


def unpadded_mean_logprob(model, tok, context, response, temperature, max_prompt_tokens):
    prompt = encode_prompt(tok, context, max_prompt_tokens)
    resp = tok(response, add_special_tokens=False)["input_ids"]
    if not resp:
        return 0.0
    ids = torch.tensor([prompt + resp])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float() / temperature  # (L, V)
    # The distribution sampled from: the pad token (never generated) is left out.
    keep = torch.ones(logits.shape[-1], dtype=torch.bool)
    keep[tok.pad_token_id] = False
    logp = logits - torch.logsumexp(logits[:, keep], dim=-1, keepdim=True)
    n = len(prompt)
    return float(np.mean([float(logp[n - 1 + k, tok_id]) for k, tok_id in enumerate(resp)]))


CONTEXTS = ["push the box", "move left then right now, then push the box up", "up", "down up"]
RESPONSES = ["up", "left left right", "", "push the box up down"]


@pytest.mark.parametrize("max_prompt_tokens", [2048, 6])
def test_policy_scorer_matches_unpadded_reference(tok, model, max_prompt_tokens):
    scorer = PolicyScorer(model, tok, temperature=0.7, max_prompt_tokens=max_prompt_tokens)
    got = scorer.score(CONTEXTS, RESPONSES)
    want = [
        unpadded_mean_logprob(model, tok, c, r, 0.7, max_prompt_tokens)
        for c, r in zip(CONTEXTS, RESPONSES)
    ]
    assert got.dtype == np.float64 and got.shape == (4,)
    np.testing.assert_allclose(got, want, atol=1e-4)
    assert got[2] == 0.0  # empty response


def test_policy_scorer_is_batching_invariant_and_side_effect_free(tok, model):
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.train()
    big = PolicyScorer(model, tok).score(CONTEXTS, RESPONSES)
    assert model.training  # the mode is restored
    model.eval()
    one_by_one = PolicyScorer(model, tok, token_budget=1).score(CONTEXTS, RESPONSES)
    assert not model.training
    reversed_ = PolicyScorer(model, tok).score(CONTEXTS[::-1], RESPONSES[::-1])[::-1]
    np.testing.assert_allclose(big, one_by_one, atol=1e-5)
    np.testing.assert_allclose(big, reversed_, atol=1e-5)
    assert PolicyScorer(model, tok).score([], []).shape == (0,)
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)
    assert all(p.grad is None for p in model.parameters())


# ---------------------------------------------------------------------------- 8. end to end


def test_end_to_end_with_policy_scorer(tok, model):
    groups = make_groups(
        [
            [[("s", "up", 0.0), ("t", "left", 1.0)], [("s", "down", 0.0)], [("s", "up", 1.0)]],
            [[("u", "right", 0.0), ("u", "up", 0.0)], [("u", "left", 1.0)]],
        ]
    )
    for group in groups:
        for i, tr in enumerate(group.trajectories):
            tr.final_obs = "the box is on the goal" if tr.won else "the box is stuck"
            for t, s in enumerate(tr.steps):
                s.prompt_text = f"turn {t}: push the box {s.anchor} (try {i})"
                s.response_text = s.action
    batch = StepBatch.from_groups(groups)
    scorer = PolicyScorer(model, tok, temperature=1.0)
    out = compute_advantages("relace", batch, scorer=scorer)
    assert out.step.shape == (batch.n_steps,) and np.all(np.isfinite(out.step))
    for key in ("delta_mean", "delta_std", "w_mean", "w_std", "score_time_s"):
        assert math.isfinite(out.metrics[f"credit/{key}"])
    assert out.metrics["credit/delta_std"] > 0  # the outcome text changes the tiny model's scores
    # ω = 0 leaves exactly the GRPO episode term.
    np.testing.assert_allclose(relace_adv(batch, scorer, omega=0.0), grpo_adv(batch))
