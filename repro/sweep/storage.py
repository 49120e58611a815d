"""Where a study lives, and how a trial lost with its worker is failed and queued again.

Two storages:

* Journal file (the default): `<out>/<name>/journal.log` through Optuna's `JournalStorage` with
  `JournalFileBackend`, shared by the workers of one machine (opened by `repro.sweep.journal`,
  which repairs a torn last record and turns other damage into one line). A journal has no
  heartbeat, so a trial whose process was SIGKILLed would stay RUNNING forever; the worker
  locks below find it.
  Workers on several hosts cannot share it (`repro sweep --cluster` refuses it).
* A database URL (PostgreSQL on a cluster): `RDBStorage` with Optuna's heartbeat. A trial whose
  heartbeat is older than `grace_s` is failed by the next worker that looks (Optuna's
  `fail_stale_trials`), and Optuna's `RetryHeartbeatStaleTrialCallback` queues its point again.
  The heartbeat thread starts before the objective runs, so only a trial killed between `ask`
  and its first beat escapes it: such a trial carries no `worker` stamp, and it is failed here
  once it is older than `grace_s`.

Worker locks (`WorkerLocks`, `fail_orphaned_trials`): every worker process holds an exclusive
`flock` (`repro.locks`) on its own file `<study dir>/workers/<host>-<pid>.lock` for its whole
life and stamps each trial with the user attribute `worker=<host>:<pid>` right after asking.
The kernel drops a flock when its process dies, however it dies, so "I can take that worker's
lock" means "that worker is gone", with no PID-reuse ambiguity. On a journal a RUNNING trial is
stale exactly when its worker is gone; trials of live workers (for example of a second `repro
sweep` on the same study) are left alone. Workers check under `<study dir>/ask.lock`, the lock
a worker holds from counting the budget until its new trial is stamped, so an unstamped RUNNING
trial seen under the lock belongs to a dead worker. Either way the lost point is queued again
by the same Optuna callback the heartbeat uses.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import warnings
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from urllib.parse import quote, unquote

from repro.errors import UserError
from repro.locks import held, take
from repro.storage import make_dir

if TYPE_CHECKING:
    import optuna
    from optuna.storages import BaseStorage, RetryHeartbeatStaleTrialCallback

RDB_SCHEMES = ("postgresql", "mysql", "sqlite")
SERVER_SCHEMES = ("postgresql", "mysql")
"""Databases that workers on several hosts can share (SQLite is a file on one machine's disk)."""
MAX_RETRY = 2
"""How often a trial lost to a dead worker is queued again before its point is given up."""


class StudyPlace(Protocol):
    """What `open_storage` needs of a sweep spec (kept structural so this module does not
    import the spec module, which imports this one for its URL checks)."""

    storage: str | None
    study_dir: Path
    source: str
    heartbeat_s: int
    grace_s: int


_ENV = re.compile(r"\$\{(\w+)\}|\$(\w+)")


def _userinfo(url: str) -> str:
    """The URL's `user:password` part ("" when it has none)."""
    rest = url.split("://", 1)[-1]
    return rest[: rest.rfind("@")] if "@" in rest else ""


def _password(url: str) -> str | None:
    _, colon, secret = _userinfo(url).partition(":")
    return secret if colon else None


def mask_url(url: str) -> str:
    """The URL with its password replaced by `***` (the only form that is ever printed)."""
    secret = _password(url)
    if not secret:
        return url
    at = url.rfind("@")  # the password ends there
    return f"{url[: at - len(secret)]}***{url[at:]}"


def scrub(text: str, url: str) -> str:
    """Remove the URL's password (raw and percent-decoded) from any text, e.g. a driver error,
    before it reaches a message."""
    secret = _password(url)
    text = text.replace(url, mask_url(url))
    for s in {secret, unquote(secret)} if secret else ():
        text = text.replace(s, "***")
    return text


def scheme(url: str) -> str:
    """The database kind of a storage URL: `postgresql` for `postgresql+psycopg2://...`."""
    return url.split("://", 1)[0].split("+", 1)[0] if "://" in url else ""


def expand_storage_url(raw: str) -> str:
    """Expand `$VAR`/`${VAR}` (so a spec can keep the password in the environment) and check
    the scheme; a `$` in a literal password must be written `%24`."""
    if not raw:
        raise UserError("storage must be null (journal file) or a database URL")
    missing = [a or b for a, b in _ENV.findall(raw) if (a or b) not in os.environ]
    if missing:
        raise UserError(f"storage {mask_url(raw)}: environment variable {missing[0]} is not set")
    _check_encoded_secrets(raw)
    url = _ENV.sub(lambda m: os.environ[m.group(1) or m.group(2)], raw)
    if scheme(url) not in RDB_SCHEMES:
        raise UserError(
            f"storage {mask_url(url)}: expected a {'/'.join(RDB_SCHEMES)} URL "
            "(or null for the journal file)"
        )
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        make_url(url)
    except (ArgumentError, ValueError):
        raise UserError(f"storage {mask_url(url)} is not a valid database URL") from None
    if url.startswith("postgresql://"):
        # SQLAlchemy 2.1 maps a bare postgresql:// to psycopg 3; the project ships psycopg2.
        url = "postgresql+psycopg2://" + url[len("postgresql://") :]
    return url


def _check_encoded_secrets(raw: str) -> None:
    """A variable in the URL's user and password holding a character that ends them ('@',
    '/', '?', '#'): the URL would split inside the password and name a piece of it as the
    host, in every error after. Refused naming the variable, never its value."""
    for a, b in _ENV.findall(_userinfo(raw)):
        found = [c for c in "@/?#" if c in os.environ[a or b]]
        if found:
            raise UserError(
                f"storage {mask_url(raw)}: the value of {a or b} holds {found[0]!r}, which a "
                f"URL's user or password must percent-encode ({quote(found[0])}); export it "
                "encoded, as urllib.parse.quote(value, safe='') writes it"
            )


def retry_callback() -> RetryHeartbeatStaleTrialCallback:
    """Optuna's re-queue of a lost trial: a WAITING copy of its point, which the next `ask`
    takes first, at most `MAX_RETRY` times per point (counted in its `retry_history` system
    attribute). The heartbeat calls it for trials it fails; `fail_orphaned_trials` for its own."""
    import optuna

    with warnings.catch_warnings(action="ignore", category=optuna.exceptions.ExperimentalWarning):
        return optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRY)


