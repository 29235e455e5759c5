"""Policy losses and token-weight transforms (``learner.loss=``, ``learner.token_weights=``).

Importing this package registers them with :func:`agentrl.learn.policy_loss.register_policy_loss`
and :func:`~agentrl.learn.policy_loss.register_token_weight`: CISPO, KLPO, BPO, VIMPO (losses),
TACO and negative-token filtering (token weights). Every module not starting with ``_`` is
imported; each holds the pure tensor maths (shapes and formulas in the docstrings; see
docs/methods.md#policy-losses) and the registered adapter that feeds it the learner's micro-batch.
"""

from __future__ import annotations

import importlib
import pkgutil

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    if not _info.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_info.name}")
