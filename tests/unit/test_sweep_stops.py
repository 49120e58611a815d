"""Stop signals of a command and of a sweep worker, the stopped trial's mark and re-queue,
and the run directory a retried or re-numbered trial uses (real signals, real callbacks
from C, real Optuna journal storage)."""

from __future__ import annotations

import ctypes
import os
import signal
import time
from dataclasses import replace

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

from repro.errors import (
    REDELIVER_S,
    Terminated,
    dropped_stops_sent_again,
    sigterm_stops,
    sigterm_taken,
)
from repro.sweep import stops as stops_module
from repro.sweep.journal import open_journal_file
from repro.sweep.spec import spec_from_dict
from repro.sweep.stops import Stopped, StopSignals, mark_stopped, stop_reason
from repro.sweep.trial import trial_run_dir


def _spec(tmp_path):
    return spec_from_dict(
        {
            "name": "s",
            "experiment": None,
            "space": [{"key": "optim.lr", "type": "float", "low": 0.01, "high": 1.0}],
            "objectives": [{"metric": "test/acc", "direction": "maximize"}],
            "sampler": {"name": "random", "seed": 0},
            "n_trials": 2,
            "out": str(tmp_path),
        }
    )


def _study(tmp_path):
    storage = open_journal_file(tmp_path / "journal.log")
    return optuna.create_study(study_name="s", storage=storage), storage


def test_a_signal_stops_only_an_armed_block_and_is_kept_for_the_loop():
    before = signal.getsignal(signal.SIGINT)  # Python's own, or ignored when run in background
    stops = StopSignals().install()
    try:
        os.kill(os.getpid(), signal.SIGTERM)  # outside a trial's runs: kept, nothing raised
        assert stops.received == signal.SIGTERM
        with pytest.raises(Stopped) as caught:
            stops.check()
        assert caught.value.name == "SIGTERM" and isinstance(caught.value.exit(), SystemExit)
        assert caught.value.exit().code == 128 + signal.SIGTERM

        fresh = StopSignals().install()
        with pytest.raises(Stopped) as caught, fresh.armed():
            os.kill(os.getpid(), signal.SIGINT)
            pytest.fail("the armed block ran on past the signal")
        assert isinstance(caught.value.exit(), KeyboardInterrupt)
        os.kill(os.getpid(), signal.SIGINT)  # a second Ctrl-C while marking: kept, not raised
        fresh.restore()
    finally:
        stops.restore()
    assert signal.getsignal(signal.SIGINT) is before


def _called_back(signum: int):
    """A function called from C (as numba's compiler calls llvmlite's cache back) in which
    `signum` arrives: what its handler raises there, the C caller drops."""
    return ctypes.CFUNCTYPE(None)(lambda: signal.raise_signal(signum))


def _run_on() -> None:
    ran_on_until = time.monotonic() + 20 * REDELIVER_S
    while time.monotonic() < ran_on_until:
        time.sleep(0.001)
    pytest.fail("ran on past a stop its callback dropped")


