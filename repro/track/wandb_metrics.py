"""How wandb shows a training run's metrics: their default x axis and their summaries.

The papers state their results against time: AdaComm (Wang & Joshi 2018) claims the same
final training loss in a third of fully synchronous SGD's time, Flexible Top-k (Tyagi &
Swany 2023) trades accuracy against time per step over a network that changes. Our time is
the modeled clock (`time/modeled_s`: each worker's compute plus the modeled network's cost
of every collective), so it is every curve's default x axis in a wandb workspace; the
clocks themselves are plotted against steps. Every point the trainer logs carries both
clocks and `step`, so any panel can still switch its axis.

Summaries: wandb keeps a metric's last value by default. Where another value answers the
question a reader asks of a run (the lowest loss it reached, its best accuracy, the range an
adaptive period or ratio covered, the average throughput), that aggregate is kept beside the
last value, which wandb then shows as `<metric>.min`, `<metric>.last`, ... Counters and
clocks (steps, samples, bytes, seconds) only grow, so their last value is their summary;
categorical values (the chosen collective, the combiner) have no order to aggregate.
"""

from __future__ import annotations

from typing import Any

# The run's default x axis (see module doc), and the axes every metric can be drawn against.
TIME_AXIS = "time/modeled_s"
STEP_AXIS = "step"
# Plotted against steps by default: the other clock (a clock against itself says nothing).
AGAINST_STEPS = ("time/wall_s",)

# metric -> the wandb summaries kept for it (its last value always among them).
SUMMARIES: dict[str, str] = {
    "train/loss": "min,last",
    "test/loss": "min,last",
    "method/avg_loss": "min,last",  # the loss F(x_l) from which AdaComm re-chooses tau
    "test/acc": "max,last",
    "throughput/samples_per_s": "mean,last",
    "throughput/modeled_samples_per_s": "mean,last",
    "method/tau": "min,max,last",  # AdaComm's period falls as the loss falls
    "method/cr": "min,max,last",  # Top-k's ratio as its Eq. 6 re-chooses it
    "method/k": "min,max,last",
    "method/gain": "mean,last",
    "method/bytes": "mean,last",
}


def aggregated(metric: str) -> bool:
    """Whether wandb keeps aggregates for `metric` (its summary is then a mapping)."""
    return metric in SUMMARIES


def define_metrics(run: Any) -> None:
    """Declare the axes and summaries on a live `wandb.Run` (explicit names before the glob:
    wandb applies a glob only to metrics not defined by name).

    `step_sync` is off: with it on, wandb writes the axis's last value (or 0, before any)
    into every point that lacks it, a time the run never logged."""
    run.define_metric(STEP_AXIS)
    run.define_metric(TIME_AXIS)
    for metric in AGAINST_STEPS:
        run.define_metric(metric, step_metric=STEP_AXIS, step_sync=False)
    for metric, summary in SUMMARIES.items():
        run.define_metric(metric, step_metric=TIME_AXIS, step_sync=False, summary=summary)
    run.define_metric("*", step_metric=TIME_AXIS, step_sync=False)
