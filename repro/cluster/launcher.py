"""The one launcher: whether work runs in local processes, submitit's LocalExecutor or SLURM.

The `cluster` config group decides, here and nowhere else:

* `cluster=local`: a set's simulated runs side by side, a worker process per usable core,
  then the rest in turn here (`run_training` spawns a run's worker processes); K long-lived
  workers as K worker processes (one: here); the command returns when the work is done.
  Each is forked from the one server that loaded torch (`repro.comm.forked`).
* `cluster=submitit_local`, `cluster=slurm`: jobs through submitit (`repro.cluster.submit`):
  one job for one run, one job array per job shape for several runs (a run set, a
  `--multirun`), one job array for K workers; the command returns at once, and `repro jobs`
  follows what `<runs_root>/jobs.jsonl` records.

Callers hand their work over and never ask which kind ran it: `repro train` and its
`--multirun` (`launch_runs`), `repro reproduce` (`launch_runs` on a run set), `repro sweep`
(`Workers`). A finished run is skipped before anything starts or is queued, so repeating a
command only does what is left.
"""

from __future__ import annotations

import copy
import itertools
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from repro.cluster.jobs import JOBS_FILE, JobRecord
from repro.comm import forked
from repro.comm.capacity import usable_cores
from repro.config import Config
from repro.errors import StorageError, Terminated, UserError, interrupts_held
from repro.schemas.cluster import ClusterConfig, check_launched_runs, env_rank_world

SUMMARY_KEYS = ("step", "train/loss", "test/acc", "time/modeled_s", "time/wall_s")


@dataclass
class Launched:
    """What a launch did: the finished runs' summaries (None: diverged), the jobs it queued."""

    summaries: list[dict | None] = field(default_factory=list)
    jobs: list[JobRecord] = field(default_factory=list)


def runs_here(cluster: ClusterConfig) -> bool:
    """True when `cluster` runs work in this machine's processes rather than as jobs."""
    return cluster.kind == "local"


def describe(summary: dict) -> str:
    parts = [
        f"{k}={summary[k]:.4g}" for k in SUMMARY_KEYS if isinstance(summary.get(k), int | float)
    ]
    return " ".join([*parts, f"run_dir={summary.get('run_dir')}"])


def _announce(records: list[JobRecord], what: str, title: str, runs_root: str, then: str) -> None:
    ids, s = ", ".join(r.job_id for r in records), "s" if len(records) != 1 else ""
    follow = f"follow them with `repro jobs --root {runs_root} --watch`"
    print(
        f"{title}: {len(records)} {what}{s} in job{s} {ids} (recorded in "
        f"{Path(runs_root) / JOBS_FILE}); {follow}" + (f", then {then}" if then else ""),
        flush=True,
    )


def simulated_first(
    runs: Sequence[tuple[str, Config]],
) -> tuple[list[tuple[str, Config]], list[tuple[str, Config]]]:
    """(the simulated runs, the rest): the first can run side by side, one process and one
    thread each; a run on worker processes takes the machine's cores for itself."""
    simulated = [(label, cfg) for label, cfg in runs if cfg.trainer.engine == "simulated"]
    rest = [(label, cfg) for label, cfg in runs if cfg.trainer.engine != "simulated"]
    return simulated, rest


def at_once(runs: Sequence[tuple[str, Config]]) -> int:
    """How many of the simulated runs among `runs` run here side by side: as many as this
    process has cores (`usable_cores`; one alone runs in this process)."""
    return max(1, min(usable_cores(), len(simulated_first(runs)[0])))


