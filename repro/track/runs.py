"""Read wandb runs back from their local `.wandb` files, with no server.

The records come from `repro.track.wandb_file`, which parses wandb's transaction log
directly; here they become runs. A run that was killed or is still running reads up to its
last complete record.

One training run can own several segments (`offline-run-*` directories) with the same run
id: a restart after a kill writes a new one that logs every point of the run again, from
the first (the checkpoint keeps them, `repro.train.run_log`), then the steps after the
checkpoint. Segments are merged in start order; a later segment's rows replace the rows of
the same or later steps from earlier ones. Only the segments of one run directory are
merged: a run directory copied under a second name (a backup, a copy taken while the run was
still going) holds the same run id, and merged with the original its rows, cut where the copy
was taken, would replace the finished run's. Each copy is read as a run of its own, at its
own path; segments copied out of their run directory (for `wandb sync`) still join.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repro.errors import UserError
from repro.locks import RUN_LOCK
from repro.track.wandb_file import DamagedLog, records

STOPPED = 130
"""The exit code a run logs when it is stopped (Ctrl-C, or SIGTERM from `kill`) rather than
failed: 128 + SIGINT, as a shell reports it. The same command resumes such a run."""


def cut_short(exit_code: int | None) -> str | None:
    """Why a run with `exit_code` has not run to its end (no exit record: killed, or still
    running; or stopped), None when it has. A failure, divergence included, is an end: its
    history is what the run made."""
    if exit_code is None:
        return "no exit record: killed, or still running"
    return "stopped before its end" if exit_code == STOPPED else None


def unfinished(runs: Mapping[str, Mapping[int, RunData]]) -> dict[str, dict[int, str]]:
    """Label -> seed -> why (`cut_short`), for the runs (label -> seed -> run) that have not
    run to their end. A run cut short is not a measurement, so no claim is judged on it."""
    found: dict[str, dict[int, str]] = {}
    for label, by_seed in runs.items():
        for seed, run in by_seed.items():
            if why := cut_short(run.exit_code):
                found.setdefault(label, {})[seed] = why
    return found


@dataclass
class RunData:
    """One run as read from disk; `history` is sorted by step and every row has "step"."""

    run_id: str
    name: str
    group: str | None
    job_type: str | None
    tags: list[str]
    config: dict
    history: list[dict]
    summary: dict
    path: Path
    exit_code: int | None = None  # None: no exit record (still running, or killed)
    started: float = 0.0  # Unix time the run first started (its oldest segment's start)


@dataclass
class _Segment:
    """What one `.wandb` file holds."""

    file: Path
    run_id: str
    name: str = ""
    project: str = ""
    group: str | None = None
    job_type: str | None = None
    tags: list[str] = field(default_factory=list)
    start: float = 0.0
    config: dict = field(default_factory=dict)
    rows: dict[int, dict] = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    exit_code: int | None = None


def _value(item) -> Any:
    """An item's value: a history item may carry a typed field, else it is JSON text."""
    typed = "value" in item.DESCRIPTOR.oneofs_by_name
    kind = item.WhichOneof("value") if typed else None
    if kind is None:
        return json.loads(item.value_json) if item.value_json else None
    if kind == "none":
        return None
    if kind == "json":
        return json.loads(item.json)
    return getattr(item, kind)


def _path(item) -> list[str]:
    return list(item.nested_key) or [item.key]


def _assign(target: dict, path: list[str], value: Any) -> None:
    for key in path[:-1]:
        node = target.get(key)
        if not isinstance(node, dict):
            node = target[key] = {}
        target = node
    target[path[-1]] = value


def _remove(target: dict, path: list[str]) -> None:
    for key in path[:-1]:
        target = target.get(key)
        if not isinstance(target, dict):
            return
    target.pop(path[-1], None)


def _update(target: dict, update) -> None:
    """Apply a ConfigRecord or SummaryRecord (its `update` then `remove` items)."""
    for item in update.update:
        _assign(target, _path(item), _value(item))
    for item in update.remove:
        _remove(target, _path(item))


def _public(d: dict) -> dict:
    """Drop wandb's own keys (`_step`, `_runtime`, `_timestamp`, `_wandb`)."""
    return {k: v for k, v in d.items() if not k.startswith("_")}


def _read_segment(file: Path, history: bool = True) -> _Segment | None:
    """Parse one `.wandb` file; None when it holds no run record yet. Without `history` its
    points and summary are passed over (every record is still read, so damage and the exit
    record are found alike): building a run's points is most of a read, 5.8 s of 6 for
    20,000 points, and which wandb run a run directory logs to needs none of them."""
    seg: _Segment | None = None
    for record in records(file):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run = record.run
            seg = seg or _Segment(file=file, run_id=run.run_id)
            seg.name, seg.tags, seg.project = run.display_name, list(run.tags), run.project
            seg.group, seg.job_type = run.run_group or None, run.job_type or None
            seg.start = run.start_time.seconds + run.start_time.nanos * 1e-9
            _update(seg.config, run.config)
        elif seg is None or (not history and kind in ("history", "summary")):
            continue
        elif kind == "config":
            _update(seg.config, record.config)
        elif kind == "history":
            row: dict = {}
            for item in record.history.item:
                _assign(row, _path(item), _value(item))
            hist = record.history
            step = hist.step.num if hist.HasField("step") else row.get("_step", 0)
            row = _public(row)
            row.setdefault("step", step)
            seg.rows.setdefault(int(row["step"]), {}).update(row)
        elif kind == "summary":
            _update(seg.summary, record.summary)
        elif kind == "exit":
            seg.exit_code = record.exit.exit_code
    return seg


