"""agentrl.credit.skyrl_adapter: SkyRL's registry and trainer give agentrl.credit.assign's numbers.

Episodes are played on Sokoban as in test_assign.py and laid out exactly as SkyRL 0.3.0's
step-wise generator lays them out (``GeneratorOutput``: one row per turn, ``TrajectoryID``,
``is_last_step``, per-token rewards with the turn's reward on one token, the environment's
``get_metrics()`` on the last row holding the turn log). Those rows then go through SkyRL's own
code: ``RayPPOTrainer.convert_to_training_input`` (tensors, padding to the data-parallel size),
the ``AgentrlTrainer`` override of ``compute_advantages_and_returns`` and SkyRL's
``ppo_utils.compute_advantages_and_returns``, which finds ``agentrl_<method>`` in SkyRL's
``AdvantageEstimatorRegistry``. Every turn's advantage must equal ``assign`` on the same records.

Needs the ``skyrl`` package and its trainer's imports (ray, jaxtyping, loguru, skyrl-gym,
torchdata, aiohttp); skipped without them unless ``AGENTRL_REQUIRE_SKYRL=1`` (set by CI), which
turns that skip into a failure. The trainer is built without ``__init__`` (which starts Ray
placement groups and model workers): only ``cfg``, the tokenizer's pad id, the data-parallel
size and the metrics dict are what the two methods read.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import random
import sys
from types import SimpleNamespace

import numpy as np
import pytest

REQUIRE = os.environ.get("AGENTRL_REQUIRE_SKYRL") == "1"
INSTALL = (
    'pip install -e ".[dev,skyrl]" in a venv of its own (README, "Using agentrl\'s credit from '
    'another trainer")'
)
if importlib.util.find_spec("skyrl") is None and not REQUIRE:
    pytest.skip(f"skyrl is not installed: {INSTALL}", allow_module_level=True)

if sys.version_info < (3, 12):
    # SkyRL 0.3.0 puts a typing.TypedDict in a pydantic model (skyrl/tinker/types.py), which
    # pydantic refuses below Python 3.12 ("Please use typing_extensions.TypedDict"); SkyRL runs
    # on 3.12, where typing's TypedDict is what typing_extensions hands out. Our CPU torch build
    # is for 3.11, so the tests give SkyRL typing_extensions' class before importing it.
    import typing

    import typing_extensions

    typing.TypedDict = typing_extensions.TypedDict

import torch  # noqa: E402
from skyrl.backends.skyrl_train.utils import ppo_utils  # noqa: E402
from skyrl.backends.skyrl_train.utils.ppo_utils import AdvantageEstimatorRegistry  # noqa: E402
from skyrl.train.config import SkyRLTrainConfig  # noqa: E402
from skyrl.train.generators.base import TrajectoryID  # noqa: E402
from skyrl.train.trainer import RayPPOTrainer  # noqa: E402
from skyrl.train.utils import validate_cfg  # noqa: E402
from test_assign import MAX_STEPS, episodes, play  # noqa: E402

import agentrl  # noqa: E402
from agentrl.configuration import ConfigError  # noqa: E402
from agentrl.credit import RecordError, assign  # noqa: E402
from agentrl.credit import skyrl_adapter as adapter  # noqa: E402
from agentrl.credit.batch import TrajectoryGroup  # noqa: E402
from agentrl.credit.skyrl_adapter import (  # noqa: E402
    AgentrlTrainer,
    SkyRLEstimator,
    check_skyrl_config,
    register_skyrl_estimators,
    skyrl_turn_records,
)

METHODS = ["grpo", "gigpo", "crbc", "graphgpo", "g2po"]
G = 4  # rollouts per prompt (test_assign's episodes)


def skyrl_rows(
    groups: list[TrajectoryGroup], seed: int, first_uid: int = 0
) -> tuple[dict, list[str], list[dict]]:
    """The groups as SkyRL's step-wise generator outputs them, and the records by hand.

    Returns:
        (generator_output, uids, records): N rows; uids[i] is row i's prompt uid (what the
        trainer passes); records[i] is the assign record of row i.
    """
    rng = np.random.default_rng(seed)
    out: dict[str, list] = {
        k: []
        for k in (
            "prompt_token_ids",
            "response_ids",
            "rewards",
            "loss_masks",
            "stop_reasons",
            "rollout_logprobs",
            "trajectory_ids",
            "is_last_step",
            "env_metrics",
        )
    }
    uids, records = [], []
    for g, group in enumerate(groups):
        uid = f"prompt-{first_uid + g}"
        for i, tr in enumerate(group.trajectories):
            log = []
            for t, s in enumerate(tr.steps):
                last = t == len(tr.steps) - 1
                n_out, n_obs = int(rng.integers(1, 5)), 0 if last else int(rng.integers(1, 4))
                # SkyRL's step-wise row: this turn's output then the next observation's tokens;
                # the turn's reward sits on the output's last token, the mask off the observation.
                reward = [0.0] * (n_out + n_obs)
                reward[n_out - 1] = s.reward
                out["prompt_token_ids"].append(
                    rng.integers(5, 50, int(rng.integers(3, 8))).tolist()
                )
                out["response_ids"].append(rng.integers(5, 50, n_out + n_obs).tolist())
                out["rewards"].append(reward)
                out["loss_masks"].append([1] * n_out + [0] * n_obs)
                out["stop_reasons"].append("stop")
                out["rollout_logprobs"].append(None)
                out["trajectory_ids"].append(TrajectoryID(instance_id=uid, repetition_id=i))
                out["is_last_step"].append(last)
                nxt = tr.steps[t + 1].anchor if not last else None
                entry = {
                    "state_key": s.anchor,
                    "next_state_key": nxt,
                    "action": s.action,
                    "valid": s.valid,
                    "terminated": s.terminated,
                    "truncated": s.truncated,
                    "success": tr.won,
                }
                log.append(entry)
                uids.append(uid)
                records.append(
                    {
                        **entry,
                        "group_id": uid,
                        "trajectory_id": (uid, i),
                        "turn_index": t,
                        "reward": s.reward,
                    }
                )
            # SkyRL calls get_metrics() when the episode ends: only the last row carries it.
            out["env_metrics"] += [{}] * (len(tr.steps) - 1)
            out["env_metrics"].append({"agentrl_turns": log, "solved": float(tr.won)})
    out["rollout_logprobs"] = None
    out["rollout_metrics"] = {}
    return out, uids, records


def config(*overrides: str) -> SkyRLTrainConfig:
    """SkyRL's config with agentrl's estimator on step-wise rows, batch sizes for 3 prompts."""
    return SkyRLTrainConfig.from_cli_overrides(
        [
            "trainer.algorithm.advantage_estimator=agentrl_crbc",
            "generator.step_wise_trajectories=true",
            "trainer.logger=console",
            "trainer.train_batch_size=3",
            "trainer.policy_mini_batch_size=3",
            f"generator.n_samples_per_prompt={G}",
            *overrides,
        ]
    )


def bare_trainer(cfg: SkyRLTrainConfig, dp_size: int, cls: type = AgentrlTrainer):
    """An AgentrlTrainer (or ``cls``) with what convert_to_training_input and
    compute_advantages_and_returns read, without the Ray workers its __init__ starts."""
    trainer = cls.__new__(cls)
    trainer.cfg = cfg
    trainer.tokenizer = SimpleNamespace(pad_token_id=0)
    trainer.dispatch = SimpleNamespace(get_lcm_dp_size=lambda: dp_size)
    trainer.all_metrics = {}
    return trainer


def train_step(trainer: AgentrlTrainer, gen_out: dict, uids: list[str]):
    """SkyRL's steps 3 and 6 of an iteration (the forward pass in between adds ``values``)."""
    data = trainer.convert_to_training_input(copy.deepcopy(gen_out), uids)
    data["values"] = None  # no critic
    return trainer.compute_advantages_and_returns(data)


