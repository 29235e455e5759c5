"""ALFWorld on the real alfworld/textworld engine (``env=alfworld``, ``agentrl/ALFWorld-v0``).

Registering needs nothing beyond agentrl; creating the environment needs the ``alfworld`` extra
(``pip install 'agentrl[alfworld]'``).
"""

from agentrl.registry import register_env

from .env import ALFWorldConfig

register_env(
    "alfworld",
    "agentrl/ALFWorld-v0",
    entry_point="agentrl.envs.alfworld.env:ALFWorldEnv",
    config_cls=ALFWorldConfig,
    parallel=True,
    prompt_style="household",
)
