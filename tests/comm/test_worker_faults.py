"""A worker that dies or stops ends the whole run quickly, with one line naming it.

Real spawned gloo workers loop on all_reduce; one of them is sent SIGKILL or SIGSTOP by a
peer, and the time from that signal to `spawn` raising is measured. The message must name
the failed worker (not a peer that lost its connection), how it failed, and the step a
re-run resumes from. The real trainer is then run the same way in a subprocess, down to
the one line on stderr; and suspending the whole run (Ctrl-Z) must not count as a fault.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from repro.comm.launch import WorkerCrash, WorkerFailed, spawn
from repro.train import checkpoint
from tests.comm.fault_workers import loop_forever, raise_in_one, signal_one
from tests.helpers import REPO, TINY

TIMEOUT_S = 5.0
# Start-up is not timed (the clock starts at the signal); this covers the parent's polling,
# the settling second and killing and reaping up to 4 workers on 2 busy cores.
MARGIN_S = 3.0


def _run_dir_at_step(tmp_path: Path, step: int, world: int) -> Path:
    run_dir = tmp_path / "run"
    checkpoint.commit(run_dir, step, "abc123", world)
    return run_dir


def _assert_all_gone(out: Path, world: int) -> None:
    for rank in range(world):
        pid = int((out / f"pid{rank}").read_text())
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def _fail(tmp_path: Path, world: int, victim: int, sig: int, group_timeout_s: float):
    out = tmp_path / "out"
    out.mkdir()
    run_dir = _run_dir_at_step(tmp_path, 40, world)
    with pytest.raises(WorkerFailed) as err:
        spawn(
            signal_one,
            world,
            victim,
            sig,
            str(out),
            group_timeout_s,
            collective_timeout_s=TIMEOUT_S,
            resume_hint=functools.partial(checkpoint.resume_hint, run_dir),
        )
    took = time.monotonic() - float((out / "signalled").read_text())
    _assert_all_gone(out, world)
    return str(err.value), took


@pytest.mark.slow
@pytest.mark.parametrize(("world", "victim"), [(2, 0), (4, 2)])
def test_sigkill_names_the_killed_worker(tmp_path, world, victim):
    msg, took = _fail(tmp_path, world, victim, signal.SIGKILL, group_timeout_s=TIMEOUT_S)
    assert msg.startswith(f"worker {victim} of {world} was killed by SIGKILL; ")
    assert f"all {world} workers were ended" in msg
    assert "re-running the same command resumes from step 40" in msg
    assert "\n" not in msg
    # its peers see the closed connection at once; only polling and settling remain
    assert took < 1.0 + MARGIN_S, f"took {took:.1f} s"


@pytest.mark.slow
@pytest.mark.parametrize(("world", "victim"), [(2, 1), (4, 2)])
def test_sigstop_ends_the_run_within_the_timeout(tmp_path, world, victim):
    msg, took = _fail(tmp_path, world, victim, signal.SIGSTOP, group_timeout_s=TIMEOUT_S)
    assert msg.startswith(f"worker {victim} of {world} stopped answering (no heartbeat for ")
    assert f"trainer.collective_timeout_s={TIMEOUT_S:g}" in msg
    assert "re-running the same command resumes from step 40" in msg
    # the silence is judged at the timeout less two beats (0.5 s each here), never early
    assert TIMEOUT_S - 1.5 < took < TIMEOUT_S + MARGIN_S, f"took {took:.1f} s"


@pytest.mark.slow
def test_peer_collective_timeout_still_blames_the_stopped_worker(tmp_path):
    # The peers' collectives time out at 3 s, before the parent's 5 s silence limit: their
    # timeout errors arrive first, yet the stopped worker is the one named.
    msg, took = _fail(tmp_path, 2, 1, signal.SIGSTOP, group_timeout_s=3.0)
    assert re.match(r"worker 1 of 2 stopped answering \(no heartbeat for [34] s", msg), msg
    assert took < 3.0 + MARGIN_S, f"took {took:.1f} s"


@pytest.mark.slow
def test_exception_in_one_worker_names_that_worker(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(WorkerCrash) as err:
        spawn(raise_in_one, 4, 3, str(out), collective_timeout_s=TIMEOUT_S)
    first = str(err.value).splitlines()[0]
    assert first == "worker 3 of 4 failed: RuntimeError: boom in rank 3"
    _assert_all_gone(out, 4)


def _children(pid: int) -> list[int]:
    return [
        int(child)
        for task in Path(f"/proc/{pid}/task").iterdir()
        for child in (task / "children").read_text().split()
    ]


def _worker_pids(parent: int) -> list[int]:
    """`parent`'s workers, in rank order (`spawn` starts them in rank order, so their pids
    increase): the children of its fork server, not multiprocessing's resource tracker."""
    servers = [
        p for p in _children(parent) if b"forkserver" in Path(f"/proc/{p}/cmdline").read_bytes()
    ]
    return sorted(pid for server in servers for pid in _children(server))


LAUNCHER = """
import sys
from repro.comm.launch import spawn
from tests.comm.fault_workers import loop_forever
if __name__ == "__main__":
    spawn(loop_forever, 2, sys.argv[1])
"""


