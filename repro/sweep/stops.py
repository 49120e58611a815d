"""A worker told to stop: SIGTERM (its job cancelled or preempted) or SIGINT (Ctrl-C).

Such a trial is no outcome of its point, so it must neither count towards the budget nor be
left RUNNING for a heartbeat to find. `StopSignals` turns the signal into a `Stopped` raised
only while a trial's runs are running (`armed`), so Optuna's own bookkeeping (ask, tell,
storage writes) is never cut in half; a signal outside that is kept and the worker loop
stops at its next check. `mark_stopped` then fails the trial with the user attribute
`stopped` = {trial, signal} (what `repro sweep show` reports) and, in a sweep, queues its
point again with Optuna's `failed_trial` link, so the retry reuses the lost trial's run
directory and resumes from its checkpoint. Stops are not counted against
`repro.sweep.storage.MAX_RETRY`: that cap is for points that kill their worker, and a
preempted or interrupted point did nothing wrong. Nor did a point whose run a full or
read-only disk ended (`WriteRefused`): it is marked and queued again the same way.

SLURM signals every process of a job at once, and wandb's service may die before this
process handles its own SIGTERM; the run then fails with a lost connection first. So a
failing run waits up to `STOP_GRACE_S` for a stop signal before it counts as a crash.

A `Stopped` raised where the signal landed inside a callback from C code is dropped by
the C caller, and the run went on to its end as if no signal had come; the handler is armed
again and the signal sent again (`repro.errors.dropped_stops_sent_again`).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from repro.errors import StorageError, Terminated, dropped_stops_sent_again, sigterm_taken

STOP_GRACE_S = 3.0
"""How long a failed run waits for the stop signal that may have caused it (SLURM delivers
it to every process of the job within milliseconds; seconds cover a loaded machine)."""
SIGNALS = (signal.SIGTERM, signal.SIGINT)
T = TypeVar("T")


class Stopped(BaseException):
    """The worker got `signum` while a trial ran. A BaseException, so that no `except
    Exception` on the way (the objective's crash handler, Optuna's tell) takes it for a
    failure of the trial."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.name = signal.Signals(signum).name
        super().__init__(self.name)

    def exit(self) -> BaseException:
        """What the worker raises once the trial is marked: KeyboardInterrupt for Ctrl-C, and
        `Terminated` for SIGTERM where the worker runs in the command's own process (which
        takes SIGTERM as a stop): each command prints its one line for them. Else the shell's
        exit status for the signal.
        wandb's service got the same signal and may be gone; wandb's own exit hook would then
        print a traceback from talking to it, so its teardown runs here, quietly."""
        wandb = sys.modules.get("wandb")
        if wandb is not None:
            with contextlib.suppress(Exception):
                wandb.teardown()
        if self.signum == signal.SIGINT:
            return KeyboardInterrupt()
        if self.signum == signal.SIGTERM and sigterm_taken():
            return Terminated()
        return SystemExit(128 + self.signum)


class WriteRefused(BaseException):
    """A trial's run ended by a disk that refused a write (`error`, a full or read-only
    disk): no outcome of its point either, so it is marked and queued again as a stopped
    trial is, and the worker ends on `error`'s one line. A BaseException for the reason
    `Stopped` is one."""

    name = "a refused write"

    def __init__(self, error: StorageError) -> None:
        super().__init__(str(error))
        self.error = error


class StopSignals:
    """SIGTERM and SIGINT handlers for one worker process (main thread only)."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._armed = False
        self._raised: Stopped | None = None
        self._before: dict[int, Any] = {}
        self._dropped_hook = contextlib.ExitStack()

    def install(self) -> StopSignals:
        for s in SIGNALS:
            self._before[s] = signal.signal(s, self._handle)
        self._dropped_hook.enter_context(dropped_stops_sent_again(self._dropped))
        return self

    def restore(self) -> None:
        for s, handler in self._before.items():
            signal.signal(s, handler)
        self._before.clear()
        self._dropped_hook.close()

    def _handle(self, signum: int, frame: object) -> None:
        if self.received is None:
            self.received = signum
        if self._armed:
            self._armed = False  # once: marking the trial must not be cut short again
            self._raised = Stopped(self.received)
            raise self._raised

    def _dropped(self, stop: BaseException) -> int | None:
        """For an exception C code dropped (module doc): if it is the stop just raised, arm
        again and name the signal to send again; anything else is not this one's."""
        if stop is not self._raised:
            return None
        # the armed block is still open: the C call that dropped the stop was made inside it
        self._raised, self._armed = None, True
        return self.received

    @contextlib.contextmanager
    def armed(self) -> Iterator[None]:
        """Raise `Stopped` inside this block at the signal (at once if one came before)."""
        self.check()
        self._armed = True
        try:
            yield
        finally:
            self._armed, self._raised = False, None

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` armed. A failure that a stop signal caused (its cleanup replacing
        `Stopped` with an error of its own, say) raises `Stopped` too, so that the caller
        marks its trial stopped instead of leaving it RUNNING."""
        try:
            with self.armed():
                return fn(*args)
        except Exception:
            self.after_failure()
            raise

    def check(self) -> None:
        """Raise `Stopped` if a stop signal has come."""
        if self.received is not None:
            raise Stopped(self.received)

    def after_failure(self) -> None:
        """A run just failed: if a stop signal caused it, raise `Stopped` (waiting a little
        for a signal that may still be on its way, module doc)."""
        deadline = time.monotonic() + STOP_GRACE_S
        while self.received is None and time.monotonic() < deadline:
            time.sleep(0.05)
        self.check()


_CAUSES = {
    "SIGINT": "interrupted (Ctrl-C)",
    WriteRefused.name: "its disk refused a write (full or read-only)",
}


def stop_reason(trial: Any) -> str | None:
    """The one-line reason `repro sweep show` gives for a stopped trial, None for others (a
    retry carries its original's attributes, so the mark names the trial it is for)."""
    mark = trial.user_attrs.get("stopped")
    if not isinstance(mark, dict) or mark.get("trial") != trial.number:
        return None
    sent = mark.get("signal")
    cause = _CAUSES.get(sent, f"stopped by {sent} (a kill, or its job cancelled or preempted)")
    return f"{cause}; its point runs again, resuming its run"


def mark_stopped(
    study: Any, storage: Any, number: int, stop: Stopped | WriteRefused, requeue: bool
) -> None:
    """Fail RUNNING trial `number` as stopped and (with `requeue`) queue its point again."""
    import optuna
    from optuna.trial import TrialState

    study_id = storage.get_study_id_from_name(study.study_name)
    trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, number)
    try:
        storage.set_trial_user_attr(trial_id, "stopped", {"trial": number, "signal": stop.name})
        storage.set_trial_state_values(trial_id, TrialState.FAIL)
    except optuna.exceptions.UpdateFinishedTrialError:
        return  # failed meanwhile by a heartbeat check, which queued it itself
    if not requeue:
        return
    lost = storage.get_trial(trial_id)
    study.add_trial(
        optuna.create_trial(
            state=TrialState.WAITING,
            params=lost.params,
            distributions=lost.distributions,
            user_attrs=lost.user_attrs,
            system_attrs={
                **lost.system_attrs,
                "failed_trial": lost.system_attrs.get("failed_trial", number),
            },
        )
    )
