"""What the sweep tests share: the tiny sweep's spec in a test's directory, the `repro`
command, the study's trials, a finished sweep's checks, the dashboard's studies and a sweep
killed mid-trial and resumed, for the journal file (`tests/integration/test_sweep.py`) and
PostgreSQL (`tests/daemons/test_sweep_postgresql.py`) alike."""

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
from datetime import datetime
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from repro.sweep.results import load_study
from repro.sweep.spec import spec_from_dict
from repro.track.runs import read_run
from tests.helpers import REPO


def write_spec(tmp_path: Path, wandb: bool = True, **changes) -> Path:
    """sweeps/tiny.yaml writing into tmp_path; `wandb=False` turns tracking off where a test
    does not look at the runs (a wandb run costs seconds per trial on a loaded machine)."""
    raw = yaml.safe_load((REPO / "sweeps" / "tiny.yaml").read_text())
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
        cwd=REPO,
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
        assert t.values == [summary["test/acc"], summary["throughput/run_modeled_samples_per_s"]]
        assert t.params["method.cr"] == summary["method/cr"]
        run = read_run(run_dir)
        # the study's own group and tags; no paper, so no paper or scale tag
        assert (run.name, run.group) == (f"topk-s{run.config['seed']}", "tiny")
        tags = ["method:topk", f"seed:{run.config['seed']}", "sweep", "study:tiny"]
        assert run.tags == [*tags, f"trial:{t.number}"]

    shown = repro("sweep", "show", str(spec_path))
    assert shown.returncode == 0, shown.stderr
    study = optuna.load_study(study_name="tiny", storage=storage_of(spec_path))
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


def dashboard_studies(spec_path: Path, cwd: Path = REPO) -> list[str]:
    """The study names `repro sweep dashboard SPEC` serves, on a free localhost port; a
    second dashboard on that port, while the first serves, is refused in one line."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [sys.executable, "-m", "repro", "sweep", "dashboard", str(spec_path)]
    dash = subprocess.Popen(
        [*command, "--port", str(port)],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies") as r:
                    names = [s["study_name"] for s in json.load(r)["study_summaries"]]
                break
            except OSError:
                assert time.monotonic() < deadline and dash.poll() is None, "dashboard not up"
                time.sleep(0.5)
        taken = subprocess.run(
            [*command, "--port", str(port)], cwd=cwd, capture_output=True, text=True, timeout=120
        )
        assert taken.returncode == 2 and taken.stdout == "", taken
        assert taken.stderr.startswith(f"error: --port={port}: 127.0.0.1:{port} cannot be used (")
        assert len(taken.stderr.splitlines()) == 1, taken.stderr
        return names
    finally:
        dash.terminate()
        dash.wait()


def storage_of(spec_path: Path):
    from repro.sweep.storage import open_storage

    return open_storage(spec_from_dict(yaml.safe_load(spec_path.read_text()), str(spec_path)))


# A trial of `kill_and_resume` trains about 2 s: one this young is far from its end.
YOUNG_S = 1.0


def kill_mid_sweep(spec_path: Path, storage) -> set[int]:
    """Start the sweep in its own session, SIGKILL the whole session as soon as a trial has
    completed while another runs; return the completed trial numbers at that moment.

    The running trial must be under `YOUNG_S` old: the two workers' first trials start
    together, so when the first completes the second is about to, and could complete
    between the read and the kill (a killed sweep with no trial left RUNNING)."""
    env = {**os.environ, "WANDB_SILENT": "true"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "repro", "sweep", str(spec_path), "--workers", "2"],
        cwd=REPO,
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
                every = study.get_trials(deepcopy=False)
            except (KeyError, FileNotFoundError):
                every = []
            now = datetime.now()  # Optuna stamps a trial's start in local time
            young = [
                t
                for t in every
                if t.state == TrialState.RUNNING
                and (now - t.datetime_start).total_seconds() < YOUNG_S
            ]
            if young and any(t.state == TrialState.COMPLETE for t in every):
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return {t.number for t in study.get_trials(states=(TrialState.COMPLETE,))}
            time.sleep(0.2)
        pytest.fail(
            f"the sweep never had a completed trial beside a running one under {YOUNG_S} s old"
        )
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def kill_and_resume(tmp_path: Path, **storage) -> list:
    """A sweep SIGKILLed while one trial has completed and another runs, then run again: no
    completed trial is lost, the budget finishes and none is left running; returns the trials
    the rerun failed as stale (the killed ones). `storage` goes into the spec."""
    # 1,000 steps a trial (about 2 s) keep a completed and a running trial side by side for
    # longer than a poll: at tiny's 20 steps the last two trials ran 0.16 s, between polls.
    overrides = yaml.safe_load((REPO / "sweeps" / "tiny.yaml").read_text())["overrides"]
    overrides = [o for o in overrides if not o.startswith("trainer.steps=")]
    spec_path = write_spec(
        tmp_path, wandb=False, overrides=[*overrides, "trainer.steps=1000"], **storage
    )
    completed_before = kill_mid_sweep(spec_path, storage_of(spec_path))
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
    return stale
