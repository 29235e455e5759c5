"""Learner speed benchmark: tokens/s of one GRPO iteration, agentrl vs TRL's ``GRPOTrainer``.

One iteration samples ``B × G`` completions of exactly ``C`` tokens for ``B`` prompts of exactly
``P`` tokens, scores them with a trivial reward, computes group-normalised advantages and takes
one clipped-surrogate step on all ``B·G`` sequences; both sides start from the same tiny model
and use the same prompts, sampling and update (the report's Settings section lists them).
agentrl's iteration is :meth:`HFBackend.generate` + :func:`grpo_traj_advantage` +
:meth:`Learner.update`; TRL's is one step of ``GRPOTrainer.train()``. The two are interleaved in
one process (a ``TrainerCallback`` runs one agentrl iteration after every TRL step) so that load
changes on a shared machine hit both alike; the first step of each side is a warm-up.

``python -m agentrl.bench learner-speed`` writes ``<out>/learner_speed.md``. TRL is optional:
without it TRL's rows are copied from the committed report, marked (:func:`write_report`), and
``--update`` refuses to run. ``--check`` (:func:`check`) compares the agentrl / TRL ratios.
"""

from __future__ import annotations

import contextlib
import copy
import cProfile
import io
import logging
import os
import pstats
import re
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentrl.algos.grpo import GRPOConfig as AdvantageConfig
from agentrl.algos.grpo import grpo_traj_advantage
from agentrl.bench._check import (
    TOLERANCE,
    Figure,
    committed_report,
    confirmed,
    parse_number,
    tables_in,
)
from agentrl.bench._report import (
    KEPT,
    SCRATCH,
    committed_section,
    header,
    is_committed,
    kept_note,
    kept_rows,
    missing,
    notes,
    render,
    write_markdown,
)
from agentrl.learn.learner import Learner, LearnerConfig
from agentrl.model import (
    ModelConfig,
    banned_token_ids,
    build_tiny_model,
    build_tokenizer,
    encode_prompt,
)
from agentrl.model.forward import Sample
from agentrl.rollout import HFBackend, Sampling

TARGET = 1.5
"""The issue's goal: agentrl's iteration at least this many times TRL's tokens/s."""
LR = 1e-3
"""Learning rate of both sides (the report's and ``--check``'s)."""


@dataclass(frozen=True)
class Setting:
    """Shape of one measured iteration."""

    prompt_tokens: int  # P
    completion_tokens: int  # C
    n_prompts: int  # B
    group_size: int  # G

    @property
    def name(self) -> str:
        return (
            f"P={self.prompt_tokens}, C={self.completion_tokens}, "
            f"B×G={self.n_prompts}×{self.group_size}"
        )

    @property
    def tokens(self) -> int:
        """Tokens (prompt + completion) processed by one iteration."""
        return self.n_prompts * self.group_size * (self.prompt_tokens + self.completion_tokens)


SETTINGS = (Setting(128, 32, 8, 8), Setting(512, 64, 8, 8))
QUICK_SETTINGS = (Setting(16, 4, 2, 2),)


@dataclass
class Timings:
    """Per-iteration seconds of one side in one setting (warm-up excluded)."""

    total: list[float] = field(default_factory=list)
    generate: list[float] = field(default_factory=list)
    update: list[float] = field(default_factory=list)

    @staticmethod
    def median(xs: Sequence[float]) -> float:
        return statistics.median(xs) if xs else float("nan")


@dataclass
class Result:
    """Both sides of one setting."""

    setting: Setting
    agentrl: Timings
    trl: Timings | None
    profile: str = ""


# --- the task: a vocabulary of one-token words, fixed-length prompts, a trivial reward ---

_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "ze", "pu", "go", "fa")


def _words(n: int, rng: np.random.Generator) -> list[str]:
    """``n`` distinct two-syllable pseudo-words."""
    out: list[str] = []
    while len(out) < n:
        w = "".join(rng.choice(_SYLLABLES, size=2))
        if w not in out:
            out.append(w)
    return out