def revisit(seed: int, action_seed: int, n_groups: int = 3) -> list[TrajectoryGroup]:
    """The levels of ``episodes(seed)`` played again with other random actions."""
    rng = random.Random(action_seed)
    env = agentrl.make("sokoban", dim_room=(5, 5), num_boxes=1, max_steps=MAX_STEPS)
    groups = []
    for g in range(n_groups):
        level = 1000 * seed + g
        trajs = [play(env, level, rng) for _ in range(G)]
        _, info = env.reset(seed=level)
        groups.append(TrajectoryGroup(str(info["task"]), level, trajs, env="sokoban"))
    return groups


@pytest.fixture(autouse=True)
def clean_registry():
    """Each test registers what it needs; SkyRL's registry is a process-wide class attribute."""
    yield
    for name in AdvantageEstimatorRegistry.list_available():
        if name.startswith("agentrl_"):
            AdvantageEstimatorRegistry.unregister(name)


@pytest.fixture(scope="module")
def batches():
    first, second = episodes(5, n_groups=3, lost={}), revisit(5, action_seed=99)
    steps = [s for b in (first, second) for g in b for tr in g.trajectories for s in tr.steps]
    assert any(not s.valid for s in steps) and any(s.terminated for s in steps)
    assert any(tr.won for g in first for tr in g.trajectories)
    # The same prompts (uids and levels) in both: the second step revisits the first one's
    # tasks, as the next epoch does, so that a stateful estimator's state matters.
    return skyrl_rows(first, seed=0), skyrl_rows(second, seed=1)


