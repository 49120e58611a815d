"""The calculators of one run's final value, of two runs' ratio of it, of how often each
parameter was sent (Top-k's c x steps), and of how often a metric stepped down (AdaComm's
communication period tau, which the paper lowers as the loss falls)."""

from __future__ import annotations

from collections.abc import Mapping

from repro.claims.calculators.registry import Measurement, calculator, run_labelled
from repro.track.series import NotMeasurable, Run, cfg, curve, final


@calculator("final_metric")
def final_metric(runs: Mapping[str, Run], run: str, metric: str, smooth: int = 1) -> Measurement:
    """The last smoothed value of `metric` in run `run`."""
    value = final(run_labelled(runs, run), metric, smooth)
    return Measurement(value, f"mean of the last {smooth} points")


@calculator("metric_ratio")
def metric_ratio(
    runs: Mapping[str, Run], run: str, reference: str, metric: str, smooth: int = 1
) -> Measurement:
    """final(run) / final(reference) of one metric, both smoothed alike."""
    ours = final(run_labelled(runs, run), metric, smooth)
    ref = final(run_labelled(runs, reference), metric, smooth)
    if ref == 0:
        raise NotMeasurable(f"'{reference}' ends with {metric} = 0; the ratio is undefined")
    return Measurement(ours / ref, f"{run} {ours:.4g} / {reference} {ref:.4g}")


@calculator("sends_per_parameter")
def sends_per_parameter(runs: Mapping[str, Run], run: str) -> Measurement:
    """c x the steps run `run` took: how many times each parameter was sent on average by a
    Top-k run at ratio c (every step sends a c share of the entries). The measure of Top-k's
    regime (Flexible Top-k's ResNet-18 at c = 0.001: 9.8 over 9,766 steps)."""
    labelled = run_labelled(runs, run)
    cr = cfg(labelled, "method.cr")
    if cr is None:
        raise NotMeasurable(f"'{run}' has no method.cr; c x steps needs a Top-k run")
    steps = final(labelled, "step")
    return Measurement(float(cr) * steps, f"c = {cr} x {steps:.0f} steps")


@calculator("monotone_decrease")
def monotone_decrease(runs: Mapping[str, Run], run: str, metric: str = "method/tau") -> Measurement:
    """The share of the changes of `metric` that are decreases; 0 unless it ends lower.

    1.0 means the metric only ever stepped down (AdaComm's tau as the loss falls).
    """
    _, ys = curve(run_labelled(runs, run), metric)
    changes = [b - a for a, b in zip(ys, ys[1:], strict=False) if b != a]
    downs = sum(1 for d in changes if d < 0)
    value = downs / len(changes) if changes and ys[-1] < ys[0] else 0.0
    note = f"{metric} {ys[0]:.4g} -> {ys[-1]:.4g}; {downs} of {len(changes)} changes are decreases"
    return Measurement(value, note)
