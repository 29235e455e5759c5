"""The PPO learner: surrogate golden values, token-mean accumulation, sampler agreement."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agentrl.learn.learner import Learner, LearnerConfig
from agentrl.learn.losses import clipped_surrogate
from agentrl.model import (
    ModelConfig,
    banned_token_ids,
    build_tiny_model,
    build_tokenizer,
    encode_prompt,
)
from agentrl.model.forward import Sample, micro_batches, pack, token_logprobs
from agentrl.rollout import HFBackend, Sampling

CORPUS = ["push the box up", "move left then right", "down down up", "<action>up</action>"] * 20


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer(CORPUS, vocab_size=300)


def _model(tok, seed=0):
    torch.manual_seed(seed)
    return build_tiny_model(ModelConfig(hidden_size=32, intermediate_size=64), tok)


def test_clipped_surrogate_golden():
    ratio = torch.tensor([1.0, 1.5, 0.5, 1.5, 10.0])
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0, -1.0])
    loss, clipped = clipped_surrogate(ratio, adv, 0.2, 0.28, 3.0)
    # r=1: -1. r=1.5,A>0: max(-1.5,-1.28)=-1.28. r=0.5,A<0: max(0.5,0.8)=0.8.
    # r=1.5,A<0: max(1.5,1.2)=1.5. r=10,A<0: max(10,1.2)=10 -> dual clip min(10, 3)=3.
    torch.testing.assert_close(loss, torch.tensor([-1.0, -1.28, 0.8, 1.5, 3.0]))
    assert clipped.tolist() == [False, True, True, False, False]


def test_micro_batches_respect_budget():
    s = [Sample([1] * 5, [2] * 5, [0.0] * 5, 1.0) for _ in range(7)]
    chunks = micro_batches(s, 30)
    assert [len(c) for c in chunks] == [3, 3, 1]
    assert micro_batches(s, 1) == [[x] for x in s]  # oversize samples go alone


def _grads(tok, samples, budget):
    model = _model(tok)
    learner = Learner(
        model, LearnerConfig(micro_batch_tokens=budget, max_grad_norm=0), tok.pad_token_id
    )
    learner.optimizer.param_groups[0]["lr"] = 0.0  # keep parameters: compare gradients only
    learner.update(samples, np.random.default_rng(0))
    return [p.grad.clone() for p in model.parameters()]


def test_gradient_accumulation_equals_one_pass(tok):
    rng = np.random.default_rng(1)
    samples = [
        Sample(
            rng.integers(5, 200, size=int(rng.integers(3, 9))).tolist(),
            rng.integers(5, 200, size=int(rng.integers(1, 5))).tolist(),
            [],
            0.0,
        )
        for _ in range(6)
    ]
    for s in samples:
        s.old_logprobs = list(rng.normal(-4.0, 0.3, size=len(s.response_ids)))
        s.advantage = float(rng.normal())
    g_one = _grads(tok, samples, 10_000)
    g_acc = _grads(tok, samples, 12)
    for a, b in zip(g_one, g_acc):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_sampler_logprobs_match_learner_recomputation(tok):
    """Old log-probs from generate equal the learner's (left vs right padding, temperature)."""
    torch.manual_seed(0)
    model = _model(tok)
    backend = HFBackend(model, tok)
    banned = banned_token_ids(tok)
    prompts = [encode_prompt(tok, t, 100) for t in ("push the box", "move left then right now")]
    for temp in (1.0, 0.7):
        gens = backend.generate(prompts, Sampling(max_new_tokens=6, temperature=temp))
        for p, g in zip(prompts, gens):
            assert len(g.token_ids) == len(g.logprobs) >= 1
            ids = torch.tensor([p + g.token_ids])
            lp = token_logprobs(model, ids, torch.ones_like(ids), temp, banned=banned)
            np.testing.assert_allclose(lp[0, len(p) - 1 :].detach().numpy(), g.logprobs, atol=1e-4)
        # The learner's left-padded packing of both samples scores them the same way.
        samples = [Sample(p, g.token_ids, g.logprobs, 0.0) for p, g in zip(prompts, gens)]
        t = pack(samples, tok.pad_token_id, "cpu")
        lp = token_logprobs(model, t["ids"], t["attn"], temp, t["mask"].shape[1], banned)
        got = lp[t["mask"].bool()].detach().numpy()
        np.testing.assert_allclose(got, [x for g in gens for x in g.logprobs], atol=1e-4)


