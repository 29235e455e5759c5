"""trainer.loggers: names checked at start-up with the valid choices and the install command;
the jsonl logger keeps only the rows before a resume point; configs flatten for MLflow."""

from __future__ import annotations

import json

import pytest

from agentrl.configuration import ConfigError
from agentrl.run import compose
from agentrl.run.loggers import check_loggers, flat_config, list_loggers, make_loggers


def test_the_default_is_tensorboard_and_jsonl():
    assert compose().trainer.loggers == ("tensorboard", "jsonl")
    assert {"tensorboard", "jsonl", "wandb", "mlflow"} <= set(list_loggers())


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["tensorbord"], "Did you mean 'tensorboard'?"),
        (["csv"], "which is not a logger; choose from ["),
        (["jsonl", "jsonl"], "names a logger twice"),
    ],
)
def test_bad_logger_names_say_what_is_valid(names, message):
    with pytest.raises(ConfigError, match=r"trainer\.loggers") as exc:
        compose([f"trainer.loggers=[{','.join(names)}]"])
    assert message in str(exc.value)


def test_a_logger_without_its_package_names_the_extra(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a)
    )
    with pytest.raises(ConfigError, match=r"pip install 'agentrl\[wandb\]'"):
        check_loggers(["wandb"])


def test_jsonl_rows_past_the_resume_point_are_dropped(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"iteration": i, "x": i}) + "\n" for i in range(5)))
    (logger,) = make_loggers(["jsonl"], tmp_path, 2, {})
    logger.scalars(3, {"x": 30.0})
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    assert [(r["iteration"], r["x"]) for r in rows] == [(0, 0), (1, 1), (2, 2), (3, 30.0)]


def test_flat_config_keys_are_dotted_paths():
    flat = flat_config({"algo": {"name": "grpo", "gamma": 1.0}, "trainer": {"loggers": ["a"]}})
    assert flat == {"algo.name": "grpo", "algo.gamma": "1.0", "trainer.loggers": '["a"]'}
