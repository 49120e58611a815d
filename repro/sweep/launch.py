"""Starting a sweep or a tuning search: every check first, then K workers (`Workers`).

`repro sweep SPEC --workers K [--cluster NAME]` (`run_sweep`): the workers go where
`repro.cluster.launcher.Workers` puts them for the `cluster` group of the spec's base config
(or `NAME`): processes here, or one job array sharing the study's storage. Before any worker
starts or any job is queued, in this order, so that a refused sweep leaves nothing behind (no
study, no directory, no job):

1. every search key and value composes into a valid config, and workers that run here fit
   this machine's cores;
2. the storage suits the cluster: workers on several SLURM hosts need Optuna's heartbeat, which
   only a database server gives. A journal file has none (a trial lost with a preempted worker
   job would stay RUNNING, count towards the budget, and leave the other workers idle until
   `timeout_s`), and a SQLite file cannot be shared between hosts;
3. a database answers (an unreachable one is one line naming it, its password masked);
4. the cluster can run the workers (sbatch, partition, CPUs);

and only then is the study created (or loaded, to continue it). A study that already has its
`n_trials` runs nothing and queues no job.

A search with arms (`run_tune`, from `repro tune PAPER` or `repro sweep SPEC`), one study per
arm, is checked first, on a new search before its journal exists: its run set when it exports
(every label in an arm or untuned), and every arm with trials left composed at both ends of its
space, with `--workers` against the cores here.
Its workers always run here, as many as it has usable cores and trials left when every trial
runs simulated (one process and one thread each, as the simulated runs of a run set), else
one. Once every arm has its trials, the chosen values are written atomically to
`configs/tuned/<paper>_<scale>.yaml` (`repro.sweep.tuned`); a search left unfinished writes
nothing.
"""

from __future__ import annotations

import functools
import logging
import warnings
from datetime import datetime
from pathlib import Path
from typing import Any

from repro.cluster.jobs import JobRecord
from repro.cluster.launcher import Workers, runs_here
from repro.comm.capacity import WORKERS_PER_CORE, refuse_past_per_core, usable_cores
from repro.errors import UserError
from repro.pages.writer import counted
from repro.schemas.cluster import ClusterConfig
from repro.sweep.space import format_override
from repro.sweep.spec import STEPS_TO_TARGET, SweepSpec, base_overrides
from repro.sweep.storage import SERVER_SCHEMES, open_storage, scheme
from repro.sweep.study import (
    completed,
    finished_words,
    open_arm_study,
    open_journal,
    open_study,
    tally,
)
from repro.sweep.trial import arm_trial_overrides
from repro.sweep.tuned import TUNED_DIR, export_data, write_tuned
from repro.sweep.worker import run_worker, tune_worker

log = logging.getLogger("repro.sweep")


def check_storage_for(spec: SweepSpec, cluster: ClusterConfig) -> None:
    """Refuse a storage that workers on several hosts cannot share with a heartbeat."""
    if cluster.kind != "slurm":
        return  # local processes and submitit's LocalExecutor share this machine's locks
    if spec.storage is None:
        problem = f"the journal file {spec.storage_label}, which has no heartbeat"
    elif scheme(spec.storage) not in SERVER_SCHEMES:
        problem = f"{spec.storage_label}, a file that hosts cannot share safely"
    else:
        return
    raise UserError(
        f"sweep {spec.name}: cluster={cluster.name} runs workers on several hosts but storage "
        f"is {problem}; set `storage: postgresql://USER:PASSWORD@HOST/DB` in "
        f"{spec.source or 'the spec'} (`make pg-up` starts one on this machine)"
    )


def check_config_keys(spec: SweepSpec) -> None:
    """Compose the base config, then base + each probe value of each search key, so an unknown
    key or a value the config schema rejects is refused before a trial is created."""
    from repro.config import compose

    base, where = base_overrides(spec), spec.source or f"sweep {spec.name}"
    try:
        compose(base)
    except UserError as err:
        raise UserError(f"{where}: its overrides do not compose: {err}") from None
    for p in spec.space:
        for value in p.probe_values():
            override = format_override(p.key, value)
            try:
                compose([*base, override])
            except UserError as err:
                fix = "; make its type int" if p.type == "float" and "an int" in str(err) else ""
                raise UserError(
                    f"{where}: space key {p.key} ({override}) is not a valid config setting: "
                    f"{err}{fix}"
                ) from None