def _pad_heavy_model(tok):
    """A model whose raw next-token distribution puts most mass on the (never sampled) pad
    token, as the default job's policy did after 20 iterations (73%)."""
    model = _model(tok)
    with torch.no_grad():
        model.lm_head.weight[tok.pad_token_id] *= 0.0  # untie from the inputs' view: a bias
        model.model.norm.weight.fill_(1.0)
    # A constant extra logit for pad: an lm-head bias the tiny model does not have.
    head = model.lm_head
    bias = torch.zeros(head.weight.shape[0])
    bias[tok.pad_token_id] = 8.0
    head.register_forward_hook(lambda mod, inp, out: out + bias)
    return model


def test_sampler_and_learner_share_one_vocabulary(tok):
    """Generation never emits pad; the learner's log-probs are over the same vocabulary, so
    they equal the sampler's even when the raw logits put most mass on pad."""
    torch.manual_seed(0)
    model = _pad_heavy_model(tok)
    prompt = encode_prompt(tok, "push the box", 100)
    ids = torch.tensor([prompt])
    with torch.no_grad():
        raw = torch.softmax(model(ids).logits[0, -1].float(), -1)
    assert raw[tok.pad_token_id] > 0.5  # the situation the ban must survive
    gens = HFBackend(model, tok).generate([prompt] * 4, Sampling(max_new_tokens=5))
    banned = banned_token_ids(tok)
    assert banned == (tok.pad_token_id,)
    for g in gens:
        assert tok.pad_token_id not in g.token_ids
        full = torch.tensor([prompt + g.token_ids])
        lp = token_logprobs(model, full, torch.ones_like(full), 1.0, banned=banned)
        np.testing.assert_allclose(lp[0, len(prompt) - 1 :].detach().numpy(), g.logprobs, atol=1e-4)
        # Scored over the full vocabulary instead, every token looks ~pad-mass less likely.
        unmasked = token_logprobs(model, full, torch.ones_like(full), 1.0)[0, len(prompt) - 1 :]
        assert float((lp[0, len(prompt) - 1 :] - unmasked).min().detach()) > 0.5


def test_negative_advantages_put_no_mass_on_the_banned_token(tok):
    """The learner's gradient never reaches the pad logit. Scored over the full vocabulary,
    negative advantages push the sampled tokens down and every other token up, and pad, never
    sampled, is never pushed back: a ratchet that gave pad 73% of the default job's policy."""
    prompt = encode_prompt(tok, "push the box", 100)

    def pad_prob_after(banned, iters):
        torch.manual_seed(3)
        model = _model(tok, seed=3)
        learner = Learner(model, LearnerConfig(lr=5e-2), tok.pad_token_id, banned_ids=banned)
        backend = HFBackend(model, tok)
        for i in range(iters):
            gens = backend.generate([prompt] * 8, Sampling(max_new_tokens=4))
            samples = [Sample(prompt, g.token_ids, g.logprobs, -1.0) for g in gens]
            learner.update(samples, np.random.default_rng(i))
        grad = 0.0 if not iters else float(model.lm_head.weight.grad[tok.pad_token_id].abs().max())
        with torch.no_grad():
            p = torch.softmax(model(torch.tensor([prompt])).logits[0, -1].float(), -1)
        return float(p[tok.pad_token_id]), grad

    p0, _ = pad_prob_after((), 0)
    p_unmasked, grad_unmasked = pad_prob_after((), 5)
    p_masked, grad_masked = pad_prob_after(banned_token_ids(tok), 5)
    assert p_unmasked > 1.2 * p0 and grad_unmasked > 0  # the ratchet, without the ban
    assert grad_masked == 0.0  # one vocabulary: no gradient reaches the banned logit
    assert p_masked < p0