def test_rows_become_the_records_by_hand(batches):
    (gen_out, _, records), _ = batches
    got = skyrl_turn_records(gen_out)
    assert got == records
    assert len(got) == len(gen_out["response_ids"]) > 3 * G


@pytest.mark.parametrize("method", METHODS)
def test_registered_estimator_equals_assign(batches, method):
    """SkyRL's compute_advantages_and_returns with the name, on float64 rewards: exact."""
    (gen_out, uids, records), _ = batches
    assert register_skyrl_estimators([method]) == [f"agentrl_{method}"]
    want = assign(records, method, sort_ids=False).advantages
    n, width = len(records), 9
    rewards = torch.zeros(n + 2, width, dtype=torch.float64)  # 2 rows of SkyRL's padding
    mask = torch.from_numpy(np.random.default_rng(3).random((n + 2, width)) < 0.7).float()
    adv, ret = ppo_utils.compute_advantages_and_returns(
        token_level_rewards=rewards,
        response_mask=mask,
        index=np.array([*uids, "pad0", "pad1"]),
        adv_estimator=f"agentrl_{method}",
        config=config().trainer.algorithm,
        agentrl_turns=skyrl_turn_records(gen_out),
    )
    assert adv.dtype == torch.float64 and adv.shape == (n + 2, width)
    expected = torch.from_numpy(np.append(want, [0.0, 0.0]))[:, None] * mask
    assert torch.equal(adv, expected)
    assert torch.equal(ret, adv)


@pytest.mark.parametrize("method", METHODS)
def test_trainer_step_equals_assign(batches, method):
    """Through SkyRL's convert_to_training_input (padding to 4 data-parallel ranks) and the
    trainer's advantage step: each row's response tokens carry its turn's advantage."""
    (gen_out, uids, records), _ = batches
    register_skyrl_estimators([method])
    cfg = config(f"trainer.algorithm.advantage_estimator=agentrl_{method}")
    trainer = bare_trainer(cfg, dp_size=4)
    data = train_step(trainer, gen_out, uids)
    want = assign(records, method, sort_ids=False)
    n = len(records)
    assert data.metadata["pad_size"] == (-n) % 4 and data["advantages"].shape[0] == n + (-n) % 4
    assert "agentrl_turns" not in data.metadata  # used up, not shipped to the workers
    adv, mask = data["advantages"], data["response_mask"]
    rows = torch.from_numpy(want.advantages).to(adv.dtype)[:, None] * mask[:n].to(adv.dtype)
    assert torch.equal(adv[:n], rows)
    assert torch.count_nonzero(adv[n:]) == 0
    assert torch.equal(data["returns"], adv)
    # The response tokens of each row are its own: the turn's output and the next observation.
    lengths = [len(r) for r in gen_out["response_ids"]]
    assert mask[:n].sum(dim=1).tolist() == lengths
    assert trainer.all_metrics["agentrl/diag/success"] == want.metrics["diag/success"]
    assert trainer.all_metrics["loss/avg_raw_advantages"] == pytest.approx(
        float(np.average(want.advantages, weights=lengths)), abs=1e-6
    )


