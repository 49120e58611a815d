"""The record of submitted jobs, `<runs_root>/jobs.jsonl`, and their live states.

One JSON line per job at submission: its id, what it runs (`run`, `run_set`, `sweep`), the
label, the cluster kind, submitit's folder and the log paths of each task. States come from
SLURM's accounting through submitit's `SlurmInfoWatcher` (one `sacct` call for all jobs),
or, for submitit's LocalExecutor, from the job's result file and whether its process lives.
"""

from __future__ import annotations

import json
import os
import pickle
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from submitit.core.utils import JobPaths
from submitit.slurm.slurm import SlurmInfoWatcher

from repro.cluster.executor import apply_env_file
from repro.cluster.slurm_env import job_log_tail
from repro.errors import UserError

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

    def paths(self, task: int = 0) -> JobPaths:
        return JobPaths(self.folder, job_id=self.job_id, task_id=task)

    @property
    def stdout(self) -> str:
        return str(self.paths().stdout)

    @property
    def stderr(self) -> str:
        return str(self.paths().stderr)


def append_records(runs_root: str | Path, records: list[JobRecord]) -> Path:
    """Add `records` to `<runs_root>/jobs.jsonl` (created if needed); one line each, with the
    log paths spelt out so that the file alone tells where to look."""
    path = Path(runs_root) / JOBS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        for r in records:
            f.write(json.dumps({**asdict(r), "stdout": r.stdout, "stderr": r.stderr}) + "\n")
    return path


def read_records(runs_root: str | Path) -> list[JobRecord]:
    path = Path(runs_root) / JOBS_FILE
    if not path.is_file():
        raise UserError(f"no jobs recorded under {runs_root} ({path} does not exist)")
    known = set(JobRecord.__dataclass_fields__)
    records = []
    for line in path.read_text().splitlines():
        if line.strip():
            raw = json.loads(line)
            records.append(JobRecord(**{k: v for k, v in raw.items() if k in known}))
    return records


def _local_state(record: JobRecord) -> str:
    """LocalExecutor jobs: the id is the controller's pid, the result file tells the end."""
    result = record.paths().result_pickle
    if result.exists():
        with result.open("rb") as f:
            outcome = pickle.load(f)[0]
        return "COMPLETED" if outcome == "success" else "FAILED"
    try:
        os.kill(int(record.job_id), 0)
    except (ProcessLookupError, ValueError):
        return "FAILED"
    except PermissionError:
        return "RUNNING"
    return "RUNNING"


def job_states(records: list[JobRecord]) -> dict[str, str]:
    """job id -> state (SLURM's words: PENDING, RUNNING, COMPLETED, FAILED, ...)."""
    states = {r.job_id: _local_state(r) for r in records if r.cluster == "submitit_local"}
    slurm = [r for r in records if r.cluster != "submitit_local"]
    if slurm:
        for env_file in {r.env_file for r in slurm if r.env_file}:
            apply_env_file(env_file)
        watcher = SlurmInfoWatcher(delay_s=1)
        for r in slurm:
            watcher.register_job(r.job_id)
        watcher.update()
        for r in slurm:
            state = watcher.get_state(r.job_id, mode="cache")
            # sacct writes "CANCELLED by 0"; the first word is the state
            states[r.job_id] = state.split()[0].upper() if state else "UNKNOWN"
    return states


def failure_report(record: JobRecord, lines: int = 5) -> str:
    """Log paths and last lines of every task's stderr of a failed job."""
    out = []
    for task in range(record.tasks):
        err = record.paths(task).stderr
        tail = job_log_tail(err, lines)
        out.append(f"  task {task} log {err}" + (":" if tail else " (empty)"))
        out.extend(f"    {line}" for line in tail.splitlines())
    return "\n".join(out)
