"""Where a run executes: `local` (spawned on this machine) or a SLURM cluster via submitit.

The training code is identical in every case; only how the N worker processes are started
differs. The SLURM fields are used by the `slurm`, `slurm_local` and `submitit_local` presets.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hydra.core.config_store import ConfigStore

from repro.errors import UserError

CLUSTERS = ("local", "submitit_local", "slurm")


@dataclass
class ClusterConfig:
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
    folder: str = "runs/slurm_logs"

    def __post_init__(self):
        if self.kind not in CLUSTERS:
            raise UserError(
                f"cluster.kind={self.kind!r} is unknown; choose one of {list(CLUSTERS)}"
            )
        if self.nodes < 1:
            raise UserError(f"cluster.nodes={self.nodes} must be at least 1")
        if self.gpus_per_node < 0 or self.cpus_per_task < 1:
            raise UserError("cluster.gpus_per_node must be >= 0 and cluster.cpus_per_task >= 1")
        if self.time_min < 1:
            raise UserError(f"cluster.time_min={self.time_min} must be at least 1 minute")


ConfigStore.instance().store(group="cluster", name="cluster_schema", node=ClusterConfig)
