"""The `spawn` parent's watch over its workers: results, failure reports, exits, heartbeats.

`repro.comm.launch.spawn` polls a `WorkerWatch` until every worker has returned or one has
failed; the watch tells which worker failed first and how (an exit code, a signal, a
heartbeat that stopped or never started), so the one line the run ends with names the
worker that caused it rather than a peer that reported a timeout first. It needs no torch:
it reads the results queue, the heartbeat array and the processes' exit codes.
"""

from __future__ import annotations

import pickle
import queue
import signal
import time
from typing import Any

TIMEOUT_SETTING = "trainer.collective_timeout_s"
# A worker beats only once it has imported torch and unpickled its arguments, which takes
# seconds per process on a loaded node; until its first beat it gets this much extra time.
STARTUP_S = 120.0
# The parent looks at the workers at least once a second; a longer gap means it was itself
# suspended (Ctrl-Z stops the parent and the workers alike), not that the workers went quiet.
SUSPENDED_S = 2.0


def _exit_cause(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}" if code else "exited without returning a result"


class WorkerWatch:
    """The parent's view of the workers: results, failure reports, exits and heartbeats."""

    def __init__(self, procs, results, beats, timeout_s: float):
        self.procs, self.results, self.beats, self.timeout_s = procs, results, beats, timeout_s
        self.outs: dict[int, Any] = {}
        self.reports: list[tuple[int, str, Any]] = []  # failures, in arrival order
        self.launched = self.watch_from = self.last_look = time.monotonic()

    def take(self, item: tuple[int, str, Any]) -> None:
        rank, kind, payload = item
        if kind == "ok":
            self.outs[rank] = pickle.loads(payload)
        else:
            self.reports.append(item)

    def receive(self, wait_s: float) -> None:
        """Take every report already sent, waiting up to `wait_s` for the first."""
        try:
            self.take(self.results.get(timeout=wait_s))
            while True:
                self.take(self.results.get_nowait())
        except queue.Empty:
            pass

    def done(self) -> bool:
        return len(self.outs) == len(self.procs)

    def fault(self, silent_s: float) -> tuple[int, str] | None:
        """The first worker that died without a report or has been silent for `silent_s`."""
        now = time.monotonic()
        if now - self.last_look > SUSPENDED_S:
            # Every heartbeat looks old after this process was suspended: the workers get a
            # fresh window instead of being blamed.
            self.watch_from = now
        self.last_look = now
        # Exit codes are read before the queue is drained: a worker puts its report in the
        # pipe before it exits, so one that exited and still has no report sent none.
        exited = {r: p.exitcode for r, p in enumerate(self.procs) if p.exitcode is not None}
        self.receive(0.0)
        settled = self.outs.keys() | {r for r, _, _ in self.reports}
        for rank, code in exited.items():
            if rank not in settled:
                return rank, _exit_cause(code)
        for rank in range(len(self.procs)):
            if rank in settled or rank in exited:
                continue
            beat = self.beats[rank]
            if beat == 0.0:
                if now - self.launched > silent_s + STARTUP_S:
                    return rank, f"never started ({now - self.launched:.0f} s after launch)"
                continue
            age = now - max(beat, self.watch_from)
            if age > silent_s:
                return rank, (
                    f"stopped answering (no heartbeat for {age:.0f} s, "
                    f"{TIMEOUT_SETTING}={self.timeout_s:g})"
                )
        return None
