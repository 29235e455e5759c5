"""agentrl.credit.verl_adapter: verl's advantage step gives agentrl.credit.assign's numbers.

Runs against verl itself (``pip install verl``; its ``DataProto``, its estimator registry, its
``compute_advantage`` and its v1 trainer's advantage step). Skipped when verl does not import,
unless ``AGENTRL_REQUIRE_VERL=1`` (set by CI), which turns that skip into a failure. The v1
trainer test also needs verl's ``TransferQueue`` extra; only the store itself is replaced (by a
dict packed with verl's own ``list_of_dict_to_tensordict``, as verl's agent loop packs it).

Episodes are Sokoban episodes played as in test_assign.py; each turn becomes one DataProto row
(verl-agent's layout) with a random response length, in shuffled order. The expected numbers
come from :func:`agentrl.credit.assign` on records built from the episodes directly, not from the
DataProto.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

REQUIRE = os.environ.get("AGENTRL_REQUIRE_VERL") == "1"
if importlib.util.find_spec("verl") is None and not REQUIRE:
    pytest.skip(
        "verl is not installed: pip install verl==0.9.1 (see README)", allow_module_level=True
    )

from omegaconf import OmegaConf  # noqa: E402  (verl's dependency)
from test_assign import assert_same_metrics, episodes  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.trainer.ppo.ray_trainer import compute_advantage as verl_compute_advantage  # noqa: E402

from agentrl.configuration import ConfigError  # noqa: E402
from agentrl.credit import RecordError, assign  # noqa: E402
from agentrl.credit import verl_adapter as va  # noqa: E402

L = 7  # padded response length
ROOT = Path(__file__).resolve().parents[2]


def turn_rows(groups, seed: int = 0) -> list[dict]:
    """Every turn of every episode, with a response length, in shuffled order."""
    rng = random.Random(seed)
    rows = []
    for g, group in enumerate(groups):
        for m, traj in enumerate(group.trajectories):
            for t, s in enumerate(traj.steps):
                rows.append(
                    {
                        "uid": f"prompt-{g}",
                        "traj_uid": f"prompt-{g}-session-{m}",
                        "turn_index": t,
                        "state_key": s.anchor,
                        "action": s.action,
                        "valid": s.valid,
                        "terminated": s.terminated,
                        "truncated": s.truncated,
                        "success": traj.won,
                        "reward": s.reward,
                        "episode_return": traj.ret,
                        "rubric_reward": round(rng.uniform(-1, 1), 3),
                        "logprob": float(np.mean(s.logprobs)),
                        "len": rng.randint(1, L),
                    }
                )
    rng.shuffle(rows)
    return rows


def obj(values) -> np.ndarray:
    """An object column (tuples stay elements, not a second dimension)."""
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


def dataproto(rows, token_reward: str | None = None, rename: dict | None = None) -> DataProto:
    """The rows as verl's DataProto: response_mask from each row's length; the token rewards
    hold ``token_reward`` (a row field) on the last response token, or 0."""
    n = len(rows)
    mask = torch.zeros(n, L, dtype=torch.int64)
    rewards = torch.zeros(n, L, dtype=torch.float32)
    for i, r in enumerate(rows):
        mask[i, : r["len"]] = 1
        if token_reward:
            rewards[i, r["len"] - 1] = r[token_reward]
    rename = rename or {}
    fields = [k for k in rows[0] if k != "len"]
    non_tensors = {rename.get(k, k): obj([r[k] for r in rows]) for k in fields}
    return DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask}, non_tensors=non_tensors
    )


def records(rows, reward: str = "reward", float32: bool = False) -> list[dict]:
    """The same turns as assign's records (agentrl's field names); ``float32``: the reward
    rounded as verl's float32 token rewards hold it."""
    out = []
    for r in rows:
        rec = {
            "group_id": r["uid"],
            "trajectory_id": r["traj_uid"],
            **{k: r[k] for k in va.REQUIRED_FIELDS if k in r},
            "rubric_reward": r["rubric_reward"],
            "logprob": r["logprob"],
        }
        rec[reward] = float(np.float32(r[reward])) if float32 else r[reward]
        out.append(rec)
    return out


