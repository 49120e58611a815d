"""Runs and run sets submitted to a real local SLURM cluster, and input it refuses.

Every job goes through sbatch, slurmctld, slurmd and srun; states come from sacct. A run
submitted as a two-task job, each run of a run set submitted as one array, and a run
started by a user's own `srun` of two tasks equal their local twins; a bad partition, CPU
count, env file or a missing sbatch is one clear line.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from repro.cli import main as repro_main
from repro.cluster.executor import read_env_file
from repro.cluster.jobs import append_records, read_records
from repro.cluster.launcher import launch_runs
from repro.config import run_dir_of
from repro.reproduce.run_sets import run_set
from repro.train.entry import run_training
from tests.daemons.slurm_jobs import (
    GUARD_S,
    TWO_WORKERS,
    _assert_same_run,
    _slurm_overrides,
    _wait,
)
from tests.helpers import TINY, repro_cli, train

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("slurm_cluster")]


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

    # The same job seen through a SLURM whose accounting does not answer (its database port
    # closed): the job is UNKNOWN and sacct's errors are one line, not sacct's and submitit's.
    env = read_env_file(record.env_file)
    conf = Path(env["SLURM_CONF"]).read_text()
    assert "AccountingStoragePort=6819" in conf
    (tmp_path / "down.conf").write_text(conf.replace("StoragePort=6819", "StoragePort=1"))
    (tmp_path / "down.env").write_text(f"export SLURM_CONF={tmp_path / 'down.conf'}\n")
    down = tmp_path / "down"
    append_records(down, [replace(record, env_file=str(tmp_path / "down.env"))])
    unanswered = repro_cli("jobs", "--root", str(down), cwd=tmp_path)
    assert unanswered.returncode == 0, unanswered.stderr
    assert re.search(rf"^{job_id.group(1)}\s+run\s+sync\s+UNKNOWN", unanswered.stdout, re.M)
    assert unanswered.stderr == (
        "states unknown: SLURM's accounting did not answer (sacct failed: sacct: error: "
        "Problem talking to the database: Connection refused)\n"
    )


@pytest.mark.timeout(600)
def test_an_srun_step_of_two_tasks_is_one_run_of_two_workers(tmp_path: Path) -> None:
    """`srun -n 2 repro train trainer.world_size=2`, as in a batch script: srun sets no
    RANK, and each task ran the whole run by itself (the second refused by the run's lock)."""
    auto = [o for o in TWO_WORKERS if not o.startswith("trainer.engine=")]  # processes here
    where = ["tracking=disabled", f"runs_root={tmp_path / 'runs'}", f"data.root={tmp_path}/data"]
    exe = Path(sys.executable).parent / "repro"
    step = subprocess.run(
        ["srun", "-n", "2", "-p", "debug", str(exe), "train", *auto, *where],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=GUARD_S,
    )
    assert step.returncode == 0, step.stderr
    runs = sorted((tmp_path / "runs").glob("*/sync-*"))
    assert len(runs) == 1 and step.stdout.count("done sync:") == 1  # rank 0's line alone
    assert re.search(rf"done sync: step=40 .*run_dir={runs[0]}", step.stdout), step.stdout
    local = train(tmp_path / "local", *TWO_WORKERS)
    _assert_same_run(runs[0], Path(local["run_dir"]))


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
    monkeypatch.undo()
    # what only sbatch judges: its reasons in one line, not its raw lines and a traceback
    assert _cli_error(capsys, *base, "cluster.mem_gb=100000") == (
        "error: sbatch refused the job of cluster=slurm_local: Memory specification can not be "
        "satisfied; Batch job submission failed: Requested node configuration is not "
        "available; change what it names (cluster.mem_gb, cluster.time_min, "
        "cluster.partition, cluster.account, cluster.qos, cluster.sbatch_args)"
    )
    left = [p for p in (tmp_path / "runs").rglob("*") if p.is_file()]
    assert left == []  # no job files, no jobs.jsonl


@pytest.mark.timeout(600)
def test_an_sbatch_flag_without_a_value_is_written_bare(tmp_path, capsys) -> None:
    """The template's example `exclusive: "true"` became `--exclusive=true`, which sbatch
    refuses; an empty value is the bare flag. Without the + a free map's new key needs, the
    line says to add it."""
    base = ["train", *TINY, *_slurm_overrides(tmp_path)]
    assert _cli_error(capsys, *base, "cluster.sbatch_args.exclusive=") == (
        "error: cluster.sbatch_args.exclusive is a new key of the map cluster.sbatch_args: add "
        "it with +cluster.sbatch_args.exclusive="
    )
    assert repro_main([*base, "+cluster.sbatch_args.exclusive="]) == 0
    assert _wait(tmp_path / "runs") == {read_records(tmp_path / "runs")[0].job_id: "COMPLETED"}
    (script,) = (tmp_path / "runs" / "slurm").rglob("*_submission.sh")
    assert "#SBATCH --exclusive\n" in script.read_text()


@pytest.mark.timeout(600)
def test_runs_submitted_from_under_a_launcher_are_not_refused(tmp_path, monkeypatch) -> None:
    """Several runs under torchrun or srun are refused where they would run here, on the
    launcher's one rendezvous; a submitted job sets its own."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    args = ["train", "--multirun", *TINY, "seed=1,2", *_slurm_overrides(tmp_path)]
    assert repro_main(args) == 0
    assert set(_wait(tmp_path / "runs").values()) == {"COMPLETED"}


@pytest.mark.timeout(600)
def test_a_run_with_a_job_queued_for_it_is_not_queued_again(tmp_path: Path) -> None:
    """The job holds no lock on its run directory until it starts: the same command again
    while it waited queued a second job on the same directory, which failed as "in use"
    once both ran (or ran again a finished run)."""
    later = "+cluster.sbatch_args.begin=now+3600"  # pending until released below
    args = ["train", *TINY, *_slurm_overrides(tmp_path)]
    first = repro_cli(*args, later, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    job = re.search(r"submitted sync: job (\d+) ", first.stdout).group(1)
    again = repro_cli(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert f"skip sync: job {job} is pending for it" in again.stdout, again.stdout
    assert "submitted" not in again.stdout
    assert f"train: 1 run in job {job} (recorded in" in again.stdout
    root = tmp_path / "runs"
    assert [r.job_id for r in read_records(root)] == [job]
    env = {**os.environ, **read_env_file(read_records(root)[0].env_file)}
    subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], env=env, check=True)
    assert _wait(root) == {job: "COMPLETED"}
