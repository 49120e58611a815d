"""The record of submitted jobs, `<runs_root>/jobs.jsonl`, and their live states.

One JSON line per job at submission: its id, what it runs (`run`, `run_set`, `sweep`), the
label, the cluster kind, submitit's folder and the log paths of each task, and the host it was
submitted from. Paths under the runs root are written relative to it, so a runs folder moved
or copied whole (from a cluster to a laptop) still finds its job files and run directories.
States come from SLURM's accounting (one `sacct` call for all jobs, read by submitit's parser;
an accounting that does not answer is one line, not sacct's own errors), or, for submitit's
LocalExecutor, from the job's result file and whether its process lives.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import socket
import subprocess
import zlib
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from submitit.core.utils import JobPaths
from submitit.slurm.slurm import SlurmInfoWatcher

from repro.cluster.executor import apply_env_file
from repro.cluster.slurm_env import job_log_tail, slurm_tool
from repro.errors import UserError
from repro.storage import storage_error

JOBS_FILE = "jobs.jsonl"
ACTIVE = ("PENDING", "RUNNING", "REQUEUED", "COMPLETING", "CONFIGURING", "RESIZING", "SUSPENDED")
FAILED = ("FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED", "DEADLINE")


@dataclass
class JobRecord:
    job_id: str
    kind: str
    label: str
    cluster: str
    folder: str
    tasks: int = 1
    run_dir: str = ""
    env_file: str | None = None
    submitted: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    host: str = field(default_factory=socket.gethostname)

    def paths(self, task: int = 0) -> JobPaths:
        return JobPaths(self.folder, job_id=self.job_id, task_id=task)

    @property
    def stdout(self) -> str:
        return str(self.paths().stdout)

    @property
    def stderr(self) -> str:
        return str(self.paths().stderr)


def _crc(fields: dict) -> int:
    return zlib.crc32(json.dumps(fields, sort_keys=True).encode())


_PATHS = ("folder", "run_dir", "stdout", "stderr")


def _relative(fields: dict, root: Path) -> dict:
    """`fields` with its paths under `root` made relative to it (see the module doc)."""
    out = dict(fields)
    for key in _PATHS:
        path = Path(out.get(key) or "")
        if path.is_absolute() and path.is_relative_to(root):
            out[key] = str(path.relative_to(root))
    return out


def _rooted(fields: dict, root: Path) -> dict:
    """`fields` with its relative paths read from `root`, where the record lies now."""
    return {
        k: str(root / v) if k in _PATHS and v and not Path(v).is_absolute() else v
        for k, v in fields.items()
    }


def append_records(runs_root: str | Path, records: list[JobRecord]) -> Path:
    """Add `records` to `<runs_root>/jobs.jsonl` (created if needed); one line each, with the
    log paths spelt out so that the file alone tells where to look, and a `crc` of the
    line's other fields, so that a damaged line is told from a good one. A full or
    read-only disk is one line (a line it cut short is skipped when read)."""
    path = Path(runs_root) / JOBS_FILE
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as f:
            for r in records:
                fields = {**asdict(r), "stdout": r.stdout, "stderr": r.stderr}
                fields = _relative(fields, path.parent.absolute())
                f.write(json.dumps({**fields, "crc": _crc(fields)}) + "\n")
    except OSError as e:
        raise storage_error(path, e, "runs_root") from None
    return path


def _parse(line: str, root: Path) -> JobRecord:
    """One line's record, its paths read from `root`; ValueError when the line is damaged."""
    raw = json.loads(line)
    if not isinstance(raw, dict):
        raise ValueError("not a JSON object")
    crc = raw.pop("crc", None)
    if crc is not None and crc != _crc(raw):
        raise ValueError("its checksum does not match")
    known = set(JobRecord.__dataclass_fields__)
    try:
        return JobRecord(**{k: v for k, v in _rooted(raw, root).items() if k in known})
    except TypeError:
        raise ValueError("a field is missing") from None


def read_records(runs_root: str | Path) -> list[JobRecord]:
    """The good records of `<runs_root>/jobs.jsonl` (see `scan_records`)."""
    return scan_records(runs_root)[0]


def scan_records(runs_root: str | Path) -> tuple[list[JobRecord], list[str], bool]:
    """(the good records, one line per damaged line, whether any line is damaged rather
    than torn). A torn last line, with no newline after it, is what a submission cut short
    leaves: it is skipped, and said; a damaged line is skipped, and its line names it and
    the fix."""
    path = Path(runs_root) / JOBS_FILE
    if not path.is_file():
        raise UserError(f"no jobs recorded under {runs_root} ({path} does not exist)")
    lines = path.read_bytes().split(b"\n")
    records, notes, inner = [], [], False
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(_parse(line.decode(), path.parent.absolute()))
        except ValueError as e:  # UnicodeDecodeError and JSONDecodeError too
            if i == len(lines) - 1:  # no newline after it: its write was cut short
                notes.append(f"note: {path} line {i + 1} is torn (skipped): {_why(e)}")
            else:
                inner = True
                notes.append(
                    f"error: {path} line {i + 1} is damaged ({_why(e)}); skipped it, remove "
                    "that line to list the rest without this error"
                )
    if not records and not notes:  # only blank lines: a header and "0 jobs: " said nothing
        raise UserError(f"no jobs recorded under {runs_root} ({path} is empty)")
    return records, notes, inner