def expect_tokens(data: DataProto, want: np.ndarray) -> None:
    """advantages = returns = each turn's advantage (float32) on its response tokens, 0 after."""
    mask = data.batch["response_mask"]
    tokens = torch.as_tensor(want, dtype=torch.float32)[:, None] * mask
    assert data.batch["advantages"].dtype == torch.float32
    assert torch.equal(data.batch["advantages"], tokens)
    assert torch.equal(data.batch["returns"], tokens)
    assert torch.all(data.batch["advantages"][mask == 0] == 0)


def algo_config(method: str, **agentrl) -> OmegaConf:
    cfg = {"adv_estimator": f"agentrl_{method}", "gamma": 1.0, "lam": 1.0}
    if agentrl:
        cfg["agentrl"] = agentrl
    return OmegaConf.create(cfg)


@pytest.fixture(scope="module")
def groups():
    gs = episodes(5, n_groups=3, lost={})
    assert any(tr.won for g in gs for tr in g.trajectories)
    assert any(not s.valid for g in gs for tr in g.trajectories for s in tr.steps)
    return gs


@pytest.fixture(scope="module")
def rows(groups):
    return turn_rows(groups)


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch):
    """Each test starts without the process's cached estimators (and their state)."""
    monkeypatch.setattr(va, "_CREDITS", {})


@pytest.mark.parametrize("method", ["grpo", "rloo", "gigpo", "crbc", "graphgpo", "g2po", "hgpo"])
def test_function_equals_assign(rows, method):
    data = va.compute_agentrl_advantage(dataproto(rows), method)
    want = assign(records(rows), method)
    expect_tokens(data, want.advantages)
    assert_same_metrics(data.meta_info["agentrl_metrics"], want.metrics)
    assert "agentrl_state" not in data.meta_info
    # float64 before the cast to verl's dtype: exactly assign's numbers
    credit = va.VerlCredit(va.VerlCreditSettings(method))
    d = dataproto(rows)
    got = credit.turn_advantages(
        d.non_tensor_batch, d.batch["token_level_rewards"], d.batch["response_mask"]
    )
    np.testing.assert_array_equal(got.advantages, want.advantages)
    assert np.abs(want.advantages).max() > 0


def test_every_registered_name_through_verls_advantage_step(rows):
    """``algorithm.adv_estimator=agentrl_<m>`` in the drop-in compute_advantage, which runs
    verl's own compute_advantage and its registry lookup, for every registrable method."""
    names = va.register()
    assert names == [f"agentrl_{m}" for m in va.registrable_methods()]
    assert len(names) >= 15 and "agentrl_crbc" in names and "agentrl_tigpo" in names
    for name in names:
        method = name.removeprefix("agentrl_")
        assert core_algos.get_adv_estimator_fn(name) is va._REGISTERED[name]
        data = va.compute_advantage(dataproto(rows), name, config=algo_config(method))
        want = assign(records(rows), method)
        expect_tokens(data, want.advantages)
        assert_same_metrics(data.meta_info["agentrl_metrics"], want.metrics)


def test_options_and_renamed_columns_from_the_verl_config(rows):
    """verl-agent's column names, and an option, under algorithm.agentrl."""
    rename = {"state_key": "anchor_obs", "valid": "is_action_valid"}
    cfg = algo_config(
        "graphgpo",
        options={"omega": 0.5},
        columns={"state_key": "anchor_obs", "valid": "is_action_valid"},
    )
    data = va.compute_advantage(dataproto(rows, rename=rename), "agentrl_graphgpo", config=cfg)
    want = assign(records(rows), "graphgpo", omega=0.5).advantages
    expect_tokens(data, want)
    assert not np.array_equal(want, assign(records(rows), "graphgpo").advantages)


