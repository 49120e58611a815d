"""Journal stale-trial detection: worker liveness from flocks, and what a restart does with
trials of dead workers (a real journal file and real worker processes killed with SIGKILL)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import optuna
from optuna.storages.journal import JournalFileBackend, JournalStorage
from optuna.trial import TrialState

from repro.sweep.storage import MAX_RETRY, WorkerLocks, fail_orphaned_trials, requeue_lost_trial
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
    assert locks.is_alive("some-other-host:1")  # cannot be judged from here: never stolen
    assert not locks.is_alive(f"{locks.host}:999999999")  # no lock file at all


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
        # With a database, an unstamped trial gets the grace period (other hosts may own it).
        assert fail_orphaned_trials(study, storage, locks, 3600) == 1
        assert study.trials[unstamped.number].state == TrialState.RUNNING
        # With a journal, under the ask lock, it is dead at once.
        assert fail_orphaned_trials(study, storage, locks, 0) == 1
        by_worker = {t.user_attrs.get("worker"): t for t in study.get_trials()}
        lost = by_worker[dead_stamp]
        assert lost.state == TrialState.FAIL
        assert lost.user_attrs["stale"] == f"worker {dead_stamp} died"
        assert study.trials[unstamped.number].user_attrs["stale"] == "worker unknown died"
        assert by_worker[live_stamp].state == TrialState.RUNNING
        waiting = study.get_trials(states=(TrialState.WAITING,))
        # The lost point is queued again; the unsampled trial had nothing to redo.
        assert [(t.params, t.user_attrs) for t in waiting] == [
            (lost.params, {"retry_of": lost.number, "retries": 1})
        ]
        # Stale failures do not use up the budget: 1 complete, 1 running.
        assert tally(study) == (1, 1)
        assert fail_orphaned_trials(study, storage, locks, 0) == 0  # idempotent
    finally:
        kill(live)


def test_a_point_is_retried_at_most_max_retry_times():
    study = optuna.create_study()
    dist = {"x": optuna.distributions.FloatDistribution(0.0, 1.0)}
    lost = optuna.trial.create_trial(
        params={"x": 0.5}, distributions=dist, value=0.0, user_attrs={"retries": MAX_RETRY - 1}
    )
    requeue_lost_trial(study, lost)
    (again,) = study.get_trials(states=(TrialState.WAITING,))
    assert again.params == {"x": 0.5} and again.user_attrs["retries"] == MAX_RETRY
    requeue_lost_trial(study, again)  # the last allowed retry was lost as well: give up
    assert len(study.get_trials(states=(TrialState.WAITING,))) == 1
