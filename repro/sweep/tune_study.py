"""The trials of a tuning search: one Optuna study per arm, one trial per design point.

Each trial is ordinary simulated runs (one per seed of the spec) of the arm's run-set label
at one point of the arm's Sobol design (`repro.sweep.space`), the same `run_training`
that `repro reproduce` and `repro sweep` use. The point is enqueued into the arm's study and
asked back under the search's ask lock, and the trial carries its `design_index`: an arm is
finished when every index has a completed trial, so every arm gets exactly `trials` trials.
Workers run side by side (`tune_worker`), each taking the next (arm, index) whose `flock`
nobody holds, one process and one thread each, as the simulated runs of a run set.

Resume. The journal keeps every study (`repro.sweep.storage`). The worker that takes an
index's lock fails a RUNNING trial of that index as stale: its worker died, since the lock
was free. A trial's runs live in directories named by their config (`runs_root`, not
`run_dir`), so the retried point resumes its runs from their checkpoints. The design is data,
so an interrupted search ends where an uninterrupted one does; a search whose arms all have
their trials runs nothing. A worker stopped by SIGINT (Ctrl-C) or SIGTERM marks its trial
stopped (`repro.sweep.stops`) rather than leaving it for the next worker to find.
"""

from __future__ import annotations

import functools
import json
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from repro.errors import UserError
from repro.locks import take
from repro.sweep.space import format_override
from repro.sweep.spec import STEPS_TO_TARGET, ArmSpec, ObjectiveSpec, SweepSpec
from repro.sweep.stops import Stopped, StopSignals, mark_stopped
from repro.sweep.study import serve, suggest, trial_overrides


@dataclass(frozen=True)
class Place:
    """Where a search's journal lives, in the shape `repro.sweep.storage.open_storage` takes."""

    study_dir: Path
    storage: None = None
    heartbeat_s: int = 30
    grace_s: int = 120


def open_journal(spec: SweepSpec) -> Any:
    """The search's journal; Optuna's own lines about studies and trials are silenced (each
    trial prints its own line)."""
    import optuna

    from repro.sweep.storage import open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return open_storage(Place(spec.study_dir))


def arm_trial_overrides(
    spec: SweepSpec, runs: dict[str, list[str]], arm: ArmSpec, params: dict, seed: int
) -> list[str]:
    """The run of `arm`'s label with `params` at `seed`, its directory named by its config
    under the search's `runs_root`."""
    place = [f"seed={seed}", f"runs_root={spec.study_dir / 'runs'}", "trainer.progress=false"]
    return trial_overrides(spec, params, place, f"arm:{arm.name}", arm, runs)


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


def run_trial(
    spec: SweepSpec, runs: dict[str, list[str]], arm: ArmSpec, params: dict
) -> tuple[float, dict]:
    """The trial's objective (mean over the spec's seeds) and what to record on it."""
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


def search_of(spec: SweepSpec, arm: ArmSpec) -> str:
    """What makes an arm's trials comparable: stamped on its study, checked on every load."""
    return json.dumps(
        {
            "space": [asdict(p) for p in spec.space_of(arm)],
            "seeds": list(spec.seeds),
            "objective": asdict(spec.objective),
            "design": {
                "trials": spec.n_trials,
                "name": spec.sampler.name,
                "seed": spec.sampler.seed,
            },
            "trained": arm.trained,
            "overrides": [*spec.overrides, *arm.overrides],
        },
        sort_keys=True,
        default=list,
    )


def open_arm_study(spec: SweepSpec, arm: ArmSpec, storage: Any) -> Any:
    """The arm's study (created on first use), refused when a different search made it."""
    import optuna

    study = optuna.create_study(
        study_name=arm.name,
        storage=storage,
        direction=spec.objective.direction,
        load_if_exists=True,
    )
    made_by = study.user_attrs.get("search")
    if made_by is None:
        study.set_user_attr("search", search_of(spec, arm))
    elif made_by != search_of(spec, arm):
        raise UserError(
            f"the study of arm {arm.name} in {spec.study_dir / 'journal.log'} was made by a "
            "different search (space, design, seeds, objective or overrides); remove "
            f"{spec.study_dir} to start this one afresh"
        )
    return study