def build_task(seed: int = 0):
    """A tokenizer trained on a synthetic corpus and the words that are single tokens in it.

    Returns:
        ``(tokenizer, words)``: every ``" " + word`` encodes to exactly one token, so a prompt
        of k words is exactly k tokens, on both sides of the comparison.
    """
    rng = np.random.default_rng(seed)
    vocab = _words(60, rng)
    corpus = [" ".join(rng.choice(vocab, size=24)) for _ in range(400)]
    tok = build_tokenizer(corpus, vocab_size=ModelConfig().vocab_size)
    single = [w for w in vocab if len(tok(" " + w, add_special_tokens=False)["input_ids"]) == 1]
    if len(single) < 8:
        raise RuntimeError(f"only {len(single)} one-token words; change the corpus")
    return tok, single


def build_prompts(tok, words: Sequence[str], n: int, length: int, seed: int) -> list[str]:
    """``n`` chat-formatted prompts of exactly ``length`` tokens (as text, for TRL)."""
    rng = np.random.default_rng(seed)
    # The chat wrapper's own tokens (role markers, newlines) count towards the length.
    wrapper = len(encode_prompt(tok, "", 10**6))
    n_words = length - wrapper
    if n_words < 1:
        raise ValueError(f"prompt length {length} is shorter than the chat wrapper ({wrapper})")
    texts = []
    for _ in range(n):
        body = "".join(" " + w for w in rng.choice(words, size=n_words))
        text = tok.apply_chat_template(
            [{"role": "user", "content": body}], add_generation_prompt=True, tokenize=False
        )
        ids = tok(text, add_special_tokens=False)["input_ids"]
        if len(ids) != length or ids != encode_prompt(tok, body, 10**6):
            raise RuntimeError(f"prompt tokenizes to {len(ids)} tokens, not {length}")
        texts.append(text)
    # TRL tokenizes plain-text prompts with the tokenizer's defaults (special tokens added).
    if [len(ids) for ids in tok(text=texts)["input_ids"]] != [length] * n:
        raise RuntimeError("TRL's tokenization of the prompts differs from agentrl's")
    return texts


def reward(ids: Sequence[int]) -> float:
    """Fraction of even token ids: deterministic, cheap and varied, so advantages are nonzero."""
    return sum(1 for t in ids if t % 2 == 0) / max(len(ids), 1)


def trl_reward(completions, completion_ids, **_: Any) -> list[float]:
    """:func:`reward` with TRL's reward-function signature."""
    return [reward(ids) for ids in completion_ids]


# --- agentrl's iteration ---


class AgentrlIteration:
    """One GRPO iteration with agentrl's pieces, timed in parts."""

    def __init__(self, model, tok, prompts: Sequence[str], setting: Setting, lr: float):
        self.s = setting
        self.prompt_ids = [tok(t, add_special_tokens=False)["input_ids"] for t in prompts]
        self.backend = HFBackend(model, tok)
        self.learner = Learner(
            model,
            LearnerConfig(lr=lr, max_grad_norm=1.0),
            pad_id=tok.pad_token_id,
            temperature=1.0,
            max_response_tokens=setting.completion_tokens,
            banned_ids=banned_token_ids(tok),
        )
        self.sampling = Sampling(max_new_tokens=setting.completion_tokens, temperature=1.0)
        # HFBackend's GenerationConfig leaves min_new_tokens unset, so generate() takes it from
        # the model's generation_config: EOS is suppressed until C tokens, as min_new_tokens does
        # for TRL.
        model.generation_config.min_new_tokens = setting.completion_tokens
        self.rng = np.random.default_rng(0)
        self.timings = Timings()

    def __call__(self, record: bool = True) -> None:
        s = self.s
        t0 = time.perf_counter()
        # Group-major: the G copies of prompt b are rows b·G … b·G + G − 1.
        batch = [p for p in self.prompt_ids for _ in range(s.group_size)]
        gens = self.backend.generate(batch, self.sampling)
        t1 = time.perf_counter()
        lengths = {len(g.token_ids) for g in gens}
        if lengths != {s.completion_tokens}:
            raise RuntimeError(f"completion lengths {lengths}, expected {s.completion_tokens}")
        rewards = np.array([reward(g.token_ids) for g in gens])
        groups = np.repeat(np.arange(s.n_prompts), s.group_size)
        adv = grpo_traj_advantage(rewards, groups, s.n_prompts, AdvantageConfig())
        samples = [
            Sample(
                prompt_ids=p,
                response_ids=g.token_ids,
                old_logprobs=g.logprobs,
                advantage=float(a),
                group=int(k),
            )
            for p, g, a, k in zip(batch, gens, adv, groups)
        ]
        t2 = time.perf_counter()
        self.learner.update(samples, self.rng)
        t3 = time.perf_counter()
        if record:
            self.timings.total.append(t3 - t0)
            self.timings.generate.append(t1 - t0)
            self.timings.update.append(t3 - t2)


