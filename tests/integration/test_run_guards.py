"""One live run per run directory, closed pipes, and the guards that refuse a run before
it starts: each refusal one line naming the setting, exit 2, nothing written."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from repro.cluster.launcher import launch_runs
from repro.config import compose, identity, run_dir_of
from repro.errors import UserError
from repro.storage import NewDir
from repro.train.run_lock import run_lock
from tests.helpers import TINY, repro_cli
from tests.integration.test_state_faults import cli

REPRO = str(Path(sys.executable).parent / "repro")


def _env() -> dict:
    env = {**os.environ, "WANDB_SILENT": "true"}
    env.pop("WANDB_API_KEY", None)
    return env


def _one_line(code: int, err: str, *needles: str) -> str:
    line = err.strip()
    assert code == 2 and len(line.splitlines()) == 1 and line.startswith("error: "), err
    assert all(n in line for n in needles), (needles, line)
    return line


def test_second_launch_is_refused_and_a_killed_run_leaves_no_lock(tmp_path):
    run_dir = tmp_path / "run"
    args = [*TINY, "trainer.steps=100000", "tracking=disabled", f"data.root={tmp_path}/data"]
    first = subprocess.Popen(
        [REPRO, "train", *args, f"run_dir={run_dir}"],
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    lock = run_dir / ".lock"
    deadline = time.time() + 120
    while not (lock.exists() and lock.read_text().strip()) and first.poll() is None:
        assert time.time() < deadline
        time.sleep(0.05)
    os.kill(first.pid, signal.SIGSTOP)  # holds the lock, and cannot finish meanwhile
    try:
        code, _, err = cli("train", *args, f"run_dir={run_dir}")
        _one_line(code, err, f"pid {first.pid} on host {socket.gethostname()}", str(run_dir))
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
    with run_lock(run_dir):  # the kernel dropped the killed run's lock
        assert lock.read_text().split() == [str(os.getpid()), socket.gethostname()]


def test_a_closed_pipe_ends_quietly(tmp_path):
    """The reader goes before the command writes: its first write meets a broken pipe."""
    commands = [["train", "--help"], ["runs", "ls", str(tmp_path)], ["jobs", "--root", "x"]]
    for command in commands:
        proc = subprocess.Popen(
            [REPRO, *command], env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        proc.stdout.close()
        err = proc.stderr.read().decode()
        code = proc.wait()
        if command[0] == "jobs":  # nothing on stdout: its one error line still shows
            assert code == 2 and err.startswith("error: no jobs recorded"), err
        else:
            assert code == 141 and err == "", (command, err)


@pytest.mark.parametrize(
    "override,needles",
    [
        (
            "experiment.label=" + "x" * 300,
            ("311 bytes", "at most 255", "experiment.label", "run_dir"),
        ),
        ("run_dir={tmp}/" + "y" * 256, ("256 bytes", "run_dir")),
        ("data.root={tmp}/afile", ("data.root=", "is a regular file", "directory")),
        ("data.root={tmp}/afile/below", ("lies under", "is a regular file")),
    ],
)
def test_names_the_file_system_cannot_hold_and_a_file_for_data_root(tmp_path, override, needles):
    (tmp_path / "afile").write_text("not a directory")
    override = override.format(tmp=tmp_path)
    code, _, err = cli("train", "trainer.steps=2", f"runs_root={tmp_path}/runs", override)
    _one_line(code, err, *needles)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


@pytest.mark.parametrize("before", ["missing", "empty"])
def test_a_run_wandb_cannot_start_leaves_its_folder_as_it_was(tmp_path, before):
    """Online tracking without an API key is refused only when wandb starts, after the run's
    folder, its lock and its config.yaml were made: those are taken back. HOME is empty, so
    no key is found in a netrc either."""
    run_dir = tmp_path / "new" / "run"
    if before == "empty":
        run_dir.mkdir(parents=True)
    args = [*TINY, "tracking=wandb_online", f"run_dir={run_dir}", f"data.root={tmp_path}/d"]
    proc = subprocess.run(
        [REPRO, "train", *args],
        env={**_env(), "HOME": str(tmp_path / "home")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    _one_line(proc.returncode, proc.stderr, "tracking.mode=online", "tracking=wandb_offline")
    if before == "empty":
        assert list(run_dir.iterdir()) == []
    else:
        assert not (tmp_path / "new").exists()


@pytest.mark.parametrize(
    "before,written,left",
    [
        (None, ["config.yaml"], None),  # refused before its own first write: taken back
        (None, ["config.yaml", "step_20.pt"], ["config.yaml", "step_20.pt"]),
        (["summary.json"], ["config.yaml"], ["config.yaml", "summary.json"]),  # a run's folder
    ],
)
def test_a_failed_body_takes_back_only_a_folder_it_made_and_nothing_else(
    tmp_path, before, written, left
):
    run_dir = tmp_path / "a" / "run"
    for name in before or []:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / name).write_text("before")
    folder = NewDir(run_dir, "run_dir")
    with pytest.raises(KeyboardInterrupt), folder.undone_on_failure(("config.yaml",)):
        for name in written:
            (run_dir / name).write_text("written")
        raise KeyboardInterrupt
    if left is None:
        assert list(tmp_path.iterdir()) == []
    else:
        assert sorted(p.name for p in run_dir.iterdir()) == left


def test_a_launch_the_lock_refuses_leaves_the_live_runs_files(tmp_path):
    """Two launches of a new run: the second found the folder empty, then the first took
    the lock and wrote its config; the second's refusal must not take those back."""
    run_dir = tmp_path / "run"
    second = NewDir(run_dir, "run_dir")
    with run_lock(run_dir):  # the first launch
        (run_dir / "config.yaml").write_text("the live run's")
        undone = second.undone_on_failure(("config.yaml", ".lock"))
        with pytest.raises(UserError, match="in use by a live run"), run_lock(run_dir), undone:
            pass
        assert sorted(p.name for p in run_dir.iterdir()) == [".lock", "config.yaml"]