def _no_fallback_warning(record: logging.LogRecord) -> bool:
    """Drops Optuna's "Caught an error from sqlalchemy ... Falling back to a slower
    alternative" warning. Optuna guesses that the error was a query with too many variables
    and runs a slower one: that either works, and there is nothing to act on, or meets the
    same error again, and `lost_database` says in one line that the server went (a database
    dropped while a trial was read printed the warning, its SQL and the guess first)."""
    return not record.getMessage().startswith("Caught an error from sqlalchemy")


def open_storage(spec: StudyPlace) -> BaseStorage:
    """The study's storage, connected: an unreachable database is a one-line `UserError`."""
    import optuna

    # the logger of Optuna's RDB storage module: a filter applies to its own records only
    logging.getLogger("optuna.storages._rdb.storage").addFilter(_no_fallback_warning)

    if spec.storage is None:
        from repro.sweep.journal import open_journal_file

        make_dir(spec.study_dir, "the spec's `out:`")
        return open_journal_file(spec.study_dir / "journal.log")
    url = expand_storage_url(spec.storage)
    engine_kwargs: dict = {"pool_pre_ping": True}
    if url.startswith("postgresql"):
        engine_kwargs["connect_args"] = {"connect_timeout": 10}
    with warnings.catch_warnings(action="ignore", category=optuna.exceptions.ExperimentalWarning):
        try:
            return optuna.storages.RDBStorage(
                url,
                engine_kwargs=engine_kwargs,
                heartbeat_interval=spec.heartbeat_s,
                grace_period=spec.grace_s,
                heartbeat_stale_trial_callback=retry_callback(),
            )
        except Exception as err:  # driver, DNS, auth and schema errors all mean "cannot use"
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            # the URL as the spec writes it, named by its file as the spec's other errors are
            where = f"{spec.source}: " if spec.source else ""
            msg = f"{where}storage {mask_url(spec.storage)}: cannot connect ({scrub(first, url)})"
            raise UserError(msg) from None