def _run_dir(segment_file: Path) -> Path:
    """The training run's directory: the one holding `wandb/`, else the segment's own."""
    seg_dir = segment_file.parent
    return seg_dir.parent.parent if seg_dir.parent.name == "wandb" else seg_dir


def _home(segment_file: Path) -> Path | None:
    """The training run directory whose segments `segment_file` merges with; None for a
    loose segment, which merges with every loose one of its run id."""
    run_dir = _run_dir(segment_file)
    return None if run_dir == segment_file.parent else run_dir


def _merge(segments: list[_Segment]) -> RunData:
    """One run from its segments (same run id), oldest first."""
    segments = sorted(segments, key=lambda s: (s.start, str(s.file)))
    rows: dict[int, dict] = {}
    config: dict = {}
    for seg in segments:
        if seg.rows:
            first = min(seg.rows)
            rows = {s: r for s, r in rows.items() if s < first}
            rows.update(seg.rows)
        config.update(seg.config)
    environment = _environment(segments)
    if environment:
        config["environment"] = environment
    history = [rows[s] for s in sorted(rows)]
    summary: dict = {}
    for row in history:  # fallback: the last logged value of every metric
        # as wandb's own summary: a None is left out, the metric keeps its last value
        summary.update({k: v for k, v in row.items() if v is not None})
    for seg in segments:
        summary.update(_public(seg.summary))
    last = segments[-1]
    return RunData(
        run_id=last.run_id,
        name=last.name,
        group=last.group,
        job_type=last.job_type,
        tags=last.tags,
        config=_public(config),
        history=history,
        summary=summary,
        path=_run_dir(last.file),
        exit_code=last.exit_code,
        started=segments[0].start,
    )


def _environment(segments: list[_Segment]) -> dict[str, str]:
    """The run's `environment` record (`repro.track.provenance`) from its segments' (oldest
    first): a line that changed when the run was resumed on another install or machine
    names each value in turn, "a; then b"."""
    records = [s.config["environment"] for s in segments if "environment" in s.config]
    keys = dict.fromkeys(key for record in records for key in record)
    return {key: "; then ".join(dict.fromkeys(r[key] for r in records if key in r)) for key in keys}


def _unique(files: Iterator[Path]) -> list[Path]:
    """Each `.wandb` file once: `wandb/latest-run` is a symlink to one of the segments."""
    return sorted({p.resolve(): p for p in files if p.is_file()}.values())


def _flag(line: str, damaged: list[str] | None) -> None:
    """End the read with `line`, or, given a `damaged` list, add it there and go on."""
    if damaged is None:
        raise UserError(line)
    damaged.append(line)


def _finished_last(file: Path) -> bool:
    """Whether `file` is the newest segment (`wandb/latest-run`) of a finished run."""
    run_dir = _run_dir(file)
    latest = run_dir / "wandb" / "latest-run" / file.name
    return (run_dir / "summary.json").exists() and latest.resolve() == file.resolve()


Segments = dict[tuple[str, Path | None], list[_Segment]]


def _grouped(files: list[Path], damaged: list[str] | None = None, history: bool = True) -> Segments:
    """Segments by run id and run directory (`_home`). A damaged file, or a finished run's
    last segment cut short (which only damage does: the run waits for its exit record), is
    flagged and left out."""
    by_id: Segments = {}
    for file in files:
        # asked first: a run that finishes while its file is read is read as still running,
        # not as a finished run cut short
        finished = _finished_last(file)
        try:
            seg = _read_segment(file, history)
        except DamagedLog as e:
            _flag(f"{e}; {_relog_fix(file)}", damaged)
            continue
        if seg is not None and (seg.exit_code is not None or not finished):
            by_id.setdefault((seg.run_id, _home(file)), []).append(seg)
        elif seg is not None or finished:
            summary = _run_dir(file) / "summary.json"
            _flag(
                f"{file} ends before its exit record though {summary} says the run finished: "
                f"it was cut short; {_relog_fix(file)}",
                damaged,
            )
    return by_id


