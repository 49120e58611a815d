"""How many worker processes this machine holds for a command: its usable cores and memory
per process, the limits the process engine, `repro calibrate` and the sweep and tuning
workers check before they start anything.

It needs no torch, so the commands that only size their work (a run set's side-by-side
slots, a sweep's worker count) check it without loading torch.
"""

from __future__ import annotations

import os

from repro.errors import UserError

# Each worker process runs one thread; past this many per core the time slices stretch
# every collective until the slowest worker's turn comes and a run crawls or times out.
WORKERS_PER_CORE = 4
# One worker process before its model: the interpreter, torch and gloo. Measured with 4
# workers of the MNIST-1D CNN: about 335 MiB proportional set size each, plus the
# launcher's 330 MiB, so about 0.4-0.5 GiB per worker all told.
PROCESS_BYTES = 512 * 2**20


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, which SLURM (task/affinity,
    task/cgroup), `taskset` and a container's cpuset narrow to the job's share, where
    `os.cpu_count()` counts the whole node's. Side-by-side runs and workers are sized by it,
    so that a job given 4 of a node's 64 cores starts 4, not 64 taking turns on those 4."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # a platform without affinity (macOS)
        return os.cpu_count() or 1


def refuse_past_per_core(subject: str, count: int, fix: str) -> None:
    """Refuse `count` processes, more than `WORKERS_PER_CORE` to each usable core, in one
    line: `<subject> on the N cores this command may use is more than 4 per core; <fix>`,
    where `fix` may name the most allowed as `{limit}`."""
    cores = usable_cores()
    limit = WORKERS_PER_CORE * cores
    if count > limit:
        on = f"{cores} core{'' if cores == 1 else 's'}"
        raise UserError(
            f"{subject} on the {on} this command may use is more than {WORKERS_PER_CORE} per "
            f"core; {fix.format(limit=limit)}"
        )
