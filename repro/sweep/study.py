"""A sweep worker: sampler, objective, and the loop that runs trials of one shared study.

Each trial is one full training run: the base experiment, the fixed
overrides and the trial's sampled values are composed into a config whose `run_dir` is
`<out>/<name>/trial_<n>`, whose wandb group is the study's (never the reproduction's) and
whose tracking tags name the study and the trial, then
`run_training` runs it through the same launcher as `repro train`.

Budget. `n_trials` counts trials that ran to an end: COMPLETE, or FAIL with a `fail_reason`
(crash, divergence, rejected config, missing metric) recorded by the objective. A trial lost to
a killed worker is not an outcome: it is failed as stale (worker locks on a journal, Optuna's
heartbeat on a database; see `repro.sweep.storage`) and its point is queued again. A worker
that gets SIGTERM (job cancelled or preempted) or SIGINT (Ctrl-C) marks its trial as stopped
and queues it again itself (`repro.sweep.stops`). A retried point runs in its first trial's
run directory (`trial_run_dir`), so it resumes from the checkpoint the lost run left; the step
it resumed from is recorded on the trial (`resumed_from`). Before
starting a trial a worker takes the study's ask lock, counts finished plus running trials and
starts one only below the budget; the lock is handed on (released) inside the objective once
the trial is stamped with its worker, so K workers on one machine never overshoot. Workers on
other machines sharing a database have their own lock and may overshoot by one trial each.

Resume is free: the study lives in its storage, so running `repro sweep SPEC` again loads it
and works on the remaining budget. Where the workers run is `repro.sweep.launch`'s business.
"""

from __future__ import annotations

import functools
import logging
import math
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from repro.errors import UserError
from repro.locks import take
from repro.sweep.space import format_override, suggest
from repro.sweep.spec import SweepSpec, base_overrides
from repro.sweep.stops import Stopped, StopSignals, mark_stopped
from repro.sweep.storage import WorkerLocks, fail_orphaned_trials, open_storage

log = logging.getLogger("repro.sweep")
POLL_S = 2.0
"""How often an idle worker looks again while others finish the last trials."""


class TrialFailed(Exception):
    """A trial that ran but produced no usable objective; the study goes on."""


def make_sampler(spec: SweepSpec, seed_offset: int = 0) -> Any:
    import optuna

    seed = spec.sampler.seed + seed_offset
    name = spec.sampler.name
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(
            population_size=spec.sampler.population_size or 50, seed=seed
        )
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.GridSampler({p.key: p.grid_values() for p in spec.space}, seed=seed)


def trial_overrides(
    spec: Any, params: dict[str, Any], place: list[str], tag: str, arm: Any = None, runs: Any = None
) -> list[str]:
    """One trial's full override list, of a sweep or of a tuning search's `arm`: its study's
    base (a sweep's experiment and overrides; an arm's run of the run set `runs`, as the set
    composes it, under the search's and the arm's overrides), the sampled values, where its
    run lives (`place`), and the study's own wandb group and tags ending in `tag`: its trials
    are not a reproduction's runs. A sweep stores it on the trial so it can be rerun by hand."""
    if arm is None:
        base, group, kind = base_overrides(spec), spec.name, "sweep"
    else:
        label, group, kind = arm.trained, f"tune_{spec.experiment}", "tune"
        base = [f"experiment={spec.experiment}", f"experiment.label={label}", *runs[label]]
        base += [*spec.overrides, *arm.overrides]
    return [
        *base,
        *(format_override(k, v) for k, v in params.items()),
        *place,
        f"tracking.group={group}",
        f"tracking.tags=['{kind}','study:{group}','{tag}']",
    ]


def sweep_trial_overrides(
    spec: SweepSpec, number: int, params: dict[str, Any], run_dir: Path | None = None
) -> list[str]:
    """A sweep trial's overrides: its run in `<out>/<name>/trial_<number>` unless `run_dir`."""
    run_dir = run_dir or spec.study_dir / f"trial_{number}"
    return trial_overrides(spec, params, [f"run_dir={run_dir}"], f"trial:{number}")


def trial_run_dir(storage: Any, spec: SweepSpec, number: int) -> Path:
    """A retried point's run directory is its first trial's (Optuna's `failed_trial` link),
    so it resumes that run. A new trial's `trial_<n>` that exists already belongs to a trial
    whose records the storage lost (a damaged or restored journal): that run is kept, and
    the new trial runs in `trial_<n>.<k>`."""
    study_id = storage.get_study_id_from_name(spec.name)
    trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, number)
    first = storage.get_trial_system_attrs(trial_id).get("failed_trial")
    if first is not None:
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


@dataclass
class TrialRun:
    """What a worker knows of the trial it is running: its number once asked, and whether the
    run itself is over (from then on only the result is still to be written)."""

    number: int | None = None
    ended: bool = False


