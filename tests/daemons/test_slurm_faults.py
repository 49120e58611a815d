"""A SLURM run's task killed hard, and a run requeued in the middle.

A task killed with SIGKILL fails the whole job, and `repro jobs --watch` shows that task's
log within a minute. A job requeued after a checkpoint resumes from it and ends equal to
the uninterrupted local run. Both runs sleep their modeled compute, so they last long
enough to be hit in the middle.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest

from repro.cluster.jobs import JobRecord, append_records
from repro.cluster.submit import submit_run
from repro.config import compose, run_dir_of
from tests.daemons.slurm_jobs import (
    GUARD_S,
    SLOW,
    TWO_WORKERS,
    _assert_same_run,
    _slurm_overrides,
    _wait,
)
from tests.helpers import repro_cli, train

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("slurm_cluster")]


def _checkpointed_step(run_dir: Path) -> int:
    try:
        return json.loads((run_dir / "checkpoints" / "latest.json").read_text())["step"]
    except (OSError, ValueError):
        return 0


def _wait_for_checkpoint(run_dir: Path, step: int) -> None:
    deadline = time.monotonic() + GUARD_S
    while _checkpointed_step(run_dir) < step:
        if time.monotonic() > deadline:
            pytest.fail(f"{run_dir} has no checkpoint of step {step} after {GUARD_S:.0f} s")
        time.sleep(0.2)


def _task_pid(job_id: str, rank: int) -> int:
    """The pid of task `rank` of job `job_id` on this node (we are root and share it)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = (proc / "environ").read_bytes().split(b"\0")
            cmd = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if (
            f"SLURM_JOB_ID={job_id}".encode() in env
            and f"SLURM_PROCID={rank}".encode() in env
            and b"submitit.core._submit" in cmd
        ):
            return int(proc.name)
    raise AssertionError(f"no process of task {rank} of job {job_id} found")


@pytest.mark.timeout(600)
def test_a_task_killed_hard_fails_the_job_with_its_log_shown(tmp_path: Path) -> None:
    cfg = compose([*TWO_WORKERS, *SLOW, "trainer.steps=2000", *_slurm_overrides(tmp_path)])
    job = submit_run(cfg)
    root = tmp_path / "runs"
    _wait_for_checkpoint(run_dir_of(cfg), 20)
    os.kill(_task_pid(job.job_id, 1), signal.SIGKILL)
    # srun ends the other task (--kill-on-bad-exit) and accounting reports the failure;
    # `repro jobs --watch` returns once no job is active, and must do so within a minute.
    watched = repro_cli("jobs", "--root", str(root), "--watch", "--interval", "1", timeout=60)
    assert watched.returncode == 1, watched.stdout + watched.stderr
    final = watched.stdout.split("\n\n")[-1]
    assert re.search(rf"^{job.job_id}\s+run\s+sync\s+FAILED", final, re.M), final
    assert f"task 0 log {job.paths.stderr}:" in final
    assert "task 1: Killed" in final
    assert final.rstrip().endswith("1 job: 1 FAILED")
    assert not (run_dir_of(cfg) / "summary.json").exists()


@pytest.mark.timeout(600)
def test_requeue_in_the_middle_resumes_and_matches_the_uninterrupted_run(tmp_path) -> None:
    # requeued at step 60 or later, the job runs on through KillWait (5 s, 100 steps) before
    # SLURM kills it: 220 steps leave it 3 s more, so the kill still comes in the middle
    cfg = compose([*TWO_WORKERS, *SLOW, "trainer.steps=220", *_slurm_overrides(tmp_path)])
    job = submit_run(cfg)
    root = tmp_path / "runs"
    _wait_for_checkpoint(run_dir_of(cfg), 60)
    subprocess.run(["scontrol", "requeue", job.job_id], check=True, timeout=60)
    _release_requeued(job.job_id)
    states = _wait(root)
    assert states == {job.job_id: "COMPLETED"}
    starts = re.findall(r"2 workers, from step (\d+)", Path(job.paths.stdout).read_text())
    assert len(starts) == 2 and starts[0] == "0" and int(starts[1]) >= 60, starts

    local = train(
        tmp_path / "local",
        *TWO_WORKERS,
        "trainer.steps=220",
        "compute.dist=constant",
        "compute.mean_ms=50",
    )
    _assert_same_run(run_dir_of(cfg), Path(local["run_dir"]))


@pytest.mark.timeout(600)
def test_a_run_that_fits_a_one_minute_limit_runs_once(tmp_path) -> None:
    """The warning before the time limit was 90 s whatever the limit: before a 1-minute one
    it came at the start, so every try was requeued within seconds and a run of seconds
    took minutes of requeues, or failed once they ran out."""
    cfg = compose([*TWO_WORKERS, *_slurm_overrides(tmp_path), "cluster.time_min=1"])
    job = submit_run(cfg)
    assert _wait(tmp_path / "runs") == {job.job_id: "COMPLETED"}
    starts = re.findall(r"2 workers, from step (\d+)", Path(job.paths.stdout).read_text())
    assert starts == ["0"]


def _release_requeued(job_id: str) -> None:
    """Start a requeued job now. Once its old steps are gone SLURM puts it back in the queue
    with a begin time about two minutes ahead; the requeue on preemption this stands for is
    not about that wait, so the test lifts it (as an operator would) instead of sleeping."""
    deadline = time.monotonic() + GUARD_S
    while time.monotonic() < deadline:
        state = subprocess.run(
            ["squeue", "-h", "-j", job_id, "-o", "%T %r"], capture_output=True, text=True
        ).stdout.split()
        if state == ["PENDING", "BeginTime"]:
            subprocess.run(
                ["scontrol", "update", f"JobId={job_id}", "StartTime=now"], check=True, timeout=60
            )
            return
        time.sleep(0.5)
    pytest.fail(f"requeued job {job_id} did not come back to the queue within {GUARD_S:.0f} s")


@pytest.mark.timeout(180)
def test_a_job_neither_the_accounting_nor_the_queue_knows_is_not_waited_for(tmp_path) -> None:
    """A record of a job the cluster has forgotten (purged from accounting, or an earlier
    cluster's): `--watch` used to count it as pending and redraw for ever."""
    cluster = compose(["cluster=slurm_local"]).cluster
    root = tmp_path / "runs"
    gone = JobRecord("98765432", "run", "sync", cluster.name, str(tmp_path / "jobs"))
    append_records(root, [replace(gone, env_file=cluster.env_file)])
    watched = repro_cli("jobs", "--root", str(root), "--watch", "--interval", "1", timeout=60)
    assert watched.returncode == 0, watched.stdout + watched.stderr
    assert re.search(r"^98765432\s+run\s+sync\s+NOT_FOUND", watched.stdout, re.M)
    assert watched.stdout.rstrip().endswith("1 job: 1 NOT_FOUND")