@pytest.mark.parametrize("method", ["tigpo", "bv_blend"])
def test_stateful_estimator_keeps_its_state_across_steps(batches, method):
    """tigpo's per-task graph (bv_blend's statistics) lives in the registered estimator from
    one step to the next."""
    (gen1, uids1, rec1), (gen2, uids2, rec2) = batches
    register_skyrl_estimators([method])
    trainer = bare_trainer(config(f"trainer.algorithm.advantage_estimator=agentrl_{method}"), 1)
    first = assign(rec1, method, sort_ids=False)
    second = assign(rec2, method, state=first.state, sort_ids=False)
    fresh = assign(rec2, method, sort_ids=False)
    assert not np.array_equal(second.advantages, fresh.advantages)  # the state matters
    for (gen, uids, rec), want in (((gen1, uids1, rec1), first), ((gen2, uids2, rec2), second)):
        data = train_step(trainer, gen, uids)
        got = data["advantages"][: len(rec)]
        rows = torch.from_numpy(want.advantages).to(got.dtype)[:, None]
        assert torch.equal(got, rows * data["response_mask"][: len(rec)].to(got.dtype))
    assert AdvantageEstimatorRegistry.get(f"agentrl_{method}").state == second.state


def test_options_reach_the_estimator(batches):
    (gen_out, _, records), _ = batches
    register_skyrl_estimators(["graphgpo"], options={"graphgpo": {"omega": 0.5}})
    est = AdvantageEstimatorRegistry.get("agentrl_graphgpo")
    got = est.turn_advantages(skyrl_turn_records(gen_out))
    np.testing.assert_array_equal(got, assign(records, "graphgpo", sort_ids=False, omega=0.5)[0])
    assert not np.array_equal(got, assign(records, "graphgpo", sort_ids=False)[0])


def test_skyrl_accepts_the_names():
    """SkyRL's own config check looks the estimator up in its registry."""
    names = register_skyrl_estimators()
    assert {"agentrl_crbc", "agentrl_gigpo", "agentrl_tigpo"} <= set(names)
    assert not {"agentrl_gae", "agentrl_relace", "agentrl_ac2"} & set(names)
    cfg = config()
    validate_cfg(cfg)
    check_skyrl_config(cfg)
    assert register_skyrl_estimators(["crbc"]) == ["agentrl_crbc"]  # again: harmless


def test_unregistered_name_and_wrong_settings_are_refused():
    with pytest.raises(ConfigError, match=r"agentrl_crbc is not registered.*register_skyrl"):
        check_skyrl_config(config())
    register_skyrl_estimators(["crbc"])
    cases = [
        ("generator.step_wise_trajectories=false", "step_wise_trajectories=true"),
        ("generator.merge_stepwise_output=true", "merge_stepwise_output=false"),
        ("trainer.algorithm.use_kl_in_reward=true", "use_kl_loss"),
        ("trainer.algorithm.dynamic_sampling.type=filter", "dynamic_sampling.type=null"),
    ]
    for override, message in cases:
        with pytest.raises(ConfigError, match=message):
            check_skyrl_config(config(override))
    check_skyrl_config(config("trainer.algorithm.advantage_estimator=grpo"))  # SkyRL's own


def test_registration_errors():
    with pytest.raises(ValueError, match="learned value function"):
        register_skyrl_estimators(["gae"])
    with pytest.raises(ValueError, match="rescores responses"):
        register_skyrl_estimators(["relace"])
    with pytest.raises(ConfigError, match=r"algo.omgea is not a valid key"):
        register_skyrl_estimators(["graphgpo"], options={"graphgpo": {"omgea": 0.2}})
    with pytest.raises(ConfigError, match=r"options for \['crbc'\]"):
        register_skyrl_estimators(["grpo"], options={"crbc": {}})
    with pytest.raises(ConfigError, match="list of names"):
        register_skyrl_estimators("crbc")
    register_skyrl_estimators(["crbc"])
    with pytest.raises(ValueError, match="already has an advantage estimator 'agentrl_crbc'"):
        register_skyrl_estimators(["crbc"], options={"crbc": {"w_step": 5.0}})
    register_skyrl_estimators(["crbc"], options={"crbc": {"w_step": 5.0}}, replace=True)
    est = AdvantageEstimatorRegistry.get("agentrl_crbc")
    assert isinstance(est, SkyRLEstimator) and est.settings.options == {"w_step": 5.0}


def test_the_stock_trainer_cannot_feed_it(batches):
    """SkyRL's own RayPPOTrainer hands the estimator the last step of each episode and no
    records: a clear error naming the fix."""
    (gen_out, uids, _), _ = batches
    register_skyrl_estimators(["crbc"])
    with pytest.raises(ValueError, match=r"needs the per-turn records.*AgentrlTrainer"):
        train_step(bare_trainer(config(), 1, RayPPOTrainer), gen_out, uids)


