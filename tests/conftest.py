"""Test set-up: make ``tests/helpers.py`` importable and keep torch on few threads."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
# The README's example plugin (examples/doors), as if installed: its environment joins the
# contract suite. Its estimator is registered only inside tests/test_examples.py.
sys.path.insert(0, str(Path(__file__).parents[1] / "examples" / "doors"))
torch.set_num_threads(2)
import agentrl_doors.env  # noqa: E402,F401 - registers 'doors'
import toy_env  # noqa: E402,F401 - registers the test suite's own toy env 'guess'


def pytest_collection_modifyitems(config, items):
    """GPU-marked tests run only where CUDA is available (they never gate CPU CI)."""
    import pytest

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
