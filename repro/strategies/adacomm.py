"""method=adacomm: local SGD whose period tau follows AdaComm's schedule.

Wang & Joshi 2018, Sec. 4: start with a large tau_0 (fast progress in wall-clock time while
the loss is high) and shrink tau as the training loss falls (lower error floor). The
schedule itself is `TauSchedule`; this strategy feeds it, at every model averaging, the
loss averaged over workers (carried in the averaging allreduce) and the modeled time (or
the step count when `interval_steps > 0`). Every rank feeds identical values, so every rank
picks the same next tau without any extra communication.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from repro.errors import UserError
from repro.strategies.base import Metrics, StepInfo, register
from repro.strategies.local_sgd import LocalSGDConfig, LocalSGDStrategy
from repro.strategies.tau_schedule import TauSchedule

RULES = ("loss", "loss_lr")


@dataclass
class AdaCommConfig(LocalSGDConfig):
    """`tau_max`: an upper bound on tau, or null (the default) for none, as published:
    with `rule=loss_lr` a learning-rate decay raises tau above tau0 by sqrt(lr_0 / lr_l)."""

    unread: ClassVar[tuple[str, ...]] = ("tau",)  # the schedule sets tau
    name: str = "adacomm"
    tau0: int = 16
    interval_s: float = 1.0
    interval_steps: int = 0
    rule: str = "loss"
    tau_max: int | None = None
    tau0_search: bool = False
    tau0_candidates: list[int] = field(default_factory=lambda: [64, 16, 4])
    search_window_s: float = 0.25

    def __post_init__(self):
        if self.tau != LocalSGDConfig.tau:
            raise UserError(
                f"method.tau={self.tau} is local_sgd's fixed period; AdaComm's starts at "
                "method.tau0 and follows its schedule: set method.tau0"
                + (f"={self.tau}" if self.tau >= 1 else " (at least 1)")
            )
        super().__post_init__()
        if self.tau0 < 1:
            raise UserError(f"method.tau0={self.tau0} must be at least 1")
        if self.interval_steps < 0:
            raise UserError(f"method.interval_steps={self.interval_steps} must be >= 0")
        if self.interval_steps == 0 and not self.interval_s > 0:
            raise UserError(
                f"method.interval_s={self.interval_s} (T0) must be positive, "
                "or set method.interval_steps > 0"
            )
        if self.rule not in RULES:
            raise UserError(f"method.rule={self.rule!r} must be one of {list(RULES)}")
        if self.tau0_search and not self.tau0_candidates:
            raise UserError(
                "method.tau0_candidates is empty; list periods to try or set tau0_search=false"
            )
        if any(c < 1 for c in self.tau0_candidates):
            raise UserError(f"method.tau0_candidates={self.tau0_candidates} must all be >= 1")
        if self.tau0_search and not self.search_window_s > 0:
            raise UserError(f"method.search_window_s={self.search_window_s} must be positive")
        if self.tau_max is not None:
            start = max(self.tau0_candidates) if self.tau0_search else self.tau0
            if self.tau_max < start:
                what = "the largest tau0_candidates" if self.tau0_search else "method.tau0"
                raise UserError(
                    f"method.tau_max={self.tau_max} must be >= {what} ({start}), or null "
                    "for no cap (the published rule)"
                )


@register(AdaCommConfig)
class AdaCommStrategy(LocalSGDStrategy):
    cfg: AdaCommConfig

    def __init__(self, cfg: AdaCommConfig, world_size: int):
        super().__init__(cfg, world_size)
        by_steps = cfg.interval_steps > 0
        self.by_steps = by_steps
        self.schedule = TauSchedule(
            tau0=cfg.tau0,
            interval=cfg.interval_steps if by_steps else cfg.interval_s,
            rule=cfg.rule,
            tau_max=cfg.tau_max,
            candidates=list(cfg.tau0_candidates) if cfg.tau0_search else [],
            search_window=cfg.search_window_s,
        )
        self.tau = self.schedule.tau

    def on_average(self, info: StepInfo, avg_loss: float, steps: int) -> None:
        # its tau periods are local steps: under measured compute the clock as the step began
        # lacks the period's compute until the workers' seconds are exchanged
        if self.by_steps:
            now = float(info.step)
        else:
            now = info.synced_s() if info.synced_s is not None else info.modeled_s
        self.tau = self.schedule.observe(now, avg_loss, info.lr)

    def metrics(self) -> Metrics:
        return {"method/tau": float(self.tau), "method/avg_loss": self.last_avg_loss}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "schedule": self.schedule.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.schedule.load_state_dict(state["schedule"])