def test_skyrl_estimators_run_skyrl_code_unchanged(batches):
    """With SkyRL's own grpo, AgentrlTrainer is RayPPOTrainer: same advantages, no records."""
    (gen_out, uids, _), _ = batches
    cfg = config("trainer.algorithm.advantage_estimator=grpo")
    ours = train_step(bare_trainer(cfg, 2), gen_out, uids)
    stock = train_step(bare_trainer(cfg, 2, RayPPOTrainer), gen_out, uids)
    assert torch.equal(ours["advantages"], stock["advantages"])
    assert torch.count_nonzero(ours["advantages"]) > 0
    assert "agentrl_turns" not in ours.metadata


def test_skyrl_cli_dispatches_to_the_adapter(monkeypatch):
    """``main_base trainer.override_entrypoint=agentrl.credit.skyrl_adapter ...`` reaches
    main(), which registers the method with AGENTRL_CREDIT_CONFIG's options, checks the config
    and hands run_experiment to Ray (faked here: no cluster is started)."""
    import multiprocessing as mp

    import ray
    import skyrl.train.utils.utils as skyrl_utils

    method = mp.get_start_method(allow_none=True)
    from skyrl.train.entrypoints import main_base  # switches multiprocessing to spawn

    mp.set_start_method(method, force=True)
    launched = []
    monkeypatch.setattr(skyrl_utils, "initialize_ray", lambda cfg: launched.append("ray"))
    monkeypatch.setattr(
        ray, "remote", lambda **kw: lambda fn: SimpleNamespace(remote=lambda cfg: (fn, cfg))
    )
    monkeypatch.setattr(ray, "get", launched.append)
    monkeypatch.setenv("AGENTRL_CREDIT_CONFIG", '{"w_step": 5.0}')
    argv = [
        "trainer.override_entrypoint=agentrl.credit.skyrl_adapter",
        "trainer.algorithm.advantage_estimator=agentrl_crbc",
        "generator.step_wise_trajectories=true",
        "trainer.logger=console",
    ]
    monkeypatch.setattr(sys, "argv", ["main_base", *argv])
    main_base.main()
    assert launched[0] == "ray"
    fn, cfg = launched[1]
    assert fn is adapter.run_experiment
    assert cfg.trainer.algorithm.advantage_estimator == "agentrl_crbc"
    est = AdvantageEstimatorRegistry.get("agentrl_crbc")
    assert est.settings.options == {"w_step": 5.0}
    monkeypatch.setattr(sys, "argv", ["main_base", *argv[:2], "trainer.logger=console"])
    with pytest.raises(ConfigError, match="step_wise_trajectories=true"):
        main_base.main()


def test_the_estimator_without_records_says_what_is_missing(batches):
    register_skyrl_estimators(["crbc"])
    with pytest.raises(ValueError, match=r"needs the per-turn records.*AgentrlTrainer"):
        ppo_utils.compute_advantages_and_returns(
            token_level_rewards=torch.zeros(2, 3),
            response_mask=torch.ones(2, 3),
            index=np.array(["a", "a"]),
            adv_estimator="agentrl_crbc",
            config=config().trainer.algorithm,
        )


def test_rows_out_of_step_with_uids_are_named(batches):
    (gen_out, uids, _), _ = batches
    register_skyrl_estimators(["crbc"])
    est = AdvantageEstimatorRegistry.get("agentrl_crbc")
    n = len(uids)
    with pytest.raises(RecordError, match=r"row 0 has uid 'prompt-1' but its record is in group"):
        est(
            torch.zeros(n, 2),
            torch.ones(n, 2),
            ["prompt-1", *uids[1:]],
            skyrl_turn_records(gen_out),
        )
    with pytest.raises(RecordError, match="records for 3 rows"):
        est(torch.zeros(3, 2), torch.ones(3, 2), None, skyrl_turn_records(gen_out))


def test_episode_without_a_turn_log_is_lost(batches):
    """SkyRL cuts an episode at max_input_length without asking for its metrics: lost by
    default (advantage 0, left out of the other episodes' statistics), or an error."""
    (gen_out, _, records), _ = batches
    cut = copy.deepcopy(gen_out)
    last = next(i for i, x in enumerate(cut["is_last_step"]) if x)
    cut["env_metrics"][last] = {}
    got = skyrl_turn_records(cut)
    assert all(r["lost"] for r in got[: last + 1]) and got[last + 1 :] == records[last + 1 :]
    register_skyrl_estimators(["gigpo"])
    adv = AdvantageEstimatorRegistry.get("agentrl_gigpo").turn_advantages(got)
    np.testing.assert_array_equal(adv[: last + 1], 0.0)
    lost_by_hand = [dict(r, lost=True) if i <= last else r for i, r in enumerate(records)]
    np.testing.assert_array_equal(adv, assign(lost_by_hand, "gigpo", sort_ids=False).advantages)
    with pytest.raises(RecordError, match=r"trajectory \('prompt-0', 0\) .* has no turn log"):
        skyrl_turn_records(cut, unlogged="error")


