"""The environment contract, checked over every registered environment.

Each registered env must: return the right types and ``info`` keys; give identical twin
rollouts for the same seed; accept any malformed action text without raising and report it as
invalid (case/whitespace variants of a real action may instead be accepted, but then as that
canonical action); truncate at its step limit; terminate only on a true end (``won``);
refuse ``step`` before ``reset`` with a clear error, wrapped or not; and, when it reports step
costs (``info["costs"]``, optional), report named finite non-negative floats.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from helpers import GARBAGE, check_info, make_env, product_envs

from agentrl.env_api import INFO_KEYS, STEP_INFO_KEYS, ResetNeeded, TextEnv

ENV_NAMES = product_envs()  # the registry without the fixtures of benchmarks and tests


def _policy_action(info: dict, rng: np.random.Generator) -> str:
    adm = info["admissible_actions"]
    return adm[int(rng.integers(len(adm)))] if adm else "look"


def test_some_environment_is_registered():
    assert "sokoban" in ENV_NAMES


@pytest.mark.parametrize("name", ENV_NAMES)
def test_types_and_info_keys(name):
    env = make_env(name)
    assert isinstance(env.unwrapped, TextEnv)
    obs, info = env.reset(seed=3)
    assert isinstance(obs, str) and obs
    check_info(info, INFO_KEYS)
    rng = np.random.default_rng(0)
    out = env.step(_policy_action(info, rng))
    assert len(out) == 5
    obs, reward, terminated, truncated, info = out
    assert isinstance(obs, str)
    assert isinstance(reward, float)
    assert isinstance(terminated, bool) and isinstance(truncated, bool)
    check_info(info, STEP_INFO_KEYS)
    assert info["action_valid"] is True
    assert isinstance(info["executed_action"], str)


@pytest.mark.parametrize("name", ENV_NAMES)
def test_step_before_reset_raises_a_clear_error(name):
    env = make_env(name)
    # gymnasium's OrderEnforcing wrapper guards the made env; the env itself must too.
    with pytest.raises(gym.error.ResetNeeded):
        env.step("look")
    for action in ("look", "", None):
        with pytest.raises(ResetNeeded, match=r"before reset\(\)"):
            env.unwrapped.step(action)  # type: ignore[arg-type]
    assert issubclass(ResetNeeded, RuntimeError)
    # The refusal leaves the env usable.
    _, info = env.unwrapped.reset(seed=0)
    *_, info2 = env.unwrapped.step(_policy_action(info, np.random.default_rng(0)))
    assert info2["action_valid"] is True


def test_step_after_a_failed_reset_raises():
    env = make_env("sokoban").unwrapped
    env.reset(seed=0)
    with pytest.raises(ValueError, match="unknown symbol"):
        env.reset(seed=0, options={"level": "not a level"})
    with pytest.raises(ResetNeeded):
        env.step("up")


def _rollout(name: str, seed: int, n: int = 40) -> list:
    env = make_env(name)
    obs, info = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    trace = [(obs, info["anchor"], info["admissible_actions"])]
    for _ in range(n):
        obs, r, term, trunc, info = env.step(_policy_action(info, rng))
        trace.append((obs, r, term, trunc, info["anchor"], info["won"], info["executed_action"]))
        if term or trunc:
            obs, info = env.reset()  # the env's own RNG continues: twins must still agree
            trace.append((obs, info["anchor"]))
    return trace


@pytest.mark.parametrize("name", ENV_NAMES)
def test_twin_rollouts_identical(name):
    assert _rollout(name, 11) == _rollout(name, 11)
    assert _rollout(name, 11) != _rollout(name, 12), "different seeds should give other tasks"


@pytest.mark.parametrize("name", ENV_NAMES)
@pytest.mark.parametrize("bad", GARBAGE, ids=range(len(GARBAGE)))
def test_garbage_actions_are_invalid_and_never_raise(name, bad):
    env = make_env(name)
    _, info = env.reset(seed=5)
    anchor = info["anchor"]
    _, reward, terminated, _, info2 = env.step(bad)
    assert info2["action_valid"] is False
    assert info2["executed_action"] is None
    assert not terminated
    assert info2["anchor"] == anchor, "an invalid action must not change the state"
    assert isinstance(reward, float) and np.isfinite(reward)


@pytest.mark.parametrize("name", ENV_NAMES)
def test_non_string_actions_never_raise(name):
    env = make_env(name)
    env.reset(seed=1)
    for bad in (None, 3, b"up"):
        _, _, term, _, info = env.step(bad)  # type: ignore[arg-type]
        assert info["action_valid"] is False
        assert not term


@pytest.mark.parametrize("name", ENV_NAMES)
def test_case_and_whitespace_variants(name):
    """Variants of a real action are invalid, or accepted as exactly that canonical action."""
    env = make_env(name)
    _, info = env.reset(seed=2)
    action = _policy_action(info, np.random.default_rng(0))
    for variant in (action.upper(), f"  {action}\n", action.swapcase(), f"\t{action.title()} "):
        env.reset(seed=2)
        _, _, _, _, info2 = env.step(variant)
        if info2["action_valid"]:
            assert info2["executed_action"] == action
        else:
            assert info2["executed_action"] is None


@pytest.mark.parametrize("name", ENV_NAMES)
def test_truncated_at_step_limit_and_terminated_only_on_true_end(name):
    env = make_env(name)
    limit = env.unwrapped.max_steps
    # Invalid actions never finish the task, so the episode must run exactly to the limit.
    env.reset(seed=0)
    for t in range(1, limit + 1):
        _, _, term, trunc, info = env.step("")
        assert not term
        assert trunc == (t == limit)
    # Random play: every end is either a win (terminated) or the limit (truncated).
    rng = np.random.default_rng(0)
    for seed in range(5):
        _, info = env.reset(seed=seed)
        for t in range(1, limit + 1):
            _, _, term, trunc, info = env.step(_policy_action(info, rng))
            assert not (term and trunc)
            if term:
                # Some tasks can end in failure (e.g. buying the wrong item); those that can
                # only end by succeeding say so, and then an end must be a win.
                if env.unwrapped.ends_only_on_success:
                    assert info["won"]
                break
            assert trunc == (t == limit)
            if trunc:
                break
        assert term or trunc


def _check_costs(env, info: dict) -> None:
    """``info["costs"]`` is optional; when present, named finite non-negative floats, the same
    names at every step (a TextEnv's ``cost_names``)."""
    if "costs" not in info:
        return
    costs = info["costs"]
    assert isinstance(costs, dict)
    for name, value in costs.items():
        assert isinstance(name, str) and isinstance(value, float), (name, value)
        assert np.isfinite(value) and value >= 0, (name, value)
    if isinstance(env.unwrapped, TextEnv):
        assert tuple(costs) == env.unwrapped.cost_names


@pytest.mark.parametrize("name", ENV_NAMES)
def test_step_costs_are_named_non_negative_floats(name):
    env = make_env(name)
    rng = np.random.default_rng(0)
    _, info = env.reset(seed=4)
    _, _, _, _, info = env.step("")  # invalid
    _check_costs(env, info)
    if "costs" in info and "invalid" in info["costs"]:
        assert info["costs"]["invalid"] == 1.0
    for _ in range(6):
        _, _, term, trunc, info = env.step(_policy_action(info, rng))
        _check_costs(env, info)
        if "costs" in info and "invalid" in info["costs"]:
            assert info["costs"]["invalid"] == (0.0 if info["action_valid"] else 1.0)
        if term or trunc:
            break
