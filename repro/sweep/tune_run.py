"""A whole tuning search: check, say how long, run the trials side by side, write the values.

Before any worker starts, the spec is checked against its run set (every label in an arm or
untuned) and every arm with trials left is composed at both ends of its space; on a new
search this happens before the journal exists, so a refused spec leaves nothing behind. Each
arm's study is created or loaded (one made by a different search is refused). The workers
then run on this machine (`repro.cluster.launcher.Workers`), as many as there are cores and
trials left when every trial runs simulated (one process and one thread each, as the
simulated runs of a run set), else one. Once every arm has its trials, the chosen values are
collected from the studies and written atomically to `configs/tuned/<paper>_<scale>.yaml`; a
search left unfinished writes nothing.
"""

from __future__ import annotations

import functools
import os
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any

from repro.errors import UserError
from repro.sweep.space import format_override
from repro.sweep.tune_checks import check_run_set, probe_arms
from repro.sweep.tune_spec import TuneSpec
from repro.sweep.tune_study import completed, open_arm_study, open_journal, tune_worker
from repro.sweep.tuned import REPO, TUNED_DIR, tune_command, write_tuned


def shown_path(source: str) -> str:
    """A spec's path as the tuned file records it: relative to the repository when inside."""
    path = Path(source).resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else source


def _entry(p: Any) -> dict[str, Any]:
    """A space entry as data, without the fields it leaves at their defaults."""
    return {k: v for k, v in asdict(p).items() if v is not None and v != () and v is not False}


def expected_line(spec: TuneSpec, left: int, workers: int, minutes_per_run: float) -> str:
    """How long the `left` trials take here: from the spec's measured minutes per trial, else
    the run set's measured minutes per run."""
    runs = left * len(spec.seeds)
    how = f"{left} trials x {len(spec.seeds)} seed(s) = {runs} runs, {workers} at a time"
    minutes, source = spec.minutes_per_trial, "the spec's minutes_per_trial"
    if minutes <= 0:
        minutes, source = minutes_per_run, "experiment.expected_minutes"
    if minutes <= 0:
        return f"expected time: not measured for this set (experiment.expected_minutes); {how}"
    return (
        f"expected time: about {minutes * runs / workers:.1f} min ({how}; from {source}, "
        "measured on a 2-core machine)"
    )


def collect(spec: TuneSpec, storage: Any) -> dict[str, Any]:
    """The tuned file's data from the finished studies."""
    arms, runs, trials = {}, {}, []
    for arm in spec.arms.values():
        study = open_arm_study(spec, arm, storage)
        done = completed(study)
        if len(done) < spec.trials:
            raise UserError(
                f"arm {arm.name} has {len(done)} of {spec.trials} trials; run "
                f"`{tune_command(spec.paper, spec.scale)}` again to finish the search"
            )
        trials += done
        best = study.best_trial
        entries = {p.key: _entry(p) for p in spec.space_of(arm)}
        arms[arm.name] = {
            "run": arm.trained,
            "labels": list(arm.labels),
            "space": arm.space,
            "extra": [_entry(p) for p in arm.extra],
            "overrides": list(arm.overrides),
            "chosen": dict(best.params),
            "objective": best.value,
            "best_trial": best.number,
            "trials": len(done),
            "diverged_trials": sum(1 for t in done if t.user_attrs.get("diverged")),
            "tried": [
                {**t.params, "objective": t.value}
                for t in sorted(done, key=lambda t: t.user_attrs["design_index"])
            ],
            # a best value at the end of what was tried may have been cut off by the range
            "at_edge": [
                k
                for k, v in best.params.items()
                if entries[k]["type"] != "categorical"
                and v in (min(t.params[k] for t in done), max(t.params[k] for t in done))
            ],
        }
        for label in arm.labels:
            runs[label] = [format_override(k, v) for k, v in best.params.items()]
    for label in spec.untuned:
        runs[label] = []
    start = min(t.datetime_start for t in trials)
    end = max(t.datetime_complete for t in trials)
    search = {
        "spaces": {name: [_entry(p) for p in entries] for name, entries in spec.spaces.items()},
        "trials_per_arm": spec.trials,
        "seeds": list(spec.seeds),
        "objective": spec.objective.describe(),
        "design": spec.sampler.describe(),
        "overrides": list(spec.overrides),
        "started": start.isoformat(timespec="seconds"),
        "finished": end.isoformat(timespec="seconds"),
        "elapsed_s": round((end - start).total_seconds(), 1),
        "trial_s": round(sum((t.duration.total_seconds() for t in trials), 0.0), 1),
    }
    return {
        "paper": spec.paper,
        "scale": spec.scale,
        "experiment": spec.experiment,
        "spec": shown_path(spec.source),
        "search": search,
        "arms": arms,
        "untuned": dict(spec.untuned),
        "runs": runs,
    }


def run_tune(spec: TuneSpec, workers: int | None = None, out: Path = TUNED_DIR) -> Path:
    """Run (or finish) the search of `spec` here and write its tuned file; returns its path."""
    from repro.cluster.launcher import Workers
    from repro.schemas.cluster import ClusterConfig

    if workers is not None and workers < 1:
        raise UserError(f"--workers={workers} must be at least 1")
    run_set = check_run_set(spec)
    fresh = not (spec.study_dir / "journal.log").exists()
    if fresh:  # probe before the journal exists: a refused spec leaves nothing behind
        simulated = probe_arms(spec, run_set.runs, list(spec.arms))
    storage = open_journal(spec)
    left = {
        arm.name: spec.trials - len(completed(open_arm_study(spec, arm, storage)))
        for arm in spec.arms.values()
    }
    busy = [name for name, n in left.items() if n > 0]
    title = f"tune {spec.experiment}"
    if busy:
        if not fresh:
            simulated = probe_arms(spec, run_set.runs, busy)
        k = workers or (min(os.cpu_count() or 1, sum(left.values())) if simulated else 1)
        expected = expected_line(spec, sum(left.values()), k, run_set.minutes_per_run)
        print(
            f"{title}: {len(spec.arms)} arms x {spec.trials} trials, {sum(left.values())} "
            f"trials to do; {expected}",
            flush=True,
        )
        started = datetime.now()
        # the trials run here, whatever cluster the experiment names
        pool = Workers(ClusterConfig(), str(spec.study_dir), "tune", spec.experiment, cpus=1)
        pool.start([functools.partial(tune_worker, spec, run_set.runs) for _ in range(k)])
        print(f"{title}: trials ran in {(datetime.now() - started).total_seconds():.0f} s")
    else:
        print(f"{title}: every arm has its {spec.trials} trials; nothing to run", flush=True)
    path = write_tuned(collect(spec, storage), out)
    print(f"{title}: tuned values written to {path}", flush=True)
    return path
