"""Running totals between log points, and the dict logged at each point.

Training loss is averaged over the steps since the last point on each worker, then over
workers (an untracked reduction: instrumentation, not the method's traffic).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from repro.comm.record import CommRecord

if TYPE_CHECKING:
    from repro.strategies.base import Metrics


@dataclass
class RunningStats:
    """`loss_sum` holds one running sum per held worker (axis order), so the mean over
    workers is formed by the same float64 reduction under both engines."""

    loss_sum: list[float] = field(default_factory=list)
    loss_count: int = 0
    bytes: int = 0
    collectives: int = 0
    comm_measured_s: float = 0.0
    last_point_wall_s: float = 0.0
    last_point_samples: int = 0
    last_point_modeled_s: float = 0.0

    def add_step(self, losses: list[float], records: list[CommRecord]) -> None:
        self.loss_sum = [
            a + b for a, b in zip(self.loss_sum or [0.0] * len(losses), losses, strict=True)
        ]
        self.loss_count += 1
        for r in records:
            self.bytes += r.nbytes
            self.collectives += 1
            self.comm_measured_s += r.seconds

    def reset_interval(self, wall_s: float, samples: int, modeled_s: float) -> None:
        self.loss_sum, self.loss_count = [0.0] * len(self.loss_sum), 0
        self.last_point_wall_s = wall_s
        self.last_point_samples = samples
        self.last_point_modeled_s = modeled_s

    def state_dict(self) -> dict:
        return asdict(self)

    def load_state_dict(self, state: dict) -> None:
        for k, v in state.items():
            setattr(self, k, v)


def point(
    *,
    step: int,
    epoch: float,
    samples: int,
    train_loss: float,
    test: tuple[float, float] | None,
    stats: RunningStats,
    wall_s: float,
    modeled_s: float,
    lr: float,
    strategy_metrics: Metrics,
) -> dict:
    """One logged point. Throughput is over the interval since the previous point, and on
    the modeled clock also over the run so far: under a network schedule (Flexible Top-k's
    C1 phases) the last interval is the last phase alone, and a search whose objective is a
    run's throughput must compare whole runs."""
    d_samples = samples - stats.last_point_samples
    d_wall = max(wall_s - stats.last_point_wall_s, 1e-12)
    d_modeled = max(modeled_s - stats.last_point_modeled_s, 1e-12)
    out = {
        "step": step,
        "epoch": epoch,
        "samples": samples,
        "train/loss": train_loss,
        "comm/bytes": stats.bytes,
        "comm/collectives": stats.collectives,
        "comm/measured_s": stats.comm_measured_s,
        "time/wall_s": wall_s,
        "time/modeled_s": modeled_s,
        "throughput/samples_per_s": d_samples / d_wall,
        "throughput/modeled_samples_per_s": d_samples / d_modeled,
        "throughput/run_modeled_samples_per_s": samples / max(modeled_s, 1e-12),
        "lr": lr,
    }
    if test is not None:
        out["test/loss"], out["test/acc"] = test
    out.update(strategy_metrics)
    return out
