"""Training runs and long-lived workers as submitit jobs (SLURM or LocalExecutor).

`repro.cluster.launcher` decides that work goes here; this module shapes the jobs.

* One run = ONE multi-task job: `trainer.world_size / cluster.nodes` tasks per node, one
  worker each. Every task maps submitit's `JobEnvironment` (SLURM_PROCID, SLURM_LOCALID,
  the node list) onto the `env://` variables and enters the usual run path, so the job
  computes exactly what `repro train` computes here.
* Several runs (a run set, a `--multirun`) = job arrays, one per distinct job shape (the
  tasks of an array share one shape); K workers (a sweep's) = one array of K single-task
  jobs. Each array is one `sbatch --array`.
* Preemption and time limits: the callables are `Checkpointable`. At `scontrol requeue`
  SLURM restarts the batch script; near the time limit submitit signals rank 0, which
  resubmits the same callable and requeues. Either way the job starts the work again: the
  trainer resumes from its last checkpoint (atomic, every rank's full state), so the final
  metrics equal an uninterrupted run's; a worker rejoins what it works on (a sweep's
  study: at SIGTERM the worker marks its trial stopped and queues it again, and the
  heartbeat finds one killed outright; `repro.sweep.stops`).

Submitting returns at once; `repro jobs` follows what `<runs_root>/jobs.jsonl` records.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

import submitit
from submitit.helpers import Checkpointable, DelayedSubmission

from repro.cluster.executor import job_folder, make_executor, sbatch_refusals
from repro.cluster.jobs import JOBS_FILE, JobRecord, append_records, live_states, read_records
from repro.cluster.slurm_env import rendezvous_env
from repro.config import Config, run_dir_of
from repro.errors import UserError
from repro.locks import take
from repro.pages.writer import counted
from repro.schemas.cluster import ClusterConfig
from repro.train import checkpoint


def set_rendezvous(env: submitit.JobEnvironment) -> tuple[int, int]:
    """RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the job
    environment (every node runs the same number of tasks, `_tasks_per_node`)."""
    master = "127.0.0.1" if env.num_nodes == 1 else env.hostnames[0]
    os.environ.update(
        rendezvous_env(
            env.global_rank, env.num_tasks, env.local_rank, env.num_nodes, master, env.job_id
        )
    )
    return env.global_rank, env.num_tasks


def _prepare_data_once(cfg: Config) -> None:
    """Generate or download the data set once per node: the other tasks wait on the lock
    and then read the cached copy instead of writing the same files at the same time."""
    from repro.workload.workload import prepare

    with take(Path(cfg.data.root) / ".prepare.lock"):  # creates the data root too
        prepare(cfg.workload, cfg.data, cfg.seed)


class TrainingJob(Checkpointable):
    """One task of a run's job. Calling it trains; rank 0 returns the summary.

    With the env:// variables set, `run_training` takes its external-launcher path: the
    run-directory checks, then `train_worker(rank, world, cfg)` in this process, so a
    finished run is skipped and an interrupted one resumes exactly as `repro train` would.
    """

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg

    def __call__(self) -> dict:
        from repro.comm import launch
        from repro.train.entry import run_training

        rank, world = set_rendezvous(submitit.JobEnvironment())
        if rank == 0:
            run_dir = run_dir_of(self.cfg)
            if (run_dir / "summary.json").is_file():  # run_training skips it
                start = "finished earlier"
            else:
                start = f"from step {checkpoint.latest_step(run_dir)}"
            print(f"run {run_dir}: {counted(world, 'worker')}, {start}", flush=True)
        _prepare_data_once(self.cfg)
        try:
            return run_training(self.cfg)
        finally:
            launch.shutdown()

    def checkpoint(self) -> DelayedSubmission:
        """Near the time limit: resubmit the same run; progress lives in the run directory."""
        return DelayedSubmission(TrainingJob(self.cfg))


class WorkerJob(Checkpointable):
    """A long-lived worker (e.g. a sweep worker) as one task: calls `fn` until it returns.
    A requeued worker simply calls it again; `fn` must pick up where the work stands."""

    def __init__(self, fn: Callable[[], object]) -> None:
        self.fn = fn

    def __call__(self) -> object:
        return self.fn()

    def checkpoint(self) -> DelayedSubmission:
        return DelayedSubmission(WorkerJob(self.fn))


def _tasks_per_node(cfg: Config) -> int:
    world, nodes = cfg.trainer.world_size, cfg.cluster.nodes
    if world % nodes:
        raise UserError(
            f"trainer.world_size={world} is not a multiple of cluster.nodes={nodes}; "
            "every node runs the same number of workers"
        )
    per_node = world // nodes
    gpus = cfg.cluster.gpus_per_node
    if gpus and per_node > gpus:
        raise UserError(
            f"{per_node} workers per node but cluster.gpus_per_node={gpus}: one worker per GPU; "
            f"raise cluster.nodes to {-(-world // gpus)} or lower trainer.world_size"
        )
    return per_node


def _record(
    job: submitit.Job, kind: str, label: str, cluster: ClusterConfig, tasks: int, run_dir: str = ""
) -> JobRecord:
    return JobRecord(
        job_id=job.job_id,
        kind=kind,
        label=label,
        cluster=cluster.kind,
        folder=str(job.paths.folder),
        tasks=tasks,
        run_dir=run_dir,
        env_file=cluster.env_file,
    )


def _run_record(job: submitit.Job, kind: str, label: str, cfg: Config) -> JobRecord:
    run_dir = str(run_dir_of(cfg).absolute())
    return _record(job, kind, label, cfg.cluster, cfg.trainer.world_size, run_dir)


def check_run(cfg: Config) -> None:
    """The run-directory checks `run_training` does, here, before anything is queued."""
    from repro.config import identity

    checkpoint.check_run_dir(run_dir_of(cfg), identity(cfg))


def submit_run(cfg: Config) -> submitit.Job:
    """Submit one training run as one multi-task job and record it; returns at once."""
    check_run(cfg)
    per_node = _tasks_per_node(cfg)
    folder = job_folder(cfg.cluster, cfg.runs_root)
    executor = make_executor(cfg.cluster, folder, f"repro-{cfg.label}", per_node, cfg.cluster.nodes)
    with sbatch_refusals(cfg.cluster, folder):
        job = executor.submit(TrainingJob(cfg))
    append_records(cfg.runs_root, [_run_record(job, "run", cfg.label, cfg)])
    return job


def live_jobs(runs: Sequence[tuple[str, Config]]) -> dict[str, tuple[JobRecord, str]]:
    """Run directory -> (record, state) of a job recorded for it that is queued or running:
    a run whose directory such a job will take must not be queued again (the job holds no
    lock until it starts, so the directory's own checks cannot see it)."""
    root = runs[0][1].runs_root
    if not (Path(root) / JOBS_FILE).is_file():
        return {}
    dirs = {str(run_dir_of(cfg).absolute()) for _, cfg in runs}
    records = [r for r in read_records(root) if r.run_dir in dirs]
    states = live_states(records) if records else {}
    return {r.run_dir: (r, states[r.job_id]) for r in records if r.job_id in states}


def submit_runs(runs: Sequence[tuple[str, Config]], title: str) -> list[JobRecord]:
    """Submit runs as job arrays, one `sbatch --array` per job shape (a single run: one
    job), record them, and say each. Every run is checked before the first is queued. A run
    a queued or running job will make is not queued again: that job is named and returned
    with the new ones (the runs are all in jobs, whose end the caller waits for)."""
    live = live_jobs(runs)
    left = []
    for label, cfg in runs:
        if found := live.get(str(run_dir_of(cfg).absolute())):
            print(f"skip {label}: job {found[0].job_id} is {found[1].lower()} for it", flush=True)
        else:
            left.append((label, cfg))
    records = _submit(left, title) if left else []
    for r in records:
        print(f"submitted {r.label}: job {r.job_id} run_dir={r.run_dir}", flush=True)
    return [record for record, _ in live.values()] + records


def _submit(runs: Sequence[tuple[str, Config]], title: str) -> list[JobRecord]:
    groups: dict[int, list[tuple[str, Config]]] = defaultdict(list)
    for label, cfg in runs:
        check_run(cfg)
        groups[_tasks_per_node(cfg)].append((label, cfg))
    first = runs[0][1]
    if len(runs) == 1:
        return [_run_record(submit_run(first), "run", first.label, first)]
    folder = job_folder(first.cluster, first.runs_root)
    name = "repro-" + "-".join(title.split())
    executors = {
        n: make_executor(first.cluster, folder, name, n, first.cluster.nodes) for n in groups
    }
    records = []
    for per_node, group in groups.items():
        executor = executors[per_node]  # all made first: a shape the cluster refuses queues nothing
        with sbatch_refusals(first.cluster, folder), executor.batch():
            jobs = [executor.submit(TrainingJob(cfg)) for _, cfg in group]
        queued = [
            _run_record(job, "run_set", label, cfg)
            for job, (label, cfg) in zip(jobs, group, strict=True)
        ]
        append_records(first.runs_root, queued)  # each array once queued: a later refusal
        records += queued  # by sbatch leaves the queued ones recorded
    return records


class WorkerArray:
    """K workers of `kind` as one job array of single-task jobs with `cpus` CPUs each. The
    executor is made (so the cluster is checked: sbatch, partition, sizes) when this is
    built, before the caller writes anything; `submit` then only queues and records."""

    def __init__(
        self, cluster: ClusterConfig, runs_root: str, kind: str, name: str, cpus: int
    ) -> None:
        self.cluster, self.kind, self.name, self.runs_root = cluster, kind, name, runs_root
        self.folder = job_folder(cluster, runs_root)
        self.executor = make_executor(cluster, self.folder, f"repro-{kind}-{name}", 1, 1, cpus)

    def submit(self, workers: Sequence[Callable[[], object]]) -> list[JobRecord]:
        with sbatch_refusals(self.cluster, self.folder), self.executor.batch():
            jobs = [self.executor.submit(WorkerJob(fn)) for fn in workers]
        records = [_record(job, self.kind, self.name, self.cluster, 1) for job in jobs]
        append_records(self.runs_root, records)
        return records
