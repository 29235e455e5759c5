"""Loss pieces against hand-computed values: aggregation (with fully masked rows), KL, ratios."""

from __future__ import annotations

import math

import pytest
import torch

from agentrl.learn.losses import aggregate_loss, entropy_from_logits, kl_penalty, policy_ratio

# Three responses: 2 tokens, 3 tokens, and a fully masked row.
LOSS = torch.tensor([[1.0, 3.0, 100.0], [2.0, 4.0, 6.0], [7.0, 7.0, 7.0]])
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", (1 + 3 + 2 + 4 + 6) / 5),  # 16 / 5 = 3.2
        ("seq-mean-token-sum", (4 + 12) / 2),  # row sums 4 and 12; masked row not counted
        ("seq-mean-token-mean", (2 + 4) / 2),  # row means 2 and 4
        ("seq-mean-token-sum-norm", (4 / 10 + 12 / 10) / 2),  # scale 10
    ],
)
def test_aggregate_loss_golden(mode, expected):
    got = aggregate_loss(LOSS, MASK, mode, scale=10.0)
    assert float(got) == pytest.approx(expected)


def test_aggregate_with_global_counts_adds_up_over_micro_batches():
    for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean"):
        whole = aggregate_loss(LOSS, MASK, mode)
        n_tok, n_seq = float(MASK.sum()), 2.0
        parts = sum(
            aggregate_loss(LOSS[i : i + 1], MASK[i : i + 1], mode, n_tokens=n_tok, n_seqs=n_seq)
            for i in range(3)
        )
        assert float(parts) == pytest.approx(float(whole))


def test_aggregate_all_masked_is_zero_not_nan():
    z = torch.zeros(2, 3)
    for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean"):
        assert float(aggregate_loss(LOSS[:2], z, mode)) == 0.0
    with pytest.raises(ValueError, match="positive scale"):
        aggregate_loss(LOSS, MASK, "seq-mean-token-sum-norm")


def test_kl_estimators_golden():
    logp = torch.tensor([math.log(0.5), math.log(0.2)])
    ref = torch.tensor([math.log(0.25), math.log(0.4)])
    d = logp - ref  # [ln 2, -ln 2]
    torch.testing.assert_close(kl_penalty(logp, ref, "k1"), d)
    torch.testing.assert_close(kl_penalty(logp, ref, "abs"), d.abs())
    torch.testing.assert_close(kl_penalty(logp, ref, "k2"), 0.5 * d**2)
    # k3 = r - ln r - 1 with r = ref/p: r = 0.5 -> 0.5 + ln 2 - 1; r = 2 -> 2 - ln 2 - 1
    k3 = torch.tensor([0.5 + math.log(2) - 1, 1 - math.log(2)])
    torch.testing.assert_close(kl_penalty(logp, ref, "k3"), k3)
    # verl's clamp: the result never exceeds 10
    assert float(kl_penalty(torch.tensor([-50.0]), torch.tensor([0.0]), "k3")) == 10.0


def test_step_ratio_is_length_normalised_and_keeps_token_gradients():
    logp = torch.tensor([[-1.0, -2.0, -3.0]], requires_grad=True)
    old = torch.tensor([[-1.5, -2.5, -9.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])  # third token is padding
    r = policy_ratio(logp, old, mask, "step")
    expected = math.exp((0.5 + 0.5) / 2)  # mean log-ratio over the 2 real tokens
    torch.testing.assert_close(r[0, :2], torch.full((2,), expected))
    (r * mask).sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[expected, expected, 0.0]]))
    tok = policy_ratio(logp.detach(), old, mask, "token")
    torch.testing.assert_close(tok[0, :2], torch.tensor([math.exp(0.5)] * 2))


def test_entropy_golden():
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.25], [1.0, 1e-12, 1e-12]]))
    ent = entropy_from_logits(logits)
    assert float(ent[0]) == pytest.approx(1.5 * math.log(2))
    assert float(ent[1]) == pytest.approx(0.0, abs=1e-6)
