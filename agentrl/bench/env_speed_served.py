"""The price of the OpenEnv boundary: the ``OpenEnv`` section of ``env_speed.md``.

Sokoban (agentrl's default 6x6 room, 1 box) played with random moves, episodes back to back
(resets included), in this process and through ``python -m agentrl.serve`` on a loopback port
(a server process of its own):

- in-process: ``agentrl.make("sokoban")``, one environment, and 16 stepped in turn by the
  inline pool;
- OpenEnv WebSocket: ``env=openenv`` (openenv-core's ``EnvClient``, one session per
  environment), 1 session, and 16 stepped at once by the inline pool (``env.concurrency``);
- OpenEnv HTTP: openenv-core's HTTP ``/reset`` is stateless (a fresh environment per request,
  and ``/step`` has no episode to step), so its rows are ``POST /reset`` requests per second,
  1 client and 16 at once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

MOVES = ("up", "down", "left", "right")
SESSIONS = (1, 16)


def _steps_per_s(pool, n_steps: int, seed: int = 0) -> float:
    """Random moves in every environment of ``pool`` (an env pool) until ``n_steps`` steps in
    all; an episode that ends is reset at once. Returns steps per second."""
    rng = np.random.default_rng(seed)
    n = len(pool)
    episodes = iter(range(10**9))
    t0 = time.perf_counter()
    pool.reset([(j, next(episodes), None) for j in range(n)])
    done = 0
    while done < n_steps:
        out = pool.step([(j, MOVES[int(rng.integers(4))]) for j in range(n)])
        done += n
        ended = [j for j, r in enumerate(out) if r[2] or r[3]]
        if ended:
            pool.reset([(j, next(episodes), None) for j in ended])
    return done / (time.perf_counter() - t0)


def _http_resets_per_s(url: str, n_requests: int, clients: int) -> float:
    import httpx

    def one(k: int) -> None:
        with httpx.Client(base_url=url, timeout=60) as http:
            for i in range(k, n_requests, clients):
                http.post("/reset", json={"seed": i}).raise_for_status()

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as ex:
        list(ex.map(one, range(clients)))
    return n_requests / (time.perf_counter() - t0)


def _serve() -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentrl.serve", "env=sokoban", "--port", "0",
         "--max-sessions", "64"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    line = proc.stdout.readline() if proc.stdout else ""
    if not line:
        proc.kill()
        raise RuntimeError("python -m agentrl.serve did not start")
    return proc, json.loads(line)["url"]


def openenv(quick: bool, log: Callable[[str], Any] = print) -> tuple[str, dict]:
    """Measure the rows of the module docstring (2,000 steps and 400 HTTP resets per row;
    ``quick``: 300 and 60). Returns the section's body and ``{row: steps (or resets) /s}``."""
    import agentrl
    import agentrl.interop.openenv  # registers env=openenv
    from agentrl.bench._report import header, render
    from agentrl.rollout.env_pool import InlinePool

    n_steps, n_http = (300, 60) if quick else (2000, 400)
    results: dict[str, float] = {}
    for n in SESSIONS:
        with InlinePool([agentrl.make("sokoban") for _ in range(n)]) as pool:
            results[f"in-process|{n}"] = _steps_per_s(pool, n_steps)
    log("[env-speed] OpenEnv: starting python -m agentrl.serve env=sokoban")
    proc, url = _serve()
    try:
        for n in SESSIONS:
            envs = [agentrl.make("openenv", base_url=url, concurrency=16) for _ in range(n)]
            with InlinePool(envs) as pool:
                results[f"ws|{n}"] = _steps_per_s(pool, n_steps)
        for n in SESSIONS:
            results[f"http|{n}"] = _http_resets_per_s(url, n_http, n)
    finally:
        proc.terminate()
        proc.wait(30)
    labels = {
        "in-process": "in-process (`agentrl.make`)",
        "ws": "OpenEnv WebSocket (`env=openenv` -> `agentrl.serve`)",
        "http": "OpenEnv HTTP `POST /reset` (stateless; resets/s)",
    }
    rows = []
    for key, value in results.items():
        path, n = key.split("|")
        base = results[f"in-process|{n}"]
        share = "" if path == "in-process" or path == "http" else f"{value / base:.2f}x"
        rows.append(f"| {labels[path]} | {n} | {value:,.0f} | {1000 / value:.3f} | {share} |")
        log("  " + rows[-1])
    head = header(("agentrl", "openenv-core", "uvicorn", "websockets"),
                  "python -m agentrl.bench env-speed --section OpenEnv", quick)  # fmt: skip
    body = render("env_speed", "OpenEnv", head=head, n_steps=n_steps, n_http=n_http,
                  rows="\n".join(rows))  # fmt: skip
    return body, results
