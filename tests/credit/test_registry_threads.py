"""Registries load their plugins once per process, also when threads ask at the same time (the
benchmarks resolve method names from a thread pool)."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import threading
from agentrl.credit import list_estimators
from agentrl.registry import list_envs

barrier = threading.Barrier(6)
seen = []

def ask(i):
    barrier.wait()
    seen.append(tuple(list_estimators() if i % 2 else list_envs()))

threads = [threading.Thread(target=ask, args=(i,)) for i in range(6)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(sum("grpo" in s for s in seen), sum("sokoban" in s for s in seen), len(set(seen)))
"""


def test_concurrent_first_lookups_see_the_whole_registry():
    # A fresh interpreter: the first lookup is the one that loads the plugins.
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # Every thread saw the full registry: 3 answers of each kind, two distinct answers in all.
    assert proc.stdout.split() == ["3", "3", "2"]
