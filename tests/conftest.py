"""Test set-up: make ``tests/helpers.py`` importable and keep torch on few threads."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
torch.set_num_threads(2)
import toy_env  # noqa: E402,F401 - registers the README's example env 'guess'
