"""Advisory file locks (`flock`), the one place the suite takes them.

The kernel drops a flock when the process holding it ends, however it ends, so a lock left
by a killed process never blocks anyone, and "I can take it" means "its holder is gone".
The suite uses them for one live run per run directory (`repro.train.run_lock`), one
process at a time generating a dataset or preparing a job's data (`repro.workload.data`,
`repro.cluster.submit`), a sweep's ask lock and its workers' liveness
(`repro.sweep.storage`), a tuning worker's claim on a design point
(`repro.sweep.worker`), and a page writer's staging folder (`repro.storage.staged_folder`).
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import time
from pathlib import Path

_POLL_S = 1.0
RUN_LOCK = ".lock"
"""The file in a run directory whose lock the live run holds (`repro.train.run_lock`), which
`repro runs` asks to tell a running run from a stopped one."""


class FileLock:
    """An exclusive flock held on an open file until `release` (idempotent, so a lock can
    be handed on) or the end of a `with` block. Build one with `take`."""

    def __init__(self, fd: int) -> None:
        self.fd: int | None = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor drops the flock
            self.fd = None

    def stamp(self) -> None:
        """Write this process's pid and host into the locked file, for `holder`. In place,
        not by rename: the lock belongs to this open file."""
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)

    def __enter__(self) -> FileLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def take(path: Path, wait_s: float | None = None) -> FileLock | None:
    """The exclusive lock on `path` (created, with its folder, if missing). `wait_s`: None
    waits as long as it takes; 0 tries once; more retries every second for that long.
    None when another process still holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    if wait_s is None:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return FileLock(fd)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return FileLock(fd)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                os.close(fd)
                raise
        if time.monotonic() >= deadline:
            os.close(fd)
            return None
        time.sleep(_POLL_S)


def held(path: Path) -> bool:
    """Whether a live process holds `path`'s lock (a missing file: nobody does)."""
    try:
        fd = os.open(path, os.O_RDONLY)  # a flock needs no write access: a read-only share
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def holder(path: Path) -> str:
    """Who `stamp`ed `path`: "pid P on host H", or "another process" when unreadable."""
    try:
        words = path.read_text(encoding="utf-8").split()
    except OSError:
        words = []
    return f"pid {words[0]} on host {words[1]}" if len(words) == 2 else "another process"
