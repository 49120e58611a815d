"""One live run per run directory: an OS lock held for the run's whole life.

Two launches of one run would both write the same checkpoints and each its own wandb run
in the directory. The first launch takes `fcntl.flock` on `<run_dir>/.lock` and writes its
pid and host into it; a second is refused with one line naming them. The kernel drops the
lock when its process ends however it ends, so a killed run never blocks its own resume.

One process per run holds it: the launcher, which outlives its spawned workers, or rank 0
when torchrun or a SLURM job started the ranks. A SLURM requeue may start the run on
another node while the old node's lock is still being released (on NFS the server drops
a dead client's lock only when its lease runs out, about 90 s), so a requeued job waits
for the lock for a while before refusing.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from repro.errors import UserError
from repro.storage import storage_error

LOCK_FILE = ".lock"
# Longer than an NFSv4 lease (90 s by default), after which a dead node's lock is dropped.
REQUEUE_WAIT_S = 120.0


def _requeued() -> bool:
    return int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0) > 0


def _take(handle, wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                raise
        if time.monotonic() >= deadline:
            return False
        time.sleep(1.0)


@contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold `run_dir`'s lock while the body runs; UserError when a live run holds it."""
    path = run_dir / LOCK_FILE
    try:
        handle = path.open("a+")
    except OSError as e:
        raise storage_error(path, e, "run_dir") from None
    with handle:
        if not _take(handle, REQUEUE_WAIT_S if _requeued() else 0.0):
            handle.seek(0)
            holder = handle.read().split()
            who = f"pid {holder[0]} on host {holder[1]}" if len(holder) == 2 else "another process"
            raise UserError(
                f"run_dir={run_dir} is in use by a live run ({who}); wait for it to end, "
                "or stop it, then run this again (a killed run leaves no lock behind)"
            )
        # in place, not by rename: the lock belongs to this open file
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()} {socket.gethostname()}\n")
        handle.flush()
        yield
