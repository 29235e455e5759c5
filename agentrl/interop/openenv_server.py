"""Serve any registered agentrl environment as an OpenEnv environment (OpenEnv outward).

``python -m agentrl.serve env=webshop --port 8000`` (or :func:`build_app` in code) puts an
agentrl environment behind openenv-core's own server (:class:`openenv.core.HTTPEnvServer` on
FastAPI, run by uvicorn), so any OpenEnv client (TRL, SkyRL, torchforge, ``EnvClient``) can
train on it:

- **action**: :class:`TextAction`, one field ``text`` (at most :data:`MAX_ACTION_CHARS`
  characters; longer is a validation error, not an action);
- **observation**: :class:`TextObservation`: ``text`` (the observation), ``reward``, ``done``
  (terminated or truncated) and the agentrl ``info`` dict as JSON (``anchor``,
  ``admissible_actions``, ``won``, ``task``, ``terminated``, ``truncated``, ``action_valid``,
  ``executed_action``, ``costs`` and the environment's own keys; at reset also
  ``max_steps``, the episode's step limit). The same dict is the
  observation's ``metadata``; it is repeated in the ``info`` field because openenv-core 0.3's
  serializer leaves ``metadata`` out of what goes over the wire (huggingface/OpenEnv#616).
  Anchors become JSON lists; :func:`agentrl.interop.openenv.hashable` turns them back.
- **seeds** go through the reset request (``{"seed": 3}``, also ``{"options": {...}}``, e.g.
  ``{"options": {"split": "eval"}}`` for held-out tasks).
- **sessions**: each WebSocket connection (``/ws``, what ``EnvClient`` uses) gets its own
  environment, up to ``--max-sessions``; one more is refused with OpenEnv's
  ``CAPACITY_REACHED`` error. A dropped connection's environment is closed and its slot freed
  (websocket pings find half-open connections); ``--session-timeout-s`` also reaps idle ones.
  ``GET /capacity`` reports the sessions in use.
- **bad requests** get OpenEnv's error responses (WebSocket ``VALIDATION_ERROR`` /
  ``EXECUTION_ERROR`` / ``INVALID_JSON``, HTTP 422) and never stop the server. OpenEnv's HTTP
  ``/reset`` and ``/step`` are stateless (a fresh environment per request), so an HTTP
  ``/step`` gets a 409 that says to use the WebSocket session.

Each session steps on a thread of its own (openenv-core's default), so a slow or hung
environment holds up only its own session. The environment built at start-up to check the
options also fills the caches that instances share (catalogues, search indexes, game files)
before the first session opens.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import socket
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from openenv.core.env_server.http_server import HTTPEnvServer
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import (
    Action,
    ConcurrencyConfig,
    EnvironmentMetadata,
    Observation,
    ServerCapacityStatus,
    State,
)
from pydantic import Field

from agentrl.configuration import ConfigError, check
from agentrl.registry import env_spec, make, validate_env_kwargs

log = logging.getLogger(__name__)

MAX_ACTION_CHARS = 100_000
"""Longest action text a server accepts (agentrl's ``TextSpace`` default)."""


class TextAction(Action):
    """One agentrl action: free text (a model's answer, or one of the admissible actions)."""

    text: str = Field(..., max_length=MAX_ACTION_CHARS, description="The action text")


class TextObservation(Observation):
    """An agentrl observation: the text plus the environment's ``info`` as JSON."""

    text: str = Field(default="", description="The observation text")
    info: dict[str, Any] = Field(
        default_factory=dict,
        description="agentrl's info dict (anchor, admissible_actions, won, task, terminated, "
        "truncated, action_valid, executed_action, costs, ...); equal to metadata",
    )


class RequestError(ValueError):
    """A request the environment cannot serve (bad seed, step without an episode); the client
    gets its message (WebSocket ``EXECUTION_ERROR``, HTTP 409)."""


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON types: tuples become lists, numpy scalars Python numbers, keys
    strings; anything else its ``str`` (never an error: an odd info value must not fail a
    step)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item):
        with contextlib.suppress(Exception):
            return jsonable(item())
    return str(value)


