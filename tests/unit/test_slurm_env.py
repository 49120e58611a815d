"""The SLURM helpers that need no cluster: log tails, GRES parsing, missing client tools, the
variables an srun step's tasks take (the step itself: tests/daemons/test_slurm_submit.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from repro.cluster.executor import default_partition
from repro.cluster.slurm_env import (
    _gpus,
    job_log_tail,
    join_srun_step,
    partition_info,
    rendezvous_port,
    sbatch_available,
)
from repro.errors import UserError


def test_tail_of_a_log_longer_than_many_read_blocks(tmp_path: Path) -> None:
    log = tmp_path / "job.err"
    log.write_text("".join(f"line {i}\n" for i in range(50_000)))
    assert job_log_tail(log, 3) == "line 49997\nline 49998\nline 49999"


def test_tail_without_final_newline_and_with_long_lines(tmp_path: Path) -> None:
    log = tmp_path / "job.out"
    long_line = "x" * 20_000  # longer than one read block
    log.write_text(f"first\n{long_line}\nTraceback: boom")
    assert job_log_tail(log, 2) == f"{long_line}\nTraceback: boom"


def test_tail_asking_for_more_lines_than_the_log_has(tmp_path: Path) -> None:
    log = tmp_path / "short.log"
    log.write_text("a\nb\n")
    assert job_log_tail(log, 10) == "a\nb"


def test_tail_of_a_log_the_job_never_wrote(tmp_path: Path) -> None:
    assert job_log_tail(tmp_path / "missing.log", 5) == ""


def test_tail_rejects_a_non_positive_line_count(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="n=0"):
        job_log_tail(tmp_path / "any.log", 0)


@pytest.mark.parametrize(
    ("gres", "gpus"),
    [
        ("(null)", 0),
        ("gpu:4", 4),
        ("gpu:a100:4(S:0-1)", 4),
        ("gpu:4(S:0,1)", 4),
        ("gpu:a100:2,gpu:v100:1", 3),
        ("mps:100,gpu:2", 2),
    ],
)
def test_gpus_counted_from_a_nodes_gres(gres: str, gpus: int) -> None:
    assert _gpus(gres) == gpus


def test_no_slurm_tools_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert sbatch_available() is False
    with pytest.raises(UserError, match="scontrol not found"):
        partition_info("debug")


def test_an_unreachable_controller_is_said_so_not_a_missing_partition(monkeypatch) -> None:
    """Without a configuration sinfo finds no controller (this machine has none outside
    `make slurm-up`'s, whose SLURM_CONF the local cluster's env file sets)."""
    monkeypatch.delenv("SLURM_CONF", raising=False)
    with pytest.raises(
        UserError, match=r"^sinfo cannot reach a SLURM controller \(.*cluster=local"
    ):
        default_partition()


# what srun sets in task 1 of a step of 4 tasks on one node (job 7, its third step)
_STEP = {
    "SLURM_JOB_ID": "7",
    "SLURM_STEP_ID": "2",
    "SLURM_STEP_NUM_TASKS": "4",
    "SLURM_STEP_NUM_NODES": "1",
    "SLURM_STEP_NODELIST": "localhost",
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "1",
    "SLURM_NTASKS": "4",
}
_RENDEZVOUS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _unset(monkeypatch, *keys: str) -> None:
    """Unset `keys` for this test alone: set first, so that monkeypatch also removes what
    `join_srun_step` sets (a RANK left behind makes later tests' engine=auto processes)."""
    for key in keys:
        monkeypatch.setenv(key, "")
        monkeypatch.delenv(key)


@pytest.mark.parametrize(
    "env",
    [
        {k: v for k, v in _STEP.items() if not k.startswith("SLURM_STEP")},  # the batch step
        {**_STEP, "SLURM_STEP_NUM_TASKS": "1", "SLURM_NTASKS": "1"},  # `srun repro ...`
        {**_STEP, "RANK": "3", "WORLD_SIZE": "4"},  # torchrun's or submitit's own
    ],
    ids=["batch-step", "one-task-step", "rank-already-set"],
)
def test_a_process_that_is_not_one_of_several_srun_tasks_is_left_alone(env, monkeypatch):
    _unset(monkeypatch, *_STEP, *_RENDEZVOUS)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    before = dict(os.environ)
    assert join_srun_step() is False
    assert dict(os.environ) == before


def test_a_task_of_an_srun_step_takes_its_rank_and_the_steps_rendezvous(monkeypatch):
    _unset(monkeypatch, *_RENDEZVOUS)
    for key, value in _STEP.items():
        monkeypatch.setenv(key, value)
    assert join_srun_step() is True
    assert {k: os.environ[k] for k in _RENDEZVOUS} == {
        "RANK": "1",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "4",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(rendezvous_port("7.2", 0)),  # another step of the job: another port
    }
