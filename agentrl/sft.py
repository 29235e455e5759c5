"""``python -m agentrl.sft env=<name> [sft.* ...]``: the supervised warm start.

Behaviour cloning of the environment's demonstrations into the run's model, saved as a Hugging
Face checkpoint for ``python -m agentrl.run model.name_or_path=<dir>``; see
:mod:`agentrl.run.sft`.
"""

from __future__ import annotations

if __name__ == "__main__":
    from agentrl.run.sft import main

    main()