@pytest.mark.parametrize("pinned", [False, True], ids=["all_cores", "taskset_one_core"])
def test_too_many_worker_processes_for_the_cores_is_refused(tmp_path, pinned):
    """Four workers a core, counted on the cores the command may use: pinned to one (as a
    SLURM job's cpuset or `taskset` pins it), five workers are refused on a larger machine."""
    cores = 1 if pinned else len(os.sched_getaffinity(0))
    world = 4 * cores + 1
    one_core = ("taskset", "-c", str(min(os.sched_getaffinity(0))))
    proc = repro_cli(
        "train",
        *TINY,
        "trainer.engine=processes",
        f"trainer.world_size={world}",
        "trainer.batch_size=2",
        f"runs_root={tmp_path}/runs",
        f"data.root={tmp_path}/data",
        under=one_core if pinned else (),
    )
    on = "1 core" if pinned else f"{cores} cores"
    said = f"trainer.world_size={world} worker processes on the {on} this command may use"
    _one_line(proc.returncode, proc.stderr, said, "engine=simulated")
    assert not (tmp_path / "runs").exists()


def test_a_run_set_reports_a_damaged_run_and_runs_the_others(tmp_path):
    base = [*TINY, "tracking=disabled", f"runs_root={tmp_path}/runs", f"data.root={tmp_path}/d"]
    runs = [(seed, compose([*base, f"seed={seed}"])) for seed in ("0", "1")]
    damaged = run_dir_of(runs[0][1])
    damaged.mkdir(parents=True)
    (damaged / "config.yaml").write_bytes(b"\xff\xfe not yaml")
    with pytest.raises(UserError, match=r"1 run\(s\) need the fix above: 0"):
        launch_runs(runs, "set")
    assert (run_dir_of(runs[1][1]) / "summary.json").exists()
    assert sorted(p.name for p in damaged.iterdir()) == ["config.yaml"]
    (damaged / "config.yaml").unlink()  # the fix the line names
    launched = launch_runs(runs, "set")
    assert [s["step"] for s in launched.summaries] == [40, 40]


def test_a_requeued_job_waits_for_the_lock_a_dead_node_held(tmp_path, monkeypatch):
    """On NFS a dead node's lock lingers until its lease runs out; the requeued job waits
    for it (here another open file holds it for 2 s) where a fresh launch is refused."""
    import fcntl
    import threading

    tmp_path.joinpath(".lock").write_text("1 elsewhere\n")
    held = (tmp_path / ".lock").open("a")
    fcntl.flock(held, fcntl.LOCK_EX)
    with pytest.raises(UserError, match="pid 1 on host elsewhere"), run_lock(tmp_path):
        pass
    threading.Timer(2.0, held.close).start()
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    started = time.monotonic()
    with run_lock(tmp_path):
        assert 1.5 < time.monotonic() - started < 30


def test_a_sets_one_added_run_that_diverges_is_its_result_a_lone_run_fails(tmp_path, capsys):
    """Seeds added to a set may be a single run: its divergence is the set's result, as it is
    among many, and the reproduction goes on to its report; a command of one run fails."""
    from repro.train.divergence import Diverged

    base = [*TINY, "tracking=disabled", f"runs_root={tmp_path}/runs", f"data.root={tmp_path}/d"]
    one = [("seed=3", compose([*base, "optim.lr=3", "seed=3"]))]
    launched = launch_runs(one, "set (added seeds)", in_set=True)
    assert launched.summaries == [None]
    assert "diverged seed=3: training diverged at step" in capsys.readouterr().out
    with pytest.raises(Diverged, match="training diverged at step"):
        launch_runs(one, "train")


