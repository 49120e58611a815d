"""A search worker: one scheduling loop over the points its study (or studies) still need.

Where the next point comes from is the one difference between a sweep and a search with arms:

* adaptive (`_adaptive_points`, a sweep): under the study's ask lock, a worker fails the
  stale trials of dead workers, counts finished plus running trials and starts one only below
  `n_trials`; the lock is handed on inside the objective once the trial is stamped with its
  worker, so K workers on one machine never overshoot (workers on other machines sharing a
  database have their own lock and may overshoot by one trial each). The sampler picks the
  point; a retried point runs in its first trial's run directory, so it resumes from the
  checkpoint the lost run left (`resumed_from`).
* fixed design (`_design_points`, a search with arms): each (arm, design index) in the spec's
  order that is neither finished nor held: a worker takes the index's `flock` without
  waiting (`repro.locks.take(..., wait_s=0)`), so a held index is another worker's, and a
  RUNNING trial of an index whose lock was free belongs to a dead worker and is failed as
  stale (`repro.sweep.study.ask_point`). The design is data, so an interrupted search ends
  where an uninterrupted one does.

Either way a worker runs on one thread with the stop signals caught (`serve`): SIGTERM (job
cancelled or preempted) or SIGINT (Ctrl-C) marks its trial stopped (`repro.sweep.stops`), a
sweep's point queued again at once, an arm's design index asked again by the next search.
Where the workers run is `repro.sweep.launch`'s business.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from repro.errors import StorageError
from repro.locks import take
from repro.storage import storage_failure
from repro.sweep.space import design, shown_settings, suggest
from repro.sweep.spec import ArmSpec, SweepSpec
from repro.sweep.stops import Stopped, StopSignals, WriteRefused, mark_stopped
from repro.sweep.storage import WorkerLocks, fail_orphaned_trials, lost_database, open_storage
from repro.sweep.study import (
    ask_point,
    completed,
    done_indices,
    make_sampler,
    open_arm_study,
    open_journal,
    open_study,
    tally,
)
from repro.sweep.trial import TrialFailed, TrialRun, run_seeds, sweep_objective

log = logging.getLogger("repro.sweep")
POLL_S = 2.0
"""How often an idle worker looks again while others finish the last trials."""

Point = Callable[[StopSignals], None] | None
"""A trial to run, or None: nothing to start now, look again after `POLL_S`."""


def serve(points: Callable[[StopSignals], Iterator[Point]], stopped: str = "") -> None:
    """Run each trial `points(stops)` yields on one thread, one core per worker, with the
    stop signals caught: a stop ends the worker with the signal's own exit, its trial already
    marked stopped. A lock the generator holds over a yield is held while that trial runs.
    `stopped` names the worker in the warning a SIGTERM leaves in a worker of its own (on
    Ctrl-C, or in the command's own process, the command says it in its one line)."""
    import torch

    torch.set_num_threads(1)
    stops = StopSignals().install()
    printed = threading.excepthook

    def heartbeat_lost(args: threading.ExceptHookArgs) -> None:
        """Optuna's heartbeat thread meets a database gone first, and dies: without its
        heartbeat the trial is another worker's to fail as stale, so it stops now (from its
        checkpoint, a retry resumes it) and the worker says why in one line."""
        if lost_database(args.exc_value) is None:
            printed(args)
        else:
            os.kill(os.getpid(), signal.SIGTERM)

    threading.excepthook = heartbeat_lost
    try:
        with contextlib.closing(points(stops)) as each:
            for point in each:
                stops.check()
                if point is None:
                    time.sleep(POLL_S)
                else:
                    point(stops)
    except Exception as err:  # a database gone between trials (asking, counting)
        lost = lost_database(err)
        if lost is None:
            raise
        raise lost from None
    except Stopped as stop:
        end = stop.exit()
        if stopped and not isinstance(end, KeyboardInterrupt):  # else the command says it
            log.warning("%s stopped by %s", stopped, stop.name)
        stops.restore()
        # Ctrl-C reaches a worker twice (from the terminal, then passed on by its launcher,
        # which cannot tell it came to all): the second, in the exit's hooks once the default
        # handler was back, printed a KeyboardInterrupt traceback under the one-line stop
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise end from None
    finally:
        stops.restore()
        threading.excepthook = printed


def run_worker(spec: SweepSpec, index: int) -> None:
    """A sweep worker: count, ask, run, until the budget is spent, `timeout_s` has passed
    since it started (after its first trial, as Optuna's own `timeout`: a worker that starts
    late, a job queued for hours or a process still loading, still does work) or a stop
    signal comes."""
    deadline = None if spec.timeout_s is None else time.time() + spec.timeout_s
    storage = open_storage(spec)
    study = open_study(spec, storage)
    # Distinct seeds per worker and per resume: equal seeds would propose equal points.
    study.sampler = make_sampler(spec, 1_000_003 * index + len(study.get_trials(deepcopy=False)))
    locks = WorkerLocks(spec.study_dir)
    me = locks.register()
    points = functools.partial(_adaptive_points, spec, study, storage, locks, me, deadline)
    serve(points, f"sweep {spec.name}: worker {me}")


def tune_worker(spec: SweepSpec, runs: dict[str, list[str]]) -> None:
    """A search-with-arms worker: every design point of every arm that is neither finished
    nor held by another worker, in the spec's order."""
    import socket

    me = f"{socket.gethostname()}:{os.getpid()}"
    serve(functools.partial(_design_points, spec, runs, open_journal(spec), me))


def _adaptive_points(
    spec: SweepSpec,
    study: Any,
    storage: Any,
    locks: WorkerLocks,
    me: str,
    deadline: float | None,
    stops: StopSignals,
) -> Iterator[Point]:
    import optuna

    heartbeat_grace_s = None if spec.storage is None else spec.grace_s
    asked = waiting = False
    while True:
        stops.check()
        with take(spec.study_dir / "ask.lock") as lock:
            experimental = optuna.exceptions.ExperimentalWarning
            with warnings.catch_warnings(action="ignore", category=experimental):
                optuna.storages.fail_stale_trials(study)  # a no-op on a journal: no heartbeat
            if fail_orphaned_trials(study, storage, locks, heartbeat_grace_s):
                log.warning("sweep %s: failed trials of dead workers, queued again", spec.name)
            done, running = tally(study)
            late = asked and deadline is not None and time.time() >= deadline
            if done >= spec.n_trials or late:
                return
            if done + running < spec.n_trials:
                asked, waiting = True, False
                yield functools.partial(_sampled, spec, study, storage, me, lock.release)
                continue
            if not waiting:
                waiting = True
                _say_waiting(spec, study, locks)
        yield None


def _say_waiting(spec: SweepSpec, study: Any, locks: WorkerLocks) -> None:
    """Why a worker starts nothing while the budget is spoken for: the last trials run in
    another worker, or in a dead one whose trial storage fails only once its heartbeat is
    `grace_s` old (a killed sweep's, resumed on PostgreSQL, waited so without a word). On a
    journal, a trial stamped by another host's worker waits as long as that worker's lock
    file is here (`WorkerLocks.is_alive`): a study copied from a cluster node waited without
    end, so the file to delete is named."""
    from optuna.trial import TrialState

    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    which = ", ".join(str(t.number) for t in running) or "the last trials"
    away = [w for t in running if (w := t.user_attrs.get("worker")) and not locks.here(w)]
    why = ""
    if spec.storage is not None:
        why = f"; a dead worker's runs again once its heartbeat is {spec.grace_s} s old"
    elif away:
        why = (
            f"; worker {away[0]} is on another host: if it is gone (the study was copied "
            f"here), delete {locks.lock_file(away[0])} and its trial runs again here"
        )
    print(
        f"sweep {spec.name}: waiting for trial {which}, running in another worker{why}", flush=True
    )


def _sampled(
    spec: SweepSpec, study: Any, storage: Any, me: str, unlock: Any, stops: StopSignals
) -> None:
    """Run the sampler's next point as one trial of the sweep."""
    run = TrialRun()
    objective = functools.partial(
        sweep_objective, spec=spec, storage=storage, worker=me, unlock=unlock, run=run, stops=stops
    )
    started = time.perf_counter()
    lost = run_one_trial(study, storage, objective, run)
    if lost is None:
        _say_finished(spec, study, run.number, time.perf_counter() - started)
    else:
        log.warning(
            "sweep %s: trial %d was failed as stale while it ran (no heartbeat for grace_s=%d "
            "s: raise it on a loaded machine); its point is queued again",
            spec.name,
            lost,
            spec.grace_s,
        )


def _say_finished(spec: SweepSpec, study: Any, number: int | None, seconds: float) -> None:
    """A finished trial's line: how far the sweep is, the point and its objectives, or why it
    failed (the reason its trial records)."""
    from optuna.trial import TrialState

    trial = next((t for t in study.get_trials(deepcopy=False) if t.number == number), None)
    if trial is None or trial.state not in (TrialState.COMPLETE, TrialState.FAIL):
        return
    if trial.state == TrialState.COMPLETE:
        outcome = shown_settings(dict(zip(spec.metric_names, trial.values, strict=True)))
    else:
        outcome = f"failed ({trial.user_attrs.get('fail_reason', 'no reason recorded')})"
    print(
        f"sweep {spec.name} [{tally(study)[0]}/{spec.n_trials}] trial {number}: "
        f"{shown_settings(trial.params)} -> {outcome} in {seconds:.0f} s",
        flush=True,
    )


class _RecordedFailures(logging.Filter):
    """Drops Optuna's two warnings for a trial failed by `TrialFailed` (the reason with its
    traceback, then the missing value): that failure is an outcome the trial records and
    `_say_finished` prints in one line. Any other failure keeps the first, its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, TrialFailed):
            return False
        return not record.getMessage().endswith("failed with value None.")


RECORDED_FAILURES = _RecordedFailures()


def run_one_trial(study: Any, storage: Any, objective: Any, run: TrialRun) -> int | None:
    """Run one trial of `objective` (which fills in `run`). Returns None, or the trial's
    number when another worker failed it as stale while it ran (its heartbeat came too late):
    Optuna then refuses this worker's writes of the result, with one error or another, and
    that must not end the worker. A stop signal marks the trial stopped and queues its point
    again before `Stopped` propagates; a run's write the disk refused (`WriteRefused`) is
    marked so too, and its `StorageError` propagates, as does one of Optuna's own writes
    (perhaps hidden under the error its cleanup then meets). Any other error propagates."""
    from optuna.trial import TrialState

    logging.getLogger("optuna.study._optimize").addFilter(RECORDED_FAILURES)
    try:
        study.optimize(objective, n_trials=1, catch=(TrialFailed,))
    except Stopped as stop:
        if run.number is not None:
            mark_stopped(study, storage, run.number, stop, requeue=True)
        raise
    except WriteRefused as refused:
        if run.number is not None:
            # the journal may be on the disk that refused: then the trial stays RUNNING, and
            # the next sweep fails it as its dead worker's and queues its point again
            with contextlib.suppress(StorageError):
                mark_stopped(study, storage, run.number, refused, requeue=True)
        raise refused.error from None
    except Exception as err:
        full = storage_failure(err) or lost_database(err)
        if full is not None:  # Optuna's cleanup may have failed on it too, hiding it
            raise full from None
        mine = [t for t in study.get_trials(deepcopy=False) if t.number == run.number]
        if not run.ended or not mine or mine[0].state != TrialState.FAIL:
            raise
        return run.number
    return None


def _design_points(
    spec: SweepSpec, runs: dict[str, list[str]], storage: Any, me: str, stops: StopSignals
) -> Iterator[Point]:
    for arm in spec.arms.values():
        study = open_arm_study(spec, arm, runs, storage)
        for index in range(spec.n_trials):
            if index in done_indices(study):
                continue
            lock = take(spec.study_dir / "locks" / f"{arm.name}.{index}.lock", wait_s=0)
            if lock is None:
                continue  # another worker runs it
            with lock:
                stops.check()
                if index not in done_indices(study):  # not finished while we took the lock
                    yield functools.partial(run_point, spec, arm, runs, study, storage, index, me)


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

    point = design(spec.space_of(arm), spec.n_trials, spec.sampler.seed)[index]
    trial = ask_point(spec, study, storage, index, point, me)
    params = {p.key: suggest(trial, p) for p in spec.space_of(arm)}
    started = time.perf_counter()
    try:
        value, attrs = stops.call(run_seeds, spec, runs, arm, params)
    except Stopped as stop:  # its design index is asked again by the next search
        mark_stopped(study, storage, trial.number, stop, requeue=False)
        raise
    except Exception as err:  # a crash is a bug to fix, not a score: stop the search
        trial.set_user_attr("fail_reason", f"{type(err).__name__}: {err}"[:500])
        study.tell(trial, state=TrialState.FAIL)
        raise
    for key, v in attrs.items():
        trial.set_user_attr(key, v)
    study.tell(trial, value)
    values = [t.value for t in completed(study)]
    best = (min if spec.objective.direction == "minimize" else max)(values)
    shown = shown_settings(params)
    print(
        f"tune {spec.experiment} [{arm.name} {len(values)}/{spec.n_trials}] #{index} {shown} -> "
        f"{value:.4g} (best {best:.4g}){' diverged' if attrs['diverged'] else ''} in "
        f"{time.perf_counter() - started:.0f} s",
        flush=True,
    )
