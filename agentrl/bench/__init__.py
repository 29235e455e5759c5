"""Benchmarks, run as ``python -m agentrl.bench <name>`` (see :mod:`agentrl.bench.__main__`).

Each benchmark is a module with a ``run(out_dir="bench-out", quick=False, ...)`` function (the
``threads`` command is :func:`.scale.run_threads`) that writes a markdown report into
``out_dir``: a scratch folder by default, ``results/`` (the committed reports) only when asked
(``--update`` or ``--out results``). A report's fixed text is in ``templates/<report>.md``; the
code fills in what it measured (:func:`._report.render`). ``env-speed`` (:mod:`.env_speed`)
times Sokoban against gym-sokoban, ALFWorld's engines and WebShop's search and stepping.
"""
