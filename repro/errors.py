"""The one exception type that means "the user asked for something we cannot do".

The CLI turns a `UserError` into a single line on stderr and a non-zero exit code, with no
traceback: the message must name the setting and the fix. Beside it, the checks and the
argument parser that every command shares, so that each refuses in the same words, and the
stop a SIGTERM makes, so that each command ends on it as on Ctrl-C.

A signal can land while C code has called back into Python (numba's compiler notifying
llvmlite's object cache, which happens throughout a first compile): the exception its
handler raises there is printed as ignored and dropped by the C caller, and the command
ran on as if no signal had come. `dropped_stops_sent_again` catches such a stop at
`sys.unraisablehook`, unprinted, and sends its signal again `REDELIVER_S` later, by when
the callback has returned into code the stop can end.
"""

import _thread
import argparse
import contextlib
import difflib
import gc
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path


class UserError(Exception):
    """Bad input or an unmet precondition that the user can fix."""


class StorageError(UserError):
    """A write the disk refused (`repro.storage.storage_error`): the place or the disk is at
    fault, not the run or the trial that was writing, so a run set or a search stops on it
    rather than going on with the next run or recording a failed trial."""


def require_choice(setting: str, value: object, choices, hint: str = "") -> None:
    """Refuse `value` for `setting` unless it is one of `choices`, in the one line every
    named option's refusal shares: the setting, the value, the choices (and `hint`)."""
    if value not in choices:
        tail = f" {hint}" if hint else ""
        raise UserError(f"{setting}={value!r} is unknown; choose one of {list(choices)}{tail}")


def override_key(override: str) -> str:
    """The key a Hydra override sets: `a.b` of `a.b=1`, `+a.b=1` and `~a.b`."""
    return override.lstrip("+~").partition("=")[0]


def require_seed(setting: str, value: int) -> None:
    """Refuse a seed outside numpy's 0 .. 2**32 - 1 (MNIST-1D and PowerSGD's projections draw
    from numpy) before any run starts, rather than with numpy's traceback inside one."""
    if not 0 <= value < 2**32:
        raise UserError(f"{setting}={value} must be in 0 .. {2**32 - 1}")


def require_path(setting: str, value: str, empty: str = "") -> None:
    """Refuse a path that starts with `~`: nothing expands it on its way here (the shell
    leaves it alone after `key=`, Hydra takes it as written, a YAML file as text), so it
    would name a folder called `~` inside the current one. An empty one is refused unless
    `empty` says what it means (`run_dir`: the default directory): `data.root=`, or an
    environment variable that was not set, wrote into whatever folder the command ran in."""
    if not value and not empty:
        raise UserError(f"{setting}= is empty; name a folder (. for the current one)")
    if value.startswith("~"):
        raise UserError(
            f"{setting}={value} starts with ~, which is not expanded here (it would make a "
            f"folder named ~ in this one); write the path out: {setting}="
            f"{os.path.expanduser(value)}"
        )


def require_folder_name(setting: str, value: str) -> None:
    """Refuse a setting that names one folder of a run's directory (its experiment, its
    label) but would name others: a `/` nests folders, and `..` climbed out of runs_root,
    where `repro runs ls` and the reports never looked."""
    if "/" in value or value in (".", ".."):
        raise UserError(
            f"{setting}={value!r} names one folder of the run's directory under runs_root: "
            "write it without / and not as . or .."
        )


class CommandParser(argparse.ArgumentParser):
    """The argument parser of every `repro` command: a wrong flag or a missing argument is a
    `UserError` (one line, exit 2) naming the command and where its usage is, as any other
    bad input, rather than argparse's usage block on stderr and its own exit."""

    def error(self, message: str):
        raise UserError(f"{self.prog}: {message}; `{self.prog} --help` shows its usage")

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        """Options may stand between positionals, as people type them (`repro tune adacomm
        --workers 2 scale=tiny`, `repro report compare A --metric test/acc B`): argparse alone
        ends the positionals at the first option. A command with subcommands parses them as
        argparse does (each subcommand's own parser reads its part)."""
        if any(a.nargs in (argparse.PARSER, argparse.REMAINDER) for a in self._actions):
            return _home_expanded(super().parse_args(args, namespace))
        return _home_expanded(self.parse_intermixed_args(args, namespace))

    def parse_intermixed_args(self, args=None, namespace=None):  # type: ignore[override]
        """A mistyped option is named alone, with the nearest known one: argparse reports a
        missing required option first ("one of the arguments --model --params is
        required" for `--modle`), or lists the arguments after it as unrecognized too."""
        self._refuse_unknown_options(sys.argv[1:] if args is None else list(args))
        return super().parse_intermixed_args(args, namespace)

    def _refuse_unknown_options(self, args: list[str]) -> None:
        known = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
        for arg in args:
            if arg == "--":
                return
            name = arg.split("=", 1)[0]
            if name.startswith("--") and not any(o.startswith(name) for o in known):
                near = difflib.get_close_matches(name, known, n=1)
                hint = f" (did you mean {near[0]}?)" if near else ""
                self.error(f"unknown option {name}{hint}")


def _home_expanded(parsed: argparse.Namespace) -> argparse.Namespace:
    """Each value that starts with `~` with the home folder written out, as the shell would
    have: it expands `~` only at a word's start (`--out ~/reports`), not in `--out=~/reports`,
    which would otherwise make a folder named `~`."""
    for name, value in vars(parsed).items():
        if isinstance(value, str | Path) and str(value).startswith("~"):
            setattr(parsed, name, type(value)(os.path.expanduser(value)))
    return parsed


