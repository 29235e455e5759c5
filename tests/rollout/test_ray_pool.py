"""The Ray environment pool (``rollout.env_pool=ray``): the inline pool's results, and the
process pool's behaviour when an actor dies, hangs or its environment raises.

One local Ray (``num_cpus=2``) serves the module; every pool here is closed before the next
one starts, so its actors' CPUs are free again. Tests that need Ray are skipped when it is not
installed (the ``ray`` extra); the tests of the "Ray missing" path run without it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import crashy_env  # noqa: F401 - registers "crashy"
import numpy as np
import pytest
from helpers import ENV_TEST_KWARGS, GARBAGE, check_info, make_env, product_envs

from agentrl.configuration import ConfigError
from agentrl.env_api import INFO_KEYS, STEP_INFO_KEYS
from agentrl.rollout.env_pool import InlinePool, PoolConfig
from agentrl.rollout.pools import make_pool

ENV_NAMES = product_envs()  # the registry without the fixtures of benchmarks and tests


def _ray_or_skip():
    try:
        import ray
    except ImportError as exc:  # not installed, or broken: either way nothing to test here
        pytest.skip(f'Ray does not import ({exc}); it is the ray extra: pip install -e ".[ray]"')
    return ray


@pytest.fixture(scope="module")
def ray_local():
    ray = _ray_or_skip()
    if ray.is_initialized():  # pragma: no cover - another module left one up
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield ray
    ray.shutdown()


def _kill_and_wait(ray, actor) -> None:
    """``ray.kill`` returns before the actor is gone: wait until a call to it fails, so the
    pool's next step cannot still be served by the dying actor."""
    import time

    ray.kill(actor)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            ray.get(actor.ready.remote(), timeout=10)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.05)
    raise AssertionError("the killed actor still answers")


def _ray_pool(name: str, n: int, workers: int = 2, **kw):
    cfg = PoolConfig(kind="ray", workers=workers, **kw)
    return make_pool(name, ENV_TEST_KWARGS.get(name, {}), n, cfg)


def _strip(obj):
    """Results without the worker's pid (crashy reports it; the rest must match exactly)."""
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k != "pid"}
    if isinstance(obj, list | tuple):
        return type(obj)(_strip(v) for v in obj)
    return obj


def _play(pool, seeds: list[int], turns: int) -> list[list]:
    """Random admissible actions (a garbage action now and then) for every env, drawn from a
    generator seeded with the env's seed (twins play alike); an env whose episode ended is reset
    with seed None (its own RNG continues). Returns each env's transcript."""
    rngs = [np.random.default_rng(s) for s in seeds]
    first = pool.reset([(j, s, None) for j, s in enumerate(seeds)])
    infos = [info for _, info in first]
    trace: list[list] = [[r] for r in first]
    for t in range(turns):
        actions = []
        for j, info in enumerate(infos):
            adm = info.get("admissible_actions")
            if t % 4 == 3:
                actions.append(GARBAGE[t % len(GARBAGE)])
            elif adm:
                actions.append(adm[int(rngs[j].integers(len(adm)))])
            else:
                actions.append("look")
        res = pool.step(list(enumerate(actions)))
        infos = [r[4] for r in res]
        for j, r in enumerate(res):
            trace[j].append(r)
        ended = [j for j, r in enumerate(res) if r[2] or r[3]]
        if ended:
            for j, (obs, info) in zip(ended, pool.reset([(j, None, None) for j in ended])):
                trace[j].append((obs, info))
                infos[j] = info
    return trace


@pytest.mark.parametrize("name", ENV_NAMES)
def test_ray_pool_gives_the_inline_results(ray_local, name):
    """The contract through the pool: the right types and info keys, twins (envs 0 and 1 share
    a seed and live on different actors) identical, and every result equal to the inline
    pool's on the same seeds and actions."""
    seeds = [3, 3, 4, 5]
    inline = InlinePool([make_env(name) for _ in seeds])  # first: skips a missing extra
    pool = _ray_pool(name, len(seeds))
    try:
        assert pool.w == 2 and pool.where == "running"
        got = _play(pool, seeds, turns=10)
    finally:
        pool.close()
    want = _play(inline, seeds, turns=10)
    assert _strip(got) == _strip(want)
    assert _strip(got[0]) == _strip(got[1])  # twins on two actors
    for transcript in got:
        obs, info = transcript[0]
        assert isinstance(obs, str) and obs
        check_info(info, INFO_KEYS)
        obs, reward, terminated, truncated, info = transcript[1]
        assert isinstance(obs, str) and isinstance(reward, float)
        assert isinstance(terminated, bool) and isinstance(truncated, bool)
        check_info(info, STEP_INFO_KEYS)
        assert "worker_error" not in info


