"""Benchmarks, run as ``python -m agentrl.bench <name>`` (see :mod:`agentrl.bench.__main__`).

Each benchmark is a module with a ``run(out_dir="results", quick=False, ...)`` function that
writes a markdown report under ``results/``; ``env-speed`` (:mod:`.env_speed`) times Sokoban
level generation and stepping against gym-sokoban.
"""
