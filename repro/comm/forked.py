"""Worker processes forked from one server that loaded torch and the trainer once.

Every local worker process a command starts comes from multiprocessing's forkserver, which
imports `repro.train.worker_preload` once and forks each worker from itself: a run's worker
processes (`repro.comm.launch.spawn`), a run set's side-by-side workers and a sweep's local
workers (`repro.cluster.launcher`). A freshly spawned process imports torch, the trainer and
the compiled CPU loops itself, 3-4 s of CPU on two cores; a forked one starts in
milliseconds, and every later start in the same command reuses the server.

A forked worker is not the command's child but the server's, and the server keeps the
environment it began with, so each worker takes the command's environment (`caller`, passed
at its start) and ends with the command, however it ends (`become_caller`). The server is
started with SIGINT held (`repro.errors.interrupts_held`), so every worker is born with it
held and lets it in once it has its own answer to it.

This module does not import torch, so a command that only starts workers does not load it.
"""

from __future__ import annotations

import multiprocessing
import os
import select
import signal
import threading
import time
from multiprocessing.context import BaseContext

_PRELOAD = ["repro.train.worker_preload"]


def context() -> BaseContext:
    """The forkserver context, its server to load `repro.train.worker_preload`."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    return ctx


def caller() -> tuple[dict[str, str], int]:
    """What a worker needs of the process starting it: its environment now, and its pid."""
    return dict(os.environ), os.getpid()


def become_caller(environ: dict[str, str], launcher: int) -> None:
    """Run in a forked worker first: take the starting process's environment (the server's
    is the one of its own start, maybe another test's or an earlier notebook cell's) and end
    with that process."""
    os.environ.clear()
    os.environ.update(environ)
    _die_with_launcher(launcher)


def _die_with_launcher(launcher: int) -> None:
    """End this worker when the process that started it ends, however it ends: a SIGKILLed
    command must not leave workers blocked in a collective, or training on, forever. A
    forked worker's parent is the fork server, which outlives the command for as long as its
    workers live, so the worker watches the command itself: through a pidfd where the
    system has them (no pid reuse can fool it), else by asking once a second."""
    threading.Thread(target=_end_with, args=(launcher,), daemon=True, name="launcher").start()


def _end_with(launcher: int) -> None:
    try:
        select.select([os.pidfd_open(launcher)], [], [])  # readable once it has ended
    except ProcessLookupError:
        pass  # it has ended already
    except (AttributeError, OSError):
        while _exists(launcher):
            time.sleep(1.0)
    os.kill(os.getpid(), signal.SIGKILL)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True
