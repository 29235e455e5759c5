"""Adapters to other ecosystems (OpenEnv, GEM, TRL): leaves of the layout, nothing in the core
imports them. Each needs its optional extra (``pip install agentrl[openenv]`` and so on)."""
