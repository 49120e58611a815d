"""The tiny sweep end to end: real training runs as trials, two worker
processes, journal file and a real PostgreSQL server, SIGKILL and resume, a diverging trial."""

from __future__ import annotations

import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from repro.sweep.results import load_study
from repro.sweep.spec import spec_from_dict
from repro.track.runs import read_run

pytest_plugins = ["tests.pg_fixture"]
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def write_spec(tmp_path: Path, wandb: bool = True, **changes) -> Path:
    """sweeps/tiny.yaml writing into tmp_path; `wandb=False` turns tracking off where a test
    does not look at the runs (a wandb run costs seconds per trial on a loaded machine)."""
    raw = yaml.safe_load((ROOT / "sweeps" / "tiny.yaml").read_text())
    raw.update(out=str(tmp_path / "out"), **changes)
    if not wandb:
        raw["overrides"].append("tracking=disabled")
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def repro(*args: str, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_SILENT": "true"}
    return subprocess.run(
        [sys.executable, "-m", "repro", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=150,
        **kw,
    )


def trials(spec_path: Path, *states: TrialState) -> list:
    study = load_study(spec_from_dict(yaml.safe_load(spec_path.read_text()), str(spec_path)))
    return study.get_trials(deepcopy=False, states=states or None)


def check_finished_sweep(spec_path: Path, n: int) -> list:
    done = trials(spec_path, TrialState.COMPLETE)
    assert len(done) == n
    assert trials(spec_path, TrialState.RUNNING) == []
    return done


def run_tiny_sweep_and_show(spec_path: Path) -> None:
    ran = repro("sweep", str(spec_path), "--workers", "2")
    assert ran.returncode == 0, ran.stderr
    assert "sweep tiny: 4 of 4 trials finished, 0 running" in ran.stdout
    done = check_finished_sweep(spec_path, 4)
    assert len({t.user_attrs["worker"] for t in done}) == 2  # both workers ran trials
    out = spec_path.parent / "out" / "tiny"
    for t in done:
        run_dir = out / f"trial_{t.number}"
        summary = json.loads((run_dir / "summary.json").read_text())
        assert t.values == [summary["test/acc"], summary["throughput/modeled_samples_per_s"]]
        assert t.params["method.cr"] == summary["method/cr"]
        run = read_run(run_dir)
        # the study's own group and tags; no paper, so no paper or scale tag
        assert (run.name, run.group) == (f"topk-s{run.config['seed']}", "tiny")
        tags = ["method:topk", f"seed:{run.config['seed']}", "sweep", "study:tiny"]
        assert run.tags == [*tags, f"trial:{t.number}"]

    shown = repro("sweep", "show", str(spec_path))
    assert shown.returncode == 0, shown.stderr
    study = optuna.load_study(study_name="tiny", storage=_storage_of(spec_path))
    front = sorted(t.number for t in study.best_trials)
    table = shown.stdout.split("Pareto front (")[1].split("knee:")[0].splitlines()[2:]
    assert sorted(int(line.lstrip("* ").split()[0]) for line in table if line.strip()) == front
    knee = int(shown.stdout.split("knee: trial ")[1].split()[0])
    assert knee in front
    for name in ("pareto.png", "pareto.html", "hypervolume.png", "hypervolume.html"):
        assert (out / name).stat().st_size > 1000
    with (out / "front.csv").open() as f:
        assert sorted(int(row["trial"]) for row in csv.DictReader(f)) == front
    page = (out / "pareto.html").read_text()
    assert all(f'data-trial="{t.number}"' in page for t in done)  # every trial can be hovered


def _storage_of(spec_path: Path):
    from repro.sweep.storage import open_storage

    return open_storage(spec_from_dict(yaml.safe_load(spec_path.read_text()), str(spec_path)))


def test_tiny_sweep_on_journal_with_two_workers(tmp_path):
    spec_path = write_spec(tmp_path)
    run_tiny_sweep_and_show(spec_path)

    # The dashboard serves the same study, on localhost only.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dash = subprocess.Popen(
        [sys.executable, "-m", "repro", "sweep", "dashboard", str(spec_path), "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies") as r:
                    studies = json.load(r)["study_summaries"]
                break
            except OSError:
                assert time.monotonic() < deadline and dash.poll() is None, "dashboard not up"
                time.sleep(0.5)
        assert [s["study_name"] for s in studies] == ["tiny"]
    finally:
        dash.terminate()
        dash.wait()


def test_tiny_sweep_on_postgresql(tmp_path, pg_url):
    spec_path = write_spec(tmp_path, storage=pg_url)
    run_tiny_sweep_and_show(spec_path)
    assert not (tmp_path / "out" / "tiny" / "journal.log").exists()


def test_wrong_database_password_is_refused_and_never_printed(tmp_path, pg_url):
    secret = "Wr0ngPassw0rd"
    user_part, host_part = pg_url.split("://", 1)[1].rsplit("@", 1)
    bad = f"postgresql://{user_part.split(':')[0]}:{secret}@{host_part}"
    ran = repro("sweep", str(write_spec(tmp_path, storage=bad)))
    assert ran.returncode == 2
    assert "cannot connect" in ran.stderr and "password authentication failed" in ran.stderr
    assert secret not in ran.stderr + ran.stdout
    assert ":***@" in ran.stderr


def _kill_mid_sweep(spec_path: Path, storage) -> set[int]:
    """Start the sweep in its own session, SIGKILL the whole session as soon as a trial has
    completed while another runs; return the completed trial numbers at that moment."""
    env = {**os.environ, "WANDB_SILENT": "true"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "repro", "sweep", str(spec_path), "--workers", "2"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            try:
                study = optuna.load_study(study_name="tiny", storage=storage)
                states = [t.state for t in study.get_trials(deepcopy=False)]
            except (KeyError, FileNotFoundError):
                states = []
            if TrialState.COMPLETE in states and TrialState.RUNNING in states:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return {t.number for t in study.get_trials(states=(TrialState.COMPLETE,))}
            time.sleep(0.2)
        pytest.fail("the sweep never had a completed and a running trial at once")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.parametrize("backend", ["journal", "postgresql"])
def test_resume_after_sigkill_loses_no_trial_and_leaves_none_running(tmp_path, backend, request):
    # On PostgreSQL the heartbeat finds the killed trials: 1 s beats, stale after 10 s (a
    # shorter grace can fail live trials whose heartbeat thread waits for a loaded CPU).
    extra = (
        {"storage": request.getfixturevalue("pg_url"), "heartbeat_s": 1, "grace_s": 10}
        if backend == "postgresql"
        else {}
    )
    # 1,000 steps a trial (about 2 s) keep a completed and a running trial side by side for
    # longer than a poll: at tiny's 20 steps the last two trials ran 0.16 s, between polls.
    overrides = yaml.safe_load((ROOT / "sweeps" / "tiny.yaml").read_text())["overrides"]
    overrides = [o for o in overrides if not o.startswith("trainer.steps=")]
    spec_path = write_spec(
        tmp_path, wandb=False, overrides=[*overrides, "trainer.steps=1000"], **extra
    )
    storage = _storage_of(spec_path)
    completed_before = _kill_mid_sweep(spec_path, storage)
    values_before = {t.number: t.values for t in trials(spec_path, TrialState.COMPLETE)}
    assert set(values_before) >= completed_before
    assert trials(spec_path, TrialState.RUNNING)  # the kill left trials RUNNING

    ran = repro("sweep", str(spec_path), "--workers", "2")
    assert ran.returncode == 0, ran.stderr
    done = check_finished_sweep(spec_path, 4)
    after = {t.number: t.values for t in done}
    assert all(after[n] == v for n, v in values_before.items())  # no completed trial lost
    stale = trials(spec_path, TrialState.FAIL)
    assert stale and all("fail_reason" not in t.user_attrs for t in stale)
    if backend == "journal":
        assert all(t.user_attrs["stale"].endswith("died") for t in stale)


def test_diverging_and_rejected_trials_fail_with_reason_and_the_study_goes_on(tmp_path):
    space = yaml.safe_load((ROOT / "sweeps" / "tiny.yaml").read_text())["space"]
    space.append({"key": "optim.lr", "type": "float", "low": 0.001, "high": 0.1, "log": True})
    spec_path = write_spec(tmp_path, wandb=False, space=space, n_trials=3)
    study = optuna.create_study(
        study_name="tiny", storage=_storage_of(spec_path), directions=["maximize", "maximize"]
    )
    base = {"method.cr": 0.5, "method.collective": "allgather", "optim.lr": 0.01}
    study.enqueue_trial({**base, "optim.lr": 1e30}, skip_if_exists=False)  # loss becomes nan
    study.enqueue_trial({**base, "method.cr": 2.0}, skip_if_exists=False)  # config rejects it

    ran = repro("sweep", str(spec_path))
    assert ran.returncode == 0, ran.stderr
    assert "sweep tiny: 3 of 3 trials finished" in ran.stdout
    by_number = {t.number: t for t in trials(spec_path)}
    assert by_number[0].state == TrialState.FAIL
    assert by_number[0].user_attrs["fail_reason"].startswith("diverged: training diverged")
    assert "the loss is nan" in by_number[0].user_attrs["fail_reason"]
    assert by_number[1].state == TrialState.FAIL
    assert by_number[1].user_attrs["fail_reason"].startswith("rejected: method.cr=2.0")
    assert by_number[2].state == TrialState.COMPLETE

    shown = repro("sweep", "show", str(spec_path))
    assert shown.returncode == 0, shown.stderr
    assert "1 complete, 2 failed" in shown.stdout
    assert "failed trial 0: diverged: training diverged" in shown.stdout
