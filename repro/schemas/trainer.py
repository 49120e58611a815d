"""The `trainer` group's schema: how a run trains, on which engine, and when it stops.

The training loop (`repro.train`) reads the whole composed config, so its group's schema
lives here, in a leaf the root config imports, rather than beside the loop: the root config
and the training package would otherwise import each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from repro.errors import UserError, require_choice

ENGINES = ("auto", "processes", "simulated")
# How the simulated engine runs the workers' forward/backward (`repro.train.replicas`).
VECTORIZE = ("auto", "stacked", "vmap", "loop")


@dataclass
class DivergenceConfig:
    """When a run counts as diverged (`trainer.divergence.*`).

    `loss_multiple`: the mean training loss of the last `loss_window` steps above this
    multiple of the first step's loss (0 = off). `chance_after_epochs`,
    `chance_after_steps`: test accuracy still at chance once both are passed
    (`chance_after_epochs=0` = off). A NaN or infinite loss always counts."""

    loss_multiple: float = 10.0
    loss_window: int = 10
    chance_after_epochs: float = 3.0
    chance_after_steps: int = 200

    def __post_init__(self):
        p = "trainer.divergence"
        if self.loss_multiple != 0 and not self.loss_multiple > 1:
            raise UserError(f"{p}.loss_multiple={self.loss_multiple} must be > 1 (0 = off)")
        if self.loss_window < 1:
            raise UserError(f"{p}.loss_window={self.loss_window} must be at least 1")
        if not self.chance_after_epochs >= 0:
            raise UserError(
                f"{p}.chance_after_epochs={self.chance_after_epochs} must be >= 0 (0 = off)"
            )
        if self.chance_after_steps < 0:
            raise UserError(f"{p}.chance_after_steps={self.chance_after_steps} must be >= 0")


@dataclass
class TrainerConfig:
    """`engine`: `processes` runs one OS process per worker (gloo or NCCL; torchrun, SLURM),
    `simulated` every worker in this process on a worker axis (`repro.train.replicas`);
    `auto` picks simulated at the tiny and small scales wherever it can run (a local launch,
    sampled compute, no injected delays), else processes. `vectorize`
    is how the simulated engine runs the workers' forward/backward: `stacked` (the model's
    own all-workers forward, fastest; the small workloads' CNN has one), `vmap` (any
    model), `auto` (stacked where the model has it, else vmap) or `loop` (a lone worker's
    exact kernels, bit for bit the process engine).
    `steps` bounds the run; `time_budget_s > 0` also stops it once the modeled clock
    passes the budget (runs compared at equal modeled time, as in AdaComm's figures);
    `target_acc > 0` stops it at the first evaluation whose test accuracy reaches the target
    (steps-to-target, as in Adasum's batch-scaling experiments).
    `deterministic`: on a GPU, kernels that sum in one fixed order, so that a seed repeats
    and a resumed run ends exactly as an uninterrupted one (`repro.comm.devices.
    fix_kernel_order`); false takes cuDNN's default kernels, whose rounding differs from
    run to run, for a shorter step (ResNet-18, 8 simulated workers on an H200, median of
    two rounds: sync about the same, local SGD 1.26x, Top-k 1.40x, PowerSGD 1.45x,
    Adasum-Adam 1.67x the time under false). The CPU's kernels are deterministic either
    way."""

    world_size: int = 1
    batch_size: int = 32
    engine: str = "auto"
    vectorize: str = "auto"
    steps: int = 1000
    eval_every: int = 100
    checkpoint_every: int = 200
    time_budget_s: float = 0.0
    target_acc: float = 0.0
    device: str = "auto"
    deterministic: bool = True
    progress: bool = True
    collective_timeout_s: float = 60.0
    keep_checkpoints: int = 2
    divergence: DivergenceConfig = field(default_factory=DivergenceConfig)

    def __post_init__(self):
        for name in ("world_size", "batch_size", "steps", "eval_every", "checkpoint_every"):
            if getattr(self, name) < 1:
                raise UserError(f"trainer.{name}={getattr(self, name)} must be at least 1")
        if self.time_budget_s < 0:
            raise UserError(f"trainer.time_budget_s={self.time_budget_s} must be >= 0 (0 = none)")
        if not 0 <= self.target_acc <= 1:
            raise UserError(f"trainer.target_acc={self.target_acc} must be in (0, 1] (0 = none)")
        if self.keep_checkpoints < 1:
            raise UserError(
                f"trainer.keep_checkpoints={self.keep_checkpoints} must be at least 1 (2 lets a "
                "run fall back to the one before a damaged checkpoint)"
            )
        if not self.collective_timeout_s > 0:
            raise UserError(f"trainer.collective_timeout_s={self.collective_timeout_s} must be > 0")
        require_choice(
            "trainer.engine",
            self.engine,
            ENGINES,
            "(auto: simulated where it can run at the tiny and small scales, else processes)",
        )
        require_choice("trainer.vectorize", self.vectorize, VECTORIZE)
