"""What one trial of a search is: the config overrides of its run(s), what it scores, and
what is recorded on it.

A sweep trial is one full training run: the base experiment, the fixed overrides and the
trial's sampled values, composed into a config whose `run_dir` is `<out>/<name>/trial_<n>`
and run by `run_training`, the same launcher as `repro train`; its objectives are metrics of
the run summary, and a run without them (crash, divergence, rejected config, missing metric)
fails the trial with a `fail_reason`. A tuning arm's trial is one run of the arm's label per
seed of the spec, in directories named by their config under the search's `runs_root` (so a
retried point resumes its runs), scored by the mean of the seeds' scores. Either way the
trial's wandb group and tags are the study's own, never a reproduction's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repro.errors import StorageError, UserError
from repro.override_quoting import quoted
from repro.sweep.space import format_override, suggest
from repro.sweep.spec import STEPS_TO_TARGET, ArmSpec, ObjectiveSpec, SweepSpec, base_overrides
from repro.sweep.stops import StopSignals, WriteRefused


class TrialFailed(Exception):
    """A trial that ran but produced no usable objective; the study goes on."""


def trial_overrides(
    spec: Any, params: dict[str, Any], place: list[str], tag: str, arm: Any = None, runs: Any = None
) -> list[str]:
    """One trial's full override list, of a sweep or of a tuning search's `arm`: its study's
    base (`base_overrides`, or `arm_base` of the run set `runs`), the sampled values, where its
    run lives (`place`), and the study's own wandb group and tags ending in `tag`: its trials
    are not a reproduction's runs. A sweep stores it on the trial so it can be rerun by hand."""
    if arm is None:
        base, group, kind = base_overrides(spec), spec.name, "sweep"
    else:
        base, group, kind = arm_base(spec, arm, runs), f"tune_{spec.experiment}", "tune"
    return [
        *base,
        *(format_override(k, v) for k, v in params.items()),
        *place,
        f"tracking.group={group}",
        f"tracking.tags=['{kind}','study:{group}','{tag}']",
    ]


def arm_base(spec: SweepSpec, arm: ArmSpec, runs: dict[str, list[str]]) -> list[str]:
    """The base of an arm's trials: its run of the run set `runs`, as the set composes it,
    under the search's and the arm's overrides."""
    run = [f"experiment={spec.experiment}", f"experiment.label={arm.trained}", *runs[arm.trained]]
    return [*run, *spec.overrides, *arm.overrides]


def sweep_trial_overrides(
    spec: SweepSpec, number: int, params: dict[str, Any], run_dir: Path | None = None
) -> list[str]:
    """A sweep trial's overrides: its run in `<out>/<name>/trial_<number>` unless `run_dir`."""
    run_dir = run_dir or spec.study_dir / f"trial_{number}"
    return trial_overrides(spec, params, [quoted("run_dir", str(run_dir))], f"trial:{number}")


def arm_trial_overrides(
    spec: SweepSpec, runs: dict[str, list[str]], arm: ArmSpec, params: dict, seed: int
) -> list[str]:
    """The run of `arm`'s label with `params` at `seed`, its directory named by its config
    under the search's `runs_root`."""
    runs_root = quoted("runs_root", str(spec.study_dir / "runs"))
    place = [f"seed={seed}", runs_root, "trainer.progress=false"]
    return trial_overrides(spec, params, place, f"arm:{arm.name}", arm, runs)


def trial_run_dir(storage: Any, spec: SweepSpec, number: int) -> Path:
    """A retried point's run directory is its first trial's (Optuna's `failed_trial` link),
    so it resumes that run, once its parameters are sampled, when they are that trial's: a
    lost trial whose records a damaged journal cut before all its parameters is retried with
    what was kept, the sampler drawing the rest, which is another point and another run. A
    new trial's `trial_<n>` that exists already belongs to a trial whose records the storage
    lost (a damaged or restored journal): that run is kept, and the new trial runs in
    `trial_<n>.<k>`."""
    study_id = storage.get_study_id_from_name(spec.name)
    trial = storage.get_trial(storage.get_trial_id_from_study_id_trial_number(study_id, number))
    first = trial.system_attrs.get("failed_trial")
    if first is not None:
        lost = storage.get_trial(storage.get_trial_id_from_study_id_trial_number(study_id, first))
        if lost.params == trial.params:
            return spec.study_dir / f"trial_{first}"
    run_dir, k = spec.study_dir / f"trial_{number}", 0
    while run_dir.exists():
        k += 1
        run_dir = spec.study_dir / f"trial_{number}.{k}"
    return run_dir


