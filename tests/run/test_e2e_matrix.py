"""End to end, two training iterations on the tiny model: one case per environment x method x
option, each through the entry point its original test used.

``cli`` cases run ``python -m agentrl.run`` in a subprocess (their console output is checked);
the others call ``train(compose([...]))`` in this process (its return value, the last
iteration's metrics, is checked). Every case checks the same generic properties (the metrics
rows, a complete last checkpoint, finite losses) and then its own (``check``). Properties other
than "a run trains and saves" live with their subject: resume (test_resume.py, and per method in
test_gae.py / test_stateful_estimators.py), ranks (test_distributed.py), the summary's text
(test_run_e2e.py), backends and pools (tests/rollout).
"""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from helpers import ENV_TEST_KWARGS, read_metrics


@dataclass
class Run:
    """What a finished case left: its folder, its metrics rows and what it returned or said."""

    out: Path
    rows: list[dict]
    metrics: dict | None = None  # train()'s return value (in-process cases)
    stdout: str = ""  # the console (cli cases)
    stderr: str = ""

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    @property
    def ckpt(self) -> Path:
        return self.out / "checkpoints" / "iter-000002"

    def trainer_state(self) -> dict:
        from agentrl.run.checkpoint import load_trainer_state

        return load_trainer_state(self.ckpt / "trainer_state.pt")


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str, ...]
    iterations: tuple[int, ...]  # the iterations of metrics.jsonl: 0 when iteration 0 evaluates
    check: Callable[[Run], None]
    cli: bool = False
    needs: str | None = None  # a module the case imports or skips
    timeout: float = 600