def prepare_study(spec: SweepSpec, storage: Any) -> Any:
    """Create or load the study, refusing to start a new one over an earlier one's runs."""
    import optuna

    known = {s.study_name for s in storage.get_all_studies()}
    if spec.name not in known and any(spec.study_dir.glob("trial_*")):
        # A new study would reuse trial_<n> directories holding an earlier study's runs.
        raise UserError(
            f"{spec.study_dir} holds trial directories of an earlier study {spec.name}, which "
            f"{spec.storage_label} does not hold (deleted or replaced?); move them away or "
            "give the sweep another name or out directory"
        )
    study = open_study(spec, storage)
    with warnings.catch_warnings(action="ignore", category=optuna.exceptions.ExperimentalWarning):
        study.set_metric_names(spec.metric_names)
    return study


def check_workers(workers: int | None) -> None:
    if workers is not None and workers < 1:
        raise UserError(f"--workers={workers} must be at least 1")


def check_cores(workers: int, elsewhere: str = "", per_trial: int = 1) -> None:
    """Refuse more workers than this machine's usable cores hold (`refuse_past_per_core`),
    where they run: each is a process of its own (torch loaded, about 0.3 GiB), or starts
    `per_trial` worker processes for a trial on the process engine, and past that its
    trials only take turns on the cores. `elsewhere`: the fix that runs them on other
    machines, if the command has one."""
    subject = f"--workers={workers}"
    if per_trial > 1:
        subject += f" trials of trainer.world_size={per_trial} worker processes each"
    most = WORKERS_PER_CORE * usable_cores() // per_trial
    fix = f"lower --workers to at most {most}" if most else "lower trainer.world_size"
    refuse_past_per_core(subject, workers * per_trial, fix + elsewhere)


def run_sweep(spec: SweepSpec, workers: int = 1, cluster: str | None = None) -> list[JobRecord]:
    """Run (or continue) the study with `workers` workers where the cluster group says.
    Returns the queued jobs: none when the workers ran here to the end."""
    from repro.config import compose

    check_workers(workers)
    check_config_keys(spec)
    cfg = compose([*base_overrides(spec), *([f"cluster={cluster}"] if cluster else [])])
    if runs_here(cfg.cluster):
        sizes = [v for p in spec.space if p.key == "trainer.world_size" for v in p.probe_values()]
        spawned = max([cfg.trainer.world_size, *sizes]) if cfg.trainer.engine == "processes" else 1
        check_cores(workers, ", or run them as jobs (--cluster NAME)", spawned)
    check_storage_for(spec, cfg.cluster)
    database = open_storage(spec) if spec.storage is not None else None
    cpus = cfg.cluster.cpus_per_task * cfg.trainer.world_size  # a trial spawns its workers
    pool = Workers(cfg.cluster, cfg.runs_root, "sweep", spec.name, cpus)
    done, _ = tally(prepare_study(spec, database or open_storage(spec)))
    if done >= spec.n_trials:
        words = (
            f"all {done} trials finished"
            if done == spec.n_trials
            else finished_words(done, spec.n_trials)
        )
        print(f"sweep {spec.name}: {words}; nothing to run", flush=True)
        return []
    log.info(
        "sweep %s on %s: %d trials, %s (cluster=%s)",
        spec.name,
        spec.storage_label,
        spec.n_trials,
        counted(workers, "worker"),
        cfg.cluster.name,
    )
    return pool.start(
        [functools.partial(run_worker, spec, i) for i in range(workers)],
        then=f"`repro sweep show {spec.source}`",
    )


def check_coverage(spec: SweepSpec, runs: dict[str, list[str]]) -> None:
    """Refuse a spec that names a label the run set lacks or leaves one of its labels out."""
    where = spec.source or "the tuning spec"
    listed = {**spec.labels(), **dict.fromkeys(spec.untuned, "untuned")}
    for label, arm in listed.items():
        if label not in runs:
            raise UserError(
                f"{where}: {arm} lists run {label}, which experiment={spec.experiment} does not "
                f"have; its runs: {', '.join(runs)}"
            )
    for label in runs:
        if label not in listed:
            raise UserError(
                f"{where}: run {label} of experiment={spec.experiment} is in no arm; add it to "
                "an arm, or under untuned with the reason it keeps its configured values"
            )


def check_run_set(spec: SweepSpec) -> tuple[dict[str, list[str]], float]:
    """The run set of `spec` (label -> overrides) and its measured minutes per run (0: not
    measured), after `check_coverage` when the search exports its values."""
    from repro.config import compose

    base = compose([f"experiment={spec.experiment}"])
    runs = {label: list(ovs) for label, ovs in base.experiment.runs.items()}
    if spec.export is not None:
        check_coverage(spec, runs)
    return runs, base.experiment.expected_minutes / len(runs)