def profile_agentrl(it: AgentrlIteration, top: int = 12) -> str:
    """cProfile of one agentrl iteration: the functions with the most time of their own.

    Sorted by own time (not cumulative) because the model's nested modules make the cumulative
    list a call chain; own time points at the kernels and the Python that dominate.
    """
    prof = cProfile.Profile()
    prof.enable()
    it(record=False)
    prof.disable()
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf)
    stats.sort_stats("tottime").print_stats(top)
    text = buf.getvalue()
    # Shorten file paths to the part after site-packages/ or the repository root.
    prefixes = {str(Path(torch.__file__).parents[1]), str(Path(__file__).parents[2])}
    for prefix in sorted(prefixes, key=len, reverse=True):  # site-packages may be in the repo
        text = text.replace(prefix + os.sep, "")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    start = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("ncalls")), 0)
    return "\n".join(lines[start:])


# --- TRL ---


def _import_trl() -> str | None:
    """None if TRL's GRPOTrainer imports, else why not."""
    return missing("trl", "GRPOConfig", "GRPOTrainer")


def _trl_trainer(model, tok, prompts: Sequence[str], s: Setting, lr: float, steps: int, out: str):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(
        output_dir=out,
        # One optimiser step = one generation batch of B prompts × G completions, no accumulation.
        per_device_train_batch_size=s.n_prompts * s.group_size,
        generation_batch_size=s.n_prompts * s.group_size,
        num_generations=s.group_size,
        gradient_accumulation_steps=1,
        num_iterations=1,
        max_completion_length=s.completion_tokens,
        # Exactly C tokens, pad never sampled: the same logits processors as agentrl's backend.
        generation_kwargs={
            "min_new_tokens": s.completion_tokens,
            "suppress_tokens": [tok.pad_token_id],
        },
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        beta=0.0,  # no KL, so no reference model
        loss_type="dapo",  # token-level: Σ over the batch's completion tokens / their count
        epsilon=0.2,
        scale_rewards="group",
        use_vllm=False,
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,  # TRL's default is True; agentrl's is off
        learning_rate=lr,
        lr_scheduler_type="constant",
        optim="adamw_torch",  # torch.optim.AdamW, as agentrl's Learner
        weight_decay=0.0,
        max_grad_norm=1.0,
        max_steps=steps,
        shuffle_dataset=False,
        logging_strategy="no",
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        use_cpu=not torch.cuda.is_available(),
        dataloader_num_workers=0,
        seed=0,
    )
    # B prompts per step; repeated so the run never crosses an epoch boundary.
    data = Dataset.from_dict({"prompt": list(prompts) * steps})
    return GRPOTrainer(
        model=model, reward_funcs=trl_reward, args=args, train_dataset=data, processing_class=tok
    )


