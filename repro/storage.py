"""A full or read-only disk, said in one line that names the path and the fix.

Without this, a full disk surfaced as whatever the writer made of it: torch's zip writer
prints `unexpected pos ...` and `iostream error`, wandb's logger prints a traceback per
record, numpy a 49-line traceback, matplotlib one per figure. Each writer of run
directory, data or report files turns the `OSError` into `storage_error(...)`, a
`StorageError` (a `UserError`), so the CLI prints one line and exits non-zero; a search
tells it from a trial's own failure by its type. A report's files are written together
(`staged_folder`), so a full disk leaves the previous page whole.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from repro.errors import StorageError
from repro.locks import held, take

_FULL = {errno.ENOSPC, errno.EDQUOT}
_NOT_WRITABLE = {errno.EROFS, errno.EACCES, errno.EPERM}
_FILE_IN_THE_WAY = {errno.ENOTDIR, errno.EEXIST}
# a page writer's staging folder in the page's folder, and the lock it holds inside it
_STAGE, _WRITER = ".writing-", ".writer.lock"


def storage_error(path: Path | str, err: OSError, setting: str) -> StorageError:
    """`<path>: no space left on device; free space or set <setting> elsewhere` (or the
    OS's reason for another errno); `setting` is the config key that chose the place."""
    reason = os.strerror(err.errno).lower() if err.errno else str(err)
    if err.errno in _FULL:
        fix = f"free space or set {setting} elsewhere"
    elif err.errno in _NOT_WRITABLE:
        fix = f"make it writable or set {setting} elsewhere"
    elif err.errno in _FILE_IN_THE_WAY:
        fix = f"a file, not a folder, is on that path; set {setting} elsewhere"
    else:
        fix = f"check that disk or set {setting} elsewhere"
    return StorageError(f"{path}: {reason}; {fix}")


def storage_failure(err: BaseException) -> StorageError | None:
    """The `StorageError` that `err` is, or was raised while handling (a library's cleanup
    can fail anew once the disk refused its write, hiding the first error)."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, StorageError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def out_of_space(path: Path | str) -> OSError | None:
    """The error a write under `path` would meet now, if the file system is read-only or
    has no free block left; None otherwise. One statvfs call, cheap enough per log point:
    for writers (wandb's service) that drop records on a full disk without telling us."""
    st = os.statvfs(path)
    if st.f_flag & os.ST_RDONLY:
        return OSError(errno.EROFS, os.strerror(errno.EROFS))
    # root may use the blocks reserved for it; everyone else only the available ones
    free = st.f_bfree if os.geteuid() == 0 else st.f_bavail
    if free == 0:
        return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return None


def missing_folders(path: Path) -> list[Path]:
    """The folders `mkdir -p path` would make, `path` first (absolute); [] when it exists."""
    missing, here = [], Path(path).absolute()
    while not here.exists():
        missing.append(here)
        here = here.parent
    return missing


def make_dir(path: Path, setting: str) -> None:
    """`mkdir -p path`; an OSError becomes `storage_error` naming `setting`."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise storage_error(path, e, setting) from None


class NewDir:
    """A folder made for one run, taken back if the run fails before writing anything.

    `NewDir(path, setting)` makes the folder (`make_dir`). In its `undone_on_failure`
    block, a failure while the folder, missing or empty before, holds nothing but
    `scaffolding` files removes those files and every folder made here: a run refused after
    its folder was made but before it wrote anything of its own (wandb cannot log in)
    leaves nothing half-written. A folder that held anything before (a run to resume), or
    holds anything else by then (a checkpoint, a log), is kept as it is. The caller enters
    the block only once it holds the folder's lock, so a launch refused because another
    holds it never touches that run's files."""

    def __init__(self, path: Path, setting: str):
        self.path, self.made = Path(path), missing_folders(path)
        make_dir(self.path, setting)
        try:
            self.fresh = bool(self.made) or not any(self.path.iterdir())
        except OSError:  # unreadable: not ours to take back; the run says why it fails
            self.fresh = False

    @contextlib.contextmanager
    def undone_on_failure(self, scaffolding: tuple[str, ...]) -> Iterator[None]:
        try:
            yield
        except BaseException:
            if (
                self.fresh
                and self.path.is_dir()
                and all(f.name in scaffolding for f in self.path.iterdir())
            ):
                for name in scaffolding:
                    (self.path / name).unlink(missing_ok=True)
                for folder in self.made:
                    with contextlib.suppress(OSError):  # another run's folder since: keep it
                        folder.rmdir()
            raise


@contextlib.contextmanager
def staged_folder(final: Path, setting: str) -> Iterator[Path]:
    """A hidden folder inside `final` to write a page's files into; when the block ends
    well they are renamed into `final` together (a rename takes no space, so a full disk
    stops the writing, never the move), and otherwise removed: a page and its figures are
    never left half-written beside the previous ones. An OSError (a full or read-only disk)
    becomes one line naming `final` and `setting`.

    The writer holds a lock inside its folder, so that a folder left by one that was
    killed (SIGKILL, its node lost), whose lock the kernel has dropped, is removed by the
    next writer of `final`, while a folder another writer is filling now is left alone."""
    make_dir(final, setting)
    stage = None
    try:
        _remove_abandoned(final)
        stage = Path(tempfile.mkdtemp(dir=final, prefix=_STAGE))
        with take(stage / _WRITER):
            yield stage
            for f in sorted(stage.iterdir()):
                if f.name != _WRITER:
                    os.replace(f, final / f.name)
    except OSError as e:
        raise storage_error(final, e, setting) from None
    finally:
        if stage is not None:
            shutil.rmtree(stage, ignore_errors=True)


def _remove_abandoned(final: Path) -> None:
    """Remove the staging folders in `final` whose writer has ended without removing its
    own. One with no lock file yet is being made this instant and is kept."""
    for stage in final.glob(f"{_STAGE}*"):
        lock = stage / _WRITER
        if lock.exists() and not held(lock):
            shutil.rmtree(stage, ignore_errors=True)


def check_creatable(path: Path, setting: str) -> None:
    """Raise `storage_error` now if folder `path` could not be made later: its nearest
    existing ancestor is not a directory, is on a full or read-only disk, or is not
    writable. Creates nothing, so a command refused for another reason afterwards leaves no
    empty folder behind."""
    missing = missing_folders(path)
    here = missing[-1].parent if missing else Path(path).absolute()
    if not here.is_dir():
        raise storage_error(path, OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR)), setting)
    full = out_of_space(here)  # before access(), which calls a read-only mount "denied"
    if full is not None:
        raise storage_error(path, full, setting)
    if not os.access(here, os.W_OK | os.X_OK):
        raise storage_error(path, OSError(errno.EACCES, os.strerror(errno.EACCES)), setting)


