"""One live run per run directory: an OS lock held for the run's whole life.

Two launches of one run would both write the same checkpoints and each its own wandb run
in the directory. The first launch takes the flock (`repro.locks`) on `<run_dir>/.lock` and
writes its pid and host into it; a second is refused with one line naming them. The kernel
drops the lock when its process ends however it ends, so a killed run never blocks its own
resume.

One process per run holds it: the launcher, which outlives its spawned workers, or rank 0
when torchrun or a SLURM job started the ranks. A SLURM requeue may start the run on
another node while the old node's lock is still being released (on NFS the server drops
a dead client's lock only when its lease runs out, about 90 s), so a requeued job waits
for the lock for a while before refusing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from repro.errors import UserError
from repro.locks import RUN_LOCK, holder, take
from repro.storage import storage_error

# Longer than an NFSv4 lease (90 s by default), after which a dead node's lock is dropped.
REQUEUE_WAIT_S = 120.0


def _requeued() -> bool:
    return int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0) > 0


@contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold `run_dir`'s lock while the body runs; UserError when a live run holds it."""
    path = run_dir / RUN_LOCK
    try:
        lock = take(path, REQUEUE_WAIT_S if _requeued() else 0.0)
    except OSError as e:
        raise storage_error(path, e, "run_dir") from None
    if lock is None:
        raise UserError(
            f"run_dir={run_dir} is in use by a live run ({holder(path)}); wait for it to end, "
            "or stop it, then run this again (a killed run leaves no lock behind)"
        )
    with lock:
        lock.stamp()
        yield