def _run_setting(
    init_model, tok, words, s: Setting, repeats: int, lr: float, with_trl: bool, profile: bool, log
) -> Result:
    prompts = build_prompts(tok, words, s.n_prompts, s.prompt_tokens, seed=s.prompt_tokens)
    ours = AgentrlIteration(copy.deepcopy(init_model), tok, prompts, s, lr)
    log(f"[learner-speed] {s.name}: agentrl warm-up")
    ours(record=False)
    result = Result(s, ours.timings, None)
    if not with_trl:
        for i in range(repeats):
            ours()
            log(f"  agentrl {i + 1}/{repeats}: {ours.timings.total[-1]:.3f} s")
    else:
        from transformers import PrinterCallback, TrainerCallback

        trl_t = Timings()

        class Interleave(TrainerCallback):
            """After each TRL step, run one agentrl iteration; time TRL from then on."""

            resume = None

            def on_step_end(self, args, state, control, **kwargs):
                now = time.perf_counter()
                if self.resume is not None:  # the first step is TRL's warm-up
                    trl_t.total.append(now - self.resume)
                    log(f"  TRL     {len(trl_t.total)}/{repeats}: {trl_t.total[-1]:.3f} s")
                if state.global_step <= repeats:
                    ours()
                    log(
                        f"  agentrl {len(ours.timings.total)}/{repeats}: "
                        f"{ours.timings.total[-1]:.3f} s"
                    )
                self.resume = time.perf_counter()

        log(f"[learner-speed] {s.name}: TRL GRPOTrainer, interleaved with agentrl")
        with tempfile.TemporaryDirectory() as out:
            with _quiet():
                trainer = _trl_trainer(
                    copy.deepcopy(init_model), tok, prompts, s, lr, repeats + 1, out
                )
            trainer.add_callback(Interleave())
            # With tqdm off the trainer prints its final metrics dict; the report has the numbers.
            trainer.remove_callback(PrinterCallback)
            # TRL's own profiling timers only report to wandb/trackio, so time its generation and
            # its whole pre-update phase (generation, rewards, advantages) by wrapping them.
            gen = _time_method(trainer, "_generate_single_turn")
            prep = _time_method(trainer, "_generate_and_score_completions")
            with _quiet():
                trainer.train()
            if len(gen) == repeats + 1 and len(prep) == repeats + 1:
                trl_t.generate = gen[1:]
                trl_t.update = [t - p for t, p in zip(trl_t.total, prep[1:])]
        result.trl = trl_t
    if profile:
        log(f"[learner-speed] {s.name}: profiling one agentrl iteration")
        result.profile = profile_agentrl(ours)
    return result


def _time_method(obj, name: str) -> list[float]:
    """Wrap ``obj.name`` (on the instance) to append each call's seconds to the returned list."""
    spent: list[float] = []
    method = getattr(obj, name)

    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - t0)

    setattr(obj, name, timed)
    return spent


@contextlib.contextmanager
def _quiet():
    """Silence transformers/TRL warnings and info logs during the timed run."""
    loggers = [logging.getLogger(n) for n in ("transformers", "trl", "accelerate")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, lv in zip(loggers, levels):
            lg.setLevel(lv)


# --- report ---


def _tps(tokens: int, seconds: float) -> str:
    return f"{tokens / seconds:,.0f}" if seconds == seconds and seconds > 0 else "-"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.0f}" if seconds == seconds else "-"


def _rows(r: Result) -> list[str]:
    s, med = r.setting, Timings.median
    rows = []
    sides = [("agentrl", r.agentrl)] + ([(TRL_ROW, r.trl)] if r.trl else [])
    for name, t in sides:
        tot, gen, upd = med(t.total), med(t.generate), med(t.update)
        rows.append(
            f"| {s.name} | {name} | {len(t.total)} | {_ms(tot)} | {_tps(s.tokens, tot)} "
            f"| {_ms(gen)} | {_ms(upd)} | {_tps(s.tokens, upd)} |"
        )
    return rows


def ratio(r: Result) -> float | None:
    """agentrl tokens/s over TRL tokens/s (median iteration times), None without TRL."""
    if r.trl is None or not r.trl.total or not r.agentrl.total:
        return None
    return Timings.median(r.trl.total) / Timings.median(r.agentrl.total)