def test_update_changes_parameters_and_follows_advantage(tok):
    model = _model(tok)
    prompt = encode_prompt(tok, "push the box", 100)
    good, bad = tok(" up")["input_ids"], tok(" down")["input_ids"]

    @torch.no_grad()
    def logp(ids):
        t = torch.tensor([prompt + ids])
        return float(token_logprobs(model, t, torch.ones_like(t), 1.0)[0, len(prompt) - 1 :].sum())

    before = [p.detach().clone() for p in model.parameters()]
    lg, lb = logp(good), logp(bad)
    learner = Learner(model, LearnerConfig(lr=1e-2), tok.pad_token_id)
    for _ in range(5):
        samples = [
            Sample(prompt, good, [0.0] * len(good), 1.0),
            Sample(prompt, bad, [0.0] * len(bad), -1.0),
        ]
        with torch.no_grad():  # on-policy old log-probs
            for s in samples:
                t = torch.tensor([prompt + s.response_ids])
                s.old_logprobs = token_logprobs(model, t, torch.ones_like(t), 1.0)[
                    0, len(prompt) - 1 :
                ].tolist()
        stats = learner.update(samples, np.random.default_rng(0))
    assert stats["loss/updates"] == 1.0
    assert logp(good) > lg and logp(bad) < lb
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_config_validation():
    from agentrl.configuration import ConfigError, from_mapping

    with pytest.raises(ConfigError, match=r"learner.lr=-1.0 is invalid"):
        from_mapping(LearnerConfig, {"lr": -1.0}, "learner")
    with pytest.raises(ConfigError, match=r"learner.loss_agg='sum' is not valid; choose one of"):
        from_mapping(LearnerConfig, {"loss_agg": "sum"}, "learner")
    with pytest.raises(ConfigError, match=r"learner.clip_hgh is not a valid key.*clip_high"):
        from_mapping(LearnerConfig, {"clip_hgh": 0.3}, "learner")


def test_query_preserved_mini_batches_keep_groups_together():
    from agentrl.learn.learner import mini_batches

    samples = [Sample([1], [2], [0.0], 0.0, group=g) for g in (0, 0, 0, 1, 1, 2, 2, 2, 2, 3)]
    rng = np.random.default_rng(0)
    minis = mini_batches(samples, 4, rng, batching="query_preserved")
    seen = [s for m in minis for s in m]
    assert sorted(map(id, seen)) == sorted(map(id, samples))
    for g in range(4):
        holders = [i for i, m in enumerate(minis) if any(s.group == g for s in m)]
        assert len(holders) == 1, f"group {g} split over mini-batches {holders}"
    plain = mini_batches(samples, 4, np.random.default_rng(0))
    assert [len(m) for m in plain] == [4, 4, 2]


def test_lr_schedule_warmup_then_cosine():
    from agentrl.learn.learner import lr_lambda

    cfg = LearnerConfig(warmup_iters=2, lr_schedule="cosine", min_lr_ratio=0.1)
    f = lr_lambda(cfg, total_iters=6)
    assert [round(f(i), 4) for i in range(7)] == [0.5, 1.0, 1.0, 0.8682, 0.55, 0.2318, 0.1]
    assert lr_lambda(LearnerConfig(), 10)(5) == 1.0


def _on_policy(model, tok, prompt, responses, advs):
    samples = []
    with torch.no_grad():
        for ids, a in zip(responses, advs):
            t = torch.tensor([prompt + ids])
            lp = token_logprobs(model, t, torch.ones_like(t), 1.0)[0, len(prompt) - 1 :]
            samples.append(Sample(prompt, ids, lp.tolist(), a))
    return samples


def test_kl_to_reference_starts_at_zero_and_grows(tok):
    model = _model(tok)
    prompt = encode_prompt(tok, "push the box", 100)
    resp = [tok(" up")["input_ids"], tok(" down")["input_ids"]]
    cfg = LearnerConfig(lr=1e-2, kl_coef=0.1, kl_type="k3", entropy_coef=0.01)
    learner = Learner(model, cfg, tok.pad_token_id)
    first = learner.update(
        _on_policy(model, tok, prompt, resp, [1.0, -1.0]), np.random.default_rng(0)
    )
    assert first["loss/kl"] == pytest.approx(0.0, abs=1e-7)
    assert first["loss/entropy"] > 0
    for _ in range(3):
        stats = learner.update(
            _on_policy(model, tok, prompt, resp, [1.0, -1.0]), np.random.default_rng(0)
        )
    assert stats["loss/kl"] > 1e-6
    # the reference is frozen: it still scores like the initial model
    fresh = _model(tok)
    ref_lp = learner.score(_on_policy(fresh, tok, prompt, resp, [0, 0]), reference=True)
    init_lp = [s.old_logprobs for s in _on_policy(fresh, tok, prompt, resp, [0, 0])]
    np.testing.assert_allclose(np.concatenate(ref_lp), np.concatenate(init_lp), atol=1e-5)