def _set(path: tuple, value):
    def change(out):
        target = out
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


def _first_log(out) -> list:
    return next(m["agentrl_turns"] for m in out["env_metrics"] if "agentrl_turns" in m)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda o: o.update(is_last_step=None), "step_wise_trajectories=true"),
        (lambda o: o.update(trajectory_ids=None), "has no 'trajectory_ids'"),
        (lambda o: o["env_metrics"].pop(), r"'env_metrics' is \d+ long, expected"),
        (lambda o: _first_log(o).pop(), r"has \d+ rows .* but its turn log has \d+ entries"),
        (lambda o: o["is_last_step"].__setitem__(-1, False), "end without is_last_step=True"),
        (lambda o: o["is_last_step"].__setitem__(0, 1), "is_last_step.0. must be true or false"),
        (
            lambda o: o["trajectory_ids"].__setitem__(0, TrajectoryID("prompt-9", 0)),
            r"row 1 belongs to trajectory \('prompt-0', 0\) but the episode that began at row 0",
        ),
        (
            lambda o: o["trajectory_ids"].__setitem__(0, ("prompt-0", 0)),
            "must be a TrajectoryID",
        ),
        (
            lambda o: o["env_metrics"].__setitem__(0, {"agentrl_turns": []}),
            "has a turn log but is not its episode's last row",
        ),
        (
            lambda o: _first_log(o)[0].update(turn_index=0),
            r"the turn log gives \['turn_index'\]",
        ),
        (lambda o: _first_log(o)[0].update(reward=7.0), "the turn log's reward is 7.0 but"),
        (lambda o: _first_log(o).__setitem__(0, "up"), "a turn log entry must be a dict"),
        (
            lambda o: next(m for m in o["env_metrics"] if m).update(agentrl_turns="up"),
            "must be a list with one dict per turn",
        ),
        (lambda o: o["rewards"].__setitem__(0, "x"), r"rewards\[0\] must be a number or a list"),
    ],
)
def test_malformed_outputs_are_named(batches, change, message):
    (gen_out, _, _), _ = batches
    out = copy.deepcopy(gen_out)
    assert not out["is_last_step"][0]  # the first episode has more than one turn
    change(out)
    with pytest.raises(RecordError, match=message):
        skyrl_turn_records(out)


def test_a_repeated_episode_is_named(batches):
    (gen_out, _, _), _ = batches
    out = copy.deepcopy(gen_out)
    ends = [i for i, x in enumerate(out["is_last_step"]) if x]
    for i in range(ends[0] + 1, ends[1] + 1):  # the second episode claims the first one's id
        out["trajectory_ids"][i] = TrajectoryID("prompt-0", 0)
    with pytest.raises(RecordError, match=r"trajectory \('prompt-0', 0\) appears again"):
        skyrl_turn_records(out)


def test_record_errors_from_assign_reach_the_trainer(batches):
    """A turn log that breaks assign's contract (here: the chain of states) fails the step."""
    (gen_out, uids, _), _ = batches
    register_skyrl_estimators(["crbc"])
    out = copy.deepcopy(gen_out)
    _first_log(out)[0]["next_state_key"] = "nowhere"
    with pytest.raises(RecordError, match="chain of states is broken"):
        train_step(bare_trainer(config(), 1), out, uids)


def test_options_from_the_environment(monkeypatch):
    monkeypatch.setenv("AGENTRL_CREDIT_CONFIG", '{"w_step": 5.0}')
    assert adapter._options_from_environment() == {"w_step": 5.0}
    monkeypatch.setenv("AGENTRL_CREDIT_CONFIG", "{w_step: 5}")
    with pytest.raises(ConfigError, match="is not JSON"):
        adapter._options_from_environment()
    monkeypatch.setenv("AGENTRL_CREDIT_CONFIG", "[1]")
    with pytest.raises(ConfigError, match="must be a JSON object"):
        adapter._options_from_environment()
