"""``python -m agentrl.run``: the training command line (see :mod:`agentrl.run.cli`)."""

from agentrl.run.cli import main

main()