def test_recomputed_old_logprobs_match_sampler(tok):
    model = _model(tok)
    backend = HFBackend(model, tok)
    prompts = [encode_prompt(tok, t, 100) for t in ("push the box", "move left now")]
    gens = backend.generate(prompts, Sampling(max_new_tokens=5, temperature=0.9))
    samples = [Sample(p, g.token_ids, list(g.logprobs), 0.5) for p, g in zip(prompts, gens)]
    learner = Learner(
        model,
        LearnerConfig(old_logprobs="recompute"),
        tok.pad_token_id,
        0.9,
        banned_ids=banned_token_ids(tok),
    )
    stats = learner.update(samples, np.random.default_rng(0))
    assert stats["loss/old_logp_mismatch_max"] < 1e-4
    assert stats["loss/clipfrac"] == 0.0  # on-policy first step: ratio 1 everywhere


@pytest.mark.parametrize(
    "mode", ["seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
)
def test_accumulation_matches_one_pass_for_every_aggregation(tok, mode):
    rng = np.random.default_rng(3)
    samples = []
    for _ in range(5):
        resp = rng.integers(5, 200, size=int(rng.integers(1, 5))).tolist()
        samples.append(
            Sample(
                rng.integers(5, 200, size=int(rng.integers(3, 9))).tolist(),
                resp,
                list(rng.normal(-4.0, 0.3, size=len(resp))),
                float(rng.normal()),
            )
        )
    grads = []
    for budget in (10_000, 12):
        model = _model(tok)
        cfg = LearnerConfig(micro_batch_tokens=budget, max_grad_norm=0, loss_agg=mode)
        learner = Learner(model, cfg, tok.pad_token_id, max_response_tokens=8)
        learner.optimizer.param_groups[0]["lr"] = 0.0
        learner.update(samples, np.random.default_rng(0))
        grads.append([p.grad.clone() for p in model.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_sampling_applies_no_hidden_top_k(tok):
    """top_k=0 means no truncation: a token outside the 50 most likely can be sampled."""
    from transformers import GenerationConfig  # noqa: F401 - documents what is being guarded

    model = _model(tok)
    torch.manual_seed(0)
    backend = HFBackend(model, tok)
    prompt = encode_prompt(tok, "push the box", 100)
    with torch.no_grad():
        t = torch.tensor([prompt])
        logits = model(t).logits[0, -1]
    rank = torch.argsort(logits, descending=True)
    low = set(rank[60:].tolist())  # tokens outside any top-50 filter
    gens = backend.generate([prompt] * 256, Sampling(max_new_tokens=1, temperature=3.0))
    assert any(g.token_ids[0] in low for g in gens)


def _group_samples(rng, n_groups=3, group=4):
    samples = []
    for g in range(n_groups):
        prompt = rng.integers(5, 200, size=int(rng.integers(3, 12))).tolist()
        for _ in range(int(rng.integers(1, group + 1))):  # groups of 1..4 share a prompt
            resp = rng.integers(5, 200, size=int(rng.integers(1, 6))).tolist()
            samples.append(
                Sample(
                    prompt,
                    resp,
                    list(rng.normal(-4.0, 0.3, size=len(resp))),
                    float(rng.normal()),
                    group=g,
                )
            )
    return samples


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_shared_prompt_packing_equals_separate_sequences(tok, seed):
    from agentrl.model.forward import score_samples

    samples = _group_samples(np.random.default_rng(seed))
    model = _model(tok)
    a = score_samples(model, samples, tok.pad_token_id, 0.8, 10_000, share_prompts=True)
    b = score_samples(model, samples, tok.pad_token_id, 0.8, 10_000, share_prompts=False)
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, atol=1e-5)
    grads = []
    for share in (True, False):
        m = _model(tok)
        cfg = LearnerConfig(
            max_grad_norm=0,
            share_prompts=share,
            entropy_coef=0.01,
            ratio_level="step" if seed == 2 else "token",
        )
        learner = Learner(m, cfg, tok.pad_token_id)
        learner.optimizer.param_groups[0]["lr"] = 0.0
        stats = learner.update(samples, np.random.default_rng(0))
        grads.append(([p.grad.clone() for p in m.parameters()], stats))
    for ga, gb in zip(grads[0][0], grads[1][0]):
        torch.testing.assert_close(ga, gb, rtol=1e-4, atol=1e-6)
    assert grads[0][1]["loss/pg"] == pytest.approx(grads[1][1]["loss/pg"], rel=1e-5)