def test_actors_share_the_hash_seed_and_reach_the_drivers_modules(ray_local):
    from agentrl.rollout.ray_pool import RayPool

    # crashy is defined in tests/crashy_env.py: importable in the actors only through the
    # driver's sys.path, which the pool hands them.
    with RayPool("crashy", {}, 2, workers=2) as pool:
        pids = {info["pid"] for _, info in pool.reset([(0, 0, None), (1, 1, None)])}
        assert pids == {a["pid"] for a in pool.actor_info} and len(pids) == 2
        assert {a["hash_seed"] for a in pool.actor_info} == {"0"}


def test_an_env_that_cannot_be_built_fails_the_start_clearly(ray_local):
    from agentrl.rollout.env_pool import WorkerDied
    from agentrl.rollout.ray_pool import RayPool

    with pytest.raises(WorkerDied, match=r"env actor 0 failed to start(.|\n)*bogus_key"):
        RayPool("sokoban", {"bogus_key": 1}, 1, workers=1)


def test_killed_actor_is_replaced_and_its_episodes_truncated(ray_local):
    with _ray_pool("crashy", 4) as pool:
        first = pool.reset([(j, j, None) for j in range(4)])
        pids = {j: info["pid"] for j, (_, info) in enumerate(first)}
        assert pids[0] == pids[2] != pids[1] == pids[3]  # env j lives on actor j % 2
        pool.step([(j, "tick") for j in range(4)])
        _kill_and_wait(ray_local, pool.actors[1])  # mid-episode, from outside
        res = pool.step([(j, "tick") for j in range(4)])
        assert [r[0] for r in res] == ["ticks=2", "ticks=1", "ticks=2", "ticks=1"]
        assert [r[3] for r in res] == [False, True, False, True]
        for j in (1, 3):
            assert res[j][1] == 0.0 and res[j][4]["won"] is False
            assert "env actor 1" in res[j][4]["worker_error"]
            assert "died" in res[j][4]["worker_error"]
        assert "worker_error" not in res[0][4]
        assert pool.restarts == 1
        # The next episodes run on the replacement.
        again = pool.reset([(1, 7, None), (3, 8, None)])
        assert again[0][1]["pid"] not in pids.values()
        res = pool.step([(j, "tick") for j in range(4)])
        assert [r[0] for r in res] == ["ticks=3", "ticks=1", "ticks=3", "ticks=1"]


def test_actor_process_dying_in_a_step(ray_local):
    with _ray_pool("crashy", 2) as pool:
        pool.reset([(0, 0, None), (1, 1, None)])
        res = pool.step([(0, "tick"), (1, "die")])  # os._exit(3) inside the actor
        assert res[0][0] == "ticks=1" and res[0][3] is False
        assert res[1][3] is True and "ActorDiedError" in res[1][4]["worker_error"]
        assert pool.restarts == 1
        assert pool.reset([(1, 2, None)])[0][0] == "tick away"


def test_hung_actor_is_killed_after_the_timeout(ray_local):
    with _ray_pool("crashy", 2, step_timeout_s=1.0) as pool:
        pool.reset([(0, 0, None), (1, 1, None)])
        res = pool.step([(0, "hang"), (1, "tick")])
        assert res[0][3] is True and "did not answer in 1 s" in res[0][4]["worker_error"]
        assert res[1][0] == "ticks=1" and res[1][3] is False
        assert pool.restarts == 1
        assert pool.reset([(0, 2, None)])[0][0] == "tick away"


def test_env_exception_truncates_only_that_episode(ray_local):
    with _ray_pool("crashy", 2) as pool:
        pool.reset([(0, 0, None), (1, 1, None)])
        res = pool.step([(0, "raise"), (1, "tick")])
        assert res[0][3] is True and "environment bug" in res[0][4]["worker_error"]
        assert res[1][0] == "ticks=1"
        assert pool.restarts == 0  # the actor lives on