def expected_time(
    runs: Sequence[tuple[str, Config]],
    minutes_per_run: float,
    measured: Mapping[str, float] | None = None,
) -> str:
    """The line saying how long `runs` take here. A run's minutes are `measured`'s for its
    experiment label (what that run took here at its earlier seeds), else the set's measured
    minutes of one run one at a time (0: not measured). The simulated ones run `at_once` at
    a time, each started as a slot frees in `longest_first` order, then the rest in turn."""
    simulated, rest = simulated_first(runs)
    slots = at_once(runs)
    how = f"{len(runs)} run{'s' if len(runs) != 1 else ''} to do"
    if rest and simulated:
        how += f": {len(simulated)} simulated, {slots} at a time, then {len(rest)} on worker "
        how += "processes, one at a time"
    elif rest:
        how += ", on worker processes, one at a time"
    else:
        how += f", {slots} at a time"
    measured = measured or {}
    labels = {cfg.experiment.label for _, cfg in runs}
    if minutes_per_run <= 0 and not labels <= measured.keys():
        return f"expected time: not measured for this set (experiment.expected_minutes); {how}"

    def minutes(cfg: Config) -> float:
        return measured.get(cfg.experiment.label, minutes_per_run)

    ends = [0.0] * slots
    for _, cfg in longest_first(simulated):  # the order `_run_side_by_side` starts them in
        ends[ends.index(min(ends))] += minutes(cfg)
    total = max(ends) + sum(minutes(cfg) for _, cfg in rest)
    sources = []
    if labels & measured.keys():
        sources.append("the same runs' earlier seeds here")
    if labels - measured.keys():
        sources.append("experiment.expected_minutes, measured on a 2-core machine")
    return f"expected time: about {total:.1f} min ({how}; from {' and '.join(sources)})"


def launch_runs(
    runs: Sequence[tuple[str, Config]],
    title: str,
    then: str = "",
    minutes_per_run: float | None = None,
    also: str = "",
    measured: Mapping[str, float] | None = None,
    in_set: bool = False,
) -> Launched:
    """Run or submit `(label, config)` runs where their `cluster` group says; `then` names
    the next command once submitted jobs end (e.g. the report). With `minutes_per_run` (a
    run set's measured minutes per run, 0 when not measured; `measured`: minutes by label,
    `expected_time`) the expected time of the runs left to do here is printed first, then
    `also`. A run that diverges alone fails the command, unless it is `in_set` (a set's added
    seed); one of several is a result, said in its line and in the count of runs ready."""
    from repro.train.checkpoint_pick import finished_or_resumable

    kinds = {cfg.cluster.kind for _, cfg in runs}
    if len(kinds) > 1:
        raise UserError(f"{title}: cluster differs between runs ({sorted(kinds)}); use one")
    if runs_here(runs[0][1].cluster):  # a submitted job sets its own rendezvous
        check_launched_runs(len(runs), title)
    launched = Launched()
    pending, damaged = [], []
    for label, cfg in runs:
        try:
            done = finished_or_resumable(cfg)
        except UserError as err:  # one run's directory: the set goes on with the others
            if len(runs) == 1 or isinstance(err, StorageError):  # a disk: the others' too
                raise
            print(f"damaged {label}: {err}", file=sys.stderr, flush=True)
            damaged.append(label)
            continue
        if done is None:
            pending.append((label, cfg))
        else:
            print(f"skip {label}: finished earlier: {describe(done)}", flush=True)
            launched.summaries.append(done)
    if damaged and not pending:
        raise UserError(f"{title}: {len(damaged)} run(s) need the fix above: {', '.join(damaged)}")
    if not pending:
        print(f"{title}: every run has finished", flush=True)
    elif runs_here(pending[0][1].cluster):
        if minutes_per_run is not None:
            line = expected_time(pending, minutes_per_run, measured)
            print(f"{title}: {line}{also}", flush=True)
        launched.summaries += _run_here(pending, title, alone=len(runs) == 1 and not in_set)
    else:
        from repro.cluster.submit import submit_runs

        launched.jobs = submit_runs(pending, title)
        _announce(launched.jobs, "run", title, pending[0][1].runs_root, then)
    if damaged:
        raise UserError(f"{title}: {len(damaged)} run(s) need the fix above: {', '.join(damaged)}")
    return launched