@pytest.mark.parametrize(
    "signum, stop", [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, Terminated)]
)
def test_a_commands_stop_dropped_by_c_code_that_called_back_comes_again(capfd, signum, stop):
    """Ctrl-C (Python's own handler) or SIGTERM (`sigterm_stops`) landing in a callback from
    C: the command must still stop, saying nothing but its one line."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(stop) as caught, dropped_stops_sent_again(), sigterm_stops():
            _called_back(signum)()
            _run_on()
        assert type(caught.value) is stop
    finally:
        signal.signal(signal.SIGINT, before)
    assert capfd.readouterr().err == ""


def test_a_stop_dropped_by_c_code_that_called_back_comes_again_and_ends_the_block(capfd):
    """The signal lands inside a callback from C (as inside numba's compiler): the `Stopped`
    raised there is dropped by the C caller, so the block must be stopped again once the
    callback has returned, and nothing printed (the command's one line is all it says)."""
    stops = StopSignals().install()
    try:
        with pytest.raises(Stopped) as caught, stops.armed():
            _called_back(signal.SIGINT)()
            _run_on()
        assert caught.value.name == "SIGINT"
        os.kill(os.getpid(), signal.SIGINT)  # marking the trial: kept, not raised
    finally:
        stops.restore()
    assert capfd.readouterr().err == ""


def test_sigterm_ends_a_worker_in_the_commands_own_process_as_the_command_says_it():
    """A worker run in the process of a command that takes SIGTERM as a stop (`repro sweep`
    with one worker) ends with `Terminated`, for which the command prints its one line; a
    worker of its own (spawned, or a cluster job's) ends with the shell's exit status."""
    before = signal.getsignal(signal.SIGTERM)
    stop = Stopped(signal.SIGTERM)
    with sigterm_stops():
        assert sigterm_taken() and isinstance(stop.exit(), Terminated)
    assert not sigterm_taken() and signal.getsignal(signal.SIGTERM) is before
    assert isinstance(stop.exit(), SystemExit) and stop.exit().code == 128 + signal.SIGTERM


def test_a_run_whose_cleanup_turns_the_stop_into_an_error_still_ends_stopped(monkeypatch):
    """The stop arrives inside the run and the run's own cleanup fails on the way out (an
    error replacing `Stopped`): the caller must still see `Stopped`, or it would leave the
    trial RUNNING; a run that fails on its own stays that failure."""
    monkeypatch.setattr(stops_module, "STOP_GRACE_S", 0.2)  # the wait for a signal not sent

    def interrupted_run(pid: int) -> None:
        try:
            os.kill(pid, signal.SIGINT)
        finally:
            raise RuntimeError("cleanup failed: the log was half written")

    stops = StopSignals().install()
    try:
        with pytest.raises(Stopped) as caught:
            stops.call(interrupted_run, os.getpid())
        assert caught.value.name == "SIGINT"
        assert isinstance(caught.value.__context__, RuntimeError)
    finally:
        stops.restore()

    calm = StopSignals().install()
    try:
        assert calm.call(divmod, 7, 2) == (3, 1)
        with pytest.raises(ZeroDivisionError):  # no signal came: its own error
            calm.call(divmod, 1, 0)
    finally:
        calm.restore()


def test_a_stopped_trial_is_failed_marked_and_queued_again_without_counting_a_retry(tmp_path):
    study, storage = _study(tmp_path)
    dist = {"optim.lr": FloatDistribution(0.01, 1.0)}
    first = study.ask(dist)
    mark_stopped(study, storage, first.number, Stopped(signal.SIGTERM), requeue=True)
    again = study.ask(dist)  # Optuna hands out the WAITING copy first
    assert again.params == first.params
    mark_stopped(study, storage, again.number, Stopped(signal.SIGINT), requeue=True)

    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.FAIL, TrialState.FAIL, TrialState.WAITING]
    assert trials[0].user_attrs["stopped"] == {"trial": 0, "signal": "SIGTERM"}
    assert trials[2].system_attrs["failed_trial"] == 0  # the chain's first trial, its run dir
    assert "retry_history" not in trials[2].system_attrs  # stops do not use up MAX_RETRY
    assert stop_reason(trials[0]).startswith("stopped by SIGTERM (a kill, or its job cancelled")
    assert stop_reason(trials[1]).startswith("interrupted (Ctrl-C)")
    assert stop_reason(trials[2]) is None  # carries trial 1's mark, but it is not stopped


def test_a_retry_reuses_its_first_run_dir_and_a_renumbered_trial_keeps_clear(tmp_path):
    spec = _spec(tmp_path)
    study, storage = _study(tmp_path)
    dist = {"optim.lr": FloatDistribution(0.01, 1.0)}
    first = study.ask(dist)
    assert trial_run_dir(storage, spec, first.number) == spec.study_dir / "trial_0"
    mark_stopped(study, storage, first.number, Stopped(signal.SIGTERM), requeue=True)
    retry = study.ask(dist)
    assert trial_run_dir(storage, spec, retry.number) == spec.study_dir / "trial_0"
    # trial_2 and trial_2.1 hold runs of trials the storage no longer knows (a lost journal)
    (spec.study_dir / "trial_2").mkdir(parents=True)
    (spec.study_dir / "trial_2.1").mkdir()
    new = study.ask(dist)
    assert new.number == 2
    assert trial_run_dir(storage, spec, new.number) == spec.study_dir / "trial_2.2"


def test_a_retry_of_a_point_whose_parameters_a_damaged_journal_cut_runs_apart(tmp_path):
    """A lost trial's records cut before its second parameter: the retry keeps the first, the
    sampler draws the second, so it is another point, which must not resume (and be refused
    by) the first trial's run directory."""
    spec = replace(
        _spec(tmp_path),
        space=(*_spec(tmp_path).space, replace(_spec(tmp_path).space[0], key="optim.momentum")),
    )
    study, storage = _study(tmp_path)
    lr = {"optim.lr": FloatDistribution(0.01, 1.0)}
    first = study.ask(lr)  # optim.momentum never written
    mark_stopped(study, storage, first.number, Stopped(signal.SIGTERM), requeue=True)
    retry = study.ask({**lr, "optim.momentum": FloatDistribution(0.01, 1.0)})
    assert retry.params["optim.lr"] == first.params["optim.lr"]
    assert storage.get_trial(retry._trial_id).system_attrs["failed_trial"] == first.number
    assert trial_run_dir(storage, spec, retry.number) == spec.study_dir / f"trial_{retry.number}"