def objective_values(spec: SweepSpec, summary: dict[str, Any]) -> list[float]:
    """The objective vector from a run summary; raises `TrialFailed` on NaN or a missing metric."""
    loss = summary.get("train/loss")
    if isinstance(loss, float) and math.isnan(loss):
        raise TrialFailed("diverged: train/loss is nan")
    values = []
    for metric in spec.metric_names:
        v = summary.get(metric)
        if not isinstance(v, int | float) or isinstance(v, bool):
            raise TrialFailed(f"run summary has no numeric {metric} (got {v!r})")
        if not math.isfinite(v):
            raise TrialFailed(f"diverged: {metric} is {v}")
        values.append(float(v))
    return values


def seed_score(objective: ObjectiveSpec, cfg: Any, summary: dict | None) -> float:
    """One seed's score from its run summary (None: the run diverged)."""
    if objective.metric == STEPS_TO_TARGET:
        budget, target = cfg.trainer.steps, cfg.trainer.target_acc
        if summary is not None and summary.get("target/reached") == 1.0:
            return float(summary["step"])
        acc = 0.0 if summary is None else float(summary.get("test/acc", 0.0))
        return budget * (1.0 + max(0.0, target - acc) / target)
    value = None if summary is None else summary.get(objective.metric)
    if not isinstance(value, int | float) or not math.isfinite(value):
        return float(objective.diverged)
    return float(value)


def run_seeds(
    spec: SweepSpec, runs: dict[str, list[str]], arm: ArmSpec, params: dict
) -> tuple[float, dict]:
    """An arm's trial: its objective (mean over the spec's seeds) and what to record on it."""
    from repro.config import compose, run_dir_of
    from repro.train.entry import Diverged, run_training

    scores, diverged, run_dirs = [], [], []
    for seed in spec.seeds:
        cfg = compose(arm_trial_overrides(spec, runs, arm, params, seed))
        run_dirs.append(str(run_dir_of(cfg)))
        try:
            summary = run_training(cfg)
        except Diverged:
            summary = None
            diverged.append(seed)
        scores.append(seed_score(spec.objective, cfg, summary))
    attrs = {"seeds": list(spec.seeds), "scores": scores, "diverged": diverged}
    return sum(scores) / len(scores), {**attrs, "run_dirs": run_dirs}


@dataclass
class TrialRun:
    """What a worker knows of the sweep trial it is running: its number once asked, and
    whether the run itself is over (from then on only the result is still to be written)."""

    number: int | None = None
    ended: bool = False


def sweep_objective(
    trial: Any,
    spec: SweepSpec,
    storage: Any,
    worker: str,
    unlock: Any,
    run: TrialRun,
    stops: StopSignals,
) -> list[float]:
    """A sweep trial as Optuna's objective: stamped with its worker, sampled, then the ask
    lock handed on (`unlock`) before its run; a failed run raises `TrialFailed`."""
    from repro.config import compose
    from repro.train import checkpoint
    from repro.train.entry import Diverged, run_training

    run.number = trial.number
    trial.set_user_attr("worker", worker)
    try:
        params = {p.key: suggest(trial, p) for p in spec.space}
    finally:
        unlock()  # stamped and sampled: the next worker may count and ask now
    run_dir = trial_run_dir(storage, spec, trial.number)
    overrides = sweep_trial_overrides(spec, trial.number, params, run_dir)
    trial.set_user_attr("overrides", overrides)
    trial.set_user_attr("resumed_from", checkpoint.latest_step(run_dir))
    try:
        with stops.armed():
            summary = run_training(compose(overrides))
        values = objective_values(spec, summary)
    except Diverged as err:
        reason = f"diverged: {err}"
    except TrialFailed as err:
        reason = str(err)
    except StorageError as err:  # the disk's failure, not the trial's: the sweep stops on it
        raise WriteRefused(err) from None
    except UserError as err:
        stops.check()
        reason = f"rejected: {err}"
    except Exception as err:  # any crash of one run is that trial's failure, not the sweep's
        stops.after_failure()  # unless a stop signal caused it (e.g. wandb's service died)
        reason = f"crashed: {type(err).__name__}: {err}"
    else:
        reason = ""
    run.ended = True
    if not reason:
        trial.set_user_attr(
            "summary", {k: v for k, v in summary.items() if isinstance(v, int | float | str)}
        )
        return values
    trial.set_user_attr("fail_reason", reason.splitlines()[0][:500])
    raise TrialFailed(reason)