def test_a_killed_launcher_takes_its_workers_with_it(tmp_path):
    """SIGKILL to the process that called `spawn` alone (not its group): both workers,
    in a collective loop, end within seconds, so none is left blocked forever."""
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(tmp_path)], cwd=REPO)
    try:
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("pid*"))) < 2 and time.monotonic() < deadline:
            assert launcher.poll() is None
            time.sleep(0.1)
        workers = [int(p.read_text()) for p in sorted(tmp_path.glob("pid*"))]
        assert len(workers) == 2
        launcher.kill()
        launcher.wait()
        deadline = time.monotonic() + 10
        while any(Path(f"/proc/{pid}").exists() for pid in workers):
            assert time.monotonic() < deadline, "workers outlived their launcher"
            time.sleep(0.1)
    finally:
        if launcher.poll() is None:
            launcher.kill()


# What `repro train trainer.world_size=2` does once the trainer passes its timeout and
# resume hint to `spawn`, down to the CLI's one line on stderr and exit status 2.
TRAIN_TWO_WORKERS = """
import functools, sys
from pathlib import Path
from repro.config import compose
from repro.comm.launch import spawn
from repro.errors import UserError
from repro.train import checkpoint
from repro.train.entry import train_worker
from repro.workload.workload import prepare
if __name__ == "__main__":
    cfg = compose(sys.argv[2:])
    prepare(cfg.workload, cfg.data, cfg.seed)
    hint = functools.partial(checkpoint.resume_hint, Path(cfg.run_dir))
    try:
        spawn(train_worker, 2, cfg, collective_timeout_s=float(sys.argv[1]), resume_hint=hint)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
"""


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["SIGKILL", "SIGSTOP"])
def test_training_run_ends_with_one_line_naming_worker_and_resume_step(tmp_path, sig):
    """The real trainer on 2 processes; worker 1 is signalled after the second checkpoint."""
    run_dir = tmp_path / "run"
    overrides = [
        *TINY,
        "trainer.world_size=2",
        "trainer.engine=processes",
        "trainer.steps=100000",
        "tracking=wandb_offline",
        f"run_dir={run_dir}",
        f"data.root={tmp_path / 'data'}",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-c", TRAIN_TWO_WORKERS, str(TIMEOUT_S), *overrides],
        cwd=REPO,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while checkpoint.latest_step(run_dir) < 40 and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1]
        time.sleep(0.02)
    os.kill(_worker_pids(proc.pid)[1], sig)
    signalled = time.monotonic()
    _, stderr = proc.communicate(timeout=120)
    took = time.monotonic() - signalled

    step = checkpoint.latest_step(run_dir)
    cause = {
        signal.SIGKILL: r"was killed by SIGKILL",
        signal.SIGSTOP: r"stopped answering \(no heartbeat for [45] s, "
        rf"trainer.collective_timeout_s={TIMEOUT_S:g}\)",
    }[sig]
    where = re.escape(str(run_dir / "checkpoints"))
    assert proc.returncode == 2
    # one line: no traceback of a peer, no resource-tracker warning after it
    assert re.fullmatch(
        rf"error: worker 1 of 2 {cause}; all 2 workers were ended; "
        rf"re-running the same command resumes from step {step} \({where}\)\n",
        stderr,
    ), stderr
    assert step >= 40
    assert took < {signal.SIGKILL: 1.0, signal.SIGSTOP: TIMEOUT_S}[sig] + MARGIN_S, took


SUSPEND_WHOLE_RUN = """
import sys
from repro.comm.launch import spawn
from tests.comm.fault_workers import count_to
if __name__ == "__main__":
    print(spawn(count_to, 2, 300, sys.argv[1], collective_timeout_s=3.0))
"""


@pytest.mark.slow
def test_suspending_the_whole_run_is_not_a_fault(tmp_path):
    # Ctrl-Z stops the launcher and its workers together; after `fg` every heartbeat is
    # older than the timeout (stopped 4 s, the timeout 3 s), yet nobody stopped answering on
    # their own. The launcher is continued first, so that it looks before any worker has
    # beaten again; the 300 all-reduces (3 s) go on for 2 s after it.
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", SUSPEND_WHOLE_RUN, str(out)],
        cwd=REPO,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not (out / "pid1").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)
    os.killpg(proc.pid, signal.SIGSTOP)
    time.sleep(4.0)
    os.kill(proc.pid, signal.SIGCONT)
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGCONT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert stdout.strip() == "[300, 300]"


def test_a_stop_while_workers_start_ends_those_already_started(tmp_path, monkeypatch):
    """Ctrl-C or kill between two workers' starts: the started one went on starting after
    the launcher had taken down the results queue, and failed with a traceback."""
    import multiprocessing
    from multiprocessing.context import ForkServerProcess

    (tmp_path / "out").mkdir()
    start = ForkServerProcess.start
    started = []

    def start_then_stop(self):
        if started:
            raise KeyboardInterrupt
        start(self)
        started.append(self)

    monkeypatch.setattr(ForkServerProcess, "start", start_then_stop)
    with pytest.raises(KeyboardInterrupt):
        spawn(loop_forever, 2, str(tmp_path / "out"), collective_timeout_s=TIMEOUT_S)
    assert len(started) == 1 and started[0].exitcode is not None
    assert multiprocessing.active_children() == []
