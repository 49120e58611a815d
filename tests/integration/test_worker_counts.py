"""Sweep and tune workers counted on the cores this command may use, with the worker
processes each trial starts: refused before anything is written."""

from __future__ import annotations

import pytest
import yaml

from repro import cli
from tests.helpers import REPO, on_one_core

PINNED = [["sweep", f"{REPO}/sweeps/tiny.yaml"], ["tune", "adacomm", "scale=tiny"]]


@pytest.mark.parametrize("argv", PINNED, ids=["sweep", "tune"])
def test_workers_are_counted_on_the_cores_this_command_may_use(argv, capsys, tmp_path, monkeypatch):
    """Pinned to one core (a SLURM job's cpuset, `taskset -c 0`), five workers are more than
    four to its core however many cores the node has: refused before anything is written."""
    monkeypatch.chdir(tmp_path)
    with on_one_core():
        rc = cli.main([*argv, "--workers", "5"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(
        "error: --workers=5 on the 1 core this command may use is more than 4 per core; "
        "lower --workers to at most 4"
    ), err
    assert list(tmp_path.iterdir()) == []


def test_a_sweeps_workers_are_counted_with_the_processes_their_trials_start(capsys, tmp_path):
    """Each trial on the process engine starts trainer.world_size worker processes: three
    sweep workers of 4-worker trials are 12 processes on the core, where 3 were counted."""
    spec = yaml.safe_load((REPO / "sweeps" / "tiny.yaml").read_text())
    spec["overrides"] += ["trainer.engine=processes", "trainer.world_size=4"]
    spec["out"] = str(tmp_path / "out")
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    with on_one_core():
        rc = cli.main(["sweep", str(path), "--workers", "3"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err == (
        "error: --workers=3 trials of trainer.world_size=4 worker processes each on the 1 core "
        "this command may use is more than 4 per core; lower --workers to at most 1, or run "
        "them as jobs (--cluster NAME)"
    ), err
    assert not (tmp_path / "out").exists()
    # a space over the trials' world size: counted at its largest
    spec["overrides"][-1] = "trainer.world_size=1"
    spec["space"] = [{"key": "trainer.world_size", "type": "categorical", "choices": [1, 2]}]
    path.write_text(yaml.safe_dump(spec))
    with on_one_core():
        rc = cli.main(["sweep", str(path), "--workers", "3"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "--workers=3 trials of trainer.world_size=2 worker processes" in err, err


def test_a_tunes_workers_are_counted_with_the_processes_their_trials_start(capsys, tmp_path):
    """`repro tune --workers` as the sweep's: an arm on the process engine starts its
    trainer.world_size worker processes per trial, refused before the journal is written."""
    spec = yaml.safe_load((REPO / "sweeps" / "tune" / "adacomm_tiny.yaml").read_text())
    spec["overrides"] += ["trainer.engine=processes", "trainer.world_size=4"]
    spec["out"] = str(tmp_path / "out")
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    argv = ["tune", "adacomm", "scale=tiny", "--spec", str(path), "--out", str(tmp_path / "t")]
    with on_one_core():
        rc = cli.main([*argv, "--workers", "2"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err == (
        "error: --workers=2 trials of trainer.world_size=4 worker processes each on the 1 core "
        "this command may use is more than 4 per core; lower --workers to at most 1"
    ), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]
    # a world size an arm's space takes (categorical): probed at every choice, counted at
    # its largest
    spec["overrides"][-1] = "trainer.world_size=1"
    spec["arms"]["sync"]["extra"] = [
        {"key": "trainer.world_size", "type": "categorical", "choices": [1, 2]}
    ]
    path.write_text(yaml.safe_dump(spec))
    with on_one_core():
        rc = cli.main([*argv, "--workers", "3"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "--workers=3 trials of trainer.world_size=2 worker processes" in err, err
