"""Sweep workers submitted as SLURM array jobs sharing a real PostgreSQL study (issue 16).

A worker job cancelled in the middle of a trial loses only that trial: Optuna's heartbeat
fails it and its point runs again, so the sweep still ends with exactly its budget.
"""

from __future__ import annotations

import re
import subprocess
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import yaml

from tests.helpers import REPO, repro_cli
from tests.integration.slurm_jobs import (
    GUARD_S,
    SLOW,
    # autouse: importing the fixture is what applies it to this module's tests
    _cancel_leftovers,  # noqa: F401
    _wait,
)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("slurm_cluster")]


def _running_trial_job(storage, name: str) -> tuple[object, str]:
    """A RUNNING trial of study `name` and the array task (`<array job>_<index>`; the bare id
    of task 0 would name the whole array) of the worker running it."""
    import optuna
    from optuna.trial import TrialState

    deadline = time.monotonic() + GUARD_S
    while time.monotonic() < deadline:
        try:
            study = optuna.load_study(study_name=name, storage=storage)
            running = study.get_trials(states=(TrialState.RUNNING,))
        except KeyError:
            running = []
        for t in running:
            if "worker" in t.user_attrs:
                pid = t.user_attrs["worker"].rpartition(":")[2]
                raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                env = dict(e.decode().split("=", 1) for e in raw if b"=" in e)
                return t, f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
        time.sleep(0.2)
    pytest.fail(f"no trial of {name} started running within {GUARD_S:.0f} s")


@pytest.mark.timeout(600)
def test_sweep_survives_a_cancelled_worker_job_through_optunas_heartbeat(tmp_path, pg_url):
    from optuna.trial import TrialState

    from repro.sweep.results import load_study
    from repro.sweep.spec import load_spec
    from repro.sweep.storage import open_storage

    raw = yaml.safe_load((REPO / "sweeps" / "tiny.yaml").read_text())
    # 200 steps of 50 ms modeled compute, really slept: a trial lasts over 10 s, so a worker
    # job is cancelled in the middle of one and its trial outlives SLURM's KillWait (5 s)
    # from SIGTERM to SIGKILL. Beats every second, stale after 10 s.
    raw["overrides"] += [*SLOW, "compute.mode=sampled", "trainer.steps=200"]
    raw["overrides"] += [f"runs_root={tmp_path / 'runs'}", f"data.root={tmp_path / 'data'}"]
    raw["overrides"] += ["tracking=disabled"]
    raw.update(out=str(tmp_path / "sweeps"), storage=pg_url, n_trials=3, heartbeat_s=1, grace_s=10)
    spec_path = tmp_path / "tiny.yaml"
    spec_path.write_text(yaml.safe_dump(raw))
    submitted = repro_cli(
        "sweep", str(spec_path), "--workers", "2", "--cluster", "slurm_local", cwd=tmp_path
    )
    assert submitted.returncode == 0, submitted.stderr
    assert re.search(r"2 workers submitted as jobs (\d+)_0, \1_1", submitted.stdout)

    spec = load_spec(spec_path)
    victim, job = _running_trial_job(open_storage(spec), "tiny")
    time.sleep(1.0)  # well inside the trial
    cancelled_at = datetime.now()
    subprocess.run(["scancel", job], check=True, timeout=60)
    states = _wait(tmp_path / "runs")
    assert sorted(states.values()) == ["CANCELLED", "COMPLETED"]

    trials = {t.number: t for t in load_study(spec).get_trials(deepcopy=False)}
    complete = [t for t in trials.values() if t.state == TrialState.COMPLETE]
    assert len(complete) == 3  # exactly the budget, the lost trial not counted
    lost = trials[victim.number]
    assert lost.state == TrialState.FAIL
    # Failed by Optuna's heartbeat (the worker locks would have stamped `stale`), and its
    # point run again by RetryHeartbeatStaleTrialCallback's WAITING copy.
    assert "stale" not in lost.user_attrs and "fail_reason" not in lost.user_attrs
    (retry,) = [t for t in complete if t.system_attrs.get("failed_trial") == lost.number]
    assert retry.params == lost.params
    # SLURM's KillWait (5 s), the grace (10 s), the other worker's trial in progress and its
    # 2 s poll: the point runs again well within a minute, not at `timeout_s`.
    assert retry.datetime_start - cancelled_at < timedelta(seconds=45)
    assert all(t.state in (TrialState.COMPLETE, TrialState.FAIL) for t in trials.values())
