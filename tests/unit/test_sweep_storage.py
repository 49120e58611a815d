"""Stale-trial detection without a heartbeat: worker liveness from flocks, and what a restart
does with trials of dead workers (a real journal file and real worker processes killed with
SIGKILL); lost points are queued again by Optuna's `RetryHeartbeatStaleTrialCallback`."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
from pathlib import Path

import optuna
from optuna.storages.journal import JournalFileBackend, JournalStorage
from optuna.trial import TrialState

from repro.sweep.storage import MAX_RETRY, WorkerLocks, fail_orphaned_trials, retry_callback
from repro.sweep.study import tally

# A worker that registers, optionally starts a trial of study "s", says who it is, then waits.
WORKER = textwrap.dedent(
    """
    import sys, optuna
    from optuna.storages.journal import JournalFileBackend, JournalStorage
    from pathlib import Path
    from repro.sweep.storage import WorkerLocks
    study_dir = Path(sys.argv[1])
    me = WorkerLocks(study_dir).register()
    if len(sys.argv) > 2:
        storage = JournalStorage(JournalFileBackend(str(study_dir / "journal.log")))
        study = optuna.load_study(study_name="s", storage=storage)
        trial = study.ask()
        trial.set_user_attr("worker", me)
        trial.suggest_float("x", 0.0, 1.0)
    print(me, flush=True)
    sys.stdin.read()
    """
)


def start_worker(study_dir: Path, *args: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(study_dir), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    return proc, proc.stdout.readline().strip()


def kill(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()


def test_worker_lock_tells_live_from_dead(tmp_path):
    locks = WorkerLocks(tmp_path)
    proc, stamp = start_worker(tmp_path)
    try:
        assert stamp.endswith(f":{proc.pid}")
        assert locks.is_alive(stamp)
    finally:
        kill(proc)
    assert not locks.is_alive(stamp)
    assert not (tmp_path / "workers" / f"{stamp.replace(':', '-')}.lock").exists()
    mine = locks.register()
    assert locks.is_alive(mine)  # a second descriptor in the same process is still refused
    assert not locks.is_alive(f"{locks.host}:999999999")  # no lock file at all
    # another host's flock may not reach here: its lock file's presence alone keeps it alive
    assert not locks.is_alive("some-other-host:1")
    (tmp_path / "workers" / "some-other-host-1.lock").touch()
    assert locks.is_alive("some-other-host:1")


def test_restart_fails_only_dead_workers_trials_and_queues_them_again(tmp_path):
    storage = JournalStorage(JournalFileBackend(str(tmp_path / "journal.log")))
    study = optuna.create_study(study_name="s", storage=storage)
    study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=1.0))
    dead, dead_stamp = start_worker(tmp_path, "ask")
    live, live_stamp = start_worker(tmp_path, "ask")
    unstamped = study.ask()  # a worker that died between asking and stamping
    try:
        kill(dead)
        locks = WorkerLocks(tmp_path)
        # With a heartbeat, stamped trials are the heartbeat's, and an unstamped one gets the
        # grace period first.
        assert fail_orphaned_trials(study, storage, locks, 3600) == 0
        # With a journal, under the ask lock, the dead worker's and the unstamped trial go.
        assert fail_orphaned_trials(study, storage, locks, None) == 2
        failed = {
            t.user_attrs.get("worker"): t for t in study.get_trials(states=(TrialState.FAIL,))
        }
        lost = failed[dead_stamp]
        assert lost.user_attrs["stale"] == f"worker {dead_stamp} died"
        assert failed[None].number == unstamped.number
        assert failed[None].user_attrs["stale"] == "worker unknown died"
        (running,) = study.get_trials(states=(TrialState.RUNNING,))
        assert running.user_attrs["worker"] == live_stamp
        # Both points are queued again by Optuna's callback, which remembers the lost trial.
        waiting = {
            t.system_attrs["failed_trial"]: t
            for t in study.get_trials(states=(TrialState.WAITING,))
        }
        assert set(waiting) == {lost.number, unstamped.number}
        assert waiting[lost.number].params == lost.params
        # Stale failures do not use up the budget: 1 complete, 1 running.
        assert tally(study) == (1, 1)
        assert fail_orphaned_trials(study, storage, locks, None) == 0  # idempotent
    finally:
        kill(live)


def test_an_unstamped_trial_past_the_heartbeat_grace_is_failed(tmp_path):
    storage = JournalStorage(JournalFileBackend(str(tmp_path / "journal.log")))
    study = optuna.create_study(study_name="s", storage=storage)
    study.ask()
    assert fail_orphaned_trials(study, storage, WorkerLocks(tmp_path), 0) == 1


def test_a_point_is_retried_at_most_max_retry_times():
    study = optuna.create_study()
    dist = {"x": optuna.distributions.FloatDistribution(0.0, 1.0)}
    study.add_trial(optuna.trial.create_trial(params={"x": 0.5}, distributions=dist, value=0.0))
    lost = study.trials[0]
    for attempt in range(1, MAX_RETRY + 2):
        retry_callback()(study, lost)
        waiting = study.get_trials(states=(TrialState.WAITING,))
        assert len(waiting) == min(attempt, MAX_RETRY)
        lost = waiting[-1]
    assert all(t.params == {"x": 0.5} for t in waiting)
    assert waiting[-1].system_attrs["retry_history"] == [0, 1]


def test_a_worker_with_nothing_to_start_says_which_trials_it_waits_for(tmp_path, capsys):
    """The budget spoken for by a trial another (live) worker runs: the worker says so once
    and looks again. A killed sweep resumed on PostgreSQL waited out grace_s without a word
    for its dead trial's heartbeat to lapse."""
    import yaml

    from repro.sweep.spec import spec_from_dict
    from repro.sweep.stops import StopSignals
    from repro.sweep.worker import _adaptive_points

    raw = yaml.safe_load((Path(__file__).parents[2] / "sweeps" / "tiny.yaml").read_text())
    spec = spec_from_dict({**raw, "out": str(tmp_path), "n_trials": 1}, "t.yaml")
    spec.study_dir.mkdir(parents=True)
    storage = JournalStorage(JournalFileBackend(str(spec.study_dir / "journal.log")))
    study = optuna.create_study(study_name="s", storage=storage)
    live, _ = start_worker(spec.study_dir, "ask")
    try:
        locks = WorkerLocks(spec.study_dir)
        points = _adaptive_points(
            spec, study, storage, locks, locks.register(), None, StopSignals()
        )
        assert next(points) is None and next(points) is None
        assert capsys.readouterr().out == (
            "sweep tiny: waiting for trial 0, running in another worker\n"
        )
        # where trials beat their heartbeat, a dead worker's is failed only once it lapses
        pg = dataclasses.replace(spec, storage="postgresql://u@127.0.0.1:1/x", grace_s=60)
        assert next(_adaptive_points(pg, study, storage, locks, "me", None, StopSignals())) is None
        assert capsys.readouterr().out == (
            "sweep tiny: waiting for trial 0, running in another worker; a dead worker's runs "
            "again once its heartbeat is 60 s old\n"
        )
        study.tell(0, 1.0)  # its trial done: the budget is spent
        assert list(_adaptive_points(spec, study, storage, locks, "me", None, StopSignals())) == []
    finally:
        kill(live)


