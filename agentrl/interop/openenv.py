"""An OpenEnv environment as an agentrl environment (OpenEnv inward): ``env=openenv``.

``python -m agentrl.run env=openenv env.base_url=http://host:8000`` trains on any OpenEnv
server (``openenv-core``'s ``EnvClient`` over its WebSocket session, one session per agentrl
environment); ``env.local=<agentrl env>`` is the in-process variant for tests (the agentrl
environment behind :class:`~agentrl.interop.openenv_server.AgentrlEnvironment`, with every
request and answer passed through openenv-core's own serialization, no sockets).

How an OpenEnv observation becomes agentrl's ``(obs, info)``:

- the text is the observation field ``env.text_field`` (``text``; empty: the observation
  fields as JSON); the action text is sent as the action field ``env.action_field``;
- *metadata* is the response's top-level ``metadata`` (openenv-core releases that send it),
  else the observation field ``env.metadata_field`` (``info``, where
  ``python -m agentrl.serve`` puts it);
- ``anchor`` is metadata ``env.anchor_key`` (JSON lists read back as tuples), else a hash of
  the observation text. Anchors from text are coarser or finer than the true state (two states
  that read the same merge; a text that shows history splits one state): step-level methods
  (GiGPO, CRBC) then merge steps whose observations are identical, which is still a sound
  grouping but not the environment's own state key;
- ``admissible_actions`` from metadata ``env.admissible_key`` when it is a list of strings,
  else None (open action space); ``task`` from the episode's last metadata ``task``, else
  ``env.task``;
- ``won`` from metadata ``won``, else whether the episode ended (not truncated) with a
  positive reward; ``terminated`` is ``done`` unless metadata says ``truncated``; the episode
  is also truncated after ``env.max_steps`` steps (or the reset metadata's ``max_steps``, the
  server's own limit, when lower); ``costs``, ``action_valid``,
  ``executed_action`` and other metadata keys pass through.

Failures never crash a run: a step whose request fails (connection refused or dropped, a
timeout of ``env.timeout_s``, a server error) ends the episode as *lost* (truncated, reward
0, ``info["worker_error"]`` says why; the rollout flags it and credit assignment leaves it
out, as for a crashed environment worker), and the connection is dropped. A reset that still
fails after ``env.reset_retries`` new connections starts a placeholder episode whose first
step is lost the same way; the next reset tries the server again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from agentrl.configuration import ConfigError, check, from_mapping
from agentrl.env_api import COSTS_KEY, TextEnv
from agentrl.interop.anchors import hashable, text_anchor
from agentrl.registry import register_env
from agentrl.rollout.env_pool import lost_episode

log = logging.getLogger(__name__)

_URL_SCHEMES = ("http://", "https://", "ws://", "wss://")
_OWN_KEYS = frozenset(
    {"anchor", "won", "admissible_actions", "task", "step", "terminated", "truncated",
     "action_valid", "executed_action", COSTS_KEY, "worker_error", "max_steps"}
)  # fmt: skip
"""Metadata keys the adapter reads itself (the rest pass through into ``info``)."""


@dataclass(frozen=True)
class OpenEnvConfig:
    """``env=openenv``: where the OpenEnv environment is and how to read it."""

    base_url: str = ""
    """The OpenEnv server (``http://host:8000``; ``ws://`` works too). One of ``base_url`` and
    ``local`` is required."""
    local: str = ""
    """In-process variant (tests, debugging): an agentrl environment name served through the
    OpenEnv adapter in this process."""
    local_kwargs: dict[str, Any] = field(default_factory=dict)
    """Options of the ``local`` environment."""
    action_field: str = "text"
    """Action field that carries the action text."""
    text_field: str = "text"
    """Observation field with the text; empty: all observation fields as JSON."""
    metadata_field: str = "info"
    """Observation field with the metadata dict when the response has no top-level one."""
    anchor_key: str = "anchor"
    """Metadata key of the state anchor; empty (or absent): a hash of the observation text."""
    admissible_key: str = "admissible_actions"
    """Metadata key of the admissible actions (a list of strings)."""
    task: str = ""
    """Instruction text when the metadata has no ``task``."""
    max_steps: int = 50
    """Steps before the episode is truncated here (the server may end it sooner)."""
    connect_timeout_s: float = 10.0
    """Time to open a connection."""
    timeout_s: float = 60.0
    """Time to wait for one answer; longer and the episode is lost."""
    reset_retries: int = 2
    """New connections tried when a reset fails, before its episode is given up as lost."""
    concurrency: int = 16
    """Environments the rollout steps at once (threads; the requests overlap)."""
    max_message_mb: float = 16.0
    """Largest message accepted from the server."""

    def __post_init__(self) -> None:
        check(self.max_steps >= 1, "env.max_steps", self.max_steps, ">= 1")
        check(self.connect_timeout_s > 0, "env.connect_timeout_s", self.connect_timeout_s, "> 0")
        check(self.timeout_s > 0, "env.timeout_s", self.timeout_s, "> 0")
        check(self.reset_retries >= 0, "env.reset_retries", self.reset_retries, ">= 0")
        check(self.concurrency >= 1, "env.concurrency", self.concurrency, ">= 1")
        check(self.max_message_mb > 0, "env.max_message_mb", self.max_message_mb, "> 0")
        url = self.base_url
        check(not url or url.startswith(_URL_SCHEMES), "env.base_url", url,
              f"a URL starting with one of {list(_URL_SCHEMES)}")  # fmt: skip
        check(self.local != "openenv", "env.local", self.local, "an environment other than openenv")

    def check_target(self) -> None:
        """Exactly one of ``base_url`` and ``local`` (checked when an environment is made: the
        defaults must build, for the config schema)."""
        if bool(self.base_url) == bool(self.local):
            raise ConfigError(
                "env=openenv needs exactly one of env.base_url (an OpenEnv server, e.g. "
                "env.base_url=http://127.0.0.1:8000) and env.local (an agentrl environment "
                f"served in this process, e.g. env.local=sokoban); got base_url="
                f"{self.base_url!r}, local={self.local!r}"
            )


# -- transport -------------------------------------------------------------------------------
class _Loop:
    """One asyncio loop on a daemon thread per process, shared by every remote session: the
    environments of a batch step from the rollout's threads, and their requests overlap on
    this loop instead of each client running a loop thread of its own."""

    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None
    _pid: int | None = None

    @classmethod
    def run(cls, coro, timeout: float) -> Any:
        with cls._lock:
            if cls._loop is None or cls._pid != os.getpid():  # a forked child needs its own
                cls._loop = asyncio.new_event_loop()
                cls._pid = os.getpid()
                threading.Thread(
                    target=cls._loop.run_forever, daemon=True, name="agentrl-openenv"
                ).start()
            loop = cls._loop
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise


def _payload_client(base_url: str, cfg: OpenEnvConfig):
    """openenv-core's generic WebSocket client, keeping the whole answer (observation fields,
    reward, done and a top-level ``metadata`` where the server sends one)."""
    from openenv.core.client_types import StepResult
    from openenv.core.generic_client import GenericEnvClient

    class PayloadClient(GenericEnvClient):
        def _parse_result(self, payload: dict[str, Any]) -> StepResult:
            return StepResult(observation=payload, reward=payload.get("reward"),
                              done=bool(payload.get("done", False)))  # fmt: skip

        async def _send(self, message: dict[str, Any]) -> None:
            from websockets.exceptions import ConnectionClosed

            try:
                await super()._send(message)
            except ConnectionClosed as closed:
                # openenv-core refuses a session (CAPACITY_REACHED, FACTORY_ERROR) with one
                # error message and a close, right as the socket opens: our request then
                # meets a closed socket. The message is still buffered; say why.
                try:
                    raw = await asyncio.wait_for(self._ws.recv(), 1.0)
                    data = json.loads(raw).get("data", {})
                except Exception:
                    raise closed from None
                raise RuntimeError(
                    f"Server error: {data.get('message', raw)} (code: {data.get('code')})"
                ) from closed

        async def disconnect(self) -> None:
            # After our "close" message the server closes the socket itself; closing ours
            # first makes openenv-core 0.3's handler fail on its own close and log a
            # traceback per session. So wait (briefly) for its close, then close ours.
            if self._ws is not None:
                with contextlib.suppress(Exception):
                    await self._ws.send(json.dumps({"type": "close"}))
                    await asyncio.wait_for(self._ws.wait_closed(), 0.5)
            await super().disconnect()

    return PayloadClient(
        base_url=base_url,
        connect_timeout_s=cfg.connect_timeout_s,
        message_timeout_s=cfg.timeout_s,
        max_message_size_mb=cfg.max_message_mb,
    )


class _RemoteSession:
    """One WebSocket session with an OpenEnv server."""

    def __init__(self, cfg: OpenEnvConfig):
        self.client = _payload_client(cfg.base_url, cfg)
        # The client's own timeouts end a request first; this bound only catches a wait that
        # escapes them (a connection that opens but never completes its handshake).
        self.limit = cfg.connect_timeout_s + cfg.timeout_s + 5.0

    def reset(self, data: dict[str, Any]) -> dict[str, Any]:
        return _Loop.run(self.client.reset(**data), self.limit).observation

    def step(self, action: dict[str, Any]) -> dict[str, Any]:
        return _Loop.run(self.client.step(action), self.limit).observation

    def close(self) -> None:
        # Short: after a failure the server may never answer the closing handshake (a step
        # still running, a dead peer), and the connection is given up either way.
        with contextlib.suppress(Exception):
            _Loop.run(self.client.close(), 1.0)


class _LocalSession:
    """The in-process variant: an agentrl environment behind the OpenEnv adapter, each answer
    serialized as the server's WebSocket handler does, and read back from JSON."""

    def __init__(self, cfg: OpenEnvConfig):
        from .openenv_server import AgentrlEnvironment

        self.env = AgentrlEnvironment(cfg.local, cfg.local_kwargs)

    @staticmethod
    def _wire(observation) -> dict[str, Any]:
        from openenv.core.env_server.serialization import serialize_observation
        from openenv.core.env_server.types import WSObservationResponse

        raw = WSObservationResponse(data=serialize_observation(observation)).model_dump_json()
        return json.loads(raw)["data"]

    def reset(self, data: dict[str, Any]) -> dict[str, Any]:
        return self._wire(self.env.reset(**data))

    def step(self, action: dict[str, Any]) -> dict[str, Any]:
        from openenv.core.env_server.serialization import deserialize_action

        from .openenv_server import TextAction

        return self._wire(self.env.step(deserialize_action(action, TextAction)))

    def close(self) -> None:
        self.env.close()


