"""submitit against a real local SLURM cluster with accounting.

Every job here really goes through sbatch, slurmctld, slurmd and srun, and submitit learns
its state from sacct via slurmdbd. Each test uses its own submitit folder: job ids restart
at 1 on a fresh cluster, and a shared folder would mix their pickles.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import submitit
from submitit.core.utils import UncompletedJobError

from repro.cluster import smoke
from repro.cluster.slurm_env import (
    SRUN_CPUS_PER_TASK_SETUP,
    job_log_tail,
    partition_info,
    sbatch_available,
)
from repro.errors import UserError

pytest_plugins = ["tests.slurm_fixture"]
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("slurm_cluster")]

# A hang guard, not a speed check: a healthy job here finishes in a few seconds.
JOB_GUARD_S = 90.0


def _executor(folder: Path, **params: Any) -> submitit.AutoExecutor:
    executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
    executor.update_parameters(slurm_partition="debug", timeout_min=5, **params)
    return executor


def _wait(job: submitit.Job[Any], guard_s: float = JOB_GUARD_S) -> None:
    """Block until submitit sees the job finished; cancel it and fail if that never comes."""
    deadline = time.monotonic() + guard_s
    while not job.done():
        if time.monotonic() > deadline:
            job.cancel(check=False)
            pytest.fail(f"job {job.job_id} not finished after {guard_s:.0f} s: {job.state}")
        time.sleep(0.5)


@pytest.mark.timeout(180)
def test_function_result_comes_back_from_the_node(tmp_path: Path) -> None:
    job = _executor(tmp_path).submit(smoke.where_am_i)
    _wait(job)
    info = job.result()
    assert info["SLURM_JOB_ID"] == job.job_id
    assert info["SLURM_JOB_PARTITION"] == "debug"
    assert info["hostname"] == socket.gethostname()


@pytest.mark.timeout(180)
def test_two_tasks_report_distinct_ranks(tmp_path: Path) -> None:
    executor = _executor(
        tmp_path, tasks_per_node=2, cpus_per_task=2, slurm_setup=[SRUN_CPUS_PER_TASK_SETUP]
    )
    job = executor.submit(smoke.task_identity)
    _wait(job)
    results = job.results()
    assert sorted(r["global_rank"] for r in results) == [0, 1]
    for r in results:
        assert r["job_id"] == job.job_id
        assert r["num_tasks"] == 2
        assert r["local_rank"] == r["global_rank"]
        assert r["slurm_procid"] == str(r["global_rank"])
        # The 22.05 workaround reached the tasks, so srun launched them with 2 CPUs each.
        assert r["cpus_per_task"] == r["srun_cpus_per_task"] == "2"


@pytest.mark.timeout(180)
def test_job_that_dies_hard_is_reported_failed(tmp_path: Path) -> None:
    job = _executor(tmp_path).submit(smoke.die_hard, 1)
    # Accounting must turn the crash into a FAILED state within a minute; without it
    # submitit would wait forever for a result pickle that never comes.
    _wait(job, guard_s=60.0)
    assert job.state == "FAILED"
    # submitit waits up to 15 s for a late result pickle (a slow shared filesystem); this
    # folder is local and the crash never writes one, so one second is the same answer
    job._results_timeout_s = 1
    with pytest.raises(UncompletedJobError, match="FAILED"):
        job.result()
    assert "Exited with exit code 1" in job_log_tail(job.paths.stderr, 5)


@pytest.mark.timeout(180)
def test_job_array_of_two(tmp_path: Path) -> None:
    jobs = _executor(tmp_path, slurm_array_parallelism=2).map_array(smoke.square_in_array, [3, 4])
    for job in jobs:
        _wait(job)
    results = [job.result() for job in jobs]
    assert [r["value"] for r in results] == [9, 16]
    array_id = jobs[0].job_id.split("_")[0]
    assert [job.job_id for job in jobs] == [f"{array_id}_0", f"{array_id}_1"]
    assert [r["array_task_id"] for r in results] == ["0", "1"]
    assert {r["array_job_id"] for r in results} == {array_id}


def test_partition_info_reads_the_live_partition() -> None:
    assert sbatch_available()
    info = partition_info("debug")
    assert info == {
        "name": "debug",
        "state": "UP",
        "nodes": 1,
        "cpus": 8,
        "cpus_per_node": 8,
        "gpus_per_node": 0,
        "node_list": "localhost",
    }
    with pytest.raises(UserError, match=r"cluster.partition=gpu: .*\(known: debug\)"):
        partition_info("gpu")


def test_cluster_and_account_are_registered_in_accounting() -> None:
    shown = subprocess.run(
        ["sacctmgr", "-n", "-P", "show", "association", "format=cluster,account,user"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert "repro|repro|root" in shown.stdout.splitlines()
