"""Runs, run sets and sweep workers submitted to a real local SLURM cluster (issues 8, 16).

Every job goes through sbatch, slurmctld, slurmd and srun; states come from sacct; the sweep
shares a real PostgreSQL study. Each test has its own runs_root (and so its own submitit
folder and jobs.jsonl). Every wait has a deadline after which the test cancels what it
submitted and fails, so nothing hangs.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import torch
import yaml

from repro.cli import main as repro_main
from repro.cluster.jobs import ACTIVE, read_records
from repro.cluster.jobs import job_states as states_of
from repro.cluster.launcher import launch_runs
from repro.cluster.runsets import run_set
from repro.cluster.submit import submit_run
from repro.config import compose, run_dir_of
from repro.train.entry import run_training
from tests.helpers import REPO, TINY, repro_cli, train

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("slurm_cluster")]

GUARD_S = 240.0  # hang guard for a job on a loaded 2-core machine, not a speed check
EQUAL_KEYS = (
    "step",
    "train/loss",
    "test/loss",
    "test/acc",
    "comm/bytes",
    "comm/collectives",
    "time/modeled_s",
)
# A cluster launch runs processes; its local twin is pinned to the same engine (the local
# default at this scale would be the simulated one, equal only to float rounding).
TWO_WORKERS = [
    *TINY,
    "trainer.world_size=2",
    "trainer.engine=processes",
    "compute.mode=sampled",
    "network=eth1g",
]
# 50 ms of modeled compute per step that each worker really sleeps: a run long enough to
# requeue or kill in the middle, with the same numbers as the run without sleeping.
SLOW = ["compute.dist=constant", "compute.mean_ms=50", "network.inject=true"]


def _slurm_overrides(tmp: Path) -> list[str]:
    return [
        "cluster=slurm_local",
        "tracking=disabled",
        f"runs_root={tmp / 'runs'}",
        f"data.root={tmp / 'data'}",
    ]


@pytest.fixture(autouse=True)
def _cancel_leftovers(tmp_path: Path) -> Iterator[None]:
    """A test that fails half-way must not leave its jobs running on the shared cluster."""
    yield
    if (tmp_path / "runs" / "jobs.jsonl").exists():
        ids = [r.job_id for r in read_records(tmp_path / "runs")]
        subprocess.run(["scancel", *ids], check=False, timeout=60)


def _wait(root: Path, guard_s: float = GUARD_S) -> dict[str, str]:
    """Poll the recorded jobs' states (sacct) until every job has ended."""
    records = read_records(root)
    deadline = time.monotonic() + guard_s
    while True:
        states = states_of(records)
        if _ended(states):
            return states
        if time.monotonic() > deadline:
            pytest.fail(f"jobs under {root} not done after {guard_s:.0f} s: {states}")
        time.sleep(1.0)


def _ended(states: dict[str, str]) -> bool:
    return all(s not in ACTIVE and s != "UNKNOWN" for s in states.values())


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def _assert_same_run(a: Path, b: Path) -> None:
    sa, sb = _summary(a), _summary(b)
    for key in EQUAL_KEYS:
        assert sa[key] == sb[key], key
    ma, mb = torch.load(a / "final_model.pt"), torch.load(b / "final_model.pt")
    assert all(torch.equal(ma[k], mb[k]) for k in mb)


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


@pytest.mark.timeout(600)
def test_train_submits_a_two_task_job_equal_to_the_local_run(tmp_path: Path) -> None:
    submitted = repro_cli("train", *TWO_WORKERS, *_slurm_overrides(tmp_path), cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    job_id = re.search(r"submitted sync: job (\d+) run_dir=(\S+)", submitted.stdout)
    assert job_id is not None, submitted.stdout
    root = tmp_path / "runs"
    states = _wait(root)
    assert states == {job_id.group(1): "COMPLETED"}
    record = read_records(root)[0]
    assert (record.kind, record.label, record.tasks) == ("run", "sync", 2)

    local = train(tmp_path / "local", *TWO_WORKERS)
    _assert_same_run(Path(job_id.group(2)), Path(local["run_dir"]))

    listed = repro_cli("jobs", "--root", str(root), cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert re.search(
        rf"^{job_id.group(1)}\s+run\s+sync\s+COMPLETED\s+{record.stdout}$", listed.stdout, re.M
    ), listed.stdout


@pytest.mark.timeout(600)
def test_run_set_is_one_array_and_each_run_equals_its_local_twin(tmp_path, capsys) -> None:
    runs = run_set("adacomm", "tiny", _slurm_overrides(tmp_path))[:2]
    assert [label for label, _ in runs] == ["sync", "local_sgd_tau4"]
    assert len(launch_runs(runs, "adacomm tiny").jobs) == 2
    printed = capsys.readouterr().out
    ids = re.findall(r"submitted (\w+): job (\d+)_(\d)", printed)
    assert [(label, index) for label, _, index in ids] == [("sync", "0"), ("local_sgd_tau4", "1")]
    assert ids[0][1] == ids[1][1]  # one array
    states = _wait(tmp_path / "runs")
    assert set(states.values()) == {"COMPLETED"}

    local_overrides = [
        "trainer.engine=processes",
        "tracking=disabled",
        f"runs_root={tmp_path / 'local'}",
        f"data.root={tmp_path / 'data'}",
    ]
    for (label, cfg), (_, local) in zip(
        runs, run_set("adacomm", "tiny", local_overrides), strict=False
    ):
        assert local.label == label
        _assert_same_run(run_dir_of(cfg), Path(run_training(local)["run_dir"]))
    # resubmitting the finished set submits nothing
    assert launch_runs(runs, "adacomm tiny").jobs == []
    assert "adacomm tiny: every run has finished" in capsys.readouterr().out
    assert len(read_records(tmp_path / "runs")) == 2


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
    assert final.rstrip().endswith("1 jobs: 1 FAILED")
    assert not (run_dir_of(cfg) / "summary.json").exists()


@pytest.mark.timeout(600)
def test_requeue_in_the_middle_resumes_and_matches_the_uninterrupted_run(tmp_path) -> None:
    cfg = compose([*TWO_WORKERS, *SLOW, "trainer.steps=300", *_slurm_overrides(tmp_path)])
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
        "trainer.steps=300",
        "compute.dist=constant",
        "compute.mean_ms=50",
    )
    _assert_same_run(run_dir_of(cfg), Path(local["run_dir"]))


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


def _cli_error(capsys, *args: str) -> str:
    assert repro_main(list(args)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_bad_input_is_one_clear_line(tmp_path, capsys, monkeypatch) -> None:
    base = ["train", *TINY, *_slurm_overrides(tmp_path)]
    assert _cli_error(capsys, *base, "cluster.partition=gpu") == (
        "error: cluster.partition=gpu: no such SLURM partition (known: debug)"
    )
    assert _cli_error(capsys, *base, "trainer.world_size=4", "cluster.cpus_per_task=4") == (
        "error: 4 task(s) per node x cluster.cpus_per_task=4 = 16 CPUs, more than the 8 per "
        "node of partition debug; lower trainer.world_size or cluster.cpus_per_task, or raise "
        "cluster.nodes"
    )
    assert "cluster.env_file=/nowhere/env does not exist" in _cli_error(
        capsys, *base, "cluster.env_file=/nowhere/env"
    )
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    assert _cli_error(capsys, *base).startswith("error: sbatch not found: cluster=slurm_local")
    assert not (tmp_path / "runs").exists()  # nothing submitted, nothing recorded
