"""Where a run executes: `local` (spawned on this machine) or a SLURM cluster via submitit.

The training code is identical in every case; only how the N worker processes are started
differs. `local` spawns them here; `submitit_local` hands the job to submitit's
LocalExecutor (a detached process on this machine, the same job files and requeue logic as
SLURM, no scheduler); `slurm` submits it with sbatch through submitit. The SLURM fields are
read by `repro.cluster.submit`: one training run is one job of `nodes` nodes with
`trainer.world_size / nodes` tasks per node, each task one worker (one GPU when
`gpus_per_node > 0`). The launcher reads the whole composed config, so this schema is a
leaf the root config imports rather than a module of `repro.cluster`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from hydra.core.config_store import ConfigStore

from repro.errors import UserError, require_choice

CLUSTERS = ("local", "submitit_local", "slurm")
BACKENDS = ("auto", "nccl")


@dataclass
class ClusterConfig:
    """`setup` lines run in the batch script before srun (module loads, conda activate,
    NCCL variables); `sbatch_args` are extra `#SBATCH --key=value` lines (an empty value
    writes the bare flag, `--exclusive`) and `srun_args` extra srun flags. `folder` holds
    submitit's job files and logs (empty: `<runs_root>/slurm`); it must be on a file
    system the compute nodes share. `env_file` is a shell file
    of `export KEY='value'` lines applied before any SLURM command (the local test cluster
    keeps its SLURM_CONF there). `array_parallelism` caps how many array tasks of one run
    set or sweep run at once. `max_requeues` bounds how often a job that hit its time limit
    resubmits itself. `backend` is how workers on GPUs talk: `auto` uses NCCL for CUDA
    tensors and gloo for CPU ones, gloo alone on the CPU; `nccl` insists on GPUs and NCCL,
    so a job that lands on a node without usable CUDA stops instead of running on the CPU.
    """

    name: str = "local"
    kind: str = "local"
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    nodes: int = 1
    gpus_per_node: int = 0
    cpus_per_task: int = 1
    mem_gb: float | None = None
    time_min: int = 60
    setup: list[str] = field(default_factory=list)
    sbatch_args: dict[str, str] = field(default_factory=dict)
    srun_args: list[str] = field(default_factory=list)
    folder: str = ""
    env_file: str | None = None
    array_parallelism: int = 64
    max_requeues: int = 3
    backend: str = "auto"

    def __post_init__(self):
        require_choice("cluster.kind", self.kind, CLUSTERS)
        if self.nodes < 1:
            raise UserError(f"cluster.nodes={self.nodes} must be at least 1")
        if self.gpus_per_node < 0:
            raise UserError(f"cluster.gpus_per_node={self.gpus_per_node} must be >= 0")
        if self.cpus_per_task < 1:
            raise UserError(f"cluster.cpus_per_task={self.cpus_per_task} must be at least 1")
        if self.time_min < 1:
            raise UserError(f"cluster.time_min={self.time_min} must be at least 1 minute")
        if self.mem_gb is not None and self.mem_gb <= 0:
            raise UserError(f"cluster.mem_gb={self.mem_gb} must be positive (or null for none)")
        if self.array_parallelism < 1:
            raise UserError(f"cluster.array_parallelism={self.array_parallelism} must be >= 1")
        if self.max_requeues < 0:
            raise UserError(f"cluster.max_requeues={self.max_requeues} must be >= 0")
        require_choice("cluster.backend", self.backend, BACKENDS)
        if self.kind == "submitit_local" and self.nodes != 1:
            raise UserError(f"cluster.nodes={self.nodes}: submitit_local runs on one node only")


_DEVICE = re.compile(r"^(auto|cpu|cuda)(?::(\d+))?$")


def device_request(
    requested: str, gpus_per_node: int, backend: str
) -> tuple[str, str | None, list[str]]:
    """(kind, index, the settings that ask for GPUs as `key=value`) of
    `trainer.device=requested`, refused where it is no device or where
    it is the CPU while the cluster asks for GPUs: what needs no machine to be decided, so
    that a job is refused before it waits in a queue (`repro.comm.devices.choose_device`
    decides the rest on the machine)."""
    match = _DEVICE.match(requested)
    kind, index = (match.group(1), match.group(2)) if match else ("", None)
    if not kind or (kind != "cuda" and index is not None):
        raise UserError(
            f"trainer.device={requested} is not a device; use auto, cpu, cuda or cuda:N"
        )
    asked = [
        f"trainer.device={requested}" if kind == "cuda" else "",
        f"cluster.gpus_per_node={gpus_per_node}" if gpus_per_node > 0 else "",
        "cluster.backend=nccl" if backend == "nccl" else "",
    ]
    asked = [a for a in asked if a]
    if kind == "cpu" and asked:
        raise UserError(
            f"trainer.device=cpu contradicts {' and '.join(asked)} (GPUs requested, then "
            f"left idle); use trainer.device=auto, or cluster.gpus_per_node=0 and "
            f"cluster.backend=auto"
        )
    return kind, index, asked


ConfigStore.instance().store(group="cluster", name="cluster_schema", node=ClusterConfig)


def env_rank_world() -> tuple[int, int] | None:
    """(rank, world) when an external launcher (torchrun, SLURM) already set them: this
    process is then one worker of a run whose other workers it did not start."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    rank, world = os.environ["RANK"], os.environ["WORLD_SIZE"]
    if not (rank.isdigit() and world.isdigit() and int(rank) < int(world)):
        raise UserError(
            f"RANK={rank!r} WORLD_SIZE={world!r} in the environment are not a launcher's "
            "(torchrun, srun: whole numbers, RANK below WORLD_SIZE); unset them, or launch "
            "with torchrun"
        )
    return int(rank), int(world)


def check_launched_runs(runs: int, title: str) -> None:
    """Refuse several runs in a process an external launcher started: its one rendezvous
    serves one run (the next run's gloo met the last one's stale addresses and failed
    part-way through the list, with a traceback from every rank)."""
    if runs > 1 and env_rank_world() is not None:
        raise UserError(
            f"{title}: {runs} runs under an external launcher (RANK and WORLD_SIZE set, as "
            "torchrun and srun set them), which starts one run's workers; launch each run "
            "alone, or without it (repro starts the workers; cluster=slurm submits each run)"
        )
