"""`repro jobs [--root runs] [--watch]`: submitted runs, run sets and sweep workers.

One line per job from `<root>/jobs.jsonl` with its state (SLURM accounting through
submitit) and its stdout log; a failed job also shows each task's stderr path and last
lines, so the cause is on screen without a search through the job folder. `--watch`
redraws every `--interval` seconds until no job is pending or running (a job sacct does not
list yet, UNKNOWN, counts as pending; an accounting that does not answer leaves every state
UNKNOWN, with one line saying why; one neither it nor the queue knows is NOT_FOUND, not
waited for), then exits 1 if any failed and 0 otherwise. A torn
last line of the file (a submission cut short) is skipped with a note; a line damaged
elsewhere is skipped with an error line, the others are listed, and the exit code is 2.
"""

from __future__ import annotations

import sys
import time

from repro.cluster.jobs import (
    ACTIVE,
    FAILED,
    JobRecord,
    failure_report,
    job_states,
    live_states,
    scan_records,
)
from repro.errors import CommandParser, UserError
from repro.pages.writer import counted


def render(records: list[JobRecord], states: dict[str, str]) -> str:
    width = max([len("LABEL"), *(len(r.label) for r in records)])
    lines = [f"{'JOB':<12} {'KIND':<8} {'LABEL':<{width}} {'STATE':<11} LOG"]
    for r in records:
        state = states.get(r.job_id, "UNKNOWN")
        lines.append(f"{r.job_id:<12} {r.kind:<8} {r.label:<{width}} {state:<11} {r.stdout}")
        if state in FAILED:
            lines.append(failure_report(r))
    return "\n".join(lines)


def summary_line(states: dict[str, str]) -> str:
    counts: dict[str, int] = {}
    for s in states.values():
        counts[s] = counts.get(s, 0) + 1
    return f"{counted(len(states), 'job')}: " + ", ".join(
        f"{n} {s}" for s, n in sorted(counts.items())
    )


NOT_FOUND = "NOT_FOUND"


def _not_found(records: list[JobRecord], states: dict[str, str]) -> dict[str, str]:
    """The jobs the accounting, which answered, does not list and the controller has not
    queued either: gone from both (purged, or an earlier cluster's). Counted as pending,
    `--watch` would wait for them for ever."""
    unknown = [r for r in records if states.get(r.job_id) == "UNKNOWN"]
    if not unknown:
        return {}
    problems: list[str] = []
    live = live_states(unknown, problems)
    return {} if problems else {r.job_id: NOT_FOUND for r in unknown if r.job_id not in live}


def main(argv: list[str]) -> int:
    p = CommandParser(prog="repro jobs", description=__doc__.split("\n\n")[0])
    p.add_argument("--root", default="runs", help="runs_root the jobs were submitted from")
    p.add_argument("--watch", action="store_true", help="redraw until every job has ended")
    p.add_argument("--interval", type=float, default=10.0, help="seconds between redraws")
    args = p.parse_args(argv)
    if args.interval <= 0:
        raise UserError(f"repro jobs: --interval={args.interval} must be above 0 seconds")
    records, notes, damaged = scan_records(args.root)
    for note in notes:
        print(note, file=sys.stderr)
    if damaged and not records:
        return 2
    while True:
        problems: list[str] = []
        states = job_states(records, problems)
        if not problems:
            states |= _not_found(records, states)
        print(render(records, states))
        for problem in problems:
            print(f"states unknown: SLURM's accounting did not answer ({problem})", file=sys.stderr)
        print(summary_line(states), flush=True)
        if not args.watch:
            return 2 if damaged else 0
        if not any(s in ACTIVE or s == "UNKNOWN" for s in states.values()):
            return 1 if any(s in FAILED for s in states.values()) else 0
        time.sleep(args.interval)
        print()
