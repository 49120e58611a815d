"""The checks a tuning search makes before any trial runs, on its spec and its run set.

`repro.sweep.launch` calls them before the journal exists, so a refused spec leaves
nothing behind: every label of the run set must be in an arm or untuned (and no arm may
name a label the run set lacks), and every arm with trials left must compose at both ends
of its space, which also tells whether the trials can run side by side.
"""

from __future__ import annotations

from dataclasses import dataclass

from repro.errors import UserError
from repro.sweep.tune_spec import STEPS_TO_TARGET, TuneSpec
from repro.sweep.tune_study import arm_trial_overrides


def check_coverage(spec: TuneSpec, runs: dict[str, list[str]]) -> None:
    """Refuse a spec that names a label the run set lacks or leaves one of its labels out."""
    where = spec.source or "the tuning spec"
    for label, arm in [*spec.labels().items(), *((u, "untuned") for u in spec.untuned)]:
        if label not in runs:
            raise UserError(
                f"{where}: {arm} lists run {label}, which experiment={spec.experiment} does not "
                f"have; its runs: {', '.join(runs)}"
            )
    for label in runs:
        if label not in spec.labels() and label not in spec.untuned:
            raise UserError(
                f"{where}: run {label} of experiment={spec.experiment} is in no arm; add it to "
                "an arm, or under untuned with the reason it keeps its configured values"
            )


@dataclass(frozen=True)
class RunSet:
    """What a search needs of its run set: label -> overrides and the measured minutes per
    run (0: not measured)."""

    runs: dict[str, list[str]]
    minutes_per_run: float


def check_run_set(spec: TuneSpec) -> RunSet:
    """The run set of `spec`, after `check_coverage`."""
    from repro.config import compose

    base = compose([f"experiment={spec.experiment}"])
    runs = {label: list(ovs) for label, ovs in base.experiment.runs.items()}
    check_coverage(spec, runs)
    return RunSet(runs, base.experiment.expected_minutes / len(runs))


def probe_arms(spec: TuneSpec, runs: dict[str, list[str]], arms: list[str]) -> bool:
    """Compose each arm's trial at both ends of its space, so that a bad key or value fails
    before any trial; returns whether every trial runs simulated (then side by side)."""
    from repro.config import compose

    where = spec.source or "the tuning spec"
    simulated = True
    for arm in (spec.arms[name] for name in arms):
        for end in ("low", "high"):
            params = {p.key: getattr(p, end) for p in spec.space_of(arm)}
            try:
                cfg = compose(arm_trial_overrides(spec, runs, arm, params, spec.seeds[0]))
            except UserError as err:
                raise UserError(f"{where}: arms.{arm.name} at the {end} end: {err}") from None
            if spec.objective.metric == STEPS_TO_TARGET and cfg.trainer.target_acc <= 0:
                raise UserError(
                    f"{where}: arms.{arm.name} runs with trainer.target_acc=0, so "
                    f"{STEPS_TO_TARGET} has no target; set one in the arm's overrides"
                )
            simulated = simulated and cfg.trainer.engine == "simulated"
    return simulated
