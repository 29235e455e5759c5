"""Test set-up: make ``tests/helpers.py`` importable and keep torch on few threads."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
torch.set_num_threads(2)
import toy_env  # noqa: E402,F401 - registers the README's example env 'guess'


def pytest_collection_modifyitems(config, items):
    """GPU-marked tests run only where CUDA is available (they never gate CPU CI)."""
    import pytest

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