@pytest.mark.parametrize(
    ("source", "field"), [("token_return", "episode_return"), ("token_turn", "reward")]
)
def test_rewards_from_the_token_rewards(rows, source, field):
    """The row's token rewards as the episode's return (verl's v1 agent loop puts the final
    score on every output of a session) or as the turn's reward; the columns are ignored."""
    data = dataproto(rows, token_reward=field)
    for k in ("reward", "episode_return"):
        data.non_tensor_batch[k] = obj([123.0] * len(rows))  # ignored: the tokens count
    got = va.compute_agentrl_advantage(data, "gigpo", reward_source=source)
    want = assign(records(rows, reward=field, float32=True), "gigpo").advantages
    expect_tokens(got, want)


def test_stateful_estimator_keeps_its_state_across_steps(groups):
    """bv_blend learns across calls: the registry path keeps its state in the process."""
    batches = [turn_rows(groups, seed=s) for s in (1, 2)]
    state = None
    for batch in batches:
        data = va.compute_advantage(
            dataproto(batch), "agentrl_bv_blend", config=algo_config("bv_blend")
        )
        want = assign(records(batch), "bv_blend", state=state)
        expect_tokens(data, want.advantages)
        state = want.state
    (credit,) = va._CREDITS.values()
    assert credit.state == state and state is not None
    # the function form hands the state back
    first = va.compute_agentrl_advantage(dataproto(batches[0]), "bv_blend")
    again = va.compute_agentrl_advantage(
        dataproto(batches[1]), "bv_blend", state=first.meta_info["agentrl_state"]
    )
    expect_tokens(
        again,
        assign(
            records(batches[1]), "bv_blend", state=assign(records(batches[0]), "bv_blend").state
        ).advantages,
    )


def test_golden_grpo_two_sessions():
    """One success in two turns (reward 10 at the end), one failure in one invalid turn (−0.1):
    A = ±5.05 / (std + 1e-6), std = 10.1/√2 (unbiased), on every token of each session."""
    rows = [
        dict(uid="p", traj_uid="a", turn_index=0, state_key="s0", action="go", valid=True,
             terminated=False, truncated=False, success=True, reward=0.0, len=2),
        dict(uid="p", traj_uid="a", turn_index=1, state_key="s1", action="go", valid=True,
             terminated=True, truncated=False, success=True, reward=10.0, len=3),
        dict(uid="p", traj_uid="b", turn_index=0, state_key="s0", action=None, valid=False,
             terminated=False, truncated=True, success=False, reward=-0.1, len=1),
    ]  # fmt: skip
    data = va.compute_agentrl_advantage(dataproto(rows), "grpo")
    a = 5.05 / (10.1 / np.sqrt(2) + 1e-6)
    adv = data.batch["advantages"]
    assert adv[0, :2].tolist() == pytest.approx([a, a]) and adv[0, 2:].abs().sum() == 0
    assert adv[1, :3].tolist() == pytest.approx([a] * 3) and adv[1, 3:].abs().sum() == 0
    assert adv[2, 0].item() == pytest.approx(-a) and adv[2, 1:].abs().sum() == 0


def test_plain_registry_call_points_to_the_hook(rows):
    """verl's own compute_advantage passes no per-turn fields: the estimator refuses, naming
    the hook, rather than crediting whole responses."""
    va.register()
    fn = core_algos.get_adv_estimator_fn("agentrl_crbc")
    with pytest.raises(RuntimeError, match=r"trainer_mode=agentrl_sync.*compute_advantage"):
        verl_compute_advantage(dataproto(rows), "agentrl_crbc", config=algo_config("crbc"))
    d = dataproto(rows)
    with pytest.raises(RuntimeError, match="does not pass to a registered estimator"):
        fn(
            token_level_rewards=d.batch["token_level_rewards"],
            response_mask=d.batch["response_mask"],
        )
    # a batch other than the one whose fields were supplied
    other = va.per_turn_fields(d.non_tensor_batch["uid"][::-1], d.non_tensor_batch)
    with other, pytest.raises(RecordError, match="is not the one whose per-turn fields"):
        fn(
            token_level_rewards=d.batch["token_level_rewards"],
            response_mask=d.batch["response_mask"],
            index=d.non_tensor_batch["uid"],
        )


