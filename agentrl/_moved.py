"""Old import paths of modules that moved in 0.2, kept working for one release.

0.1 kept the core in flat modules (``agentrl.batch``, ``agentrl.learner``, ``agentrl.trainer``,
…) and AC2 in the core (``agentrl.ac2``). They now live in the stage packages
(``agentrl.rollout``, ``agentrl.credit``, ``agentrl.learn``, ``agentrl.run``), in the model room
(``agentrl.model``: model building and scoring, in ``agentrl.learn`` in 0.2.0) and in
``agentrl.algos.ac2``.
``import agentrl.batch`` still works: a meta-path finder answers for the old names and hands back
the module at its new place (the same object, so classes and registries are shared), with a
``DeprecationWarning`` that names the new path. The targets are plain strings, resolved only
when an old name is imported, so the core holds no import of ``agentrl.algos``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings

MOVED: dict[str, str] = {
    "agentrl.batch": "agentrl.credit.batch",
    "agentrl.graph": "agentrl.credit.graph",
    "agentrl.synthetic": "agentrl.credit.synthetic",
    "agentrl.learner": "agentrl.learn.learner",
    "agentrl.losses": "agentrl.learn.losses",
    "agentrl.scoring": "agentrl.model.scoring",
    "agentrl.learn.model": "agentrl.model.build",
    "agentrl.learn.scoring": "agentrl.model.scoring",
    "agentrl.prompting": "agentrl.rollout.prompting",
    "agentrl.env_pool": "agentrl.rollout.env_pool",
    "agentrl.vllm_backend": "agentrl.rollout.vllm_backend",
    "agentrl.trainer": "agentrl.run.trainer",
    "agentrl.trainer_config": "agentrl.run.trainer_config",
    "agentrl.runconfig": "agentrl.run.config",
    "agentrl.ac2": "agentrl.algos.ac2.core",
    "agentrl.ac2_driver": "agentrl.algos.ac2.driver",
}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old names; loading one puts the new module under the old name."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec):
        return None  # a throwaway module; exec_module swaps in the real one

    def exec_module(self, module) -> None:
        new = MOVED[module.__name__]
        warnings.warn(
            f"{module.__name__} moved to {new}; the old path goes away in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        # The import system returns whatever sys.modules holds under the name after
        # exec_module, so the old name resolves to the very module object at its new place.
        sys.modules[module.__name__] = importlib.import_module(new)


def install() -> None:
    """Add the finder once (importing :mod:`agentrl` does this)."""
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.append(_Alias())
