"""WebShop: search a product catalogue and buy what an instruction asks for (``env=webshop``,
``agentrl/WebShop-v0``).

:mod:`.env` holds :class:`WebShopConfig` and :class:`WebShopEnv` (pages, actions, anchor);
:mod:`.reward` the original purchase reward as pure functions; :mod:`.search` the BM25 search
engine (``bm25s``); :mod:`.data` the official files, prices, goals and the train/test split;
:mod:`.generate` the catalogue generator used when no official data is present.
"""

from __future__ import annotations

from agentrl.registry import register_env

from .env import WebShopConfig, WebShopEnv, parse_action

register_env(
    "webshop",
    "agentrl/WebShop-v0",
    entry_point="agentrl.envs.webshop.env:WebShopEnv",
    config_cls=WebShopConfig,
)

__all__ = ["WebShopConfig", "WebShopEnv", "parse_action"]