def test_a_read_only_wandb_folder_of_a_writable_run_is_named(tmp_path):
    """A run resumed where only its wandb folder cannot be written (a read-only mount of it)
    ended in wandb's traceback: the run folder's own probe passed."""
    logs = tmp_path / "run" / "wandb"
    logs.mkdir(parents=True)
    up = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(logs)])
    if up.returncode != 0:
        pytest.skip("cannot mount a tmpfs here; this test needs root")
    try:
        code, _, err = cli(
            "train",
            *TINY,
            "tracking=wandb_offline",
            f"run_dir={tmp_path / 'run'}",
            f"data.root={tmp_path}/d",
        )
    finally:
        subprocess.run(["umount", "-l", str(logs)], check=True)
    line = _one_line(code, err)
    assert (
        line == f"error: {logs}: read-only file system; make it writable or set run_dir elsewhere"
    )


@pytest.mark.parametrize("engine", ["simulated", "processes"])
def test_a_blowup_on_the_last_step_fails_the_run(tmp_path, engine):
    """The last step's update was judged by nothing: its training loss came before it, and
    the run finished with a model of 1e30s and a NaN test loss as a success."""
    args = [*TINY, "trainer.steps=1", "optim.lr=1e30", "trainer.world_size=2"]
    code, _, err = cli(
        "train",
        *args,
        f"trainer.engine={engine}",
        "compute.mode=sampled",
        "tracking=disabled",
        f"run_dir={tmp_path}/run",
        f"data.root={tmp_path}/data",
    )
    _one_line(code, err, "training diverged at step 1: the evaluated model's test loss is nan")
    assert not (tmp_path / "run" / "final_model.pt").exists()


def test_a_second_launchs_other_ranks_leave_the_live_runs_checkpoint(tmp_path):
    """Rank 0 of an external launch holds the run's lock; the others skip it. Those of a
    second launch (torchrun again on the same run) cleared the live run's step directory
    still being written, and the live run died on its missing rank file."""
    from repro.train import checkpoint

    args = [*TINY, "trainer.world_size=2", "trainer.engine=processes", "tracking=disabled"]
    args += [f"run_dir={tmp_path}/run", f"data.root={tmp_path}/data"]
    cfg = compose(args)
    checkpoint.record_run_dir(tmp_path / "run", identity(cfg))
    writing = tmp_path / "run" / "checkpoints" / "step_00000005"
    writing.mkdir(parents=True)
    (writing / "rank0.pt").write_bytes(b"half")
    with socket.socket() as closed:  # a port nobody listens on: rank 0 was refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    env = {**_env(), "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    rank1 = subprocess.run(
        [REPRO, "train", *args, "trainer.collective_timeout_s=3"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert rank1.returncode != 0
    assert (writing / "rank0.pt").read_bytes() == b"half"


def test_several_runs_under_an_external_launcher_are_refused(tmp_path, monkeypatch):
    """Its one rendezvous serves one run: the second run's gloo met the first's stale
    addresses and failed part-way through, with a traceback from every rank."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    code, _, err = cli(
        "train",
        "--multirun",
        *TINY,
        "seed=1,2",
        "tracking=disabled",
        f"runs_root={tmp_path}/runs",
        f"data.root={tmp_path}/data",
    )
    _one_line(code, err, "2 runs under an external launcher (RANK and WORLD_SIZE set")
    assert not (tmp_path / "runs").exists()


def test_a_longer_run_of_a_finished_config_says_it_starts_over(tmp_path):
    """A run's length is part of its identity: raising trainer.steps makes a new run from
    step 0, and the command says so, naming the finished one; another change says nothing."""
    base = [*TINY, "tracking=disabled", f"runs_root={tmp_path}/runs", f"data.root={tmp_path}/d"]
    code, _, err = cli("train", *base, "trainer.steps=20")
    assert code == 0 and "note:" not in err, err
    (finished,) = (tmp_path / "runs" / "default").iterdir()
    code, _, err = cli("train", *base, "trainer.steps=40")
    assert code == 0, err
    note = next(line for line in err.splitlines() if line.startswith("note:"))
    assert note == (
        f"note: {finished} holds this run finished at trainer.steps=20; a run's length is part "
        "of its identity, so this one starts from step 0 in a new directory instead of "
        "extending it"
    )
    assert len(list(finished.parent.iterdir())) == 2
    for other in (["trainer.steps=40", "optim.lr=0.05"], ["trainer.steps=10"]):
        code, _, err = cli("train", *base, *other)  # another setting changed; a shorter run
        assert code == 0 and "note:" not in err, err
