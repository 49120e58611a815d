"""Ctrl-C on a sweep, a tuning search and a run set, as a terminal sends it: SIGINT to the
command's whole process group (its workers and wandb's service included); and `kill PID`,
SIGTERM to the command alone, on a sweep and a run set (and `kill -INT PID` on a sweep).

Each ends with exit status 130 (143 after SIGTERM) and one line saying what stopped and how
to continue, no traceback; the trials that were running are marked interrupted (not left for
a heartbeat or a worker lock to find), `repro sweep show` says so, and the same command then
finishes the work, the interrupted runs resuming from their checkpoints.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from repro.sweep.results import load_study
from repro.sweep.spec import load_spec, spec_from_dict
from repro.sweep.study import open_journal
from repro.train import checkpoint
from tests.helpers import REPO, repro_cli, reproduce_tiny_args

pytestmark = pytest.mark.slow

GUARD_S = 240.0  # hang guard on a loaded 2-core machine, not a speed check
EVERY = 20
"""Checkpoint and evaluation interval of the interrupted runs."""


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


STOPS = {
    "ctrl_c": (os.killpg, signal.SIGINT),
    "kill": (os.kill, signal.SIGTERM),
    "kill_int": (os.kill, signal.SIGINT),
}
"""How each stop is sent: Ctrl-C to the whole process group as a terminal sends it, `kill
PID` and `kill -INT PID` to the command alone."""


def _interrupt(
    args: list[str],
    cwd: Path,
    ready: Callable[[], bool],
    how: str | tuple[Callable[[int, int], None], int] = "ctrl_c",
) -> tuple[int, str, str]:
    """Start `repro ARGS` in its own process group and stop it `how` (`STOPS`, or how to send
    which signal) once `ready()` holds; either way no process of the group may outlive it."""
    exe = Path(sys.executable).parent / "repro"
    env = {**os.environ, "WANDB_SILENT": "true", "PYTHONUNBUFFERED": "1"}
    env.pop("WANDB_API_KEY", None)
    proc = subprocess.Popen(
        [str(exe), *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        # as from a terminal: a command started in the background of a shell script (this
        # suite's own runner may be) inherits SIGINT ignored, and Python then keeps it so
        preexec_fn=_default_sigint,
    )
    deadline = time.monotonic() + GUARD_S
    try:
        while not ready():
            if proc.poll() is not None or time.monotonic() > deadline:
                out, err = proc.communicate()
                pytest.fail(f"never ready to interrupt (exit {proc.returncode}):\n{out}\n{err}")
            time.sleep(0.2)
        send, signum = STOPS[how] if isinstance(how, str) else how
        send(proc.pid, signum)
        out, err = proc.communicate(timeout=GUARD_S)
        assert _left(proc.pid) == [], "processes outlived the command"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, out, err


def _left(group: int) -> list[str]:
    """The command lines still running in session `group` (the command's own), after a few
    seconds' grace (wandb's service notices its run's process is gone within seconds)."""
    deadline = time.monotonic() + 15.0
    while True:
        ps = subprocess.run(["ps", "-o", "args=", "-s", str(group)], capture_output=True, text=True)
        left = ps.stdout.splitlines()
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def _one_line(rc: int, out: str, err: str, starts: str, how: str = "ctrl_c") -> None:
    word = "terminated" if STOPS[how][1] == signal.SIGTERM else "interrupted"
    assert rc == 128 + STOPS[how][1], out + err
    assert "Traceback" not in out + err and "KeyboardInterrupt" not in out + err, out + err
    assert "Process Spawn" not in out + err, out + err  # multiprocessing's "a worker raised"
    said = [line for line in (out + err).splitlines() if word in line.lower()]
    assert len(said) == 1 and said[0].startswith(f"{word}: {starts}"), said
    assert err.rstrip().splitlines()[-1] == said[0]  # the last thing the command says


def _checkpointed(run_dirs: Callable[[], list[Path]]) -> Callable[[], bool]:
    def ready() -> bool:
        return any((d / "checkpoints" / "latest.json").exists() for d in run_dirs())

    return ready


def _sweep(tmp_path: Path):
    """A 2-trial sweep spec whose trials are long enough to stop, its path and its args."""
    raw = yaml.safe_load((REPO / "sweeps" / "tiny.yaml").read_text())
    # 120 steps of 50 ms modeled compute, really slept (worker processes): seconds, of which
    # at least 5 s are left when the first checkpoint (step 20) calls for the Ctrl-C (2 s were
    # too few beside another test on the two cores: that trial finished before the signal)
    raw["overrides"] += ["compute.dist=constant", "compute.mean_ms=50", "network.inject=true"]
    raw["overrides"] += ["compute.mode=sampled", "trainer.steps=120"]
    raw["overrides"] += [f"trainer.checkpoint_every={EVERY}", f"trainer.eval_every={EVERY}"]
    raw["overrides"] += [f"data.root={tmp_path / 'data'}", "tracking=wandb_offline"]
    raw.update(out=str(tmp_path / "out"), n_trials=2)
    spec_path = tmp_path / "tiny.yaml"
    spec_path.write_text(yaml.safe_dump(raw))
    spec = load_spec(spec_path)
    args = ["sweep", str(spec_path), "--workers", "2"]
    return spec, spec_path, args


def test_ctrl_c_on_a_sweep_marks_its_trials_interrupted_and_the_rerun_resumes(tmp_path):
    spec, spec_path, args = _sweep(tmp_path)
    ready = _checkpointed(lambda: [*spec.study_dir.glob("trial_*")])
    rc, out, err = _interrupt(args, tmp_path, ready)
    _one_line(rc, out, err, f"sweep {spec_path} stopped")
    trials = load_study(spec).get_trials(deepcopy=False)
    stopped = [t for t in trials if t.state == TrialState.FAIL]
    left = {t.number: checkpoint.latest_step(spec.study_dir / f"trial_{t.number}") for t in stopped}
    assert stopped and all(t.user_attrs["stopped"]["signal"] == "SIGINT" for t in stopped)
    assert all(
        t.state in (TrialState.FAIL, TrialState.COMPLETE, TrialState.WAITING) for t in trials
    )
    shown = repro_cli("sweep", "show", str(spec_path), cwd=tmp_path)
    for t in stopped:
        assert f"failed trial {t.number}: interrupted (Ctrl-C)" in shown.stdout, shown.stdout

    again = repro_cli("sweep", str(spec_path), "--workers", "2", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    trials = load_study(spec).get_trials(deepcopy=False)
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    assert len(done) == spec.n_trials and len(trials) == len(done) + len(stopped)
    resumed = {t.system_attrs.get("failed_trial"): t.user_attrs["resumed_from"] for t in done}
    # each interrupted point ran again in its own run dir, from the checkpoint it left
    assert {n: resumed[n] for n in left} == left and max(left.values()) >= EVERY


@pytest.mark.parametrize(
    "how, shown_as", [("kill", "stopped by SIGTERM (a kill"), ("kill_int", "interrupted (Ctrl-C)")]
)
def test_kill_of_a_sweep_reaches_its_workers_and_marks_their_trials(tmp_path, how, shown_as):
    """SIGTERM or SIGINT to the command alone: its workers get it from the command, or they
    would run on while it waits for them, or die with it and leave their trials RUNNING.
    Resuming such a trial is the Ctrl-C test's."""
    spec, spec_path, args = _sweep(tmp_path)
    ready = _checkpointed(lambda: [*spec.study_dir.glob("trial_*")])
    rc, out, err = _interrupt(args, tmp_path, ready, how)
    _one_line(rc, out, err, f"sweep {spec_path} stopped", how)
    trials = load_study(spec).get_trials(deepcopy=False)
    stopped = [t for t in trials if t.state == TrialState.FAIL]
    name = signal.Signals(STOPS[how][1]).name
    assert stopped and all(t.user_attrs["stopped"]["signal"] == name for t in stopped)
    assert not [t.number for t in trials if t.state == TrialState.RUNNING]
    shown = repro_cli("sweep", "show", str(spec_path), cwd=tmp_path)
    for t in stopped:
        assert f"failed trial {t.number}: {shown_as}" in shown.stdout, shown.stdout
    # its runs' worker processes stopped, not killed at once: each logged run reads stopped
    listed = repro_cli("runs", "ls", str(spec.study_dir), cwd=tmp_path).stdout.splitlines()
    states = [row.split()[4] for row in listed if "/trial_" in row]
    assert states and set(states) == {"stopped"}, listed


def test_ctrl_c_on_a_tuning_search_marks_the_trial_and_the_rerun_finishes(tmp_path):
    raw = yaml.safe_load((REPO / "sweeps" / "tune" / "adacomm_tiny.yaml").read_text())
    arms = raw["arms"]
    raw["export"]["untuned"] = {n: "left out to keep the test short" for n in arms if n != "sync"}
    raw["arms"] = {"sync": arms["sync"]}
    # a 25-modeled-second budget: a trial of several seconds, long enough to interrupt
    raw["overrides"] = ["tracking=disabled", "trainer.time_budget_s=25"]
    raw["overrides"] += [f"data.root={tmp_path / 'data'}"]
    raw["out"] = str(tmp_path / "tune")
    spec_path = tmp_path / "adacomm_tiny.yaml"
    spec_path.write_text(yaml.safe_dump(raw))
    spec = spec_from_dict(raw, str(spec_path))
    tuned = tmp_path / "tuned" / "adacomm_tiny.yaml"
    args = ["tune", "adacomm", "scale=tiny", "--spec", str(spec_path), "--out", str(tuned.parent)]

    def running() -> bool:
        if not (spec.study_dir / "journal.log").exists():
            return False
        try:
            study = optuna.load_study(study_name="sync", storage=open_journal(spec))
        except KeyError:
            return False
        return bool(study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))

    rc, out, err = _interrupt(args, tmp_path, running)
    _one_line(rc, out, err, "tune adacomm tiny stopped")
    study = optuna.load_study(study_name="sync", storage=open_journal(spec))
    trials = study.get_trials(deepcopy=False)
    stopped = [t for t in trials if t.state == TrialState.FAIL]
    assert stopped and all(t.user_attrs["stopped"]["signal"] == "SIGINT" for t in stopped)
    assert not [t.number for t in trials if t.state == TrialState.RUNNING]
    assert not tuned.exists()  # an unfinished search writes no values

    again = repro_cli(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    assert sorted(t.user_attrs["design_index"] for t in done) == list(range(spec.n_trials))
    assert yaml.safe_load(tuned.read_text())["arms"]["sync"]["trials"] == spec.n_trials


@pytest.mark.parametrize("how", list(STOPS))
def test_a_stopped_run_set_says_so_in_one_line_and_the_rerun_resumes(tmp_path, how):
    # the tiny set's 2-modeled-second budget ends a run 0.3-1 s of wall time after its first
    # checkpoint, a window an interrupt beside a busy suite has missed; 8 s widens it 4x
    args = [*reproduce_tiny_args("adacomm", tmp_path), "trainer.time_budget_s=8", "--no-report"]
    args += [f"trainer.checkpoint_every={EVERY}"]
    runs = tmp_path / "runs"

    def cut() -> list[Path]:
        return [
            d
            for d in runs.glob("*/*")
            if checkpoint.latest_step(d) > 0 and not (d / "summary.json").exists()
        ]

    rc, out, err = _interrupt(args, tmp_path, lambda: bool(cut()), how)
    _one_line(rc, out, err, "run set adacomm tiny stopped", how)
    left = cut()
    assert left
    again = repro_cli(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "every run has finished" in repro_cli(*args, cwd=tmp_path).stdout
    for d in left:  # resumed: the same wandb run continued in a second segment
        assert (d / "summary.json").exists() and len([*(d / "wandb").glob("offline-run-*")]) == 2


def test_a_killed_training_run_says_so_and_the_rerun_resumes(tmp_path):
    """`kill` of one run on worker processes: the command ends them as it stops (none
    outlives it), and the same command resumes the run from the checkpoint it left."""
    run = tmp_path / "run"
    args = ["train", "experiment=adacomm_tiny", "trainer.engine=processes", "trainer.world_size=2"]
    args += [f"run_dir={run}"]
    args += [f"data.root={tmp_path / 'data'}", "tracking=wandb_offline", "trainer.steps=200"]
    args += ["trainer.time_budget_s=1000", f"trainer.checkpoint_every={EVERY}"]

    rc, out, err = _interrupt(args, tmp_path, lambda: checkpoint.latest_step(run) > 0, "kill")
    _one_line(rc, out, err, "train stopped", "kill")
    cut = checkpoint.latest_step(run)
    assert 0 < cut < 200 and not (run / "summary.json").exists()
    again = repro_cli(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert (run / "summary.json").exists() and len([*(run / "wandb").glob("offline-run-*")]) == 2


@pytest.mark.parametrize("engine", ["simulated", "processes"])
@pytest.mark.parametrize("how", ["ctrl_c", "kill"])
def test_a_stopped_run_reads_back_as_stopped_not_failed(tmp_path, how, engine):
    """A run stopped by Ctrl-C or `kill` logs that it stopped, so `repro runs ls` tells it
    from a failure (it read `failed(1)`); resumed, the same run reads finished. On worker
    processes the command killed them at once, so the run read as cut short (incomplete)."""
    run = tmp_path / "run"
    args = ["train", "experiment=adacomm_tiny", f"run_dir={run}", "tracking=wandb_offline"]
    args += [f"trainer.engine={engine}"]
    args += [f"data.root={tmp_path / 'data'}", "trainer.steps=4000", "trainer.time_budget_s=0"]
    args += [f"trainer.checkpoint_every={EVERY}", f"trainer.eval_every={EVERY}"]

    def state() -> str:
        listed = repro_cli("runs", "ls", str(tmp_path), cwd=tmp_path)
        (row,) = [line for line in listed.stdout.splitlines() if line.endswith(str(run))]
        return row.split()[4]

    rc, out, err = _interrupt(args, tmp_path, lambda: checkpoint.latest_step(run) > 0, how)
    _one_line(rc, out, err, "train stopped", how)
    assert state() == "stopped"
    if engine == "processes":  # the same resume as the simulated run's, four times slower
        return
    again = repro_cli(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert state() == "finished"


def _ps() -> list[list[str]]:
    ps = subprocess.run(["ps", "-ww", "-eo", "pid=,sess=,args="], capture_output=True, text=True)
    return [
        row for row in (line.split(None, 2) for line in ps.stdout.splitlines()) if len(row) == 3
    ]


def _parent(pid: str) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
    except OSError:  # it ended meanwhile
        return None


def _servers(marker: str) -> list[str]:
    """The worker servers (multiprocessing's forkserver) that the command, the process whose
    arguments hold `marker`, started."""
    rows = _ps()
    commands = {p for p, _, args in rows if marker in args and "forkserver" not in args}
    return [p for p, _, args in rows if "forkserver" in args and _parent(p) in commands]


def _forkserver_loading(marker: str) -> Callable[[], bool]:
    """Ready once the command (the process whose arguments hold `marker`) has started its
    worker server: it then loads torch and the compiled loops for seconds before the first
    worker forks."""
    return lambda: bool(_servers(marker))


def _forked(marker: str) -> list[int]:
    """The workers forked for the command whose arguments hold `marker`."""
    servers = set(_servers(marker))
    return [int(p) for p, _, _ in _ps() if _parent(p) in servers]


def test_ctrl_c_while_a_sweep_starts_its_workers_says_so_in_one_line(tmp_path):
    """Ctrl-C while a sweep's worker server loads torch, before any worker is forked: it
    printed a KeyboardInterrupt traceback from its imports, or a worker forked after the
    command had gone printed one about its queue."""
    _, spec_path, args = _sweep(tmp_path)
    rc, out, err = _interrupt(args, tmp_path, _forkserver_loading(str(tmp_path)))
    _one_line(rc, out, err, f"sweep {spec_path} stopped")


def test_a_run_sets_workers_leave_sigint_to_it_from_their_start(tmp_path):
    """A run set's side-by-side workers leave interrupts to the set's process, which stops
    them all, from the moment they are forked: SIGINT sent to them alone as they start
    neither stops them nor prints "Process ForkServerPoolWorker-1:" and a traceback."""
    args = [*reproduce_tiny_args("adacomm", tmp_path), "--no-report"]
    marker = str(tmp_path)

    def to_workers(_session: int, signum: int) -> None:
        for worker in _forked(marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker, signum)

    how = (to_workers, signal.SIGINT)
    rc, out, err = _interrupt(args, tmp_path, lambda: bool(_forked(marker)), how)
    assert rc == 0 and "Process " not in out + err and "Traceback" not in out + err, out + err


def test_ctrl_c_while_the_worker_server_loads_says_so_in_one_line(tmp_path):
    """Ctrl-C as a run on worker processes starts them: the worker server printed its
    KeyboardInterrupt traceback from its imports, or, held there, a worker forked after the
    command had gone printed one about its queue."""
    run = tmp_path / "run"
    args = ["train", "experiment=adacomm_tiny", "trainer.engine=processes", "trainer.world_size=2"]
    args += [f"run_dir={run}", f"data.root={tmp_path / 'data'}", "tracking=disabled"]
    rc, out, err = _interrupt(args, tmp_path, _forkserver_loading(str(run)))
    _one_line(rc, out, err, "train stopped")
