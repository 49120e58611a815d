"""method=local_sgd: periodic-averaging SGD (PASGD, Wang & Joshi 2018, Sec. 2).

Every worker takes local optimizer steps on its own mini-batches; every `tau` local steps
all models are averaged with one flattened allreduce. tau=1 is fully synchronous SGD (with
plain SGD the averaged model equals the model after an averaged-gradient step).

Momentum buffers stay local by default, as in the AdaComm author's later code;
`momentum=average` averages them with the model, and `block_momentum > 0` applies a global
(block) momentum to the averaged model change at each averaging (Chen & Huo 2016): with
x_g the last global parameters, d = x_g - mean_i(x_i), u <- beta u + d, x_g <- x_g - u.
Block momentum moves the parameters alone, as the author's global momentum does
(Overlap_Local_SGD's `LocalSGD.average`): BatchNorm's running statistics and averaged
momentum buffers are plain averages, since extrapolating a shrinking running variance
drives it below zero (NaN at evaluation) and an extrapolated buffer is no longer the
workers' momentum. The velocity u is in parameter units (Chen & Huo's, block learning rate
1); the author's code keeps it divided by the learning rate, so a rate decay at a milestone
shrinks the carried velocity at once there and only by beta per averaging here (at a
constant rate the two are the same).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from repro.errors import UserError
from repro.strategies.base import MethodConfig, Metrics, StepInfo, Strategy, register
from repro.strategies.flat import copy_into, flatten

if TYPE_CHECKING:
    import torch

    from repro.comm.collectives import Collectives
    from repro.comm.record import CommRecord
    from repro.optim.config import OptimConfig

MOMENTUM_MODES = ("local", "average")


@dataclass
class LocalSGDConfig(MethodConfig):
    name: str = "local_sgd"
    tau: int = 4
    momentum: str = "local"
    block_momentum: float = 0.0

    def __post_init__(self):
        if self.tau < 1:
            raise UserError(f"method.tau={self.tau} must be at least 1 (1 = synchronous SGD)")
        if self.momentum not in MOMENTUM_MODES:
            raise UserError(
                f"method.momentum={self.momentum!r} must be one of {list(MOMENTUM_MODES)}"
            )
        if not 0 <= self.block_momentum < 1:
            raise UserError(f"method.block_momentum={self.block_momentum} must be in [0, 1)")

    def validate_optim(self, optim: OptimConfig) -> None:
        """`momentum=average` averages SGD's momentum buffers, or Adam's and LAMB's first
        moments (their second moments and step counts stay each worker's own); SGD without
        momentum keeps none, and the runs would be plain local SGD under another name."""
        if self.momentum == "average" and optim.name == "sgd" and optim.momentum == 0:
            raise UserError(
                "method.momentum=average averages the optimizer's momentum buffers, and "
                "optim.momentum=0 keeps none; set optim.momentum > 0 (e.g. 0.9) or drop "
                "method.momentum"
            )


class ModelAverager:
    """Averages parameters, float buffers (and optionally momentum) in one allreduce.

    One extra slot carries each worker's mean loss since the last averaging, so the loss
    averaged over workers and local steps arrives with the model at no extra cost.
    """

    def __init__(self, model, optimizer, comm: Collectives, cfg: LocalSGDConfig):
        self.comm, self.optimizer, self.cfg = comm, optimizer, cfg
        self.tensors = model.float_tensors()  # the parameters first, then float buffers
        self.params = model.parameters()
        self.param_numel = sum(p[0].numel() for p in self.params)
        self.global_model: torch.Tensor | None = None
        self.velocity: torch.Tensor | None = None
        if cfg.block_momentum > 0:
            # the common start is the first global model, and the first block's change the
            # first velocity (Chen & Huo's Delta(0) = 0), as in the author's global momentum
            self.global_model = flatten(self.params)
            self.velocity = self.global_model.new_zeros(self.global_model.shape)

    def _momentum_buffers(self) -> list[torch.Tensor]:
        if self.cfg.momentum != "average":
            return []
        bufs = []
        for p in self.params:
            state = self.optimizer.state.get(p, {})
            buf = state.get("momentum_buffer", state.get("exp_avg"))
            if buf is not None:
                bufs.append(buf)
        return bufs

    def average(self, loss_sum: torch.Tensor, steps: int) -> tuple[CommRecord, float]:
        """Average the models; returns the record and the loss averaged over workers and
        steps. `loss_sum` holds each held worker's summed losses since the last averaging."""
        tensors = self.tensors + self._momentum_buffers()
        flat = flatten(tensors, extra=loss_sum / max(steps, 1))
        model_numel = flat.shape[1] - 1
        record = self.comm.allreduce(flat, average=True)
        if self.cfg.block_momentum > 0:
            flat[:, : self.param_numel] = self._block_momentum(flat[:, : self.param_numel])
        copy_into(tensors, flat)
        return record, float(flat[0, model_numel])

    def _block_momentum(self, averaged: torch.Tensor) -> torch.Tensor:
        self.velocity.mul_(self.cfg.block_momentum).add_(self.global_model - averaged)
        self.global_model.sub_(self.velocity)
        return self.global_model.clone()

    def state_dict(self) -> dict:
        # `from_start`: the velocity holds the first block's change, which an earlier
        # version's checkpoint of the same shape left out
        return {"global_model": self.global_model, "velocity": self.velocity, "from_start": True}

    def load_state_dict(self, state: dict) -> None:
        if self.global_model is not None and not state.get("from_start"):
            # an earlier version kept no global model until the first averaging (and its
            # first velocity zero), one with the float buffers after it: resumed here, the
            # two rules would mix in one run, whatever the model's shape says
            raise UserError(
                "this checkpoint's block momentum was written by an earlier version of repro "
                "(which started it at the first averaging and moved BatchNorm statistics too); "
                "start the run afresh in a new run_dir"
            )
        self.global_model, self.velocity = state["global_model"], state["velocity"]


@register(LocalSGDConfig)
class LocalSGDStrategy(Strategy):
    """Fixed period: average every `tau` local steps."""

    cfg: LocalSGDConfig

    def __init__(self, cfg: LocalSGDConfig, world_size: int):
        super().__init__(cfg, world_size)
        import torch

        self.tau = cfg.tau
        self.local_steps = 0
        self.loss_sum = torch.zeros(0, dtype=torch.float64)
        self.last_avg_loss = float("nan")

    def setup(self, model, optimizer, comm: Collectives, rehearsal) -> None:
        import torch

        self.averager = ModelAverager(model, optimizer, comm, self.cfg)
        self.loss_sum = torch.zeros(len(comm.ranks), dtype=torch.float64)

    def after_step(self, info: StepInfo) -> list[CommRecord]:
        self.local_steps += 1
        self.loss_sum += info.losses
        if self.local_steps < self.tau:
            return []
        record, self.last_avg_loss = self.averager.average(self.loss_sum, self.local_steps)
        self.on_average(info, self.last_avg_loss, self.local_steps)
        self.local_steps = 0
        self.loss_sum.zero_()
        return [record]

    def on_average(self, info: StepInfo, avg_loss: float, steps: int) -> None:
        """Hook for subclasses that adapt tau; called on every rank with identical inputs."""

    def metrics(self) -> Metrics:
        return {"method/tau": float(self.tau)}

    def state_dict(self) -> dict:
        return {
            "tau": self.tau,
            "local_steps": self.local_steps,
            "loss_sum": self.loss_sum.clone(),
            "last_avg_loss": self.last_avg_loss,
            "averager": self.averager.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.tau, self.local_steps = state["tau"], state["local_steps"]
        self.loss_sum.copy_(state["loss_sum"])
        self.last_avg_loss = state["last_avg_loss"]
        self.averager.load_state_dict(state["averager"])
