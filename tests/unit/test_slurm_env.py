"""The SLURM helpers that need no cluster: log tails, GRES parsing, missing client tools."""

from __future__ import annotations

from pathlib import Path

import pytest

from repro.cluster.executor import default_partition
from repro.cluster.slurm_env import _gpus, job_log_tail, partition_info, sbatch_available
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
