"""``algo=gae``: GAE over environment steps from a learned critic (value head or model), CFP."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import read_metrics

from agentrl.algos.gae import GAEConfig, GAECritic, gae_advantages
from agentrl.configuration import ConfigError
from agentrl.credit import Advantages, compute_advantages
from agentrl.credit.batch import Step, StepBatch, Trajectory, TrajectoryGroup
from agentrl.learn.value import VALUE_HEAD_FILE, clipped_value_loss, save_value_head
from agentrl.model import ModelConfig, build_tiny_model, build_tokenizer
from agentrl.rollout import RolloutConfig
from agentrl.run import compose
from agentrl.run.checkpoint import load_trainer_state
from agentrl.run.trainer import train


class TableCritic:
    """A critic that looks values up by prompt text (no model)."""

    def __init__(self, table: dict[str, float]):
        self.table = table
        self.asked: list[str] = []

    def values(self, prompts):
        self.asked.extend(prompts)
        return np.array([self.table[p] for p in prompts], dtype=np.float64)


def _episode(rewards, end: str, final_prompt: str = "", prefix: str = "s") -> Trajectory:
    """One trajectory whose turn t has prompt ``{prefix}{t}``; the last step ends it by ``end``
    (``terminated`` or ``truncated``)."""
    tr = Trajectory(final_prompt=final_prompt)
    for t, r in enumerate(rewards):
        last = t == len(rewards) - 1
        tr.steps.append(
            Step(
                prompt_ids=[1],
                response_ids=[2],
                logprobs=[-0.5],
                reward=float(r),
                terminated=last and end == "terminated",
                truncated=last and end == "truncated",
                anchor=(prefix, t),
                action="a",
                valid=True,
                prompt_text=f"{prefix}{t}",
            )
        )
    return tr


TABLE = {"s0": 0.5, "s1": 1.0, "s2": -1.0, "s3": 4.0, "u0": 2.0}
CFG = GAEConfig(gamma=0.9, lam=0.8, norm_adv=False)


def test_golden_three_step_episode_terminated():
    """By hand: δ = (1 + .9·1 − .5, 0 + .9·(−1) − 1, 2 − (−1)) = (1.4, −1.9, 3);
    A₂ = 3, A₁ = −1.9 + .72·3 = 0.26, A₀ = 1.4 + .72·0.26 = 1.5872; R = A + V."""
    batch = StepBatch.from_groups(
        [TrajectoryGroup("t", 0, [_episode([1, 0, 2], "terminated", final_prompt="s3")])]
    )
    adv = compute_advantages("gae", batch, CFG, critic=TableCritic(TABLE))
    np.testing.assert_allclose(adv.step, [1.5872, 0.26, 3.0], rtol=1e-12)
    np.testing.assert_allclose(adv.values, [0.5, 1.0, -1.0])
    np.testing.assert_allclose(adv.returns, [2.0872, 1.26, 2.0], rtol=1e-12)


def test_golden_three_step_episode_truncated_bootstraps_or_not():
    """Cut at the step limit with V(s₃) = 4: ``bootstrap`` gives δ₂ = 2 + .9·4 + 1 = 6.6,
    A₁ = −1.9 + .72·6.6 = 2.852, A₀ = 1.4 + .72·2.852 = 3.45344; ``zero`` (the default) equals
    the terminated episode."""
    tr = _episode([1, 0, 2], "truncated", final_prompt="s3")
    batch = StepBatch.from_groups([TrajectoryGroup("t", 0, [tr])])
    critic = TableCritic(TABLE)
    boot = GAEConfig(gamma=0.9, lam=0.8, norm_adv=False, truncation="bootstrap")
    adv = compute_advantages("gae", batch, boot, critic=critic)
    np.testing.assert_allclose(adv.step, [3.45344, 2.852, 6.6], rtol=1e-12)
    assert "s3" in critic.asked and adv.metrics["credit/bootstrapped"] == 1.0
    zero = compute_advantages("gae", batch, CFG, critic=TableCritic(TABLE))
    np.testing.assert_allclose(zero.step, [1.5872, 0.26, 3.0], rtol=1e-12)
    # A truncated episode without a recorded final prompt falls back to 0.
    bare = StepBatch.from_groups([TrajectoryGroup("t", 0, [_episode([1, 0, 2], "truncated")])])
    np.testing.assert_allclose(
        compute_advantages("gae", bare, boot, critic=TableCritic(TABLE)).step, zero.step
    )


def test_trajectories_do_not_leak_and_lost_episodes_get_zero():
    """Two episodes in one batch: the first one's advantages are those of its own; a lost
    episode is left out (advantage, value and return 0) and its prompts are never valued."""
    first = _episode([1, 0, 2], "terminated")
    other = _episode([5], "terminated", prefix="u")
    lost = _episode([0, 0], "truncated", prefix="x")
    lost.steps[-1].lost = True
    batch = StepBatch.from_groups([TrajectoryGroup("t", 0, [first, other, lost])])
    critic = TableCritic(TABLE)
    adv = compute_advantages("gae", batch, CFG, critic=critic)
    np.testing.assert_allclose(adv.step, [1.5872, 0.26, 3.0, 3.0, 0.0, 0.0], rtol=1e-12)
    np.testing.assert_allclose(adv.returns[-2:], 0.0)
    assert not any(p.startswith("x") for p in critic.asked)
    # The pure function agrees, and λ = 1 gives returns-to-go minus V.
    a, r = gae_advantages(np.array([1.0, 0, 2]), np.zeros(3, int), np.zeros(3), np.zeros(1), 1, 1)
    np.testing.assert_allclose(a, [3.0, 2.0, 2.0])
    np.testing.assert_allclose(r, [3.0, 2.0, 2.0])


def test_whitened_by_default_and_needs_a_critic():
    batch = StepBatch.from_groups([TrajectoryGroup("t", 0, [_episode([1, 0, 2], "terminated")])])
    adv = compute_advantages("gae", batch, GAEConfig(gamma=0.9, lam=0.8), critic=TableCritic(TABLE))
    assert abs(adv.step.mean()) < 1e-12 and adv.step.std() == pytest.approx(1.0, abs=1e-6)
    with pytest.raises(ValueError, match="needs a critic"):
        compute_advantages("gae", batch, CFG)


def test_clipped_value_loss_golden_and_gradient():
    """v = 2 from v_old = 1 with R = 3, ε = 0.5: v_clip = 1.5, ½·max(1, 2.25) = 1.125 and no
    gradient (the clipped branch is flat); inside the clip v = 1.2 gives ½·1.8² = 1.62."""
    v = torch.tensor([2.0, 1.2], requires_grad=True)
    loss, clipped = clipped_value_loss(v, torch.tensor([1.0, 1.0]), torch.tensor([3.0, 3.0]), 0.5)
    assert loss.tolist() == pytest.approx([1.125, 1.62])
    assert clipped.tolist() == [True, False]
    loss.sum().backward()
    assert v.grad.tolist() == pytest.approx([0.0, 1.2 - 3.0])
    plain, _ = clipped_value_loss(torch.tensor([2.0]), torch.tensor([1.0]), torch.tensor([3.0]), 0)
    assert plain.item() == pytest.approx(0.5)


PROMPTS = [f"Current observation (step {k}): room {k % 3}" for k in range(6)]
TARGETS = np.array([1.0, -2.0, 3.0, 0.5, -1.0, 2.0])


def _tiny():
    torch.manual_seed(0)
    tok = build_tokenizer(PROMPTS * 4, 300)
    return build_tiny_model(ModelConfig(), tok), tok


def _run_cfg(**algo) -> SimpleNamespace:
    return SimpleNamespace(
        algo=GAEConfig(**algo), rollout=RolloutConfig(), model=ModelConfig(name_or_path=None)
    )


def _batch(prompts) -> StepBatch:
    trajs = []
    for k, p in enumerate(prompts):
        tr = _episode([0.0], "terminated", prefix=f"p{k}")
        tr.steps[0].prompt_text = p
        trajs.append(tr)
    return StepBatch.from_groups([TrajectoryGroup("t", 0, trajs)])


@pytest.mark.parametrize("kind", ["head", "model"])
def test_value_loss_decreases_on_a_fixed_batch(kind):
    model, tok = _tiny()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    critic = GAECritic(_run_cfg(critic=kind, critic_lr=3e-3, vf_clip=0.5), model, tok)
    np.testing.assert_array_equal(critic.values(PROMPTS), 0.0)  # a fresh head: V ≡ 0
    batch = _batch(PROMPTS)
    rng = np.random.default_rng(0)
    errors = []
    for _ in range(15):
        values = critic.values(PROMPTS)
        errors.append(float(np.mean((values - TARGETS) ** 2)))
        adv = Advantages(step=np.zeros(6), values=values, returns=TARGETS)
        metrics = critic.after_update(batch, adv, rng)
    errors.append(float(np.mean((critic.values(PROMPTS) - TARGETS) ** 2)))
    assert np.mean(errors[-3:]) < 0.3 * errors[0], errors
    assert metrics["critic/loss"] > 0 and np.isfinite(metrics["critic/grad_norm"])
    changed = any(not torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    # A shared head trains the trunk too (vf_coef > 0); a separate critic leaves it alone.
    assert changed == (kind == "head")


def test_vf_clip_holds_the_value_near_the_one_the_targets_were_made_with():
    """30 steps towards a far target: with ε_v = 0.05 the gradient vanishes once V passes
    V_old + ε_v (only Adam's momentum carries it a little further); without clipping V keeps
    going. Same model, data and steps otherwise."""
    adv = Advantages(step=np.zeros(6), values=np.zeros(6), returns=np.full(6, 10.0))
    moved = {}
    for clip in (0.05, 0.0):
        cfg = _run_cfg(critic_lr=1e-3, vf_clip=clip, critic_epochs=30, vf_coef=0.0)
        critic = GAECritic(cfg, *_tiny())
        critic.after_update(_batch(PROMPTS), adv, np.random.default_rng(0))
        moved[clip] = critic.values(PROMPTS)
    assert np.all(moved[0.05] > 0) and np.all(moved[0.05] < 0.5)
    assert np.all(moved[0.0] > 3 * moved[0.05])


def test_pretrained_critic_loads_the_checkpoints_value_head(tmp_path):
    model, tok = _tiny()
    head = torch.nn.Linear(model.config.hidden_size, 1)
    save_value_head(head, tmp_path, {"gamma": 0.95})
    cfg = _run_cfg(critic_init="pretrained")
    cfg.model = ModelConfig(name_or_path=str(tmp_path))
    critic = GAECritic(cfg, model, tok)
    assert torch.equal(critic.head.weight.cpu(), head.weight) and torch.equal(
        critic.head.bias.cpu(), head.bias
    )
    (tmp_path / VALUE_HEAD_FILE).unlink()
    with pytest.raises(ConfigError, match="holds no value head"):
        GAECritic(cfg, model, tok)
    cfg.model = ModelConfig(name_or_path=None)
    with pytest.raises(ConfigError, match=r"model\.name_or_path"):
        GAECritic(cfg, model, tok)


FAST = [
    "algo=gae",
    "rollout.n_tasks=2",
    "rollout.group_size=2",
    "env.max_steps=4",
    "trainer.progress=false",
    "trainer.eval_every=0",
    "model.tokenizer_episodes=4",
]


@pytest.mark.slow
def test_resume_restores_the_critic_exactly(tmp_path):
    args = [*FAST, "trainer.save_every=1", "algo.critic=model"]
    full, cut = tmp_path / "full", tmp_path / "cut"
    train(compose([*args, "trainer.steps=3"]), full)
    train(compose([*args, "trainer.steps=2"]), cut)  # stops after iteration 2 (saved)
    train(compose([*args, "trainer.steps=3", "trainer.resume=true"]), cut)
    a = load_trainer_state(full / "checkpoints" / "iter-000003" / "trainer_state.pt")["stages"][
        "credit"
    ]["critic"]
    b = load_trainer_state(cut / "checkpoints" / "iter-000003" / "trainer_state.pt")["stages"][
        "credit"
    ]["critic"]
    for part in ("head", "model"):
        assert a[part].keys() == b[part].keys()
        for k in a[part]:
            assert torch.equal(a[part][k], b[part][k]), (part, k)
    assert a["optimizer"]["state"].keys() == b["optimizer"]["state"].keys()
    for k, s in a["optimizer"]["state"].items():
        assert torch.equal(s["exp_avg"], b["optimizer"]["state"][k]["exp_avg"])

    def rows(out):
        return {
            r["iteration"]: {
                k: v for k, v in r.items() if not k.startswith("perf/") and "time" not in k
            }
            for r in read_metrics(out)
        }

    assert rows(full)[3] == rows(cut)[3]
