"""Reading numbers out of a run read back from disk: config paths, labels, metric curves.

Everything here works on any object with the attributes of `repro.track.runs.RunData`
(`name`, `group`, `config`, `history`, `summary`), so the claims' calculators and the
report's figures depend only on what the run reader returns, never on a live training
process. A reproduction's runs are held as label -> seed -> run (`Seeded`); a calculator
sees one seed's runs, label -> run.

A logged training loss is a mean over workers of the mini-batch losses since the previous
point, so it still carries mini-batch noise; curves and final values used in claims can be
smoothed by a trailing mean over the last `window` logged points (window 1 = raw values),
which a reader can recompute by hand from the history.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

CLOCKS = {"step": "step", "modeled": "time/modeled_s", "wall": "time/wall_s"}


class Run(Protocol):
    """The attributes of a run that the calculators and figures read."""

    run_id: str
    name: str
    group: str
    config: dict
    history: list[dict]
    summary: dict
    exit_code: int | None
    started: float
    path: Path


class NotMeasurable(Exception):
    """A quantity cannot be computed from the runs at hand (the reason is the message)."""


class MissingRun(NotMeasurable):
    """A run a claim needs is absent from the group."""


def cfg(run: Run, path: str, default: Any = None) -> Any:
    """The config value at a dotted path (`"network.latency_ms"`), or `default`."""
    node: Any = run.config
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return default
        node = node[key]
    return node


def label_of(run: Run) -> str:
    """The run's label within its reproduction (`experiment.label`), else its method's name,
    as the run's config names it (`repro.config.Config.label`); the run's name, which adds
    its seed, only for a record without either."""
    return str(cfg(run, "experiment.label") or cfg(run, "method.name") or run.name)


# A reproduction's runs: label -> seed -> run (every label is run for several seeds).
Seeded = Mapping[str, Mapping[int, Run]]


def seed_of(run: Run) -> int:
    """The run's seed (its config's top-level `seed`; 0 for a run that logged none)."""
    return int(cfg(run, "seed", 0) or 0)


def seeds_of(runs: Seeded) -> list[int]:
    """Every seed any run of the set was made with, in order."""
    return sorted({seed for by_seed in runs.values() for seed in by_seed})


def at_seed(runs: Seeded, seed: int) -> dict[str, Run]:
    """One seed's runs keyed by label (labels without a run at that seed are absent)."""
    return {label: by_seed[seed] for label, by_seed in runs.items() if seed in by_seed}


def any_seed(runs: Seeded) -> dict[str, Run]:
    """One run of each label (its lowest seed's), for what every seed's run shares: the
    label and the config a claim selects runs by."""
    return {label: by_seed[min(by_seed)] for label, by_seed in runs.items() if by_seed}


def every_run(runs: Seeded) -> list[tuple[str, int, Run]]:
    """(label, seed, run) of every run, by label in the set's order, then by seed."""
    return [
        (label, seed, by_seed[seed]) for label, by_seed in runs.items() for seed in sorted(by_seed)
    ]


def natural_key(label: str) -> list:
    """Sort key putting local_sgd_tau4 before local_sgd_tau16."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", label)]


def x_metric(x: str) -> str:
    """The history key of an x axis given as a clock name or a metric name."""
    return CLOCKS.get(x, x)


def _present(value: Any) -> bool:
    if value is None:
        return False
    return not (isinstance(value, float) and math.isnan(value))


def points(run: Run, metric: str, x: str = "step") -> tuple[list[float], list[Any]]:
    """(xs, ys) of every logged point that has both `x` and `metric`, in step order."""
    xkey = x_metric(x)
    xs: list[float] = []
    ys: list[Any] = []
    for row in run.history:
        if _present(row.get(xkey)) and _present(row.get(metric)):
            xs.append(float(row[xkey]))
            ys.append(row[metric])
    return xs, ys


def last_logged(run: Run, metric: str) -> Any:
    """The last value of `metric` logged at a step (`points`' last), or None if none was."""
    ys = points(run, metric)[1]
    return ys[-1] if ys else None


def curve(
    run: Run, metric: str, x: str = "step", window: int = 1
) -> tuple[list[float], list[float]]:
    """Numeric (xs, smoothed ys); raises NotMeasurable when the run never logged `metric`."""
    xs, ys = points(run, metric, x)
    if not ys:
        raise NotMeasurable(f"run '{label_of(run)}' logged no '{metric}' against '{x_metric(x)}'")
    return xs, trailing_mean([float(y) for y in ys], window)


def trailing_mean(values: Sequence[float], window: int) -> list[float]:
    """s_i = mean(values[max(0, i - window + 1) : i + 1])."""
    if window < 1:
        raise ValueError(f"smoothing window {window} must be >= 1")
    # A fresh sum per point (not a running sum) so that no rounding drift accumulates.
    return [
        math.fsum(values[max(0, i - window + 1) : i + 1]) / (i + 1 - max(0, i - window + 1))
        for i in range(len(values))
    ]


def final(run: Run, metric: str, window: int = 1) -> float:
    """The last smoothed value of `metric` (the mean of its last `window` logged values)."""
    return curve(run, metric, "step", window)[1][-1]


def value_at_step(run: Run, metric: str, step: float, window: int = 1) -> float:
    """The smoothed `metric` at the last logged point at or before `step`."""
    xs, ys = curve(run, metric, "step", window)
    before = [y for x, y in zip(xs, ys, strict=True) if x <= step]
    if not before:
        raise NotMeasurable(f"run '{label_of(run)}' logged no '{metric}' by step {step:g}")
    return before[-1]


def final_step(run: Run) -> float:
    """The step of the last logged point."""
    steps = [float(r["step"]) for r in run.history if _present(r.get("step"))]
    if not steps:
        raise NotMeasurable(f"run '{label_of(run)}' has no logged steps")
    return steps[-1]


def first_reach(xs: Sequence[float], ys: Sequence[float], target: float, mode: str) -> float:
    """The first x at which y reaches `target` (y <= target for mode "min", >= for "max").

    Resolution is that of the logged points (no interpolation); `inf` when never reached.
    """
    if mode not in ("min", "max"):
        raise ValueError(f"mode '{mode}' must be 'min' or 'max'")
    for x, y in zip(xs, ys, strict=True):
        if (y <= target) if mode == "min" else (y >= target):
            return x
    return math.inf