def _run_here(runs: list[tuple[str, Config]], title: str, alone: bool) -> list[dict | None]:
    """The simulated runs of a set (one process and one thread each) as many at once as the
    machine has cores, then the others in this process in turn. A diverged run is a result
    (a batch size past what a method tolerates) unless `alone`: its curve stays, the rest run."""
    from tqdm import tqdm

    started = time.perf_counter()
    simulated, rest = simulated_first(runs)
    slots = at_once(runs)
    summaries: list[dict | None] = []
    # a bar only on a terminal: in a SLURM log its carriage-return frames are noise, and the
    # "done" lines below already say how far the set is
    bar = tqdm(
        total=len(runs),
        desc=title,
        unit="run",
        position=0,
        disable=len(runs) == 1 or not sys.stderr.isatty(),
    )
    if slots > 1:
        outcomes = itertools.chain(_run_side_by_side(simulated, slots), _in_turn(rest, runs))
    else:
        outcomes = _in_turn(runs, runs)
    try:
        for label, summary, diverged in outcomes:
            if diverged is not None:
                if alone:
                    raise diverged
                tqdm.write(f"diverged {label}: {diverged}")
            elif (env_rank_world() or (0,))[0] == 0:  # a launcher's other ranks: rank 0 says it
                tqdm.write(f"done {label}: {describe(summary)}")
            summaries.append(summary)
            bar.update(1)
    finally:
        bar.close()  # before any error line, which then stands on a line of its own
    if len(runs) > 1:
        lost = f", {summaries.count(None)} of them diverged" if None in summaries else ""
        print(f"{title}: {len(runs)} runs ready in {time.perf_counter() - started:.0f} s{lost}")
    return summaries


def _in_turn(runs: list[tuple[str, Config]], whole: list[tuple[str, Config]]):
    """(label, summary or None, the Diverged error or None) of each run, one after another;
    each named as it starts when it is one of several (`whole`, the set)."""
    from tqdm import tqdm

    for label, cfg in runs:
        if len(whole) > 1:
            tqdm.write(f"run {label}")
        yield (label, *_side_run(cfg))


def _side_run(cfg: Config):
    """(summary, None) of a finished run, or (None, the Diverged error)."""
    from repro.train.entry import Diverged, run_training

    try:
        return run_training(cfg), None
    except Diverged as err:
        return None, err


def _side_run_at(job: tuple[int, Config]):
    """(the run's index, then as `_side_run`), for outcomes taken as they finish."""
    return (job[0], *_side_run(job[1]))


