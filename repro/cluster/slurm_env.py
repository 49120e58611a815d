"""What the submitting side needs to know about the SLURM installation it talks to, and
what a task that SLURM started reads of its step.

These helpers back the one-line errors of a SLURM launch's bad input: `sbatch` not
found (`sbatch_available`), an unknown partition or more tasks than it has
(`partition_info`), and a job that failed on the node, shown with its log path and last
lines (`job_log_tail`). They call the SLURM client tools and never the daemons' files, so
they work the same on a real cluster's login node and on `scripts/slurm-local`'s cluster.
A run's tasks meet at a port both sides derive from the job (`rendezvous_port`), also
where a batch script's own `srun` started them (`rendezvous_env`, `join_srun_step`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import zlib
from pathlib import Path
from typing import Any

from repro.errors import UserError

# Slurm 22.05's srun stopped reading SLURM_CPUS_PER_TASK, so without this line in the batch
# script every task of the step gets one CPU (and, under task/affinity, is pinned to it).
SRUN_CPUS_PER_TASK_SETUP = "export SRUN_CPUS_PER_TASK=${SLURM_CPUS_PER_TASK:-1}"

_GPU_GRES = re.compile(r"^gpu(?::[^:(,]+)?:(\d+)")
# Below Linux's ephemeral range (32768-60999 by default): any outgoing connection, gloo's
# own pairs among them, takes a port from that range, and one there made a rendezvous fail
# with "address already in use"
PORT_BASE, PORT_SPAN = 20000, 12768


def rendezvous_port(job_id: str, restart: int) -> int:
    """A port derived from the job id (all tasks agree without talking) and the restart
    count, so a requeued job never waits for its previous incarnation's socket."""
    return PORT_BASE + (zlib.crc32(f"{job_id}/{restart}".encode()) % PORT_SPAN)


def rendezvous_env(
    rank: int, world: int, local_rank: int, nodes: int, master: str, job: str
) -> dict[str, str]:
    """The env:// variables torchrun sets, for task `rank` of `world` on `nodes` nodes
    (the same number of tasks on each), meeting at `master` on `rendezvous_port(job)` of
    this incarnation (`SLURM_RESTART_COUNT`)."""
    restart = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_RANK": str(local_rank),
        "LOCAL_WORLD_SIZE": str(world // nodes),
        "MASTER_ADDR": master,
        "MASTER_PORT": str(rendezvous_port(job, restart)),
    }


def join_srun_step() -> bool:
    """Make this process one worker of the run when a batch script's `srun` started it as
    one task of a step of several (`srun -n 4 repro train trainer.world_size=4`): the
    `rendezvous_env` of its task in the step, meeting at the step's first node on the port
    of the job and step, a MASTER_ADDR or MASTER_PORT already set kept. srun sets none of
    them, and each task used to run the whole run by itself, all but one then refused by
    the run's lock. True when set; nothing changes where RANK is already set (torchrun,
    submitit's tasks) or the step has one task (a batch script's `srun repro ...` of one
    task, the batch step itself)."""
    env = os.environ
    tasks = env.get("SLURM_STEP_NUM_TASKS", "")
    if "RANK" in env or not tasks.isdigit() or int(tasks) < 2:
        return False
    nodes = int(env.get("SLURM_STEP_NUM_NODES", "1"))
    master = env.get("MASTER_ADDR") or (
        "127.0.0.1" if nodes == 1 else _first_host(env["SLURM_STEP_NODELIST"])
    )
    step = f"{env['SLURM_JOB_ID']}.{env['SLURM_STEP_ID']}"
    rank, local = int(env["SLURM_PROCID"]), int(env["SLURM_LOCALID"])
    joined = rendezvous_env(rank, int(tasks), local, nodes, master, step)
    env.update({**joined, "MASTER_PORT": env.get("MASTER_PORT") or joined["MASTER_PORT"]})
    return True


