"""The tiny sweep end to end on the journal file: real training runs as trials, two worker
processes, the dashboard, SIGKILL and resume, a diverging trial. The same on PostgreSQL is
`tests/daemons/test_sweep_postgresql.py`."""

from __future__ import annotations

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from tests.helpers import REPO
from tests.sweep_runs import (
    dashboard_studies,
    kill_and_resume,
    repro,
    run_tiny_sweep_and_show,
    storage_of,
    trials,
    write_spec,
)

pytestmark = pytest.mark.slow


def test_tiny_sweep_on_journal_with_two_workers(tmp_path):
    spec_path = write_spec(tmp_path)
    run_tiny_sweep_and_show(spec_path)

    # The dashboard serves the same study, on localhost only.
    assert dashboard_studies(spec_path) == ["tiny"]


def test_resume_after_sigkill_loses_no_trial_and_leaves_none_running(tmp_path):
    stale = kill_and_resume(tmp_path)
    assert all(t.user_attrs["stale"].endswith("died") for t in stale)


def test_diverging_and_rejected_trials_fail_with_reason_and_the_study_goes_on(tmp_path):
    space = yaml.safe_load((REPO / "sweeps" / "tiny.yaml").read_text())["space"]
    space.append({"key": "optim.lr", "type": "float", "low": 0.001, "high": 0.1, "log": True})
    spec_path = write_spec(tmp_path, wandb=False, space=space, n_trials=3)
    study = optuna.create_study(
        study_name="tiny", storage=storage_of(spec_path), directions=["maximize", "maximize"]
    )
    base = {"method.cr": 0.5, "method.collective": "allgather", "optim.lr": 0.01}
    study.enqueue_trial({**base, "optim.lr": 1e30}, skip_if_exists=False)  # loss becomes nan
    study.enqueue_trial({**base, "method.cr": 2.0}, skip_if_exists=False)  # config rejects it

    ran = repro("sweep", str(spec_path))
    assert ran.returncode == 0, ran.stderr
    assert "sweep tiny: 3 of 3 trials finished" in ran.stdout
    # each failure is one line of the sweep's own, with its reason; no traceback
    assert "Traceback" not in ran.stderr and "failed with" not in ran.stderr, ran.stderr
    lines = ran.stdout.splitlines()
    assert any(
        "] trial 0: " in ln and "-> failed (diverged: training diverged" in ln for ln in lines
    )
    assert any("] trial 1: " in ln and "-> failed (rejected: method.cr=2.0" in ln for ln in lines)
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


def test_a_time_budget_shorter_than_a_trial_still_runs_one_per_worker_and_says_why_it_stopped(
    tmp_path,
):
    """`timeout_s` counts from each worker's start and is looked at after its first trial, as
    Optuna's own timeout: a worker still loading (or a job that waited in a queue) past it
    used to start nothing, so the sweep never moved, and ended without saying why."""
    spec_path = write_spec(tmp_path, wandb=False, n_trials=2, timeout_s=0.001)
    first = repro("sweep", str(spec_path), "--workers", "1")
    assert first.returncode == 0, first.stderr
    assert (
        "sweep tiny: 1 of 2 trials finished, 0 running (timeout_s=0.001 reached; the same "
        "command runs the rest)" in first.stdout
    ), first.stdout
    again = repro("sweep", str(spec_path), "--workers", "1")
    assert "sweep tiny: 2 of 2 trials finished, 0 running; " in again.stdout, again.stdout
    assert len(trials(spec_path, TrialState.COMPLETE)) == 2

    # a lower n_trials afterwards: the study holds more than the spec asks for
    write_spec(tmp_path, wandb=False, n_trials=1, timeout_s=0.001)
    lower = repro("sweep", str(spec_path), "--workers", "1")
    assert lower.returncode == 0, lower.stderr
    assert "sweep tiny: 2 trials finished, more than n_trials=1; nothing to run" in lower.stdout
    assert "sweep tiny: 2 trials finished, more than n_trials=1, 0 running; " in lower.stdout

    # shown under other objectives, the study is refused as running it is: its values
    # would be labelled with this spec's objectives (and its front read in other directions)
    objectives = [
        {"metric": "test/loss", "direction": "minimize"},
        {"metric": "throughput/modeled_samples_per_s", "direction": "maximize"},
    ]
    write_spec(tmp_path, wandb=False, n_trials=1, timeout_s=0.001, objectives=objectives)
    shown = repro("sweep", "show", str(spec_path))
    assert shown.returncode == 2 and shown.stdout == "", shown.stdout
    assert shown.stderr.strip() == (
        f"error: study tiny in {tmp_path / 'out' / 'tiny' / 'journal.log'} has directions "
        "['maximize', 'maximize'], the spec ['minimize', 'maximize']; rename the study or "
        "remove the old one"
    )
    objectives[0] = {"metric": "train/loss", "direction": "maximize"}
    write_spec(tmp_path, wandb=False, n_trials=1, timeout_s=0.001, objectives=objectives)
    shown = repro("sweep", "show", str(spec_path))
    assert shown.returncode == 2 and "differs from this spec in its objectives" in shown.stderr
