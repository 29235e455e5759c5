"""Benchmarks, run as ``python -m agentrl.bench <name>`` (see :mod:`agentrl.bench.__main__`).

Each benchmark is a module with a ``run(out_dir="bench-out", quick=False, ...)`` function that
writes a markdown report into ``out_dir``: a scratch folder by default, ``results/`` (the
committed reports) only when asked (``--update`` or ``--out results``); ``env-speed``
(:mod:`.env_speed`) times Sokoban level generation and stepping against gym-sokoban.
"""
