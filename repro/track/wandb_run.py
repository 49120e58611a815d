"""One wandb run per training run: offline by default, quiet, resumable.

The trainer builds a `Tracker` on rank 0 only, logs one point per evaluation step and
finishes it (its name, group and tags from `repro.track.naming`, its default x axis and
summaries from `repro.track.wandb_metrics`); the run's files land under the training run's
own directory (`<run_dir>/wandb/offline-run-<time>-<id>/run-<id>.wandb`), where
`repro.track.runs` reads them back without a server and `wandb sync` uploads them.

Mode `auto` (the schema default) is online only when `WANDB_API_KEY` is set, so a laptop, a
CI job and a cluster node without credentials never touch the network. `disabled` makes a
Tracker that does nothing and writes nothing.

Resume: the trainer stores `Tracker.run_id` in its checkpoint and passes it back after a
restart; the new Tracker continues the same run id (`resume="allow"`). Offline, that writes a
second `offline-run-*` segment that holds every point again, from the first (the trainer
replays the points its checkpoint kept); the reader lets the later segment replace the
overlapping steps.

A full or read-only disk: wandb's service drops records on a full disk without telling this
process, and its logger prints a traceback per record it cannot write. So the Tracker checks
the disk itself (before init, and with one statvfs per logged point) and ends the run with
one `UserError` line naming the run's file; a `finish` after another error stays quiet.

Start-up cost, measured here (wandb 0.31, 2 cores): the first `wandb.init` of a process
spawns wandb's service (about 0.45 s); later inits in the same process take about 0.05 s and
`finish` a few ms. The settings below keep it there: no system-metrics sampler, no console
capture, no git inspection.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from repro.errors import UserError
from repro.schemas.tracking import TrackingConfig
from repro.storage import out_of_space, probe_write, storage_error
from repro.track.wandb_file import has_exit_record
from repro.track.wandb_metrics import aggregated, define_metrics

# wandb writes its transaction log every 15 s by default; a SIGKILL loses whatever was not
# yet written. One second bounds that loss to the points of the last second before a kill.
FLUSH_INTERVAL_S = 1.0
# How long `finish` waits for wandb's service to write the run's last records.
FINISH_WAIT_S = 30.0


def _settings(mode: str):
    import wandb

    return wandb.Settings(
        mode=mode,
        silent=True,
        quiet=True,
        show_warnings=False,
        console="off",  # tqdm and prints stay on the terminal, not in the run
        x_disable_stats=True,  # no sampler process competing for the 2 cores
        disable_git=True,  # the resolved config identifies the run; a git diff is slow
        disable_code=True,
        save_code=False,
        x_transaction_log_flush_interval=FLUSH_INTERVAL_S,
        reinit="create_new",  # several runs in one process (tests, sweeps) stay separate
    )


def _import_wandb():
    """wandb, with its import-time temporary folders removed as this process ends, where
    this process is the one that imported it.

    Importing wandb makes two empty folders in the temporary directory (for media and
    artifacts), which it removes at interpreter exit. A run set's and a sweep's workers are
    forked processes that end by `os._exit`, past that, so each left both behind: 84 in /tmp
    after one `make reproduce-all`. multiprocessing runs its own finalizers as such a worker
    ends (and at a plain exit), so the removal is registered there, once per process that
    imported wandb itself: a forked child that inherited wandb holds its parent's folders."""
    first = "wandb" not in sys.modules
    import wandb

    if first:
        from multiprocessing import util

        util.Finalize(None, _remove_temp_folders, exitpriority=0)
    return wandb


def _remove_temp_folders() -> None:
    import tempfile

    media = getattr(sys.modules.get("wandb.sdk.data_types._private"), "MEDIA_TMP", None)
    artifact = getattr(sys.modules.get("wandb.sdk.artifacts.artifact"), "Artifact", None)
    for folder in (media, getattr(artifact, "_TMP_DIR", None)):
        if isinstance(folder, tempfile.TemporaryDirectory):
            folder.cleanup()


@contextlib.contextmanager
def _quiet_logging():
    # wandb's debug.log handler prints a traceback to stderr for every record it cannot
    # write; on a full disk that is dozens of lines around the one that matters.
    before = logging.raiseExceptions
    logging.raiseExceptions = False
    try:
        yield
    finally:
        logging.raiseExceptions = before


