"""``python -m agentrl.serve env=<name> [env.KEY=VALUE ...] [--port 8000]``: serve a registered
agentrl environment as an OpenEnv environment (needs the ``openenv`` extra); see
:mod:`agentrl.interop.openenv_server`.
"""

from __future__ import annotations

if __name__ == "__main__":
    from agentrl.interop.openenv_server import main

    main()
