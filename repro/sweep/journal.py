"""A local study's journal file, opened so that damage ends in one line naming it.

The journal (`<out>/<name>/journal.log`, Optuna's `JournalFileBackend`) is a file of JSON
lines, each one operation on a study or trial, appended under Optuna's lock. Two kinds of
damage:

* A torn last line: a worker killed, or a disk filled, in the middle of an append. Optuna's
  reader skips an unterminated last line, but its next append would glue a new record to the
  fragment, and from then on the line in the middle is unreadable and the whole study with
  it. So the fragment is cut off (under the same lock) before anything is appended, with a
  one-line warning: the operation it held never completed, and what it recorded happens again
  (a trial's start is asked again, a finished run's result is read from its summary).
* Anything else (bytes flipped, a line cut out, the file truncated to the middle of a line
  that is not the last): Optuna's replay fails with one of several errors, or the record no
  longer makes sense to it. That is one `UserError` naming the file and the way out. A whole
  last line that is not a record is that too, though Optuna's reader passes over it (as it
  would a torn one): the next append would put it in the middle, where replay fails.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, BinaryIO

from repro.errors import UserError
from repro.storage import storage_error

log = logging.getLogger("repro.sweep")
DAMAGE = (ValueError, KeyError, IndexError, TypeError, AttributeError, AssertionError)
"""What Optuna's journal replay raises on records it cannot read or apply (ValueError covers
JSON and UTF-8 decoding)."""


def ends_whole(path: Path) -> bool:
    """Whether the journal is empty or ends with a whole line."""
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return True
        f.seek(size - 1)
        return f.read(1) == b"\n"


def _tail(f: BinaryIO, newlines: int) -> tuple[int, bytes]:
    """Read `f` backwards from its end, 4 KiB at a time, until what was read holds `newlines`
    newlines or is the whole file; returns where it starts and what was read."""
    end = f.seek(0, os.SEEK_END)
    tail = b""
    while end > 0 and tail.count(b"\n") < newlines:
        start = max(0, end - 4096)
        f.seek(start)
        tail = f.read(end - start) + tail
        end = start
    return end, tail


def cut_torn_tail(path: Path) -> int:
    """Cut an unterminated last line off the journal (the caller holds Optuna's lock);
    returns how many bytes were cut."""
    if ends_whole(path):
        return 0
    with open(path, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        start, tail = _tail(f, 1)
        keep = start + tail.rfind(b"\n") + 1  # 0 when no line ends
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
        return size - keep


def open_journal_file(path: Path) -> Any:
    """Optuna's `JournalStorage` on `path`, its torn tail cut, damage one `UserError`."""
    from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock, JournalStorage

    lock = JournalFileSymlinkLock(str(path))  # the lock Optuna's appends take
    # looked at unlocked first, so that a whole journal on a read-only disk is still read
    if path.exists() and not ends_whole(path):
        try:
            lock.acquire()
            try:
                cut = cut_torn_tail(path)
            finally:
                lock.release()
        except OSError as err:
            raise storage_error(path, err, "the spec's `out:`") from None
        if cut:
            log.warning(
                "%s: cut off its last %d bytes, an unfinished record (a worker stopped while "
                "writing it); the operation it held runs again",
                path,
                cut,
            )

    class Appends(JournalFileBackend):
        """Optuna's backend, a full or read-only disk under an append one line."""

        def append_logs(self, logs: list[dict[str, Any]]) -> None:
            try:
                super().append_logs(logs)
            except OSError as err:
                raise storage_error(path, err, "the spec's `out:`") from None

    if path.exists() and not is_record(last_line(path)):
        raise damaged(path, ValueError("its last line is not a record"))
    try:
        return JournalStorage(Appends(str(path), lock_obj=lock))
    except DAMAGE as err:
        raise damaged(path, err) from None


def last_line(path: Path) -> bytes | None:
    """The journal's last whole line (a record another process is still appending, not yet
    ended by its newline, is not one); None when it has none."""
    with open(path, "rb") as f:
        tail = _tail(f, 2)[1]
    whole = tail[: tail.rfind(b"\n") + 1]
    return whole.splitlines()[-1] if whole.strip(b"\n") else None


def is_record(line: bytes | None) -> bool:
    """Whether `line` (None: no line at all) is a JSON object, as Optuna writes each record."""
    if line is None:
        return True
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def damaged(path: Path, err: BaseException) -> UserError:
    """One line: the journal's first line (from 1) that is no record, else what replay raised."""
    with open(path, "rb") as f:
        line = next((n for n, text in enumerate(f, start=1) if not is_record(text)), None)
    where = f"line {line} is not a record" if line else f"{type(err).__name__}: {err}"
    return UserError(
        f"the study journal {path} is damaged ({where.splitlines()[0][:200]}); Optuna cannot "
        f"replay it: restore it from a backup, or move {path.parent} away to start the study "
        "afresh"
    )