def _side_worker_start(environ: dict[str, str], launcher: int) -> None:
    """A side-by-side worker leaves interrupts to the set's process, which stops every worker
    at once (a Ctrl-C reaches the whole process group), and dies with it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # also drops one held since its fork
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    forked.become_caller(environ, launcher)


def longest_first(runs: Sequence[tuple[str, Config]]) -> list[tuple[str, Config]]:
    """`runs` by the samples each processes at most (steps times every worker's batch),
    largest first, ties in the set's order: runs side by side end together when the long
    ones start first, instead of a long one started last running on alone."""

    def samples(run: tuple[str, Config]) -> int:
        t = run[1].trainer
        return t.steps * t.world_size * t.batch_size

    return sorted(runs, key=samples, reverse=True)  # stable: ties keep their order


def _run_side_by_side(runs: list[tuple[str, Config]], slots: int):
    """Simulated runs in `slots` worker processes, `longest_first`; outcomes as they
    finish. Their own progress bars would overwrite each other, so the set's bar counts
    runs instead."""
    from tqdm import tqdm

    quiet = []
    for label, cfg in longest_first(runs):
        cfg = copy.deepcopy(cfg)
        cfg.trainer.progress = False  # not part of a run's identity
        quiet.append((label, cfg))
    tqdm.write(f"running {len(runs)} simulated runs, {slots} at a time, the longest first")
    pool = None
    try:
        with interrupts_held():
            pool = forked.context().Pool(
                slots, initializer=_side_worker_start, initargs=forked.caller()
            )
        outcomes = pool.imap_unordered(_side_run_at, list(enumerate(cfg for _, cfg in quiet)))
        for i, summary, diverged in outcomes:
            yield quiet[i][0], summary, diverged
    except BaseException:
        # an error, or an interrupt sent to this process alone (a scheduler's signal, a
        # `kill`), ends the set now: queued runs never start and running ones stop, each to
        # resume from its last checkpoint; no worker outlives the set
        if pool is not None:
            pool.terminate()
        raise
    else:
        pool.close()
    finally:
        if pool is not None:
            pool.join()


STOP_WAIT_S = 60.0
"""How long a stopped command waits for each of its workers to mark its trial and exit
(seconds are typical: `repro.sweep.stops.STOP_GRACE_S` and a storage write)."""


class Workers:
    """K long-lived workers of `kind` (e.g. the `sweep` `name`) where `cluster` says, each
    with `cpus` CPUs on a cluster. Building it checks the cluster (sbatch, partition, sizes),
    so a caller builds it before writing anything and `start` is not refused by the cluster."""

    def __init__(
        self, cluster: ClusterConfig, runs_root: str, kind: str, name: str, cpus: int
    ) -> None:
        self.label, self.runs_root, self.kind = f"{kind} {name}", runs_root, kind
        self.array = None
        if not runs_here(cluster):
            from repro.cluster.submit import WorkerArray

            self.array = WorkerArray(cluster, runs_root, kind, name, cpus)

    def start(self, workers: Sequence[Callable[[], object]], then: str = "") -> list[JobRecord]:
        """Run the workers here to their end (returns no jobs) or queue them as one array."""
        if self.array is not None:
            records = self.array.submit(workers)
            _announce(records, "worker", self.label, self.runs_root, then)
            return records
        if len(workers) == 1:
            workers[0]()
            return []
        ctx, caller = forked.context(), forked.caller()
        procs = [
            ctx.Process(target=_worker_main, args=(fn, self.label, i, *caller))
            for i, fn in enumerate(workers)
        ]
        try:
            with interrupts_held():
                for p in procs:
                    p.start()
            for p in procs:
                p.join()
        except (Terminated, KeyboardInterrupt) as stop:
            # a SIGTERM or SIGINT sent to this command alone (`kill PID`, `kill -INT PID`),
            # passed on: each worker then marks its trial stopped and queued again, as a
            # Ctrl-C (which reaches them all; a second SIGINT is ignored) makes it, instead of
            # running on unsignalled while this process waits for it to exit, or dying with
            # it and leaving its trial RUNNING
            signum = signal.SIGTERM if isinstance(stop, Terminated) else signal.SIGINT
            procs = [p for p in procs if p.pid is not None]  # a SIGTERM may cut the starts
            for p in procs:
                if p.is_alive():
                    os.kill(p.pid, signum)
            for p in procs:
                p.join(STOP_WAIT_S)
                if p.is_alive():  # stuck: its trial is left to the stale-trial check
                    p.kill()
                    p.join()
            raise
        bad = [i for i, p in enumerate(procs) if p.exitcode != 0]
        if bad:
            raise UserError(f"{self.label}: worker(s) {bad} stopped with an error (above)")
        return []


def _worker_main(
    fn: Callable[[], object], label: str, index: int, environ: dict[str, str], launcher: int
) -> None:
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # one held arrives here
        forked.become_caller(environ, launcher)
        fn()
    except UserError as err:
        print(f"error: {label} worker {index}: {err}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    except KeyboardInterrupt:  # Ctrl-C reaches every worker; the parent says what to do
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # its passed-on copy: no exit traceback
        raise SystemExit(130) from None