def _check_logged(root: Path, by_id: Segments, damaged: list[str] | None) -> None:
    """A finished run whose tracker run (`run_id`, written when it opened) left no file:
    its log was deleted, which is damage too, not a run that was never tracked."""
    for id_file in root.rglob("run_id"):
        summary = id_file.parent / "summary.json"
        run_id = id_file.read_text(errors="replace").strip()
        logs = (p for p in id_file.parent.glob(f"wandb/*/run-{run_id}.wandb") if p.is_file())
        if summary.exists() and (run_id, id_file.parent) not in by_id and next(logs, None) is None:
            _flag(
                f"{id_file.parent / 'wandb'} holds no log of run {run_id} though {summary} "
                f"says the run finished; remove {summary}, then run the run again to log it anew",
                damaged,
            )


def run_dirs(root: str | Path) -> list[Path]:
    """The training run directories under `root`: a run's lock beside its config."""
    return sorted(
        lock.parent
        for lock in Path(root).rglob(RUN_LOCK)
        if (lock.parent / "config.yaml").is_file()
    )


def untracked_run_dirs(root: str | Path) -> list[Path]:
    """The finished training runs under `root` that never opened a tracker run: no
    `run_id`, which a run writes when it opens one (a tracked run whose log is gone is
    damage, `_check_logged`). Made with tracking=disabled, they have no log for `find_runs`
    to list, and a run set skips them as finished."""
    return [
        d for d in run_dirs(root) if (d / "summary.json").is_file() and not (d / "run_id").exists()
    ]


def _relog_fix(file: Path) -> str:
    """How to get a damaged segment's points back: a resumed segment re-logs every point
    of the run (the checkpoint keeps them), so a later segment already holds them all, and
    the last one is written anew by finishing the run again from its checkpoint."""
    run_dir = _run_dir(file)
    if run_dir == file.parent:  # a loose file, not in a training run's wandb/ folder
        return f"remove {file}, then run its training run again to log it anew"
    return (
        f"remove {file.parent}, and if it was the run's last segment also "
        f"{run_dir / 'summary.json'}, then run the run again to log it anew"
    )


def logged_to(run_dir: Path) -> tuple[str, str, str | None] | None:
    """(run id, project, group) of the wandb run that `run_dir`'s newest segment logs to;
    None where it logged none, or its files cannot be read (the run's own start says so)."""
    try:
        runs = _grouped(_unique(run_dir.glob("wandb/*/run-*.wandb")), history=False)
    except UserError:
        return None
    if not runs:
        return None
    last = max((seg for segs in runs.values() for seg in segs), key=lambda seg: seg.start)
    return last.run_id, last.project, last.group


def read_run(path: str | Path) -> RunData:
    """The run in a training run's directory, an `offline-run-*` directory or a `.wandb` file.

    A training run directory normally holds one run id (in one or more segments); if a run
    was restarted before its first checkpoint it holds two, and the latest started one is
    the run that continued, so that one is returned.
    """
    path = Path(path)
    if path.is_file():
        if path.suffix != ".wandb":
            raise UserError(
                f"{path} is not a wandb run file (run-<id>.wandb); give a training run's "
                "directory, one of its wandb/offline-run-* directories or the .wandb file in it"
            )
        files = [path]
    elif path.is_dir():
        files = _unique(path.glob("run-*.wandb")) or _unique(path.glob("wandb/*/run-*.wandb"))
    else:
        raise UserError(f"run path {path} does not exist")
    runs = _grouped(files)
    if not runs and (path / "summary.json").is_file() and not (path / "wandb").exists():
        raise UserError(
            f"no wandb run records under {path}: the run was made with tracking=disabled, so "
            f"it logged no curves; its final metrics are in {path / 'summary.json'}"
        )
    if not runs and path.is_dir() and next(path.glob("**/run-*.wandb"), None) is not None:
        raise UserError(
            f"{path} is not one run's directory but holds runs further down; "
            f"`repro runs ls {path}` lists them"
        )
    if not runs:
        raise UserError(f"no wandb run records under {path}")
    latest = max(runs.values(), key=lambda segs: max(s.start for s in segs))
    return _merge(latest)


def find_runs(
    root: str | Path, group: str | None = None, damaged: list[str] | None = None
) -> list[RunData]:
    """Every run with a `.wandb` file anywhere under `root` (in `group` if given), oldest
    first. Segments of one run id are merged within their run directory (see the module doc:
    a copied run directory is a run of its own, with the same id). A damaged file ends the
    search with one line naming it, or, given a `damaged` list, is reported there and the
    search goes on with the others."""
    root = Path(root)
    if not root.is_dir():
        raise UserError(
            f"runs root {root} is not a directory; name the folder the runs were written to "
            "(runs_root, default runs), or make one with `repro train` first"
        )
    by_id = _grouped(_unique(root.rglob("run-*.wandb")), damaged)
    _check_logged(root, by_id, damaged)
    ordered = sorted(
        by_id.values(),
        key=lambda segs: (min(s.start for s in segs), segs[0].run_id, str(segs[0].file)),
    )
    runs = [_merge(segs) for segs in ordered]
    return [r for r in runs if group is None or r.group == group]