def test_other_estimators_are_verls_own(rows):
    """The drop-in leaves verl's estimators alone: grpo and rloo as verl computes them."""
    for name in ("grpo", "rloo"):
        a = va.compute_advantage(
            dataproto(rows, token_reward="reward"), name, config=OmegaConf.create({})
        )
        b = verl_compute_advantage(
            dataproto(rows, token_reward="reward"), name, config=OmegaConf.create({})
        )
        assert torch.equal(a.batch["advantages"], b.batch["advantages"])
        assert "agentrl_metrics" not in a.meta_info


def test_registering_is_idempotent_and_names_are_guarded():
    assert va.register() == va.register()
    with pytest.raises(ValueError, match="already been registered"):
        core_algos.register_adv_est("agentrl_crbc")(lambda **kw: None)


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (
            lambda d: d.non_tensor_batch.pop("state_key"),
            RecordError,
            r"lacks the non-tensor columns 'state_key' \(state_key\).*it has \[",
        ),
        (
            lambda d: d.non_tensor_batch.pop("traj_uid"),
            RecordError,
            r"'traj_uid' \(trajectory_id\)",
        ),
        (
            lambda d: [d.non_tensor_batch.pop(k) for k in ("reward", "episode_return")],
            RecordError,
            r"'reward' or 'episode_return' \(or a reward_source",
        ),
        (
            lambda d: d.non_tensor_batch.__setitem__("success", obj(["yes"] * len(d))),
            RecordError,
            r"field 'success' must be true or false",
        ),
        (
            lambda d: d.non_tensor_batch.__setitem__("turn_index", obj([0] * len(d))),
            RecordError,
            "are both turn 0",
        ),
        (
            lambda d: d.non_tensor_batch.__setitem__("action", obj([1] * len(d))),
            RecordError,
            "field 'action' must be a string",
        ),
    ],
)
def test_malformed_batches_are_named(rows, change, error, message):
    data = dataproto(rows)
    change(data)
    with pytest.raises(error, match=message):
        va.compute_agentrl_advantage(data, "crbc")


def test_malformed_shapes_and_settings(rows):
    d = dataproto(rows)
    with pytest.raises(RecordError, match=r"column 'uid' \(record field 'group_id'\) has 3 values"):
        va.turn_columns(
            {**d.non_tensor_batch, "uid": obj(["p"] * 3)},
            d.batch["token_level_rewards"],
            d.batch["response_mask"],
            va.VerlCreditSettings("crbc"),
        )
    with pytest.raises(RecordError, match=r"must both be \(B, L\)"):
        va.turn_columns(
            d.non_tensor_batch,
            d.batch["token_level_rewards"][:, :3],
            d.batch["response_mask"],
            va.VerlCreditSettings("crbc"),
        )
    no_mask = DataProto.from_dict(
        tensors={"token_level_rewards": d.batch["token_level_rewards"]},
        non_tensors=dict(d.non_tensor_batch),
    )
    with pytest.raises(RecordError, match=r"no batch\['response_mask'\]"):
        va.compute_agentrl_advantage(no_mask, "crbc")
    no_uid = dataproto(rows)
    no_uid.non_tensor_batch.pop("uid")
    with pytest.raises(RecordError, match="no non-tensor 'uid' column"):
        va.compute_advantage(no_uid, "agentrl_crbc", config=algo_config("crbc"))
    with pytest.raises(ConfigError, match="unknown estimator"):
        va.compute_agentrl_advantage(dataproto(rows), "crbcc")
    with pytest.raises(ValueError, match="learned value function"):
        va.compute_agentrl_advantage(dataproto(rows), "gae")
    with pytest.raises(ConfigError, match=r"algo.omgea is not a valid key"):
        va.compute_agentrl_advantage(dataproto(rows), "graphgpo", omgea=0.5)
    with pytest.raises(ConfigError, match=r"reward_source='tokens'; valid choices"):
        va.VerlCreditSettings("crbc", reward_source="tokens")
    with pytest.raises(ConfigError, match=r"columns names the record field 'anchor'"):
        va.VerlCreditSettings("crbc", columns={"anchor": "anchor_obs"})
    with pytest.raises(ConfigError, match=r"algorithm.agentrl.option is not a valid key"):
        va.compute_advantage(
            dataproto(rows), "agentrl_crbc", config=algo_config("crbc", option={"x": 1})
        )