def _why(e: ValueError) -> str:
    return type(e).__name__ if isinstance(e, UnicodeDecodeError | json.JSONDecodeError) else str(e)


def _local_state(record: JobRecord) -> str:
    """LocalExecutor jobs: the id is the controller's pid, the result file tells the end.
    The pid names a process of the host that submitted the job only: elsewhere (the runs
    folder copied from there) it is some other process or none, so the state is unknown."""
    result = record.paths().result_pickle
    if result.exists():
        with result.open("rb") as f:
            outcome = pickle.load(f)[0]
        return "COMPLETED" if outcome == "success" else "FAILED"
    if record.host != socket.gethostname():
        return "UNKNOWN"
    try:
        os.kill(int(record.job_id), 0)
    except (ProcessLookupError, ValueError):
        return "FAILED"
    except PermissionError:
        return "RUNNING"
    return "RUNNING"


def _accounting(job_ids: list[str]) -> tuple[dict[str, dict[str, str]], str]:
    """sacct's rows for `job_ids` (one call; an array's base id lists all its tasks), read by
    submitit's parser, and why there are none when SLURM's accounting did not answer."""
    bases = sorted({job_id.split("_")[0] for job_id in job_ids})
    try:
        done = slurm_tool(
            ["sacct", "-o", "JobID,State,NodeList", "--parsable2"]
            + [arg for base in bases for arg in ("-j", base)]
        )
    except UserError as missing:
        return {}, str(missing)
    except subprocess.TimeoutExpired:
        return {}, "sacct did not answer within 60 s"
    if done.returncode != 0:
        said = [line for line in done.stderr.splitlines() if line.strip()]
        return {}, f"sacct failed: {said[-1] if said else f'exit {done.returncode}'}"
    return SlurmInfoWatcher(delay_s=1).read_info(done.stdout), ""


def _split(records: list[JobRecord]) -> tuple[dict[str, str], list[JobRecord]]:
    """(job id -> state of the LocalExecutor jobs, the SLURM records), the environment of
    the clusters those were submitted to applied, so SLURM's tools reach them."""
    local = {r.job_id: _local_state(r) for r in records if r.cluster == "submitit_local"}
    slurm = [r for r in records if r.cluster != "submitit_local"]
    for env_file in {r.env_file for r in slurm if r.env_file}:
        apply_env_file(env_file)
    return local, slurm


def job_states(records: list[JobRecord], problems: list[str] | None = None) -> dict[str, str]:
    """job id -> state (SLURM's words: PENDING, RUNNING, COMPLETED, FAILED, ...). A job
    SLURM's accounting does not list (yet, or because it did not answer) is UNKNOWN; why it
    did not answer goes to `problems` when given."""
    states, slurm = _split(records)
    if slurm:
        info, why = _accounting([r.job_id for r in slurm])
        if why and problems is not None:
            problems.append(why)
        for r in slurm:
            state = info.get(r.job_id, {}).get("State", "")
            # sacct writes "CANCELLED by 0"; the first word is the state
            states[r.job_id] = state.split()[0].upper() if state else "UNKNOWN"
    return states


def live_states(records: list[JobRecord], problems: list[str] | None = None) -> dict[str, str]:
    """job id -> state of the jobs among `records` that are queued or running, from the
    controller itself (squeue): the accounting sacct reads lists a job a moment after it is
    queued, so a job just submitted would read as unknown there. A controller that does not
    answer lists none, and says why in `problems` when given."""
    states, slurm = _split(records)
    live = {job: state for job, state in states.items() if state == "RUNNING"}
    if slurm:
        ids = ",".join(sorted({r.job_id.split("_")[0] for r in slurm}))
        try:  # -r: an array's pending tasks one per line, as their records name them
            done = slurm_tool(["squeue", "-h", "-r", "-j", ids, "-o", "%i|%T"])
        except (UserError, subprocess.TimeoutExpired) as err:
            if problems is not None:
                problems.append(str(err))
            return live
        # one id squeue does not know is an error of its own; a controller it cannot reach too
        if done.returncode != 0 and "Invalid job id" not in done.stderr:
            if problems is not None:
                problems.append((done.stderr.strip().splitlines() or ["squeue failed"])[-1])
            return live
        listed = dict(line.split("|", 1) for line in done.stdout.splitlines() if "|" in line)
        live |= {r.job_id: listed[r.job_id] for r in slurm if r.job_id in listed}
    return live


# srun's word on how a task ended ("srun: error: node3: task 1: Killed"): the cause of a
# failed step, which the other tasks' tracebacks, written after it, can push out of a tail
_TASK_END = re.compile(r"^srun: error: .*: tasks? [0-9,-]+: ")


def failure_report(record: JobRecord, lines: int = 5, scan: int = 200) -> str:
    """Log paths and last `lines` lines of every task's stderr of a failed job, led by
    srun's lines on how each task ended when they are among the last `scan` lines but not
    the last `lines`."""
    out = []
    for task in range(record.tasks):
        err = record.paths(task).stderr
        recent = job_log_tail(err, max(scan, lines)).splitlines()
        tail = recent[-lines:]
        ends = [line for line in recent[:-lines] if _TASK_END.match(line)]
        out.append(f"  task {task} log {err}" + (":" if tail else " (empty)"))
        out.extend(f"    {line}" for line in ends + tail)
    return "\n".join(out)