def completed(study: Any) -> list[Any]:
    from optuna.trial import TrialState

    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))


def done_indices(study: Any) -> set[int]:
    return {t.user_attrs["design_index"] for t in completed(study)}


def ask_point(spec: SweepSpec, study: Any, storage: Any, index: int, point: dict, me: str) -> Any:
    """The trial of design point `index`, enqueued and asked back under the search's ask lock
    (so the trial popped is this point). Left-overs of dead workers are failed as stale first:
    a RUNNING trial of this index (the caller holds the index's lock, so its worker is gone)
    and any WAITING trial (enqueued by a worker that died before asking it back)."""
    from optuna.trial import TrialState

    study_id = storage.get_study_id_from_name(study.study_name)
    with take(spec.study_dir / "ask.lock"):
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING)):
            if t.state == TrialState.WAITING or t.user_attrs.get("design_index") == index:
                trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, t.number)
                owner = t.user_attrs.get("worker", "unknown")
                storage.set_trial_user_attr(trial_id, "stale", f"worker {owner} died")
                storage.set_trial_state_values(trial_id, TrialState.FAIL)
        study.enqueue_trial(point, user_attrs={"design_index": index, "worker": me})
        return study.ask()


def run_point(
    spec: SweepSpec,
    arm: ArmSpec,
    runs: dict,
    study: Any,
    storage: Any,
    index: int,
    me: str,
    stops: StopSignals,
) -> None:
    """Run design point `index` of `arm` as one trial and record its score."""
    from optuna.trial import TrialState

    from repro.sweep.space import design

    point = design(spec.space_of(arm), spec.n_trials, spec.sampler.seed)[index]
    trial = ask_point(spec, study, storage, index, point, me)
    params = {p.key: suggest(trial, p) for p in spec.space_of(arm)}
    started = time.perf_counter()
    try:
        with stops.armed():
            value, attrs = run_trial(spec, runs, arm, params)
    except Stopped as stop:  # its design index is asked again by the next search
        mark_stopped(study, storage, trial.number, stop, requeue=False)
        raise
    except Exception as err:  # a crash is a bug to fix, not a score: stop the search
        stops.after_failure()  # unless a stop signal caused it
        trial.set_user_attr("fail_reason", f"{type(err).__name__}: {err}"[:500])
        study.tell(trial, state=TrialState.FAIL)
        raise
    for key, v in attrs.items():
        trial.set_user_attr(key, v)
    study.tell(trial, value)
    values = [t.value for t in completed(study)]
    best = (min if spec.objective.direction == "minimize" else max)(values)
    shown = " ".join(format_override(k, v) for k, v in params.items())
    print(
        f"tune {spec.experiment} [{arm.name} {len(values)}/{spec.n_trials}] #{index} {shown} -> "
        f"{value:.4g} (best {best:.4g}){' diverged' if attrs['diverged'] else ''} in "
        f"{time.perf_counter() - started:.0f} s",
        flush=True,
    )


def tune_worker(spec: SweepSpec, runs: dict[str, list[str]]) -> None:
    """Run every design point of every arm that is neither finished nor held by another
    worker, in the spec's order."""
    import socket

    me = f"{socket.gethostname()}:{os.getpid()}"
    serve(functools.partial(_work, spec, runs, open_journal(spec), me))


def _work(
    spec: SweepSpec, runs: dict[str, list[str]], storage: Any, me: str, stops: StopSignals
) -> None:
    for arm in spec.arms.values():
        study = open_arm_study(spec, arm, storage)
        for index in range(spec.n_trials):
            if index in done_indices(study):
                continue
            lock = take(spec.study_dir / "locks" / f"{arm.name}.{index}.lock", wait_s=0)
            if lock is None:
                continue  # another worker runs it
            with lock:
                stops.check()
                if index not in done_indices(study):  # not finished while we took the lock
                    run_point(spec, arm, runs, study, storage, index, me, stops)
