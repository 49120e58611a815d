"""The run metrics a sweep may optimise: the one list the spec checks objectives against.

Every logged point of a training run carries the trainer's metrics (`repro.train.metrics`,
written at each log point); the final point becomes the run summary that `run_training`
returns, and a sweep objective reads its value there. Strategy metrics (`method/...`) exist
only for some methods and `method/collective` is a string, so they are not offered as
objectives: a spec naming one would fail every trial instead of being refused up front.
"""

from __future__ import annotations

OBJECTIVE_METRICS: tuple[str, ...] = (
    "step",
    "epoch",
    "samples",
    "train/loss",
    "test/loss",
    "test/acc",
    "comm/bytes",
    "comm/collectives",
    "comm/measured_s",
    "time/wall_s",
    "time/modeled_s",
    "throughput/samples_per_s",
    "throughput/modeled_samples_per_s",
    "lr",
)
"""Numeric metrics on every logged point, hence in every run summary."""