def probe_arms(
    spec: SweepSpec, runs: dict[str, list[str]], arms: list[str], workers: int | None
) -> bool:
    """Compose each arm's trial at every probe point of its space (both ends of a range,
    every choice of a categorical entry, walked together), so that a bad key or value fails
    before any trial, and refuse `--workers` (when given) past the cores here, whatever
    cluster the experiment names, for trials that each start the most processes one starts
    (its world size on the process engine, else 1). Returns whether every trial runs
    simulated (then side by side)."""
    from repro.config import compose

    where = spec.source or "the tuning spec"
    simulated, spawned = True, 1
    for arm in (spec.arms[name] for name in arms):
        values = {p.key: p.probe_values() for p in spec.space_of(arm)}
        for i in range(max((len(v) for v in values.values()), default=1)):
            params = {key: v[min(i, len(v) - 1)] for key, v in values.items()}
            try:
                cfg = compose(arm_trial_overrides(spec, runs, arm, params, spec.seeds[0]))
            except UserError as err:
                at = ", ".join(f"{k}={v!r}" for k, v in params.items())
                raise UserError(f"{where}: arms.{arm.name} at {at}: {err}") from None
            if spec.objective.metric == STEPS_TO_TARGET and cfg.trainer.target_acc <= 0:
                raise UserError(
                    f"{where}: arms.{arm.name} runs with trainer.target_acc=0, so "
                    f"{STEPS_TO_TARGET} has no target; set one in the arm's overrides"
                )
            if cfg.trainer.engine == "processes":
                simulated, spawned = False, max(spawned, cfg.trainer.world_size)
    if workers is not None:
        check_cores(workers, per_trial=spawned)
    return simulated


def expected_line(spec: SweepSpec, left: int, workers: int, minutes_per_run: float) -> str:
    """How long the `left` trials take here: from the spec's measured minutes per trial, else
    the run set's measured minutes per run."""
    n = len(spec.seeds)
    runs = left * n
    how = (
        f"{counted(left, 'trial')} x {counted(n, 'seed')} = {counted(runs, 'run')}, "
        f"{workers} at a time"
    )
    minutes, source = spec.minutes_per_trial, "the spec's minutes_per_trial"
    if minutes <= 0:
        minutes, source = minutes_per_run, "experiment.expected_minutes"
    if minutes <= 0:
        return f"expected time: not measured for this set (experiment.expected_minutes); {how}"
    return (
        f"expected time: about {minutes * runs / workers:.1f} min ({how}; from {source}, "
        "measured on a 2-core machine)"
    )


def run_tune(spec: SweepSpec, workers: int | None = None, out: Path = TUNED_DIR) -> Path | None:
    """Run (or finish) the search with arms `spec` here and write its tuned file when it has an
    export; returns the file's path."""
    check_workers(workers)
    runs, minutes_per_run = check_run_set(spec)
    fresh = not (spec.study_dir / "journal.log").exists()
    if fresh:  # probe before the journal exists: a refused spec leaves nothing behind
        simulated = probe_arms(spec, runs, list(spec.arms), workers)
    storage = open_journal(spec)
    studies = {arm.name: open_arm_study(spec, arm, runs, storage) for arm in spec.arms.values()}
    left = {name: spec.n_trials - len(completed(study)) for name, study in studies.items()}
    busy = [name for name, n in left.items() if n > 0]
    todo = sum(left.values())
    title = f"tune {spec.experiment}"
    if busy:
        if not fresh:
            simulated = probe_arms(spec, runs, busy, workers)
        k = workers or (min(usable_cores(), todo) if simulated else 1)
        expected = expected_line(spec, todo, k, minutes_per_run)
        print(
            f"{title}: {len(spec.arms)} arms x {spec.n_trials} trials, {todo} trials to do; "
            f"{expected}",
            flush=True,
        )
        started = datetime.now()
        # the trials run here, whatever cluster the experiment names
        pool = Workers(ClusterConfig(), str(spec.study_dir), "tune", spec.experiment, cpus=1)
        pool.start([functools.partial(tune_worker, spec, runs) for _ in range(k)])
        print(f"{title}: trials ran in {(datetime.now() - started).total_seconds():.0f} s")
    else:
        print(f"{title}: every arm has its {spec.n_trials} trials; nothing to run", flush=True)
    if spec.export is None:
        return None
    path = write_tuned(export_data(spec, studies), out)
    print(f"{title}: tuned values written to {path}", flush=True)
    return path
