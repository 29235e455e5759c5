"""The OpenEnv tests skip when openenv-core is not installed (each file's importorskip), except
under ``AGENTRL_REQUIRE_OPENENV=1`` (set by CI), where a missing or broken package fails the
collection instead of skipping it."""

import importlib
import os

if os.environ.get("AGENTRL_REQUIRE_OPENENV") == "1":
    importlib.import_module("openenv.core")