class Tracker:
    """The wandb run of one training run; every method is a no-op when mode is disabled."""

    def __init__(
        self,
        cfg: TrackingConfig,
        run_dir: Path,
        name: str,
        group: str | None,
        job_type: str | None,
        config: Mapping[str, Any],
        run_id: str | None = None,
        tags: Sequence[str] = (),
    ):
        self._run = None
        self._id: str | None = None
        self.url: str | None = None
        self._last_step: int | None = None
        mode = cfg.resolved_mode()
        if mode == "disabled":
            return
        wandb = _import_wandb()

        run_dir = Path(run_dir)
        logs = run_dir / "wandb"
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            # wandb itself would fall back to /tmp for a directory it cannot write
            probe_write(run_dir)
            if logs.is_dir():  # a resumed run appends there
                probe_write(logs)
        except OSError as e:
            raise storage_error(logs, e, "run_dir") from None
        try:
            self._run = wandb.init(
                project=cfg.project,
                entity=cfg.entity,
                dir=str(run_dir),
                name=name,
                group=group or None,
                job_type=job_type or None,
                tags=list(dict.fromkeys([*tags, *cfg.tags])),
                config=dict(config),
                id=run_id,
                resume="allow" if run_id else None,
                settings=_settings(mode),
            )
        except wandb.errors.Error as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UserError(
                f"tracking.mode={mode}: wandb could not start ({first}); "
                "use tracking=wandb_offline or tracking=disabled"
            ) from None
        # A resumed online run continues after the server's last step; the points the
        # restarted trainer re-logs below it are already there (same config, same values).
        self._floor = self._run.starting_step
        self._id = self._run.id
        # an online run's page, for the report's run links; an offline run has none yet
        self.url = self._run.url if mode == "online" else None
        self._file = Path(self._run.settings.sync_file)
        define_metrics(self._run)

    @property
    def run_id(self) -> str | None:
        """The wandb run id to store in the checkpoint (None when disabled)."""
        return self._id

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        """Log one point (all of a step's metrics in one call); `step` is also logged as
        the `step` metric, the x axis every curve is defined against."""
        step = int(step)
        if self._run is None or step < self._floor:
            return
        if self._last_step is not None and step <= self._last_step:
            raise ValueError(
                f"Tracker.log: step {step} after step {self._last_step}; "
                "log each step once, in increasing order"
            )
        full = out_of_space(self._file.parent)
        if full is not None:
            raise storage_error(self._file, full, "run_dir")
        row = dict(metrics)
        row["step"] = step
        # commit now: a point held back until the next step would be lost to a kill
        self._run.log(row, step=step, commit=True)
        self._last_step = step

    def set_summary(self, metrics: Mapping[str, Any]) -> None:
        """Final values (e.g. the last evaluated point) shown as the run's summary.

        A metric wandb aggregates (`wandb_metrics.SUMMARIES`: min loss, max accuracy, ...)
        is left to those aggregates: its final value is their `last`, and writing it here
        would replace them all with one number."""
        if self._run is not None:
            self._run.summary.update({k: v for k, v in metrics.items() if not aggregated(k)})

    def finish(self, exit_code: int = 0) -> None:
        """End the run and wait until its file is complete; later calls do nothing.

        wandb's `finish` returns before its service has written the run's last records
        (about 1-10 ms later here), so a report built in the same process right after
        training would read a run without its end. Waiting for the exit record closes that
        gap. A full disk raises a `UserError` after a successful run (`exit_code` 0) and is
        passed over silently after a failed one, whose own error is the one to report."""
        if self._run is None:
            return
        log_file = self._file
        run, self._run = self._run, None
        try:
            with _quiet_logging():
                run.finish(exit_code=exit_code)
        except OSError as e:
            if exit_code == 0:
                raise storage_error(log_file, e, "run_dir") from None
            return
        deadline = time.monotonic() + FINISH_WAIT_S
        while not has_exit_record(log_file):
            full = out_of_space(log_file.parent)
            if full is not None:
                if exit_code == 0:
                    raise storage_error(log_file, full, "run_dir")
                return
            if time.monotonic() > deadline:
                warnings.warn(
                    f"wandb has not completed {log_file} after {FINISH_WAIT_S:.0f} s; "
                    "the run will read back as incomplete",
                    stacklevel=2,
                )
                return
            time.sleep(0.005)

    def __enter__(self) -> Tracker:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.finish(exit_code=0 if exc_type is None else 1)