# -- the environment -------------------------------------------------------------------------
class OpenEnvTextEnv(TextEnv):
    """An OpenEnv environment (a server, or ``local`` in-process) as an agentrl ``TextEnv``;
    see the module docstring for how observations, metadata and failures map."""

    def __init__(self, **kwargs: Any):
        super().__init__()
        self.config = from_mapping(OpenEnvConfig, kwargs, path="env")
        self.config.check_target()
        self.max_steps = self.config.max_steps
        self.step_concurrency = self.config.concurrency
        self._session: _RemoteSession | _LocalSession | None = None
        self._meta: dict[str, Any] = {}
        self._won_flag = False
        self._lost: str | None = None
        self._seed: int | None = None
        self._task_text = self.config.task
        if self.config.local:  # in-process: the environment's own limit is known at once
            local = self._open()
            limit = getattr(local.env.env.unwrapped, "max_steps", self.max_steps)
            self.max_steps = min(self.max_steps, limit)

    # -- transport helpers -------------------------------------------------------------------
    def _open(self) -> _RemoteSession | _LocalSession:
        if self._session is None:
            cfg = self.config
            self._session = _LocalSession(cfg) if cfg.local else _RemoteSession(cfg)
        return self._session

    def _drop(self) -> None:
        """Forget the connection: after a failure its answers can no longer be trusted to pair
        with our requests (a late answer to a timed-out one)."""
        if self._session is not None:
            self._session.close()
            self._session = None

    def _why(self, exc: Exception) -> str:
        if isinstance(exc, TimeoutError):
            return f"TimeoutError: no answer within env.timeout_s={self.config.timeout_s} s"
        return f"{type(exc).__name__}: {exc}"

    def _absorb(self, payload: dict[str, Any]) -> tuple[str, float, bool]:
        """Read an answer: sets the metadata; returns (text, reward, done)."""
        cfg = self.config
        obs = payload.get("observation") or {}
        meta = payload.get("metadata")
        if not isinstance(meta, dict) or not meta:
            meta = obs.get(cfg.metadata_field) if cfg.metadata_field else None
        self._meta = meta if isinstance(meta, dict) else {}
        if isinstance(self._meta.get("task"), str):  # servers may send the task at reset only
            self._task_text = self._meta["task"]
        if cfg.text_field:
            text = obs.get(cfg.text_field, "")
            text = text if isinstance(text, str) else json.dumps(text, sort_keys=True)
        else:
            text = json.dumps(obs, sort_keys=True)
        reward = payload.get("reward")
        reward = float(reward) if isinstance(reward, int | float) else 0.0
        return text, reward, bool(payload.get("done", False))

    # -- TextEnv hooks -------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self._seed = seed  # _reset sends it to the server
        return super().reset(seed=seed, options=options)

    def _reset(self, options: dict[str, Any] | None) -> str:
        # Without a seed, one drawn from np_random: the server's task stays a function of ours.
        seed = self._seed if self._seed is not None else int(self.np_random.integers(2**31))
        data: dict[str, Any] = {"seed": seed}
        if options:
            data["options"] = options
        self._meta, self._won_flag, self._lost = {}, False, None
        self._task_text = self.config.task
        why = ""
        for attempt in range(self.config.reset_retries + 1):
            if attempt:
                time.sleep(min(0.2 * 2**attempt, 2.0))
            try:
                text, _, _ = self._absorb(self._open().reset(data))
                # The server's step limit (agentrl.serve sends it), if lower than ours.
                limit = self._meta.get("max_steps")
                self.max_steps = self.config.max_steps
                if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 1:
                    self.max_steps = min(self.max_steps, limit)
                return text
            except Exception as exc:  # network, timeout, server error: try a new connection
                why = self._why(exc)
                self._drop()
        self._lost = f"OpenEnv reset failed {self.config.reset_retries + 1} times ({why})"
        log.warning("%s; the episode is lost", self._lost)
        return f"[no observation: {self._lost}]"

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if not self._started or self._done:
            return super().step(action)  # ResetNeeded, or the answer for a finished episode
        text = action if isinstance(action, str) else ""
        payload: dict[str, Any] = {}
        if self._lost is None:
            try:
                payload = self._open().step({self.config.action_field: text})
            except Exception as exc:  # the episode is lost; the run goes on
                self._lost = f"OpenEnv step failed ({self._why(exc)})"
                log.warning("%s; the episode is lost", self._lost)
                self._drop()
        self._t += 1
        if self._lost is not None:
            self._done = True
            return lost_episode((self._last_obs, self._info()), self._lost)
        obs, reward, done = self._absorb(payload)
        meta = self._meta
        cut = bool(meta.get("truncated", False))
        terminated = done and not cut
        truncated = not terminated and (cut or self._t >= self.max_steps)
        self._done = terminated or truncated
        self._won_flag = bool(meta["won"]) if "won" in meta else terminated and reward > 0
        self._last_obs = obs
        valid = bool(meta.get("action_valid", True))
        info = self._info()
        info.update(
            action_valid=valid,
            executed_action=meta.get("executed_action", text if valid else None),
        )
        costs = meta.get(COSTS_KEY)
        info[COSTS_KEY] = (
            dict(costs) if isinstance(costs, dict)
            else {"invalid": 0.0 if valid else 1.0, "steps": 1.0}
        )  # fmt: skip
        return obs, reward, terminated, truncated, info

    def _anchor(self) -> Hashable:
        key = self.config.anchor_key
        if key and key in self._meta:
            return hashable(self._meta[key])
        return text_anchor(self._last_obs)

    def _won(self) -> bool:
        return self._won_flag

    def _admissible(self) -> list[str] | None:
        adm = self._meta.get(self.config.admissible_key)
        if isinstance(adm, list) and all(isinstance(a, str) for a in adm):
            return list(adm)
        return None

    def _task(self) -> str:
        return self._task_text

    def _extra_info(self) -> dict[str, Any]:
        skip = _OWN_KEYS | {self.config.anchor_key, self.config.admissible_key}
        return {k: v for k, v in self._meta.items() if k not in skip}

    def close(self) -> None:
        self._drop()
        super().close()


register_env(
    "openenv",
    "agentrl/OpenEnv-v0",
    entry_point="agentrl.interop.openenv:OpenEnvTextEnv",
    config_cls=OpenEnvConfig,
)