def pair_ratios(r: Result) -> list[float]:
    """TRL step time over the agentrl iteration run just before it, per interleaved pair.

    Less sensitive to slow load drift than the ratio of medians, and its spread shows the noise.
    """
    assert r.trl is not None
    return [t / a for a, t in zip(r.agentrl.total, r.trl.total)]


TRL_ROW = "TRL GRPOTrainer"
"""The implementation cell of TRL's rows in the Results table."""
NOTES = "learner_speed_notes.md"
"""The committed readings of the measurements (why one thread; where the difference comes
from), included in the report."""


def committed_trl(
    names: Sequence[str], committed: str | os.PathLike | None = None
) -> tuple[dict[str, str], list[str], str | None]:
    """From the committed learner-speed report (``committed`` folder, default
    :func:`~agentrl.bench._report.committed_dir`), for the settings ``names``: TRL's Results rows
    (setting name → the row's markdown line) and the agentrl / TRL ratio lines, both marked as
    kept (:func:`~agentrl.bench._report.kept_note`), and the date of that run."""

    def trl_row(cells: list[str]) -> str | None:
        ok = len(cells) > 1 and cells[0] in names and cells[1].startswith(TRL_ROW)
        return cells[0] if ok else None

    rows, date = kept_rows("learner_speed.md", "Results", trl_row, "TRL", committed, cell=2)
    body = committed_section("learner_speed.md", "Results", committed)[0] or ""
    note = kept_note("TRL", date)
    ratios = [
        line if KEPT in line else f"{line} ({note})"
        for line in body.splitlines()
        if any(line.startswith(f"- {n}: agentrl / TRL tokens/s") for n in names)
    ]
    return rows, ratios, date


def write_report(
    path: Path,
    results: Sequence[Result],
    trl_error: str | None,
    quick: bool,
    loads: tuple[tuple[float, ...], tuple[float, ...]],
    repeats: int,
    lr: float,
    threads: int,
    committed: str | os.PathLike | None = None,
) -> None:
    """Write the report. Without TRL (``trl_error`` says why) its rows and the agentrl / TRL
    ratios of the same settings are copied from the committed report (``committed`` folder,
    default :func:`~agentrl.bench._report.committed_dir`), marked as from that run; they are
    never silently dropped."""
    med = Timings.median
    trl_rows, kept_ratios, date = {}, [], None
    if trl_error is not None:
        trl_rows, kept_ratios, date = committed_trl([r.setting.name for r in results], committed)
    rows = []
    for r in results:
        rows += [*_rows(r), *([trl_rows[r.setting.name]] if r.setting.name in trl_rows else [])]
    if trl_error is not None:
        block = "no_trl_kept" if trl_rows else "no_trl_none"
        findings = [render("learner_speed", block, error=trl_error, date=date or "an unknown date")]
        findings += kept_ratios
    else:
        findings = []
        for r in results:
            if (q := ratio(r)) is None:
                continue
            pairs = pair_ratios(r)
            findings.append(render(
                "learner_speed", "ratio", setting=r.setting.name, ratio=f"{q:.2f}", target=TARGET,
                met="met" if q >= TARGET else "**not met**",
                median=f"{statistics.median(pairs):.2f}", low=f"{min(pairs):.2f}",
                high=f"{max(pairs):.2f}",
            ))  # fmt: skip
    for r in results:
        if r.agentrl.total:
            share = f"{med(r.agentrl.generate) / med(r.agentrl.total):.0%}"
            findings.append(render("learner_speed", "share", setting=r.setting.name, share=share))
    splits = []
    for r in results:
        if r.trl is None or not r.trl.generate or not r.agentrl.total:
            continue
        a, t = r.agentrl, r.trl
        splits.append(render(
            "learner_speed", "split", setting=r.setting.name, gen=_ms(med(a.generate)),
            trl_gen=_ms(med(t.generate)), gen_ratio=f"{med(t.generate) / med(a.generate):.2f}",
            upd=_ms(med(a.update)), trl_upd=_ms(med(t.update)),
            upd_ratio=f"{med(t.update) / med(a.update):.2f}",
        ))  # fmt: skip
    # Where the difference comes from: the measured splits, then the committed notes' reading
    # of them and of the profiles.
    reading = notes(NOTES).get("Where the difference comes from", "")
    profiles = "".join(
        "\n\n" + render("learner_speed", "profile", setting=r.setting.name, profile=r.profile)
        for r in results
        if r.profile
    )
    device = f"GPU {torch.cuda.get_device_name()}" if torch.cuda.is_available() else "no GPU"
    packages = ("agentrl", "torch", "transformers", "trl", "accelerate")
    loads_line = render("learner_speed", "loads", loads=" → ".join(
        "/".join(f"{x:.2f}" for x in load) for load in loads
    ))  # fmt: skip
    head = header(packages, "python -m agentrl.bench learner-speed", quick,
                  f"; torch threads {threads}", device, loads_line)  # fmt: skip
    model = ModelConfig()
    text = render(
        "learner_speed",
        head=head,
        hidden=model.hidden_size,
        layers=model.num_layers,
        heads=model.num_heads,
        kv_heads=model.num_kv_heads,
        intermediate=model.intermediate_size,
        lr=f"{lr:g}",
        threads=threads,
        threads_note=notes(NOTES).get("Threads", ""),
        repeats=repeats,
        rows="\n".join(rows),
        findings="\n".join(findings),
        analysis="\n\n".join(x for x in ("\n".join(splits), reading) if x),
        profiles=profiles,
    )
    write_markdown(path, text.rstrip() + "\n")


