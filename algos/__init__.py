"""Credit-assignment estimators; importing this package registers them (:mod:`agentrl.credit`)."""

from __future__ import annotations

from agentrl.algos import grpo  # noqa: F401 - registers "grpo"