class Terminated(KeyboardInterrupt):
    """SIGTERM reached the command (`kill PID`, `timeout`, a container stopped): it stops as
    on Ctrl-C, says so in one line and resumes when run again (`sigterm_stops`, around the
    long commands' work). A KeyboardInterrupt, so that all that is undone after a Ctrl-C is
    undone here too (a run set's pool ended, a run's worker processes ended); without it
    SIGTERM killed the command silently, mid-line."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated()


@contextlib.contextmanager
def sigterm_stops() -> Iterator[None]:
    """Inside, SIGTERM raises `Terminated` (in the main thread; elsewhere it keeps its own
    handler). Only around work that resumes when run again: a command whose other threads
    keep it alive (a server's) would not end on it. A process that handles SIGTERM itself (a
    sweep worker marking its trial) installs its own handler over this one, and ends with
    `Terminated` where `sigterm_taken()` says the command it runs in takes it so."""
    try:
        before = signal.signal(signal.SIGTERM, _terminate)
    except ValueError:  # not the main thread: a signal handler cannot be set there
        yield
        return
    global _depth
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        signal.signal(signal.SIGTERM, before)


_depth = 0
"""How many `sigterm_stops` this process is inside."""


def sigterm_taken() -> bool:
    """Whether this process is inside `sigterm_stops`: a command's own, not a worker it
    spawned or a job's."""
    return _depth > 0


def say_stopped(stop: KeyboardInterrupt, what: str) -> int:
    """Print the one line a stopped command ends with (`what`: what stopped and how to go
    on) and return its exit status, as a shell reports a command the signal ended."""
    word, signum = "interrupted", signal.SIGINT
    if isinstance(stop, Terminated):
        word, signum = "terminated", signal.SIGTERM
    # the frames the stop unwound may hold a coroutine it cut off before it ran (wandb's
    # client awaits in the command's thread): freed after the line, it printed Python's
    # "never awaited" warning below it, so they go first
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "coroutine .* was never awaited", RuntimeWarning)
        stop.__traceback__ = None
        gc.collect()
    print(f"{word}: {what}", file=sys.stderr, flush=True)
    return 128 + signum


REDELIVER_S = 0.05
"""How long after a dropped stop its signal comes again (module doc): the C code that called
back returns long before (llvmlite's cache callback takes microseconds)."""


def _keyboard_signal(stop: BaseException) -> int | None:
    """The signal whose handler raised `stop`, if it is a command's stop: Ctrl-C's
    KeyboardInterrupt, or SIGTERM's `Terminated`."""
    if not isinstance(stop, KeyboardInterrupt):
        return None
    return signal.SIGTERM if isinstance(stop, Terminated) else signal.SIGINT


@contextlib.contextmanager
def dropped_stops_sent_again(
    signal_of: Callable[[BaseException], int | None] = _keyboard_signal,
) -> Iterator[None]:
    """Inside, an exception dropped by C code that had called back into Python, for which
    `signal_of` names the signal whose handler raised it, is not printed: the main thread's
    handler of that signal is called again `REDELIVER_S` later, as if the signal came again
    (module doc), unless this block has been left by then. Other unraisable exceptions go to
    the hook that was there before."""
    before, left = sys.unraisablehook, threading.Event()

    def resend(signum: int) -> None:
        if not left.is_set():  # else the handler in place is not the one whose stop dropped
            _thread.interrupt_main(signum)

    def hook(unraisable) -> None:
        signum = signal_of(unraisable.exc_value)
        if signum is None:
            before(unraisable)
            return
        timer = threading.Timer(REDELIVER_S, resend, (signum,))
        timer.daemon = True
        timer.start()

    sys.unraisablehook = hook
    try:
        yield
    finally:
        left.set()
        sys.unraisablehook = before


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Processes started inside are born with SIGINT blocked (held, not dropped) and let it
    in once they have their own answer to it, and a Ctrl-C to this process meanwhile
    arrives on leaving: enter this where a stop is handled.

    A Ctrl-C reaches the whole process group. One landing while the worker server loads
    `worker_preload` (seconds; `repro.comm.forked`) printed a KeyboardInterrupt traceback
    from its imports above the command's one-line stop, and one landing in a worker just
    forked, before it set its answer, raised in multiprocessing's bootstrap ("Process
    ForkServerPoolWorker-1:" and a traceback), a side-by-side worker lost so leaving its
    pool waiting. The block is this thread's alone, and Python runs a signal's handler on
    the main thread whichever thread the kernel gave it to, so the handler is also set
    aside while inside (on the main thread): a Ctrl-C raised inside `Process.start`, while
    it waits for the forkserver, left a worker to be forked after this process had gone,
    failing on its queue's semaphore with a traceback of its own. SIGTERM (`kill`, a
    scheduler's stop) is not held: it ends the command at once, as `sigterm_stops` means
    it to."""
    from multiprocessing import resource_tracker

    # multiprocessing's resource tracker unblocks SIGINT here as it first starts (with the
    # first worker, or its pool's first lock), so it starts before the block
    resource_tracker.ensure_running()
    arrived: list[int] = []
    # set aside only a Python handler: an ignored SIGINT (a command started in a script's
    # background) stays ignored for the processes started inside, and one set by C code
    # could not be put back
    handler = signal.getsignal(signal.SIGINT)
    swap = callable(handler) and threading.current_thread() is threading.main_thread()
    if swap:
        signal.signal(signal.SIGINT, lambda s, _: arrived.append(s))
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        if swap:
            signal.signal(signal.SIGINT, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, before)  # one held on this thread: here
        if arrived:
            signal.raise_signal(signal.SIGINT)
