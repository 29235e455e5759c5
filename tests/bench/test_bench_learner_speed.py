"""Smoke test of the learner-speed benchmark: a tiny run writes the report with its table."""

from __future__ import annotations

from agentrl.bench.__main__ import COMMANDS


def test_learner_speed_quick(tmp_path):
    from agentrl.bench.learner_speed import QUICK_SETTINGS, _import_trl, run

    results = run(out_dir=tmp_path, quick=True, log=lambda _: None)
    md = (tmp_path / "learner_speed.md").read_text()
    assert COMMANDS["learner-speed"] == "agentrl.bench.learner_speed:run"
    assert "| setting | implementation | iters | ms / iteration | tokens/s |" in md
    name = QUICK_SETTINGS[0].name
    assert f"| {name} | agentrl | 2 |" in md and "$" not in md  # placeholders filled
    (r,) = results
    assert len(r.agentrl.total) == 2 and all(t > 0 for t in r.agentrl.total)
    if _import_trl() is None:  # TRL is optional: compared when installed, else reported missing
        assert f"| {name} | TRL GRPOTrainer | 2 |" in md and "agentrl / TRL tokens/s" in md
        assert len(r.trl.total) == 2 and len(r.trl.update) == 2
    else:
        assert r.trl is None and "TRL was not measured" in md


def test_prompts_have_exact_length():
    """Prompts are exactly P tokens, tokenized alike by agentrl and by TRL's plain-text path."""
    from agentrl.bench.learner_speed import build_prompts, build_task, reward

    tok, words = build_task()
    texts = build_prompts(tok, words, n=3, length=40, seed=1)
    assert [len(ids) for ids in tok(text=texts)["input_ids"]] == [40, 40, 40]
    assert reward([2, 3, 4, 5]) == 0.5 and reward([]) == 0.0


def test_learner_speed_without_trl(tmp_path, monkeypatch):
    """Without TRL the benchmark measures agentrl alone and says why TRL is missing."""
    import torch

    from agentrl.bench import learner_speed

    monkeypatch.setattr(learner_speed, "_import_trl", lambda: "ModuleNotFoundError: no trl")
    threads = torch.get_num_threads()
    (r,) = learner_speed.run(out_dir=tmp_path, quick=True, log=lambda _: None)
    md = (tmp_path / "learner_speed.md").read_text()
    assert r.trl is None and "TRL was not measured (ModuleNotFoundError: no trl)" in md
    assert "| agentrl | 2 |" in md and "TRL GRPOTrainer |" not in md
    assert torch.get_num_threads() == threads  # the caller's thread setting is restored
