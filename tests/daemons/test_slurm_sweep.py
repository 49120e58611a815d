"""Sweep workers cancelled or preempted on the local SLURM cluster, sharing a real PostgreSQL
study, with tracking on (wandb offline, whose service process is in the job too).

SLURM ends a cancelled or preempted job by sending SIGTERM to every process of it at once,
wandb's service included, then SIGKILL after KillWait. The trial a worker loses that way is
not an outcome: it is marked as stopped, its point runs again in the same run directory, from
the checkpoint the lost run left, and the study still ends with exactly its budget complete.
"""

from __future__ import annotations

import io
import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from repro.cluster.jobs import job_states, read_records
from repro.train import checkpoint
from tests.daemons.slurm_jobs import (
    GUARD_S,
    SLOW,
    _wait,
)
from tests.helpers import REPO, repro_cli

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("slurm_cluster")]

STEPS, EVERY = 200, 20
"""200 steps of 50 ms slept modeled compute: a trial lasts over 10 s, checkpointed every 20;
the victim is taken while its last checkpoint is at step 20 to 100: a window of 5 s for a poll
on a loaded machine (3 s was missed once beside the rest of the suite: both trials first seen
running at step 100), with at least 5 s of sleep left before its trial could end."""


def _write_spec(tmp_path: Path, pg_url: str) -> Path:
    raw = yaml.safe_load((REPO / "sweeps" / "tiny.yaml").read_text())
    raw["overrides"] += [*SLOW, "compute.mode=sampled", f"trainer.steps={STEPS}"]
    raw["overrides"] += [f"trainer.checkpoint_every={EVERY}", f"trainer.eval_every={EVERY}"]
    raw["overrides"] += [f"runs_root={tmp_path / 'runs'}", f"data.root={tmp_path / 'data'}"]
    raw["overrides"] += ["tracking=wandb_offline"]
    raw.update(out=str(tmp_path / "sweeps"), storage=pg_url, n_trials=2, heartbeat_s=1, grace_s=10)
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _submit(spec_path: Path, cwd: Path) -> subprocess.CompletedProcess:
    return repro_cli("sweep", str(spec_path), "--workers", "2", "--cluster", "slurm_local", cwd=cwd)


def _checkpointed_trial(spec: object, storage: object, runs: Path) -> tuple[object, str, int]:
    """A RUNNING trial whose run has a checkpoint, the array task running it
    (`<array job>_<index>`), and the checkpoint's step."""
    import optuna
    from optuna.trial import TrialState

    deadline = time.monotonic() + GUARD_S
    seen: dict[int, int] = {}  # trial -> last checkpoint step seen while it ran
    study = None
    while time.monotonic() < deadline:
        try:
            study = optuna.load_study(study_name="tiny", storage=storage)
            running = study.get_trials(states=(TrialState.RUNNING,))
        except KeyError:
            running = []
        for t in running:
            step = checkpoint.latest_step(spec.study_dir / f"trial_{t.number}")
            seen[t.number] = step
            if "worker" in t.user_attrs and 0 < step <= STEPS // 2:  # seconds left to hit it
                pid = t.user_attrs["worker"].rpartition(":")[2]
                raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                env = dict(e.decode().split("=", 1) for e in raw if b"=" in e)
                return t, f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}", step
        time.sleep(0.2)
    trials = [] if study is None else study.get_trials(deepcopy=False)
    pytest.fail(
        f"no trial of tiny seen running with a checkpoint in steps 1-{STEPS // 2} within "
        f"{GUARD_S:.0f} s; steps seen while running: {seen}; trials: "
        f"{[(t.number, t.state.name, t.user_attrs.get('fail_reason')) for t in trials]}; "
        f"jobs: {job_states(read_records(runs))}"
    )


@pytest.mark.timeout(600)
@pytest.mark.parametrize("how", ["scancel", "sigterm"])
def test_a_lost_worker_job_loses_no_trial_and_its_run_resumes(tmp_path, pg_url, how):
    """`scancel` (SIGTERM to every process of the job, then SIGKILL), and SIGTERM alone to
    every process of the job, as SLURM's preemption sends it."""
    from optuna.trial import TrialState

    from repro.sweep.results import load_study, show_sweep
    from repro.sweep.spec import load_spec
    from repro.sweep.storage import open_storage

    spec_path = _write_spec(tmp_path, pg_url)
    submitted = _submit(spec_path, tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    assert re.search(r"2 workers in jobs (\d+)_0, \1_1", submitted.stdout)

    spec = load_spec(spec_path)
    victim, job, seen = _checkpointed_trial(spec, open_storage(spec), tmp_path / "runs")
    signal_args = ["--signal=TERM"] if how == "sigterm" else []
    subprocess.run(["scancel", *signal_args, job], check=True, timeout=60)
    states = _wait(tmp_path / "runs")
    lost_state = "CANCELLED" if how == "scancel" else "FAILED"  # exit status 143
    assert sorted(states.values()) == sorted([lost_state, "COMPLETED"])

    trials = {t.number: t for t in load_study(spec).get_trials(deepcopy=False)}
    complete = [t for t in trials.values() if t.state == TrialState.COMPLETE]
    assert len(complete) == spec.n_trials  # exactly the budget, the lost trial not counted
    assert all(t.state in (TrialState.COMPLETE, TrialState.FAIL) for t in trials.values())
    lost = trials[victim.number]
    assert lost.state == TrialState.FAIL
    assert "fail_reason" not in lost.user_attrs  # not a crash, whatever wandb's service did
    assert lost.user_attrs["stopped"] == {"trial": lost.number, "signal": "SIGTERM"}
    (retry,) = [t for t in complete if t.system_attrs.get("failed_trial") == lost.number]
    assert retry.params == lost.params
    # the same run directory, resumed from the last checkpoint the lost run wrote
    assert f"run_dir={spec.study_dir / f'trial_{lost.number}'}" in retry.user_attrs["overrides"]
    resumed = retry.user_attrs["resumed_from"]
    assert seen <= resumed < STEPS and resumed % EVERY == 0, (seen, resumed)
    others = [t for t in complete if t is not retry]
    assert all(t.user_attrs["resumed_from"] == 0 for t in others)

    out = io.StringIO()
    show_sweep(spec, out)
    assert f"failed trial {lost.number}: stopped by SIGTERM" in out.getvalue()

    again = _submit(spec_path, tmp_path)
    assert again.returncode == 0, again.stderr
    assert "nothing to run" in again.stdout and "submitted" not in again.stdout