def _objective(
    trial: Any,
    spec: SweepSpec,
    storage: Any,
    worker: str,
    unlock: Any,
    run: TrialRun,
    stops: StopSignals,
) -> list[float]:
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


def tally(study: Any) -> tuple[int, int]:
    """(trials that count towards the budget, trials running now)."""
    from optuna.trial import TrialState

    done = running = 0
    for t in study.get_trials(deepcopy=False):
        if t.state == TrialState.COMPLETE or (
            t.state == TrialState.FAIL and "fail_reason" in t.user_attrs
        ):
            done += 1
        elif t.state == TrialState.RUNNING:
            running += 1
    return done, running


def open_study(spec: SweepSpec, storage: Any) -> Any:
    import optuna

    study = optuna.create_study(
        study_name=spec.name,
        storage=storage,
        directions=spec.directions,
        sampler=make_sampler(spec),
        load_if_exists=True,
    )
    have = [d.name.lower() for d in study.directions]
    if have != spec.directions:
        raise UserError(
            f"study {spec.name} in {spec.storage_label} has directions {have}, the spec "
            f"{spec.directions}; rename the study or remove the old one"
        )
    return study


def serve(work: Any, stopped: str = "") -> None:
    """Run a worker's loop `work(stops)` (a sweep's or a tuning search's) on one thread, one
    core per worker, with the stop signals caught: a stop ends the worker with the signal's
    own exit, its trial already marked stopped (`repro.sweep.stops`). `stopped` names the
    worker in the warning a SIGTERM leaves (on Ctrl-C the command says it in its one line)."""
    import torch

    torch.set_num_threads(1)
    stops = StopSignals().install()
    try:
        work(stops)
    except Stopped as stop:
        if stopped and stop.name != "SIGINT":
            log.warning("%s stopped by %s", stopped, stop.name)
        raise stop.exit() from None
    finally:
        stops.restore()


def run_worker(spec: SweepSpec, index: int, deadline: float | None) -> None:
    """One worker: count, ask, run, until the budget is spent, the deadline passes or a stop
    signal comes (its trial marked and queued again, `repro.sweep.stops`)."""
    storage = open_storage(spec)
    study = open_study(spec, storage)
    # Distinct seeds per worker and per resume: equal seeds would propose equal points.
    study.sampler = make_sampler(spec, 1_000_003 * index + len(study.get_trials(deepcopy=False)))
    locks = WorkerLocks(spec.study_dir)
    me = locks.register()
    work = functools.partial(_work, spec, study, storage, locks, me, deadline=deadline)
    serve(work, f"sweep {spec.name}: worker {me}")


def _work(
    spec: SweepSpec,
    study: Any,
    storage: Any,
    locks: WorkerLocks,
    me: str,
    stops: StopSignals,
    deadline: float | None,
) -> None:
    import optuna

    heartbeat_grace_s = None if spec.storage is None else spec.grace_s
    while True:
        stops.check()
        with take(spec.study_dir / "ask.lock") as lock:
            with warnings.catch_warnings():  # a no-op on a journal, which has no heartbeat
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                optuna.storages.fail_stale_trials(study)
            if fail_orphaned_trials(study, storage, locks, heartbeat_grace_s):
                log.warning("sweep %s: failed trials of dead workers, queued again", spec.name)
            done, running = tally(study)
            if done >= spec.n_trials or (deadline is not None and time.time() >= deadline):
                return
            idle = done + running >= spec.n_trials
            if not idle:
                run = TrialRun()
                objective = functools.partial(
                    _objective,
                    spec=spec,
                    storage=storage,
                    worker=me,
                    unlock=lock.release,
                    run=run,
                    stops=stops,
                )
                lost = run_one_trial(study, storage, objective, run)
                if lost is not None:
                    log.warning(
                        "sweep %s: trial %d was failed as stale while it ran (no heartbeat "
                        "for grace_s=%d s: raise it on a loaded machine); its point is queued "
                        "again",
                        spec.name,
                        lost,
                        spec.grace_s,
                    )
        if idle:
            time.sleep(POLL_S)


def run_one_trial(study: Any, storage: Any, objective: Any, run: TrialRun) -> int | None:
    """Run one trial of `objective` (which fills in `run`). Returns None, or the trial's
    number when another worker failed it as stale while it ran (its heartbeat came too late):
    Optuna then refuses this worker's writes of the result, with one error or another, and
    that must not end the worker. A stop signal marks the trial stopped and queues its point
    again before `Stopped` propagates. Any other error propagates."""
    from optuna.trial import TrialState

    try:
        study.optimize(objective, n_trials=1, catch=(TrialFailed,))
    except Stopped as stop:
        if run.number is not None:
            mark_stopped(study, storage, run.number, stop, requeue=True)
        raise
    except Exception:
        mine = [t for t in study.get_trials(deepcopy=False) if t.number == run.number]
        if not run.ended or not mine or mine[0].state != TrialState.FAIL:
            raise
        return run.number
    return None
