"""Tiny job functions that check a SLURM setup end to end through submitit.

They live in the package, not in a test module, because submitit pickles a callable by
reference: the job's Python must be able to import it, and a function defined inside a
pytest module is not importable there.
"""

from __future__ import annotations

import os
import socket

import submitit

_SLURM_KEYS = (
    "SLURM_JOB_ID",
    "SLURM_ARRAY_JOB_ID",
    "SLURM_ARRAY_TASK_ID",
    "SLURM_JOB_PARTITION",
    "SLURM_NTASKS",
    "SLURM_PROCID",
    "SLURM_CPUS_PER_TASK",
    "SRUN_CPUS_PER_TASK",
)


def where_am_i() -> dict[str, str]:
    """The host name and the SLURM variables that identify this job and task."""
    info = {key: os.environ.get(key, "") for key in _SLURM_KEYS}
    info["hostname"] = socket.gethostname()
    return info


def task_identity() -> dict[str, object]:
    """This task's place in a multi-task job as submitit's JobEnvironment sees it.

    The trainer takes its rank and world size from the same object, so a job whose tasks
    report distinct ranks 0..n-1 here will rendezvous correctly.
    """
    env = submitit.JobEnvironment()
    return {
        "job_id": env.job_id,
        "global_rank": env.global_rank,
        "local_rank": env.local_rank,
        "num_tasks": env.num_tasks,
        "slurm_procid": os.environ.get("SLURM_PROCID", ""),
        "cpus_per_task": os.environ.get("SLURM_CPUS_PER_TASK", ""),
        "srun_cpus_per_task": os.environ.get("SRUN_CPUS_PER_TASK", ""),
    }


def square_in_array(x: int) -> dict[str, object]:
    """`x * x` with the array coordinates of the job that computed it."""
    return {
        "value": x * x,
        "array_job_id": os.environ.get("SLURM_ARRAY_JOB_ID", ""),
        "array_task_id": os.environ.get("SLURM_ARRAY_TASK_ID", ""),
    }


def die_hard(code: int = 1) -> None:
    """Exit at once with `code`, skipping Python's shutdown and submitit's result pickle.

    This is the crash a segfault or an OOM kill looks like from outside: only SLURM's
    accounting can tell the caller that the job failed.
    """
    os._exit(code)