def _measure(
    settings: Sequence[Setting],
    repeats: int,
    lr: float,
    with_trl: bool,
    threads: int,
    profile: bool,
    log: Callable[[str], Any],
) -> tuple[list[Result], tuple[tuple[float, ...], tuple[float, ...]]]:
    """Measure every setting; also return the load averages before and after."""
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        before = os.getloadavg()
        tok, words = build_task()
        torch.manual_seed(0)
        init_model = build_tiny_model(ModelConfig(), tok)
        results = []
        for s in settings:
            results.append(
                _run_setting(
                    init_model, tok, words, s, repeats, lr, with_trl, profile=profile, log=log
                )
            )
            for row in _rows(results[-1]):
                log("  " + row)
        after = os.getloadavg()
    finally:
        torch.set_num_threads(previous_threads)  # leave the caller's setting as it was
    return results, (before, after)


def run(
    out_dir: str | os.PathLike = SCRATCH,
    quick: bool = False,
    repeats: int = 7,
    lr: float = LR,
    with_trl: bool = True,
    threads: int = 1,
    log: Callable[[str], Any] = print,
) -> list[Result]:
    """Run the benchmark, write ``<out_dir>/learner_speed.md`` and return the results.

    Args:
        out_dir: folder of the markdown report.
        quick: tiny shapes and two iterations (a smoke run).
        repeats: timed iterations per side and setting (after one warm-up each).
        lr: learning rate of both sides.
        with_trl: also measure TRL when it imports.
        threads: torch intra-op threads for both sides.
        log: where progress lines go.
    """
    settings = QUICK_SETTINGS if quick else SETTINGS
    if quick:
        repeats = 2
    trl_error = _import_trl() if with_trl else "disabled by the caller"
    if trl_error is not None and is_committed(out_dir):
        # The committed report is the agentrl / TRL comparison that `--check` reads; a run
        # without TRL would leave it without one.
        raise SystemExit(
            f"learner-speed: TRL is not installed here ({trl_error}), and {out_dir} holds the "
            "committed agentrl / TRL comparison, which this run could not re-measure. Nothing "
            "was written. Install TRL (`pip install trl`) to update it, or run without "
            f"--update / --out {out_dir} (the report then goes to {SCRATCH}/, with TRL's "
            "committed rows kept and marked)."
        )
    results, loads = _measure(
        settings, repeats, lr, trl_error is None, threads, profile=not quick, log=log
    )
    path = Path(out_dir) / "learner_speed.md"
    write_report(path, results, trl_error, quick, loads, repeats, lr, threads)
    log(f"[learner-speed] wrote {path}")
    return results