def test_optunas_fallback_guess_is_not_printed(tmp_path):
    """Optuna meets a query it cannot run (here one binding more ids than this SQLite
    connection takes; in CI a database dropped while a trial was read), logs its guess that
    the query had too many variables with the query's SQL, and runs a slower one. The sweep
    prints none of it: the slower query works, or `lost_database` says in one line why not."""
    import logging
    import sqlite3

    import sqlalchemy
    import yaml

    from repro.sweep.spec import spec_from_dict
    from repro.sweep.storage import open_storage

    raw = yaml.safe_load((Path(__file__).parents[2] / "sweeps" / "tiny.yaml").read_text())
    url = f"sqlite:///{tmp_path / 'study.db'}"
    spec = spec_from_dict({**raw, "out": str(tmp_path), "storage": url}, "t.yaml")
    storage = open_storage(spec)
    study = optuna.create_study(study_name="s", storage=storage)
    study.tell(study.ask(), 1.0)
    storage.engine.dispose()  # connections made from here on bind at most 4 variables
    sqlalchemy.event.listen(
        storage.engine,
        "connect",
        lambda conn, _: conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 4),
    )
    logged: list[str] = []
    printer = logging.Handler()  # beside Optuna's own, which writes to stderr
    printer.emit = lambda record: logged.append(record.getMessage())
    logging.getLogger("optuna").addHandler(printer)
    failed: list[str] = []  # the query Optuna falls back from
    sqlalchemy.event.listen(storage.engine, "handle_error", lambda c: failed.append(c.statement))
    try:  # the call of Optuna's cached storage: 10 unfinished ids, none after the 10th
        trials = storage._get_trials(study._study_id, None, set(range(10)), 10)
    finally:
        logging.getLogger("optuna").removeHandler(printer)
    assert [t.number for t in trials] == [0]
    assert len(failed) == 1 and "IN (" in failed[0]  # the fallback ran
    assert logged == []


def test_a_study_copied_from_another_host_names_the_lock_file_that_holds_its_trial(
    tmp_path, capsys
):
    """A journal study killed on a cluster node and copied here (`rsync -a`) holds a RUNNING
    trial stamped by that node's worker, and that worker's lock file. The sweep continued
    here waited for it without end; it says which file keeps it waiting, and once that file
    is gone the trial is failed and its point runs again here."""
    import yaml

    from repro.sweep.spec import spec_from_dict
    from repro.sweep.stops import StopSignals
    from repro.sweep.worker import _adaptive_points

    raw = yaml.safe_load((Path(__file__).parents[2] / "sweeps" / "tiny.yaml").read_text())
    spec = spec_from_dict({**raw, "out": str(tmp_path), "n_trials": 1}, "t.yaml")
    (spec.study_dir / "workers").mkdir(parents=True)
    storage = JournalStorage(JournalFileBackend(str(spec.study_dir / "journal.log")))
    study = optuna.create_study(study_name="s", storage=storage)
    lost = study.ask()
    lost.suggest_float("x", 0.0, 1.0)
    lost.set_user_attr("worker", "gpu-node7:4242")
    copied = spec.study_dir / "workers" / "gpu-node7-4242.lock"
    copied.write_text("4242 gpu-node7\n")

    locks = WorkerLocks(spec.study_dir)
    points = _adaptive_points(spec, study, storage, locks, locks.register(), None, StopSignals())
    assert next(points) is None and next(points) is None
    assert capsys.readouterr().out == (
        "sweep tiny: waiting for trial 0, running in another worker; worker gpu-node7:4242 is "
        f"on another host: if it is gone (the study was copied here), delete {copied} and its "
        "trial runs again here\n"
    )
    copied.unlink()
    assert callable(next(points))  # the budget is free again: a point to run here
    (failed,) = study.get_trials(states=(TrialState.FAIL,))
    assert failed.user_attrs["stale"] == "worker gpu-node7:4242 died"
    (queued,) = study.get_trials(states=(TrialState.WAITING,))
    assert queued.params == failed.params
