"""A submitit executor for a `ClusterConfig`, refused up front when the job cannot run.

Every check that SLURM itself would only report later (a job pending forever on a
partition too small for it, or rejected by sbatch with a long message) is done here first
and becomes one `UserError` line: no `sbatch`, an unknown partition, more tasks x CPUs or
GPUs per node than the partition's smallest node has, more nodes than it has. What only
sbatch can judge (memory, constraints, accounts) is its refusal in one line
(`sbatch_refusals`).
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import submitit
from submitit.core.utils import FailedJobError

from repro.cluster.slurm_env import SRUN_CPUS_PER_TASK_SETUP, partition_info, sbatch_available
from repro.errors import UserError
from repro.schemas.cluster import ClusterConfig

# One dead rank must end the whole step: without this srun leaves the other ranks blocked in
# a collective until the process-group timeout, and the job looks alive for ten minutes.
KILL_ON_BAD_EXIT = "--kill-on-bad-exit=1"
# submitit signals the job this long before its time limit; the job then requeues itself.
SIGNAL_DELAY_S = 90


def signal_delay_s(time_min: int) -> int:
    """The warning's lead: `SIGNAL_DELAY_S`, or a quarter of a shorter limit. The job only
    asks to be requeued then (its progress is the run directory's last checkpoint), which
    takes seconds; 90 s before a 1- or 2-minute limit came at or near the start, so every
    try was requeued within seconds and a run that fits one limit used up its requeues."""
    return min(SIGNAL_DELAY_S, time_min * 15)


def read_env_file(path: str | os.PathLike[str]) -> dict[str, str]:
    """The variables of a file of `export KEY='value'` lines (comments and others skipped)."""
    file = Path(path)
    if not file.is_file():
        raise UserError(
            f"cluster.env_file={file} does not exist; for cluster=slurm_local start the "
            "local cluster first (make slurm-up)"
        )
    env: dict[str, str] = {}
    for line in file.read_text(encoding="utf-8").splitlines():
        words = shlex.split(line, comments=True)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            key, value = words[1].split("=", 1)
            env[key] = value
    return env


def apply_env_file(env_file: str | None) -> None:
    """Export `env_file`'s variables into this process, so sbatch, sacct and the jobs
    (which inherit the submitting environment) all talk to the same cluster."""
    if env_file:
        os.environ.update(read_env_file(env_file))


def job_folder(cluster: ClusterConfig, runs_root: str) -> Path:
    """Where submitit keeps job pickles and logs: absolute, since the job reads it too."""
    folder = Path(cluster.folder) if cluster.folder else Path(runs_root) / "slurm"
    return folder.expanduser().absolute()


def default_partition() -> str:
    """The partition sbatch uses when none is named (`sinfo` marks it with a `*`)."""
    out = subprocess.run(
        ["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=60, check=False
    )
    if out.returncode != 0:  # no controller answered: not the same as no default partition
        said = (out.stderr or out.stdout).strip().splitlines()
        raise UserError(
            f"sinfo cannot reach a SLURM controller ({said[-1] if said else 'no output'}); "
            "start SLURM (here: make slurm-up, then cluster=slurm_local) or use cluster=local"
        )
    for line in out.stdout.split():
        if line.endswith("*"):
            return line[:-1]
    raise UserError(
        "cluster.partition is not set and this SLURM cluster has no default partition; "
        "set cluster.partition=NAME (see `sinfo`)"
    )


def check_fits(cluster: ClusterConfig, tasks_per_node: int, cpus_per_task: int) -> None:
    """Refuse a job the partition can never run, naming the setting to change."""
    if not sbatch_available():
        raise UserError(
            f"sbatch not found: cluster={cluster.name} needs the SLURM client tools on PATH; "
            "submit from a login node, or use cluster=local or cluster=submitit_local"
        )
    name = cluster.partition or default_partition()
    part = partition_info(name)
    if cluster.nodes > part["nodes"]:
        raise UserError(
            f"cluster.nodes={cluster.nodes} but partition {name} has {part['nodes']} node(s)"
        )
    cpus = tasks_per_node * cpus_per_task
    if cpus > part["cpus_per_node"]:
        raise UserError(
            f"{tasks_per_node} task(s) per node x cluster.cpus_per_task={cpus_per_task} = {cpus} "
            f"CPUs, more than the {part['cpus_per_node']} per node of partition {name}; "
            "lower trainer.world_size or cluster.cpus_per_task, or raise cluster.nodes"
        )
    if cluster.gpus_per_node > part["gpus_per_node"]:
        raise UserError(
            f"cluster.gpus_per_node={cluster.gpus_per_node} but the nodes of partition {name} "
            f"have {part['gpus_per_node']} GPU(s)"
        )


def make_executor(
    cluster: ClusterConfig,
    folder: Path,
    name: str,
    tasks_per_node: int,
    nodes: int = 1,
    cpus_per_task: int | None = None,
) -> submitit.Executor:
    """An executor for jobs of `nodes` x `tasks_per_node` tasks, after `check_fits`."""
    cpus = cpus_per_task or cluster.cpus_per_task
    if cluster.kind == "submitit_local":
        local = submitit.LocalExecutor(folder=folder, max_num_timeout=cluster.max_requeues)
        local.update_parameters(
            timeout_min=cluster.time_min,
            tasks_per_node=tasks_per_node,
            gpus_per_node=cluster.gpus_per_node,
            signal_delay_s=signal_delay_s(cluster.time_min),
            setup=list(cluster.setup),
        )
        return local
    if cluster.kind != "slurm":
        raise UserError(f"cluster.kind={cluster.kind!r} does not submit jobs; use repro train")
    apply_env_file(cluster.env_file)
    check_fits(cluster, tasks_per_node, cpus)
    executor = submitit.SlurmExecutor(folder=folder, max_num_timeout=cluster.max_requeues)
    params: dict = {
        "job_name": name,
        "time": cluster.time_min,
        "nodes": nodes,
        "ntasks_per_node": tasks_per_node,
        "cpus_per_task": cpus,
        "setup": [SRUN_CPUS_PER_TASK_SETUP, *cluster.setup],
        "srun_args": [KILL_ON_BAD_EXIT, *cluster.srun_args],
        "signal_delay_s": signal_delay_s(cluster.time_min),
        "array_parallelism": cluster.array_parallelism,
        # submitit writes a bare `--key` for True: sbatch refuses `--exclusive=true`
        "additional_parameters": {k: v or True for k, v in cluster.sbatch_args.items()},
    }
    optional = {
        "partition": cluster.partition,
        "account": cluster.account,
        "qos": cluster.qos,
        "gpus_per_node": cluster.gpus_per_node or None,
        "mem": f"{int(cluster.mem_gb * 1024)}MB" if cluster.mem_gb else None,
    }
    params.update({k: v for k, v in optional.items() if v is not None})
    executor.update_parameters(**params)
    return executor


@contextlib.contextmanager
def sbatch_refusals(cluster: ClusterConfig, folder: Path) -> Iterator[None]:
    """sbatch's own refusal of a job the checks above let through (memory, a constraint, an
    account or QOS the site does not grant) as one `UserError` line with sbatch's reasons,
    instead of sbatch's raw lines and submitit's traceback; the job files submitit wrote
    into `folder` for it are removed."""
    before = set(folder.iterdir()) if folder.is_dir() else set()
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):  # submitit echoes a refusal's stderr
            yield
    except FailedJobError as err:
        for path in set(folder.iterdir()) - before if folder.is_dir() else ():
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()]
        reasons = "; ".join(dict.fromkeys(ln.removeprefix("sbatch: error: ") for ln in lines))
        raise UserError(
            f"sbatch refused the job of cluster={cluster.name}: {reasons}; change what it "
            "names (cluster.mem_gb, cluster.time_min, cluster.partition, cluster.account, "
            "cluster.qos, cluster.sbatch_args)"
        ) from None
    except BaseException:
        sys.stderr.write(said.getvalue())
        raise
    sys.stderr.write(said.getvalue())  # a job queued: whatever was said on the way