# --- --check ---

CHECK_REPEATS = 5
"""Timed iterations per side and setting in ``--check`` (the report uses 7)."""
CHECK_COLUMNS: tuple[tuple[str, str], ...] = (
    ("tokens/s", "tokens/s (whole iteration)"),
    ("update tokens/s", "update tokens/s"),
)
"""(column of the report's Results table, what the figure calls it)."""


def committed_ratios(text: str) -> dict[tuple[str, str], float | None]:
    """(setting name, column) → agentrl / TRL of that column in a learner-speed report's
    Results table (None when a side's row or number is missing)."""
    (table,) = tables_in(text, "Results")[:1]
    name_col, impl_col = table.column("setting"), table.column("implementation")
    values: dict[tuple[str, str, str], float | None] = {}
    for row in table.rows:
        for column, _ in CHECK_COLUMNS:
            cell = row[table.column(column)]
            values[(row[name_col], row[impl_col], column)] = parse_number(cell)
    out: dict[tuple[str, str], float | None] = {}
    for name in {row[name_col] for row in table.rows}:
        for column, _ in CHECK_COLUMNS:
            ours = values.get((name, "agentrl", column))
            theirs = values.get((name, "TRL GRPOTrainer", column))
            out[(name, column)] = ours / theirs if ours and theirs else None
    return out


def check(
    results_dir: str | os.PathLike = "results",
    log: Callable[[str], Any] = print,
    tolerance: float = TOLERANCE,
    repeats: int = CHECK_REPEATS,
) -> list[Figure]:
    """Re-measure and compare with ``<results_dir>/learner_speed.md`` (``learner-speed
    --check``).

    Every setting of :data:`SETTINGS` is measured as the report does (interleaved with TRL,
    one warm-up each, no profile) with ``repeats`` iterations per side; the compared figures are
    agentrl / TRL tokens/s for the whole iteration and for the update alone, which cancel the
    machine's speed and, being interleaved, most of its load. When a ratio is beyond
    ``tolerance`` the measurement is repeated once and each ratio keeps the better of its two
    values. Without TRL nothing is measured: every figure is skipped, with the reason.
    """
    _, text = committed_report(results_dir, "learner_speed.md", "learner-speed")
    committed = committed_ratios(text)
    names = [(s.name, column, label) for s in SETTINGS for column, label in CHECK_COLUMNS]

    def figure(name: str, label: str) -> str:
        return f"learner-speed: agentrl / TRL {label} at {name}"

    trl_error = _import_trl()
    if trl_error is not None:
        used = re.search(r"\btrl (\d[\w.+-]*\w)", text)
        why = (
            f"TRL is not installed here ({trl_error}), so the agentrl / TRL ratio was not "
            f"measured; `pip install trl{'==' + used.group(1) if used else ''}` to compare"
        )
        return [
            Figure(figure(n, lab), committed.get((n, c)), None, True, skip=why, unit="×")
            for n, c, lab in names
        ]

    def measure() -> list[Figure]:
        results, loads = _measure(
            SETTINGS, repeats, LR, with_trl=True, threads=1, profile=False, log=log
        )
        load = f"{loads[0][0]:.1f} → {loads[1][0]:.1f}"
        log(f"[learner-speed --check] load average (1 min) before → after: {load}")
        measured: dict[tuple[str, str], float | None] = {}
        for r in results:
            med = Timings.median
            measured[(r.setting.name, "tokens/s")] = ratio(r)
            upd = r.trl.update if r.trl is not None else []
            measured[(r.setting.name, "update tokens/s")] = (
                med(upd) / med(r.agentrl.update) if upd and r.agentrl.update else None
            )
        return [
            Figure(figure(n, lab), committed.get((n, c)), measured.get((n, c)), True, unit="×")
            for n, c, lab in names
        ]

    return confirmed(measure, tolerance, log, "learner-speed --check")
