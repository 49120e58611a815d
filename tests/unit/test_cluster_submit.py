"""Job shapes, rendezvous ports and env files of repro.cluster (no cluster needed)."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import pytest
import submitit

from repro.cluster.executor import job_folder, read_env_file
from repro.cluster.jobs import (
    JobRecord,
    append_records,
    failure_report,
    job_states,
    read_records,
)
from repro.cluster.slurm_env import rendezvous_port
from repro.cluster.submit import _tasks_per_node
from repro.config import compose
from repro.errors import UserError


def _cfg(*overrides: str):
    return compose(["workload=synthetic_mlp", "trainer.batch_size=16", *overrides])


def test_tasks_per_node_is_workers_over_nodes_and_at_most_one_per_gpu() -> None:
    assert _tasks_per_node(_cfg("trainer.world_size=8", "cluster=slurm", "cluster.nodes=2")) == 4
    assert _tasks_per_node(_cfg("trainer.world_size=3", "cluster=slurm_local")) == 3
    with pytest.raises(UserError, match=r"world_size=6 is not a multiple of cluster.nodes=4"):
        _tasks_per_node(_cfg("trainer.world_size=6", "cluster=slurm", "cluster.nodes=4"))
    with pytest.raises(UserError, match=r"8 workers per node but cluster.gpus_per_node=4.*to 2"):
        _tasks_per_node(_cfg("trainer.world_size=8", "cluster=slurm"))


def test_rendezvous_port_is_shared_by_tasks_and_changes_on_restart() -> None:
    ports = {rendezvous_port(str(job), restart) for job in range(200) for restart in (0, 1)}
    # all below Linux's default ephemeral range (32768-60999), spread over the span below it
    assert all(20000 <= p < 32768 for p in ports)
    assert min(ports) < 20500 and max(ports) > 32200
    assert len(ports) > 380  # 400 (job, restart) pairs over 12,768 ports: about 6 collide
    assert rendezvous_port("17_3", 0) == rendezvous_port("17_3", 0)
    assert rendezvous_port("17_3", 0) != rendezvous_port("17_3", 1)


def test_env_file_and_folder(tmp_path: Path) -> None:
    env = tmp_path / "env"
    env.write_text("# comment\nexport SLURM_CONF='/x y/slurm.conf'\nexport A=b\necho hi\n")
    assert read_env_file(env) == {"SLURM_CONF": "/x y/slurm.conf", "A": "b"}
    with pytest.raises(UserError, match="make slurm-up"):
        read_env_file(tmp_path / "missing")
    cfg = _cfg("cluster=slurm_local", f"runs_root={tmp_path}")
    assert job_folder(cfg.cluster, cfg.runs_root) == tmp_path / "slurm"


def test_job_records_round_trip_with_log_paths(tmp_path: Path) -> None:
    rec = JobRecord("12_1", "run_set", "sync", "slurm", str(tmp_path / "slurm"), tasks=2)
    path = append_records(tmp_path, [rec])
    append_records(tmp_path, [rec])
    assert path.read_text().count("\n") == 2
    back = read_records(tmp_path)
    assert back == [rec, rec]
    assert back[0].stdout == str(tmp_path / "slurm" / "12_1_0_log.out")
    assert back[0].paths(1).stderr == tmp_path / "slurm" / "12_1_1_log.err"
    with pytest.raises(UserError, match="no jobs recorded"):
        read_records(tmp_path / "elsewhere")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "jobs.jsonl").write_text("\n")  # `repro jobs` listed "0 jobs: "
    with pytest.raises(UserError) as empty:
        read_records(tmp_path / "empty")
    root = tmp_path / "empty"
    assert str(empty.value) == f"no jobs recorded under {root} ({root / 'jobs.jsonl'} is empty)"


def test_a_failure_report_keeps_sruns_word_on_a_task_that_later_lines_push_out(
    tmp_path: Path,
) -> None:
    rec = JobRecord("66", "run", "sync", "slurm", str(tmp_path / "slurm"), tasks=2)
    Path(rec.paths(0).stderr).parent.mkdir(parents=True)
    # task 0's traceback from the broken connection lands after srun reports task 1
    Path(rec.paths(0).stderr).write_text(
        "[rank0]: Traceback (most recent call last):\n"
        "srun: error: localhost: task 1: Killed\n"
        + "".join(f"[rank0]: frame {i}\n" for i in range(8))
        + "srun: error: localhost: task 0: Terminated\n"
    )
    report = failure_report(rec, lines=3).splitlines()
    assert report == [
        f"  task 0 log {rec.paths(0).stderr}:",
        "    srun: error: localhost: task 1: Killed",
        "    [rank0]: frame 6",
        "    [rank0]: frame 7",
        "    srun: error: localhost: task 0: Terminated",
        f"  task 1 log {rec.paths(1).stderr} (empty)",
    ]


def test_a_runs_folder_moved_whole_keeps_its_jobs_states_and_logs(tmp_path: Path) -> None:
    """A runs folder copied from where its jobs ran (a cluster) to elsewhere (a laptop):
    `repro jobs` called a completed job FAILED, its result file looked for at the old path,
    and named logs that were not there. A job of submitit's LocalExecutor is its pid, which
    on another host names some other process: its state there is unknown, not RUNNING."""
    root = tmp_path / "cluster" / "runs"
    job = submitit.LocalExecutor(folder=root / "slurm").submit(print, "the job ran")
    job.result()
    run_dir = root / "default" / "sync-abc123"
    rec = JobRecord(job.job_id, "run", "sync", "submitit_local", str(job.paths.folder))
    append_records(root, [dataclasses.replace(rec, run_dir=str(run_dir))])
    assert job_states(read_records(root)) == {job.job_id: "COMPLETED"}

    moved = tmp_path / "laptop" / "runs"
    shutil.copytree(root, moved)
    shutil.rmtree(root)
    (back,) = read_records(moved)
    assert (back.folder, back.run_dir) == (
        str(moved / "slurm"),
        str(moved / "default" / run_dir.name),
    )
    assert back.stdout == str(moved / "slurm" / f"{job.job_id}_0_log.out")
    assert "the job ran" in Path(back.stdout).read_text()
    assert job_states([back]) == {job.job_id: "COMPLETED"}

    mine = str(os.getpid())  # a live process here: what a copied pid may name
    unfinished = dataclasses.replace(back, job_id=mine, folder=str(tmp_path / "none"))
    assert job_states([unfinished]) == {mine: "RUNNING"}
    assert job_states([dataclasses.replace(unfinished, host="gpu-node7")]) == {mine: "UNKNOWN"}