def probe_write(directory: Path | str) -> None:
    """Write, sync and remove one byte in `directory`: raises the OSError a real write
    would (creating an empty file still succeeds on a full disk, writing does not)."""
    with tempfile.TemporaryFile(dir=directory) as f:
        f.write(b"\0")
        f.flush()
        os.fsync(f.fileno())


def _umask() -> int:
    """This process's umask, read without setting it (setting it to read it back would
    change it for a moment under the other threads, wandb's among them)."""
    with contextlib.suppress(OSError), open("/proc/self/status") as status:
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(
    path: Path,
    write: Callable[[IO[bytes]], object],
    setting: str,
    prefix: str = "",
    suffix: str = ".tmp",
) -> None:
    """`write(file)` into a synced temporary file beside `path`, then rename it to `path`:
    readers never see a torn file. Any failure removes the temporary file; an OSError (a
    full or read-only disk) becomes one line naming `path` and `setting`."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=prefix, suffix=suffix)
        with os.fdopen(fd, "wb") as f:
            write(f)
            # mkstemp's file is the owner's alone (0600): the file gets the mode any other
            # file here gets, so that a group sharing runs on a cluster can read them
            os.fchmod(f.fileno(), 0o666 & ~_umask())
            f.flush()
            # On file systems that allocate at write-back (ext4, xfs), ENOSPC shows here.
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise storage_error(path, e, setting) from None
        raise