def lost_database(err: BaseException) -> UserError | None:
    """The one line for a database that stopped answering while the sweep ran (stopped,
    unreachable, its connections ended), found anywhere in `err`'s chain, or None. Optuna
    reports it as an error "during the commit ... exceeding max length", and its cleanup
    then meets it again: 24 chained tracebacks, none saying that the server had gone."""
    from sqlalchemy.exc import InterfaceError, OperationalError

    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, OperationalError | InterfaceError):
            said = str(seen.orig or seen).strip().splitlines()
            return UserError(
                f"the study's database stopped answering ({said[0] if said else 'no reason'}); "
                "the same command continues once it answers again (a trial cut off is run again)"
            )
        seen = seen.__cause__ or seen.__context__
    return None


class WorkerLocks:
    """Liveness of journal workers on this host, read from their lock files (module doc)."""

    def __init__(self, study_dir: Path) -> None:
        self.dir = study_dir / "workers"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.host = socket.gethostname()

    def register(self) -> str:
        """Hold this process's lock for its lifetime; returns the `worker` stamp for trials."""
        me = f"{self.host}:{os.getpid()}"
        self._own = take(self.lock_file(me), wait_s=0)
        if self._own is None:  # a pid is one live process: nobody else holds its file
            raise RuntimeError(f"worker lock of pid {os.getpid()} is held by another process")
        return me

    def lock_file(self, worker: str) -> Path:
        """The lock file of the worker stamped `worker` ("host:pid")."""
        host, _, pid = worker.rpartition(":")
        return self.dir / f"{host}-{pid}.lock"

    def here(self, worker: str) -> bool:
        """Whether the worker stamped `worker` runs (or ran) on this host."""
        return worker.rpartition(":")[0] == self.host

    def is_alive(self, worker: str) -> bool:
        path = self.lock_file(worker)
        if not self.here(worker):
            # Its flock need not reach this host (a cluster file system with node-local
            # locks): its lock file's presence is all that tells, so it is never stolen while
            # the file is here. A study copied here without that file (or with it deleted:
            # `_say_waiting` names it) has no worker of that host left.
            return path.exists()
        if held(path):
            return True
        path.unlink(missing_ok=True)
        return False


def fail_orphaned_trials(
    study: optuna.Study, storage: BaseStorage, locks: WorkerLocks, heartbeat_grace_s: int | None
) -> int:
    """Fail RUNNING trials whose worker is gone, stamping `stale` with the reason, and queue
    their points again. On a journal (`heartbeat_grace_s=None`, the caller holds the ask lock)
    every RUNNING trial is judged by its worker's lock at once. With a heartbeat the heartbeat
    judges every stamped trial; left here are unstamped ones older than the grace. Returns how
    many trials were failed."""
    import optuna
    from optuna.trial import TrialState

    now = datetime.now()
    failed = 0
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner = t.user_attrs.get("worker")
        if heartbeat_grace_s is None:
            if owner is not None and locks.is_alive(owner):
                continue
        elif owner is not None or (now - (t.datetime_start or now)).total_seconds() < (
            heartbeat_grace_s
        ):
            continue
        try:
            fail_stale(study, storage, t)
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # finished meanwhile (e.g. failed by the heartbeat check of another worker)
        failed += 1
        retry_callback()(study, t)
    return failed


def fail_stale(study: optuna.Study, storage: BaseStorage, trial: optuna.trial.FrozenTrial) -> None:
    """Fail a trial whose worker is gone, its `stale` attribute naming that worker."""
    from optuna.trial import TrialState

    study_id = storage.get_study_id_from_name(study.study_name)
    trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, trial.number)
    owner = trial.user_attrs.get("worker", "unknown")
    storage.set_trial_user_attr(trial_id, "stale", f"worker {owner} died")
    storage.set_trial_state_values(trial_id, TrialState.FAIL)