# ------------------------------------------------------------------------------ plugins

PROBE = textwrap.dedent(
    """
    import sys
    print("before", "agentrl.credit.verl_adapter" in sys.modules)
    import verl
    from verl.trainer.ppo import core_algos
    print("estimator", "agentrl_crbc" in core_algos.ADV_ESTIMATOR_REGISTRY)
    if "verl.trainer.ppo.v1" in sys.modules:
        from verl.trainer.ppo.v1 import get_trainer_cls
        print("trainer", get_trainer_cls("agentrl_sync").__name__)
    """
)


def test_verl_loads_the_adapter_as_a_plugin(tmp_path):
    """``import verl`` registers agentrl's estimators (and v1 trainers) through the
    ``verl.plugins`` entry point of a distribution that declares it, as agentrl's pyproject
    does. One fresh interpreter: the registry is empty until verl loads the plugin."""
    dist = tmp_path / "agentrl_verl_probe-0.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: agentrl-verl-probe\nVersion: 0.0\n"
    )
    (dist / "entry_points.txt").write_text(
        "[verl.plugins]\nagentrl = agentrl.credit.verl_adapter\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "PYTHONWARNINGS": "ignore"}
    env.pop("VERL_USE_EXTERNAL_PLUGINS", None)
    env.pop("VERL_USE_EXTERNAL_MODULES", None)
    proc = subprocess.run(
        [sys.executable, "-c", PROBE],
        env=env,
        cwd=ROOT,
        text=True,
        capture_output=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "before False" in proc.stdout, proc.stdout
    assert "estimator True" in proc.stdout, (proc.stdout, proc.stderr[-2000:])
    if importlib.util.find_spec("transfer_queue") is not None:
        assert "trainer AgentrlPPOTrainerSync" in proc.stdout


# ------------------------------------------------------------------------------ v1 trainer


class FakeStore:
    """TransferQueue's kv_batch_get / kv_batch_put over a dict of per-key field dicts."""

    def __init__(self, entries: dict[str, dict]):
        self.entries = entries

    def kv_batch_get(self, keys, partition_id, select_fields=None):
        from verl.utils.tensordict_utils import list_of_dict_to_tensordict

        rows = [
            {
                f: v
                for f, v in self.entries[k].items()
                if select_fields is None or f in select_fields
            }
            for k in keys
        ]
        return list_of_dict_to_tensordict(rows)

    def kv_batch_put(self, keys, partition_id, fields=None, tags=None):
        from transfer_queue import KVBatchMeta

        for name in fields.keys():  # noqa: SIM118 (TensorDict has no `in`)
            values = fields[name].unbind(0)
            for k, v in zip(keys, values):
                self.entries[k][name] = v
        return KVBatchMeta(keys=list(keys), tags=[{}] * len(keys), partition_id=partition_id)


def test_v1_trainer_advantage_step(rows, monkeypatch):
    """verl's v1 ``_compute_advantage`` (``trainer.v1.trainer_mode=agentrl_sync``) on a
    TransferQueue laid out as verl's agent loop writes it: one key ``{uid}_{session}_{turn}``
    per turn, the turn's fields in ``extra_fields``, the episode's score in ``rm_scores``."""
    tq = pytest.importorskip("transfer_queue") if not REQUIRE else __import__("transfer_queue")
    trainers = va.register_trainers()
    from verl.trainer.ppo.v1 import get_trainer_cls

    cls = get_trainer_cls("agentrl_sync")
    assert cls is trainers["agentrl_sync"] and cls.__mro__[1] is va.AgentrlAdvantageStep
    sessions = {t: i for i, t in enumerate(dict.fromkeys(r["traj_uid"] for r in rows))}
    entries, keys = {}, []
    for r in rows:
        key = f"{r['uid']}_{sessions[r['traj_uid']]}_{r['turn_index']}"
        scores = torch.zeros(r["len"])
        scores[-1] = r["episode_return"]  # verl copies the final score to every output
        extra = {
            k: r[k] for k in ("state_key", "action", "valid", "terminated", "truncated", "success")
        }
        entries[key] = {
            "uid": r["uid"],
            "response_mask": torch.ones(r["len"], dtype=torch.int64),
            "rm_scores": scores,
            "extra_fields": extra,
        }
        keys.append(key)
    store = FakeStore(entries)
    monkeypatch.setattr(tq, "kv_batch_get", store.kv_batch_get)
    monkeypatch.setattr(tq, "kv_batch_put", store.kv_batch_put)

    # the constructor hands verl's own mode to the parent (replay buffer, trainer.v1.<mode>)
    seen = []
    monkeypatch.setattr(
        cls.__mro__[2], "__init__", lambda self, config: seen.append(config.trainer.v1.trainer_mode)
    )
    cls(OmegaConf.create({"trainer": {"v1": {"trainer_mode": "agentrl_sync"}}}))
    assert seen == ["sync"]

    trainer = object.__new__(cls)
    trainer.config = OmegaConf.create(
        {
            "algorithm": {
                "adv_estimator": "agentrl_crbc",
                "use_kl_in_reward": False,
                "gamma": 1.0,
                "lam": 1.0,
                "norm_adv_by_std_in_grpo": True,
                "agentrl": {"reward_source": "token_return"},
            },
            "actor_rollout_ref": {"rollout": {"n": 4}},
        }
    )
    meta = tq.KVBatchMeta(keys=keys, tags=[{}] * len(keys), partition_id="train")
    metrics: dict = {}
    trainer._compute_advantage(meta, metrics)

    # trajectory ids here are "{uid}_{session}": rename the expected records the same way
    recs = records(rows, reward="episode_return", float32=True)
    for rec, r in zip(recs, rows):
        rec["trajectory_id"] = f"{r['uid']}_{sessions[r['traj_uid']]}"
    want = assign(recs, "crbc")
    for key, r, a in zip(keys, rows, want.advantages):
        got = entries[key]["advantages"]
        assert got.shape == (r["len"],)
        assert torch.equal(got, torch.full((r["len"],), np.float32(a)))
        assert torch.equal(entries[key]["returns"], got)
    assert metrics["agentrl/diag/success"] == want.metrics["diag/success"]

    # another estimator goes through verl's step untouched (no agentrl metrics)
    trainer.config.algorithm.adv_estimator = "rloo"
    metrics = {}
    trainer._compute_advantage(meta, metrics)
    assert not any(k.startswith("agentrl/") for k in metrics)
    bad = copy.deepcopy(entries[keys[0]]["extra_fields"])
    bad.pop("state_key")
    entries[keys[0]]["extra_fields"] = bad
    trainer.config.algorithm.adv_estimator = "agentrl_crbc"
    with pytest.raises(RecordError, match="state_key"):
        trainer._compute_advantage(meta, {})
