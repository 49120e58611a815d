"""The one flock module: refused while held, free once its holder ends (however it ends),
waited for when asked to, and a holder's stamp read back."""

import os
import signal
import socket
import subprocess
import sys
import threading
import time

from repro.locks import held, holder, take
from repro.storage import staged_folder

HOLD = (
    "import sys, time\n"
    "from pathlib import Path\n"
    "from repro.locks import take\n"
    "lock = take(Path(sys.argv[1])); lock.stamp(); print('held', flush=True); time.sleep(60)\n"
)


def test_a_held_lock_is_refused_then_free_after_its_holder_is_killed(tmp_path):
    path = tmp_path / "sub" / "a.lock"  # the folder is created
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "held"
        assert held(path)
        assert take(path, wait_s=0) is None
        assert holder(path) == f"pid {proc.pid} on host {socket.gethostname()}"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert not held(path)  # the kernel dropped the killed holder's lock
    with take(path, wait_s=0) as lock:
        assert lock.fd is not None
    assert lock.fd is None


def test_waiting_takes_the_lock_once_released_and_release_is_idempotent(tmp_path):
    path = tmp_path / "b.lock"
    first = take(path)
    threading.Timer(1.5, first.release).start()
    started = time.monotonic()
    second = take(path, wait_s=30)
    assert second is not None and 1.0 < time.monotonic() - started < 30
    first.release()  # already released by the timer: nothing happens
    second.release()
    second.release()


def test_missing_and_unstamped_files(tmp_path):
    assert not held(tmp_path / "none.lock")
    assert holder(tmp_path / "none.lock") == "another process"
    (tmp_path / "c.lock").write_text("garbage\n")
    assert holder(tmp_path / "c.lock") == "another process"


STAGE = (
    "import sys, time\n"
    "from pathlib import Path\n"
    "from repro.storage import staged_folder\n"
    "with staged_folder(Path(sys.argv[1]), '--out') as stage:\n"
    "    (stage / 'page.html').write_text(sys.argv[2])\n"
    "    print('writing', flush=True); time.sleep(60)\n"
)


def _writer(final, text: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", STAGE, str(final), text], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "writing"
    return proc


def _stages(final) -> list[str]:
    return sorted(p.read_text() for p in final.glob(".writing-*/page.html"))


def test_a_killed_page_writers_staging_folder_is_removed_by_the_next_not_a_live_ones(
    tmp_path,
):
    """A page writer killed mid-page leaves its hidden staging folder; the next writer of
    that folder removes it, but not the folder a live writer is filling."""
    final = tmp_path / "reports" / "adacomm"
    live, killed = _writer(final, "live"), _writer(final, "killed")
    try:
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait()
        assert _stages(final) == ["killed", "live"]
        with staged_folder(final, "--out") as stage:
            (stage / "page.html").write_text("whole")
        assert _stages(final) == ["live"]
        assert (final / "page.html").read_text() == "whole"
    finally:
        os.kill(live.pid, signal.SIGKILL)
        live.wait()
    with staged_folder(final, "--out") as stage:
        (stage / "page.html").write_text("again")
    assert _stages(final) == [] and sorted(p.name for p in final.iterdir()) == ["page.html"]