class AgentrlEnvironment(Environment[TextAction, TextObservation, State]):
    """An agentrl environment (``make(name, **env_kwargs)``) as an OpenEnv ``Environment``.

    One instance per session; the server builds them with ``functools.partial(cls, name,
    env_kwargs)``. ``reset(seed=, options=)`` and ``step(TextAction)`` return
    :class:`TextObservation`; ``state`` is the episode id and step count.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True  # each session owns its env; nothing mutable is shared

    def __init__(self, name: str = "sokoban", env_kwargs: Mapping[str, Any] | None = None):
        super().__init__()
        self.name = name
        self.env = make(name, **dict(env_kwargs or {}))
        self._episode_id: str | None = None
        self._steps = 0
        self._started = False

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        options: dict[str, Any] | None = None,
    ) -> TextObservation:
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise RequestError(f"seed={seed!r} is invalid: it must be a non-negative integer")
        if options is not None and not isinstance(options, dict):
            raise RequestError(f"options={options!r} is invalid: it must be an object")
        if episode_id is not None and not isinstance(episode_id, str):
            raise RequestError(f"episode_id={episode_id!r} is invalid: it must be a string")
        self._started = False  # a reset that raises leaves no episode to step
        obs, info = self.env.reset(seed=seed, options=options)
        self._episode_id, self._steps, self._started = episode_id, 0, True
        # The step limit too, so that a client can truncate where the environment does.
        limit = getattr(self.env.unwrapped, "max_steps", None)
        info = {**info, "terminated": False, "truncated": False, "max_steps": limit}
        return self._observation(obs, None, False, info)

    def step(self, action: TextAction, timeout_s: float | None = None) -> TextObservation:
        if not self._started:
            raise RequestError(
                "no episode to step: send a reset first. OpenEnv's HTTP /step is stateless (a "
                "new environment per request); play episodes over the WebSocket session at /ws "
                "(EnvClient)"
            )
        obs, reward, terminated, truncated, info = self.env.step(action.text)
        self._steps += 1
        info = {**info, "terminated": terminated, "truncated": truncated}
        return self._observation(obs, float(reward), terminated or truncated, info)

    @staticmethod
    def _observation(
        obs: str, reward: float | None, done: bool, info: dict[str, Any]
    ) -> TextObservation:
        meta = jsonable(info)
        return TextObservation(text=obs, reward=reward, done=done, info=meta, metadata=meta)

    @property
    def state(self) -> State:
        return State(episode_id=self._episode_id, step_count=self._steps)

    def get_metadata(self) -> EnvironmentMetadata:
        import agentrl

        spec = env_spec(self.name)
        doc = (type(self.env.unwrapped).__doc__ or "").strip().split("\n\n")[0]
        return EnvironmentMetadata(
            name=spec.env_id,
            description=" ".join(doc.split()) or f"agentrl environment {self.name}",
            version=agentrl.__version__,
            author="agentrl",
        )

    def close(self) -> None:
        self.env.close()


@dataclass(frozen=True)
class ServeConfig:
    """What ``python -m agentrl.serve`` serves and how."""

    env: str = "sokoban"
    """Registered agentrl environment name (``env=alfworld``)."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """The environment's options (``env.generated_games=20``), checked against its config."""
    host: str = "127.0.0.1"
    """Address to listen on; ``0.0.0.0`` to serve other machines."""
    port: int = 8000
    """Port; 0 picks a free one (printed at start-up)."""
    max_sessions: int = 64
    """Concurrent sessions (one environment each); one more is refused (CAPACITY_REACHED)."""
    session_timeout_s: float | None = None
    """Close sessions idle this long (None: only when their connection drops)."""
    max_message_mb: float = 4.0
    """Largest WebSocket message accepted; a larger one closes that connection (code 1009)."""

    def __post_init__(self) -> None:
        check(0 <= self.port < 65536, "--port", self.port, "in 0..65535")
        check(self.max_sessions >= 1, "--max-sessions", self.max_sessions, ">= 1")
        t = self.session_timeout_s
        check(t is None or t > 0, "--session-timeout-s", t, "> 0")
        check(self.max_message_mb > 0, "--max-message-mb", self.max_message_mb, "> 0")


