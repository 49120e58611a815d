"""Optimizers and the learning-rate schedule.

The schedule is a pure function of (step, epoch) rather than a torch LR scheduler object:
it has no state to checkpoint, so a resumed run sets exactly the learning rate an
uninterrupted run would. Step decay by `gamma` at `milestones` (in epochs) is the Top-k
paper's ResNet-18 schedule (x0.1 at 15/30/45) and AdaComm's decayed runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from repro.errors import UserError, require_choice

if TYPE_CHECKING:
    from repro.optim.stacked import StackedOptimizer

OPTIMIZERS = ("sgd", "adam", "lamb")
FLOAT32_MAX = 3.4028234663852886e38  # torch.finfo(torch.float32).max, without torch


@dataclass
class OptimConfig:
    name: str = "sgd"
    lr: float = 0.1
    momentum: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8
    milestones: list[float] = field(default_factory=list)
    gamma: float = 0.1
    warmup_steps: int = 0

    def __post_init__(self):
        require_choice("optim.name", self.name, OPTIMIZERS)
        if not self.lr > 0:
            raise UserError(f"optim.lr={self.lr} must be positive")
        if self.momentum < 0 or self.momentum >= 1:
            raise UserError(f"optim.momentum={self.momentum} must be in [0, 1)")
        if self.weight_decay < 0:
            raise UserError(f"optim.weight_decay={self.weight_decay} must be >= 0")
        if self.nesterov and not (self.name == "sgd" and self.momentum > 0):
            # torch.optim.SGD refuses it too; a plain step would run under the Nesterov label
            raise UserError(
                f"optim.nesterov=true needs SGD's momentum (optim.name={self.name}, "
                f"optim.momentum={self.momentum}); set optim.name=sgd and optim.momentum > 0, "
                "or drop optim.nesterov"
            )
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise UserError(
                f"optim.betas={self.betas} must be two values in [0, 1), e.g. [0.9,0.999]"
            )
        # the optimizers scale float32 tensors by their step size: torch refuses, mid-step, in
        # a traceback, one past float32's range
        adam = self.name == "adam"
        if (self.lr / (1 - self.betas[0]) if adam else self.lr) > FLOAT32_MAX:
            raise UserError(
                f"optim.lr={self.lr} makes steps past the largest float32 ({FLOAT32_MAX:.4g}), "
                "the parameters' type"
                + (" (Adam's first is lr / (1 - betas[0]))" if adam else "")
                + "; give a smaller rate"
            )
        if not self.eps >= 0:
            raise UserError(f"optim.eps={self.eps} must be >= 0 (e.g. 1e-8)")
        if self.eps == 0 and self.name in ("adam", "lamb"):
            # a ReLU unit that never fired has v = 0: 0/0 is nan at the first step it is read
            raise UserError(
                f"optim.eps=0 must be > 0 for optim.name={self.name}: it divides by sqrt(v) + "
                "eps, and v is 0 wherever a gradient has been 0 (e.g. 1e-8)"
            )
        if any(m <= 0 for m in self.milestones):
            raise UserError(f"optim.milestones={self.milestones} must be epochs above 0")
        if any(b <= a for a, b in zip(self.milestones, self.milestones[1:], strict=False)):
            raise UserError(f"optim.milestones={self.milestones} must be strictly increasing")
        if not 0 < self.gamma <= 1:
            raise UserError(f"optim.gamma={self.gamma} must be in (0, 1]")
        if self.warmup_steps < 0:
            raise UserError(f"optim.warmup_steps={self.warmup_steps} must be >= 0")


def check_schedule(cfg: OptimConfig, steps_per_epoch: float, setting: str) -> None:
    """Refuse a step decay inside the warm-up: the milestones are epochs and the warm-up is
    steps, so a run of larger batches (fewer steps an epoch) can decay before its rate has
    reached its peak, and then train at gamma^k of it (the peak never reached). `setting`
    names what sets the steps an epoch."""
    if not cfg.milestones or not cfg.warmup_steps:
        return
    at = cfg.milestones[0] * steps_per_epoch
    if at <= cfg.warmup_steps:
        raise UserError(
            f"optim.milestones={cfg.milestones} decays the rate at epoch {cfg.milestones[0]:g}"
            f", step {at:.0f} at {setting}, inside optim.warmup_steps={cfg.warmup_steps}; "
            f"shorten the warm-up to under {at:.0f} steps or move the milestones"
        )


def build_optimizer(cfg: OptimConfig, params) -> StackedOptimizer:
    """The optimizer of stacked worker parameters (leading worker axis): SGD and Adam are
    elementwise, stepping every worker as torch's own would; LAMB takes its trust ratio
    per worker. (Imported here, not with `OptimConfig`, so that validating a config does
    not load torch.)"""
    from repro.optim.stacked import SGD, Adam

    if cfg.name == "sgd":
        return SGD(
            params,
            lr=cfg.lr,
            momentum=cfg.momentum,
            nesterov=cfg.nesterov,
            weight_decay=cfg.weight_decay,
        )
    if cfg.name == "adam":
        return Adam(
            params, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=cfg.weight_decay
        )
    from repro.optim.lamb import Lamb

    return Lamb(
        params,
        lr=cfg.lr,
        betas=tuple(cfg.betas),
        eps=cfg.eps,
        weight_decay=cfg.weight_decay,
        worker_axis=True,
    )


def lr_at(cfg: OptimConfig, step: int, epoch: float) -> float:
    """Learning rate for `step` (1-based) at fractional `epoch`: warm-up, then step decay."""
    lr = cfg.lr * cfg.gamma ** sum(epoch >= m for m in cfg.milestones)
    if cfg.warmup_steps and step <= cfg.warmup_steps:
        lr *= step / cfg.warmup_steps
    return lr


def set_lr(optimizer: StackedOptimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
