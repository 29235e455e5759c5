"""Credit-assignment estimators, one module per method; importing this package registers them.

Every module in this package is imported (and so registers its estimators with
:func:`agentrl.credit.register_estimator`); modules whose name starts with ``_`` are helpers.
"""

from __future__ import annotations

import importlib
import pkgutil

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    if not _info.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_info.name}")