def build_app(cfg: ServeConfig) -> tuple[FastAPI, HTTPEnvServer]:
    """The FastAPI app serving ``cfg.env`` with OpenEnv's routes, and its ``HTTPEnvServer``.

    The environment name and options are checked here, before anything is served (a bad key
    raises :class:`~agentrl.configuration.ConfigError` naming it and the valid ones).
    """
    name = env_spec(cfg.env).name
    validate_env_kwargs(name, cfg.env_kwargs)
    make(name, **cfg.env_kwargs).close()  # fail now, not in the first session; warm caches
    factory = functools.partial(AgentrlEnvironment, name, dict(cfg.env_kwargs))
    server = HTTPEnvServer(
        factory,
        TextAction,
        TextObservation,
        concurrency_config=ConcurrencyConfig(
            max_concurrent_envs=cfg.max_sessions, session_timeout=cfg.session_timeout_s
        ),
    )
    app = FastAPI(
        title=f"agentrl {name} (OpenEnv)",
        description=f"The agentrl environment {env_spec(name).env_id} served with openenv-core.",
    )
    server.register_routes(app)

    @app.exception_handler(RequestError)
    async def request_error(request: Request, exc: RequestError) -> JSONResponse:
        return JSONResponse(status_code=409, content={"detail": str(exc)})

    @app.get("/capacity", response_model=ServerCapacityStatus, tags=["Health"])
    async def capacity() -> ServerCapacityStatus:
        """Sessions in use and the most allowed."""
        return server.get_capacity_status()

    return app, server


def _uvicorn_server(app: FastAPI, cfg: ServeConfig, log_level: str = "warning"):
    import uvicorn

    config = uvicorn.Config(
        app,
        log_level=log_level,
        ws_max_size=int(cfg.max_message_mb * 2**20),
        timeout_graceful_shutdown=5,
    )
    return uvicorn.Server(config)


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket: clients that connect before the server loop runs wait in the
    backlog instead of being refused, so the printed address is usable at once."""
    sock = socket.create_server((host, port), reuse_port=False, backlog=2048)
    sock.set_inheritable(True)
    return sock


@contextlib.contextmanager
def running(app: FastAPI, cfg: ServeConfig | None = None) -> Iterator[str]:
    """Serve ``app`` on a background thread of this process; yields its base URL
    (``http://host:port``) and stops the server on exit. For tests and benchmarks."""
    cfg = cfg or ServeConfig(port=0)
    sock = _listen(cfg.host, cfg.port)
    server = _uvicorn_server(app, cfg)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="agentrl-serve"
    )
    thread.start()
    host, port = sock.getsockname()[:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


def parse_args(argv: list[str]) -> tuple[ServeConfig, str]:
    """``env=NAME``, ``env.KEY=VALUE`` (VALUE read as YAML: ``env.dim_room=[7,7]``) and the
    flags of :class:`ServeConfig`; also returns the uvicorn log level."""
    import yaml

    parser = argparse.ArgumentParser(
        prog="python -m agentrl.serve",
        description="Serve an agentrl environment as an OpenEnv environment "
        "(HTTP + WebSocket, openenv-core's server).",
    )
    d = ServeConfig()
    parser.add_argument("overrides", nargs="*", help="env=NAME and env.KEY=VALUE")
    parser.add_argument("--host", default=d.host, help=f"(default {d.host})")
    parser.add_argument("--port", type=int, default=d.port, help="0: any free port")
    parser.add_argument("--max-sessions", type=int, default=d.max_sessions)
    parser.add_argument("--session-timeout-s", type=float, default=d.session_timeout_s)
    parser.add_argument("--max-message-mb", type=float, default=d.max_message_mb)
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    env, kwargs = d.env, {}
    for item in args.overrides:
        key, eq, value = item.partition("=")
        if not eq or not (key == "env" or key.startswith("env.")):
            raise ConfigError(f"{item!r} is not valid; use env=NAME or env.KEY=VALUE")
        if key == "env":
            env = value
        else:
            kwargs[key[4:]] = yaml.safe_load(value)
    return ServeConfig(
        env=env,
        env_kwargs=kwargs,
        host=args.host,
        port=args.port,
        max_sessions=args.max_sessions,
        session_timeout_s=args.session_timeout_s,
        max_message_mb=args.max_message_mb,
    ), args.log_level


def main(argv: list[str] | None = None) -> None:
    """``python -m agentrl.serve env=NAME [env.KEY=VALUE ...] [--port 8000] ...``."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        cfg, log_level = parse_args(sys.argv[1:] if argv is None else argv)
        app, _ = build_app(cfg)
    except ConfigError as exc:
        print(f"agentrl.serve: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    sock = _listen(cfg.host, cfg.port)
    host, port = sock.getsockname()[:2]
    # One line a script (or a test) can wait for: the address clients connect to.
    print(
        json.dumps(
            {"serving": env_spec(cfg.env).env_id, "url": f"http://{host}:{port}",
             "max_sessions": cfg.max_sessions}
        ),
        flush=True,
    )  # fmt: skip
    _uvicorn_server(app, cfg, log_level).run(sockets=[sock])