def every_parameter_changed(run: Run) -> None:
    """Every trainable parameter of the last checkpoint differs from the initial one
    (``trainer.save_initial=true``), and the tokenizer saved with it loads."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    trained = AutoModelForCausalLM.from_pretrained(run.ckpt)
    initial = AutoModelForCausalLM.from_pretrained(run.out / "checkpoints" / "iter-000000")
    AutoTokenizer.from_pretrained(run.ckpt)  # the tokenizer round-trips too
    before = dict(initial.named_parameters())
    unchanged = [
        n for n, p in trained.named_parameters() if p.requires_grad and torch.equal(p, before[n])
    ]
    assert not unchanged, f"parameters that did not change: {unchanged}"


# -- per-case checks -------------------------------------------------------------------------


def check_default_cli(run: Run) -> None:
    """The default job (sokoban, grpo): log lines, the closing summary, the run folder's files,
    every parameter trained."""
    out, ckpt = run.out, run.ckpt
    assert "iter 2/2" in run.output
    # The closing summary, on stdout: final train and eval success next to the untrained
    # evaluation, where the run is, its last checkpoint and how to view it.
    rows = {r["iteration"]: r for r in run.rows}
    summary = run.stdout[run.stdout.index("agentrl: run finished") :]
    assert f"train success   {rows[2]['env/success']:.3f}  (iteration 2)" in summary
    assert (
        f"eval success    {rows[2]['eval/success']:.3f}  (iteration 2; untrained, "
        f"iteration 0: {rows[0]['eval/success']:.3f})"
    ) in summary
    assert f"run folder      {out}\n" in summary
    assert f"last checkpoint {ckpt}\n" in summary
    assert f"tensorboard --logdir {out / 'tb'}" in summary
    assert (out / "run_config.yaml").exists()
    assert list((out / "tb").glob("events.out.tfevents.*")), "no TensorBoard log"
    every_parameter_changed(run)


def check_loss(key: str) -> Callable[[Run], None]:
    """A policy loss or token weighting (docs/methods.md#policy-losses): its own metric and the
    PPO ones are finite, and every parameter trained."""

    def check(run: Run) -> None:
        m = run.metrics
        assert math.isfinite(m["loss/pg"]) and math.isfinite(m["loss/grad_norm"])
        assert math.isfinite(m[key])
        every_parameter_changed(run)

    return check


def check_estimator(algo: str) -> Callable[[Run], None]:
    """An advantage method of issue 16: finite advantages and loss, and the estimator's state
    (stateful ones) saved with the checkpoint after its two updates."""
    from agentrl.credit import get_estimator

    def check(run: Run) -> None:
        m = run.metrics if run.metrics is not None else run.rows[-1]  # cli: the last row
        assert math.isfinite(m["credit/adv_std"]) and math.isfinite(m["loss/pg"])
        state = run.trainer_state()
        if get_estimator(algo).stateful:
            assert state["stages"]["credit"]["credit_state"]["updates"] == 2
        else:
            assert "credit_state" not in state
            assert "credit_state" not in state["stages"]["credit"]
        if algo == "constrained_grpo":
            assert {"credit/lambda_invalid", "credit/lambda_steps"} <= set(m)
            lam = state["stages"]["credit"]["credit_state"]["lambda"]["steps"]
            assert lam == m["credit/lambda_steps"]
        if algo == "bv_blend":
            # Sokoban: one cluster, seen at iteration 1, so all of iteration 2's from history.
            assert run.rows[-1]["credit/history_frac"] == 1.0

    return check


def check_gae(kind: str) -> Callable[[Run], None]:
    """``algo=gae``: the critic trains and is saved (a value head; the model only when the
    critic is a model of its own)."""
    from agentrl.learn.value import VALUE_HEAD_FILE

    def check(run: Run) -> None:
        assert run.metrics["critic/loss"] > 0 and "credit/value_mean" in run.metrics
        assert (run.ckpt / VALUE_HEAD_FILE).exists()
        critic = run.trainer_state()["stages"]["credit"]["critic"]
        assert (critic["model"] is None) == (kind == "head")

    return check


def check_alfworld(run: Run) -> None:
    """Generated games, offline: the notice said once per run (the main process, the
    evaluation pool and every worker share it), episodes cut at env.max_steps=3, success per
    task type in every evaluation."""
    assert run.output.count("the games are GENERATED") == 1
    assert all(0 < r["env/length"] <= 3 for r in run.rows[1:])
    assert all(any(k.startswith("eval/success_") for k in r) for r in run.rows)


def check_ac2(run: Run) -> None:
    """AC2's metrics are logged, the buffer fills, decoding tokens accumulate, and the
    checkpoint carries the driver's state."""
    rows = run.rows
    assert rows[1]["ac2/buffer_size"] == 3 and rows[2]["ac2/buffer_size"] == 6
    assert rows[2]["perf/decode_tokens_total"] > rows[1]["perf/decode_tokens_total"] > 0
    assert "ac2/critic_lr" in rows[2] and "eval/return" in rows[2]
    state = run.trainer_state()
    assert len(state["stages"]["sampler"]["driver"]["buffer"]["items"]) == 6


def check_psppo(run: Run) -> None:
    """PS-PPO's metrics and the diagnostics are logged, decoding tokens accumulate."""
    rows = run.rows
    for row in rows[1:]:
        assert row["psppo/continuations"] <= 2 * 2 * 2
        assert 0.0 <= row["psppo/response_reward"] <= 1.0
        assert "diag/headroom" in row and "credit/partial_credit_conflict" in row
    assert rows[2]["perf/decode_tokens_total"] > rows[1]["perf/decode_tokens_total"] > 0


# -- the cases -------------------------------------------------------------------------------

# Short answers: some moves are valid, so returns (and advantages) differ.
LOSSES = (
    "rollout.n_tasks=2",
    "rollout.group_size=4",
    "rollout.max_new_tokens=3",
    "env.max_steps=5",
    "model.tokenizer_episodes=4",
    "trainer.eval_every=0",
    "trainer.progress=false",
    "trainer.save_initial=true",
)
ESTIMATORS = tuple(a for a in LOSSES if a != "trainer.save_initial=true")
GAE = (
    "algo=gae",
    "rollout.n_tasks=2",
    "rollout.group_size=2",
    "env.max_steps=4",
    "trainer.progress=false",
    "trainer.eval_every=0",
    "model.tokenizer_episodes=4",
)
TRAINED = (1, 2)
EVALUATED = (0, 1, 2)

CASES = [
    Case(
        "sokoban-grpo-cli",
        (
            "rollout.n_tasks=2",
            "rollout.group_size=4",
            "rollout.max_new_tokens=3",  # some valid moves, so advantages are nonzero
            "trainer.progress=false",
            "trainer.save_initial=true",
        ),
        EVALUATED,
        check_default_cli,
        cli=True,
    ),
    Case(
        "sokoban-grpo-cispo", (*LOSSES, "learner.loss=cispo"), TRAINED, check_loss("loss/clipfrac")
    ),
    Case(
        "sokoban-grpo-klpo",
        (*LOSSES, "learner.loss=klpo", "learner.loss_args={m: 4}"),
        TRAINED,
        check_loss("loss/klpo_h"),
    ),
    Case(
        "sokoban-grpo-bpo",
        (*LOSSES, "learner.loss=bpo", "algo.norm_by_std=false"),
        TRAINED,
        check_loss("loss/bpo_omega"),
    ),
    Case(
        "sokoban-grpo-vimpo",
        (
            *LOSSES,
            "learner.loss=vimpo",
            "algo.norm_by_std=false",
            "learner.batching=reward_balanced",
        ),
        TRAINED,
        check_loss("loss/vimpo_value"),
    ),
    Case(
        "sokoban-grpo-ppo+taco+ntf",
        (*LOSSES, "learner.token_weights=[taco,ntf]", "learner.mini_batch_steps=8"),
        TRAINED,
        check_loss("loss/ntf_frac"),
    ),
    Case("sokoban-bv_blend", ("algo=bv_blend", *ESTIMATORS), TRAINED, check_estimator("bv_blend")),
    Case(
        "sokoban-basis",
        ("algo=basis", *ESTIMATORS, "rollout.group_size=1", "rollout.n_tasks=6"),
        TRAINED,
        check_estimator("basis"),
    ),
    Case("sokoban-gr2po", ("algo=gr2po", *ESTIMATORS), TRAINED, check_estimator("gr2po")),
    Case("sokoban-hcapo", ("algo=hcapo", *ESTIMATORS), TRAINED, check_estimator("hcapo")),
    Case(
        "sokoban-constrained_grpo",
        ("algo=constrained_grpo", *ESTIMATORS, "algo.thresholds={invalid: 0.1, steps: 3}"),
        TRAINED,
        check_estimator("constrained_grpo"),
    ),
    # The graph methods of 2026, each from the command line as a user starts them.
    *(
        Case(
            f"sokoban-{algo}-cli",
            (f"algo={algo}", *ESTIMATORS),
            TRAINED,
            check_estimator(algo),
            cli=True,
        )
        for algo in ("g2po", "graphgpo", "hgpo", "tigpo", "trca")
    ),
    Case("sokoban-gae-head", (*GAE, "algo.critic=head"), TRAINED, check_gae("head")),
    Case("sokoban-gae-model", (*GAE, "algo.critic=model"), TRAINED, check_gae("model")),
    Case(
        "alfworld-grpo-cli",
        (
            "env=alfworld",
            "algo=grpo",
            "model=tiny",
            "rollout.n_tasks=2",
            "rollout.group_size=2",
            "env.max_steps=3",
            "trainer.eval_episodes=2",
            "trainer.eval_every=1",
            "model.tokenizer_episodes=2",
            "trainer.progress=false",
            *(f"env.{k}={v}" for k, v in ENV_TEST_KWARGS["alfworld"].items()),
        ),
        EVALUATED,
        check_alfworld,
        cli=True,
        needs="alfworld",
        timeout=900,
    ),
    Case(
        "proof-ac2-cli",
        (
            "env=proof",
            "algo=ac2",
            "model=tiny",
            "rollout.max_new_tokens=24",
            "algo.budget_tokens=24",
            "algo.chunk_tokens=8",
            "algo.n_refill=3",
            "algo.n_batch=3",
            "algo.group_size=2",
            "trainer.eval_episodes=4",
            "trainer.eval_every=1",
            "model.tokenizer_episodes=4",
            "trainer.progress=false",
        ),
        EVALUATED,
        check_ac2,
        cli=True,
    ),
    Case(
        "proof-psppo-cli",
        (
            "env=proof",
            "algo=psppo",
            "model=tiny",
            "rollout.n_tasks=2",
            "rollout.group_size=2",
            "rollout.max_new_tokens=24",
            "algo.chunk_tokens=8",
            "algo.max_cuts=1",
            "algo.continuations=2",
            "trainer.eval_episodes=2",
            "trainer.eval_every=2",
            "model.tokenizer_episodes=4",
            "trainer.progress=false",
        ),
        EVALUATED,
        check_psppo,
        cli=True,
    ),
]


def run_case(case: Case, tmp_path: Path) -> Run:
    """Two iterations (``trainer.steps=2``) of ``case`` into ``tmp_path / "run"``."""
    out = tmp_path / "run"
    args = [*case.args, "trainer.steps=2"]
    if not case.cli:
        from agentrl.run import compose
        from agentrl.run.trainer import train

        metrics = train(compose(args), out)
        return Run(out, read_metrics(out), metrics=metrics)
    cmd = [sys.executable, "-m", "agentrl.run", *args]
    cmd += [f"trainer.out_dir={out}", f"hydra.run.dir={tmp_path}/hydra"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=case.timeout, cwd=tmp_path)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return Run(out, read_metrics(out), stdout=proc.stdout, stderr=proc.stderr)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_two_iterations_end_to_end(case: Case, tmp_path):
    if case.needs:
        pytest.importorskip(case.needs)
    run = run_case(case, tmp_path)
    # Generic: one row per iteration, finite losses, a complete last checkpoint.
    assert [r["iteration"] for r in run.rows] == list(case.iterations)
    assert all(math.isfinite(v) for r in run.rows for k, v in r.items() if k.startswith("loss/"))
    assert (run.out / "checkpoints" / "latest").read_text() == "iter-000002"
    for name in ("config.json", "model.safetensors", "trainer_state.pt"):
        assert (run.ckpt / name).exists(), name
    if run.metrics is not None:  # train() returns the last row it wrote
        assert {"iteration": 2, **run.metrics} == run.rows[-1]
    case.check(run)


def test_every_case_has_its_own_id_and_two_iterations():
    """The matrix itself: distinct ids, no case setting its own length (run_case adds
    ``trainer.steps=2``), and the iterations each case expects end at 2."""
    assert len({c.id for c in CASES}) == len(CASES)
    for case in CASES:
        assert not any(a.startswith("trainer.steps=") for a in case.args), case.id
        assert case.iterations[-1] == 2, case.id