def _first_host(nodelist: str) -> str:
    """The first host name of a SLURM node list (`gpu[03-04,07]` -> `gpu03`)."""
    shown = slurm_tool(["scontrol", "show", "hostnames", nodelist])
    if shown.returncode != 0 or not shown.stdout.split():
        raise UserError(
            f"scontrol could not expand SLURM_STEP_NODELIST={nodelist}; set MASTER_ADDR"
        )
    return shown.stdout.split()[0]


def sbatch_available() -> bool:
    """True when `sbatch` is on PATH, i.e. this machine can submit SLURM jobs."""
    return shutil.which("sbatch") is not None


def slurm_tool(args: list[str]) -> subprocess.CompletedProcess[str]:
    """One SLURM client command, its output captured (a minute at most); a machine without
    the tool is one line saying where to run instead."""
    if shutil.which(args[0]) is None:
        raise UserError(
            f"{args[0]} not found: this machine has no SLURM client tools; "
            "use cluster=local or submit from a SLURM login node"
        )
    return subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)


def _gpus(gres: str) -> int:
    """GPUs named in one node's GRES string, e.g. 'gpu:a100:4(S:0-1),gpu:v100:2' -> 6."""
    total = 0
    for item in gres.split(","):
        match = _GPU_GRES.match(item.strip())
        if match:
            total += int(match.group(1))
    return total


def _known_partitions() -> list[str]:
    out = slurm_tool(["sinfo", "-h", "-o", "%R"]).stdout
    return sorted({line.strip() for line in out.splitlines() if line.strip()})


def partition_info(name: str) -> dict[str, Any]:
    """Size and state of SLURM partition `name`.

    Returns `{"name", "state", "nodes", "cpus", "cpus_per_node", "gpus_per_node",
    "node_list"}`: totals from `scontrol show partition`, and the smallest per-node CPU and
    GPU counts from `sinfo -N` (a multi-task job must fit on its smallest node).
    Raises `UserError` for an unknown partition, missing client tools or an unreachable
    controller.
    """
    shown = slurm_tool(["scontrol", "-o", "show", "partition", name])
    if shown.returncode != 0:
        message = (shown.stderr or shown.stdout).strip()
        if "not found" in message:
            known = ", ".join(_known_partitions()) or "none"
            raise UserError(f"cluster.partition={name}: no such SLURM partition (known: {known})")
        raise UserError(f"scontrol show partition {name} failed: {message}")
    fields = dict(token.split("=", 1) for token in shown.stdout.split() if "=" in token)
    per_node = slurm_tool(["sinfo", "-h", "-N", "-p", name, "-o", "%c|%G"]).stdout.split()
    cpus_per_node = [int(line.split("|")[0].rstrip("+")) for line in per_node]
    gpus_per_node = [_gpus(line.split("|", 1)[1]) for line in per_node]
    return {
        "name": name,
        "state": fields.get("State", "UNKNOWN"),
        "nodes": int(fields.get("TotalNodes", "0")),
        "cpus": int(fields.get("TotalCPUs", "0")),
        "cpus_per_node": min(cpus_per_node, default=0),
        "gpus_per_node": min(gpus_per_node, default=0),
        "node_list": fields.get("Nodes", ""),
    }


def job_log_tail(path: str | os.PathLike[str], n: int = 20) -> str:
    """The last `n` lines of a job's log file, or "" when the job never wrote one.

    Reads backwards from the end in blocks, so a multi-gigabyte training log costs only
    the bytes shown.
    """
    if n < 1:
        raise UserError(f"job_log_tail n={n} must be >= 1")
    file = Path(path)
    if not file.is_file():
        return ""
    block = 8192
    with file.open("rb") as handle:
        end = handle.seek(0, os.SEEK_END)
        data = b""
        position = end
        # n lines need n newlines before them, plus possibly one ending the file.
        while position > 0 and data.count(b"\n") <= n:
            step = min(block, position)
            position -= step
            handle.seek(position)
            data = handle.read(step) + data
    lines = data.decode("utf-8", errors="replace").splitlines()
    return "\n".join(lines[-n:])
