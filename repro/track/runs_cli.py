"""`repro runs`: list and show the wandb runs on disk, read back with no server.

  repro runs ls [ROOT] [--group G]            one line per run under ROOT (default: runs)
  repro runs show RUN [--root ROOT] [--json]  one run: config, summary, last points

RUN is a run directory (or an `offline-run-*` directory, or a `.wandb` file) or a run id
found under ROOT. `ls` lists the readable runs and then names each damaged file on a line of
its own, with the fix, and exits 2; a run directory with no wandb log (tracking=disabled) it
cannot list is named in a note.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from repro.errors import CommandParser, UserError
from repro.locks import RUN_LOCK, held
from repro.track.runs import (
    STOPPED,
    RunData,
    find_runs,
    read_run,
    run_dirs,
    untracked_run_dirs,
)

DEFAULT_ROOT = "runs"  # the trainer's default `runs_root`
LS_METRICS = ("train/loss", "test/acc")
UNTRACKED = "{} no wandb log (made with tracking=disabled) and {} not listed"
UNLOGGED = "{} not finished and logged no points (stopped early, or tracking=disabled): {}"


def _parser() -> argparse.ArgumentParser:
    p = CommandParser(prog="repro runs", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True, parser_class=CommandParser)
    ls = sub.add_parser("ls", help="list runs under ROOT")
    ls.add_argument("root", nargs="?", default=DEFAULT_ROOT)
    ls.add_argument("--group", help="only runs of this wandb group")
    show = sub.add_parser("show", help="show one run")
    show.add_argument("run", help="a run directory or a run id under --root")
    show.add_argument("--root", default=DEFAULT_ROOT)
    show.add_argument("--last", type=int, default=5, help="history points to show")
    show.add_argument("--json", action="store_true", help="the whole run as one JSON object")
    return p


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _final(value: Any) -> Any:
    """A summary's final value: a metric wandb aggregates (`repro.track.wandb_metrics`)
    holds it as `last` beside its min or max."""
    return value.get("last") if isinstance(value, dict) else value


def _state(run: RunData) -> str:
    """finished, failed(code), stopped (Ctrl-C or kill), running (its process holds the run
    directory's lock, so it is still writing) or incomplete (ended with no exit record:
    SIGKILL, or a worker process its launcher ended). The same command resumes a stopped or
    incomplete run."""
    if run.exit_code is None:
        return "running" if held(run.path / RUN_LOCK) else "incomplete"
    if run.exit_code == STOPPED:
        return "stopped"
    return "finished" if run.exit_code == 0 else f"failed({run.exit_code})"


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in [header, *rows]]
    return "\n".join(line.rstrip() for line in lines)


def _last_step(run: RunData) -> str:
    return str(run.history[-1]["step"]) if run.history else "-"


def _ls(root: str, group: str | None, damaged: list[str]) -> tuple[str, set[Path]]:
    """The table of the runs under `root`, and their directories."""
    runs = find_runs(root, group, damaged)
    if not runs:
        where = f" in group {group!r}" if group else ""
        return f"no runs under {root}{where}", set()
    header = ["run id", "name", "group", "job type", "state", "steps", *LS_METRICS, "path"]
    rows = [
        [
            run.run_id,
            run.name,
            _fmt(run.group),
            _fmt(run.job_type),
            _state(run),
            _last_step(run),
            *(_fmt(_final(run.summary.get(m))) for m in LS_METRICS),
            str(run.path),
        ]
        for run in runs
    ]
    return _table(header, rows), {run.path.absolute() for run in runs}


def _note(dirs: list[Path], root: str, words: str, one: tuple[str, str], many: tuple[str, str]):
    """One note line for the run directories `dirs` that `runs ls` could not list."""
    if len(dirs) == 1:
        print(f"note: {dirs[0]} {words.format(*one)}", file=sys.stderr)
    elif dirs:
        said = words.format(*many)
        print(
            f"note: {len(dirs)} run directories under {root} {said}, {dirs[0]} the first",
            file=sys.stderr,
        )


def _find(run: str, root: str) -> RunData:
    if Path(run).exists():
        return read_run(run)
    if not Path(root).is_dir():
        raise UserError(
            f"repro runs show: {run} is not a path, and --root {root} is not a folder to look "
            "for run ids in; give a run's directory, or --root the runs folder"
        )
    damaged: list[str] = []
    found = [r for r in find_runs(root, damaged=damaged) if r.run_id == run]
    if len(found) > 1:  # a run directory copied under another name holds the same run id
        where = ", ".join(str(r.path) for r in found)
        raise UserError(
            f"repro runs show: run {run} lies in {len(found)} run directories under {root} "
            f"({where}), copies of one run; give the directory of the one to show"
        )
    if found:
        return found[0]
    if damaged:  # the run asked for may be the damaged one
        raise UserError(f"repro runs show: no readable run {run!r} under {root}; {damaged[0]}")
    raise UserError(f"repro runs show: no run {run!r} under {root} (`repro runs ls {root}`)")


def _flat(d: dict, prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key in sorted(d):
        value = d[key]
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out += _flat(value, name + ".")
        else:
            out.append((name, value))
    return out


def _show(run: RunData, last: int) -> str:
    head = [
        ("run id", run.run_id),
        ("name", run.name),
        ("group", run.group),
        ("job type", run.job_type),
        ("tags", ", ".join(run.tags) or None),
        ("state", _state(run)),
        ("steps", _last_step(run)),
        ("path", run.path),
    ]
    parts = [_table(["run", ""], [[k, _fmt(v)] for k, v in head])]
    parts.append(_table(["config", ""], [[k, _fmt(v)] for k, v in _flat(run.config)]))
    parts.append(_table(["summary", ""], [[k, _fmt(v)] for k, v in _flat(run.summary)]))
    rows = run.history[-last:] if last > 0 else []
    if rows:
        metrics = sorted({k for r in rows for k in r} - {"step"})
        header = ["step", *(str(r["step"]) for r in rows)]
        parts.append(_table(header, [[m, *(_fmt(r.get(m)) for r in rows)] for m in metrics]))
    return "\n\n".join(parts)


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.command == "show" and args.last < 0:
        raise UserError(f"repro runs show: --last={args.last} must be >= 0")
    if args.command == "ls":
        damaged: list[str] = []
        table, listed = _ls(args.root, args.group, damaged)
        print(table)
        sys.stdout.flush()  # the table first, then what was left out of it
        if not args.group:
            _note(
                untracked_run_dirs(args.root), args.root, UNTRACKED, ("has", "is"), ("have", "are")
            )
            quiet = [
                d
                for d in run_dirs(args.root)
                if d.absolute() not in listed
                # named there, with its fix (a folder of its own: not `a/run` in `a/run2/...`)
                and not any(f"{d}{os.sep}" in line for line in damaged)
                and not (d / "summary.json").exists()
                and not held(d / RUN_LOCK)  # a live run yet to log its first point
            ]
            resumes = ("is", "the same command resumes it"), ("are", "their commands resume them")
            _note(quiet, args.root, UNLOGGED, *resumes)
        for line in damaged:
            print(f"error: {line}", file=sys.stderr)
        return 2 if damaged else 0
    run = _find(args.run, args.root)
    if args.json:
        print(json.dumps(asdict(run) | {"path": str(run.path)}, indent=1, default=str))
    else:
        print(_show(run, args.last))
    return 0
