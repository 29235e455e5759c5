"""torchrun worker: ``python -m agentrl.run`` whose rank ``FAIL_RANK`` raises mid-run.

Run as ``torchrun --nproc_per_node=2 tests/dist/fail_on_rank.py [overrides ...]``. The rank
named by the environment variable ``AGENTRL_TEST_FAIL_RANK`` raises ``RuntimeError("injected
failure on rank R")`` at the start of its second iteration, while the other ranks go on into
that iteration's collectives: the test checks that the whole job then ends at once, with the
error in its output, instead of waiting for ``trainer.dist_timeout_s``. The failing rank
writes the time of its failure (``time.time()``) to the file ``AGENTRL_TEST_FAIL_MARK``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from agentrl.run import cli
from agentrl.run.trainer import Trainer

FAIL_RANK = int(os.environ.get("AGENTRL_TEST_FAIL_RANK", "1"))
_iteration = Trainer.iteration


def _failing_iteration(self):
    self._test_calls = getattr(self, "_test_calls", 0) + 1
    if self.dist.rank == FAIL_RANK and self._test_calls == 2:
        Path(os.environ["AGENTRL_TEST_FAIL_MARK"]).write_text(repr(time.time()))
        raise RuntimeError(f"injected failure on rank {FAIL_RANK}")
    return _iteration(self)


Trainer.iteration = _failing_iteration

if __name__ == "__main__":
    cli.main()