def test_rollout_survives_an_actor_dying_mid_batch(ray_local):
    """collect() over a Ray pool: the killed actor's episodes end truncated and are flagged as
    lost; the other actor's episodes play on to their wins, and the next batch runs."""
    from helpers import ScriptedBackend

    from agentrl.credit.batch import StepBatch
    from agentrl.model import build_tokenizer
    from agentrl.rollout import RolloutConfig, Sampling, collect

    tok = build_tokenizer(["tick away", "Tick three times.", "tick die"] * 5, 300)
    cfg = RolloutConfig(n_tasks=2, group_size=2, invalid_penalty=0.5, env_pool="ray")
    backend = ScriptedBackend(["tick", "die", "tick", "tick"] + ["tick"] * 20)
    with make_pool("crashy", {}, 4, cfg.pool_config()) as pool:
        assert type(pool).__name__ == "RayPool" and pool.w == 2  # one per core of this Ray
        groups = collect(pool, [0, 1], backend, tok, cfg, Sampling(max_new_tokens=2))
        trajs = [t for g in groups for t in g.trajectories]
        for j in (1, 3):
            assert len(trajs[j].steps) == 1 and trajs[j].steps[0].truncated
            assert trajs[j].steps[0].reward == 0.0 and not trajs[j].won
        for j in (0, 2):
            assert trajs[j].won and len(trajs[j].steps) == 3
        assert [t.lost for t in trajs] == [False, True, False, True]
        assert StepBatch.from_groups(groups).traj_lost.tolist() == [False, True, False, True]
        assert pool.restarts == 1
        again = collect(pool, [2, 3], ScriptedBackend(["tick"] * 12), tok, cfg,
                        Sampling(max_new_tokens=2))  # fmt: skip
        assert all(t.won for g in again for t in g.trajectories)


def test_rollout_config_passes_the_ray_settings():
    _ray_or_skip()
    from agentrl.rollout import RolloutConfig
    from agentrl.run import compose

    cfg = RolloutConfig(env_pool="ray", env_workers=3, ray_num_cpus=0.5,
                        ray_resources={"env_node": 1})  # fmt: skip
    assert cfg.pool_config() == PoolConfig("ray", 3, 300.0, 0.5, {"env_node": 1})
    # From the command line (README): a mapping in Hydra's override syntax.
    run = compose(["rollout.env_pool=ray", "rollout.ray_resources={env_node:1}"])
    assert run.rollout.pool_config().ray_resources == {"env_node": 1}
    assert compose(["rollout.env_pool=ray"]).rollout.pool_config().ray_resources == {}
    with pytest.raises(ConfigError, match=r"rollout\.ray_num_cpus"):
        RolloutConfig(env_pool="ray", ray_num_cpus=0)
    with pytest.raises(ConfigError, match=r"rollout\.ray_resources"):
        RolloutConfig(env_pool="ray", ray_resources={"env_node": -1})


def test_missing_ray_fails_at_start_with_the_install_hint(monkeypatch):
    from agentrl.rollout import RolloutConfig

    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed: import ray fails
    with pytest.raises(ConfigError, match=r'pip install -e "\.\[ray\]"'):
        RolloutConfig(env_pool="ray")
    with pytest.raises(ImportError, match=r'pip install -e "\.\[ray\]"'):
        make_pool("sokoban", {}, 2, PoolConfig(kind="ray"))
    RolloutConfig(env_pool="process")  # the other pools never need it


def test_cluster_detection(monkeypatch):
    ray = _ray_or_skip()
    from agentrl.rollout.ray_pool import cluster_address

    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert cluster_address() == "10.0.0.1:6379"
    monkeypatch.delenv("RAY_ADDRESS")
    live = "10.0.0.2:6379"
    monkeypatch.setattr(ray._private.services, "find_gcs_addresses", lambda: {live})
    # The latest `ray start` cluster, alive here: join it.
    monkeypatch.setattr(ray._private.utils, "read_ray_address", lambda *a: live)
    assert cluster_address() == live
    # An address file left by a cluster that has stopped: start a local Ray instead.
    monkeypatch.setattr(ray._private.utils, "read_ray_address", lambda *a: "10.0.0.3:6379")
    assert cluster_address() is None
    monkeypatch.setattr(ray._private.utils, "read_ray_address", lambda *a: None)
    assert cluster_address() is None  # another program's private ray.init() is not joined


@pytest.mark.slow
def test_run_end_to_end_with_the_ray_pool(ray_local, tmp_path):
    """``python -m agentrl.run rollout.env_pool=ray``: its own local Ray (training and
    evaluation pools on it), one iteration, a checkpoint."""
    out = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.run(
        [sys.executable, "-m", "agentrl.run", "rollout.env_pool=ray", "trainer.steps=1",
         "rollout.n_tasks=2", "rollout.group_size=2", "rollout.max_new_tokens=3",
         "trainer.eval_every=1", "trainer.eval_episodes=2", "trainer.progress=false",
         f"trainer.out_dir={out}", f"hydra.run.dir={tmp_path}/hydra"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env,
    )  # fmt: skip
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text[-3000:]
    assert "iter 1/1" in text
    assert "Ray actors" in text and "(local)" in text
    assert (out / "checkpoints" / "iter-000001" / "config.json").exists()
    assert Path(out / "metrics.jsonl").exists()
