"""Training runs, run sets and sweep workers as submitit jobs (SLURM or LocalExecutor).

* One run = ONE multi-task job: `trainer.world_size / cluster.nodes` tasks per node, one
  worker each. Every task maps submitit's `JobEnvironment` (SLURM_PROCID, SLURM_LOCALID,
  the node list) onto the `env://` variables and enters the usual run path, so the job
  computes exactly what `repro train` computes here.
* A reproduction's run set = job arrays (one per distinct worker count, since the tasks of
  an array share one shape); a sweep's K workers = one array of K single-task jobs sharing
  the study's storage.
* Preemption and time limits: the callables are `Checkpointable`. At `scontrol requeue`
  SLURM restarts the batch script; near the time limit submitit signals rank 0, which
  resubmits the same callable and requeues. Either way the job starts the run again, and
  the trainer resumes from its last checkpoint (atomic, every rank's full state), so the
  final metrics equal an uninterrupted run's.

Submitting returns at once; `repro jobs` follows what `<runs_root>/jobs.jsonl` records.
"""

from __future__ import annotations

import fcntl
import os
import zlib
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

import submitit
from submitit.helpers import Checkpointable, DelayedSubmission

from repro.cluster.executor import job_folder, make_executor
from repro.cluster.jobs import JobRecord, append_records
from repro.config import Config, run_dir_of
from repro.errors import UserError
from repro.train import checkpoint

if TYPE_CHECKING:
    from repro.sweep.spec import SweepSpec

PORT_BASE, PORT_SPAN = 20000, 20000


def rendezvous_port(job_id: str, restart: int) -> int:
    """A port derived from the job id (all tasks agree without talking) and the restart
    count, so a requeued job never waits for its previous incarnation's socket."""
    return PORT_BASE + (zlib.crc32(f"{job_id}/{restart}".encode()) % PORT_SPAN)


def set_rendezvous(env: submitit.JobEnvironment) -> tuple[int, int]:
    """RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT from the job environment."""
    master = "127.0.0.1" if env.num_nodes == 1 else env.hostnames[0]
    restart = os.environ.get("SLURM_RESTART_COUNT", "0")
    os.environ.update(
        RANK=str(env.global_rank),
        WORLD_SIZE=str(env.num_tasks),
        LOCAL_RANK=str(env.local_rank),
        MASTER_ADDR=master,
        MASTER_PORT=str(rendezvous_port(env.job_id, int(restart))),
    )
    return env.global_rank, env.num_tasks


def _prepare_data_once(cfg: Config) -> None:
    """Generate or download the data set once per node: the other tasks wait on the lock
    and then read the cached copy instead of writing the same files at the same time."""
    from repro.workload.workload import prepare

    root = Path(cfg.data.root)
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".prepare.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
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
        from repro.dist import launch
        from repro.train.entry import run_training

        rank, world = set_rendezvous(submitit.JobEnvironment())
        if rank == 0:
            step = checkpoint.latest_step(run_dir_of(self.cfg))
            print(f"run {run_dir_of(self.cfg)}: {world} workers, from step {step}", flush=True)
        _prepare_data_once(self.cfg)
        try:
            return run_training(self.cfg)
        finally:
            launch.shutdown()

    def checkpoint(self) -> DelayedSubmission:
        """Near the time limit: resubmit the same run; progress lives in the run directory."""
        return DelayedSubmission(TrainingJob(self.cfg))


class SweepWorkerJob(Checkpointable):
    """One sweep worker: runs trials of the study until `n_trials` have ended."""

    def __init__(self, spec: SweepSpec, index: int, deadline: float | None) -> None:
        self.spec, self.index, self.deadline = spec, index, deadline

    def __call__(self) -> tuple[int, int]:
        from repro.sweep.storage import open_storage
        from repro.sweep.study import open_study, run_worker, tally

        run_worker(self.spec, self.index, self.deadline)
        return tally(open_study(self.spec, open_storage(self.spec)))

    def checkpoint(self) -> DelayedSubmission:
        """A requeued worker joins the study again; its lost trial is queued again by the
        study's stale-trial handling."""
        return DelayedSubmission(SweepWorkerJob(self.spec, self.index, self.deadline))


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


def _record(job: submitit.Job, kind: str, label: str, cfg: Config, tasks: int) -> JobRecord:
    return JobRecord(
        job_id=job.job_id,
        kind=kind,
        label=label,
        cluster=cfg.cluster.kind,
        folder=str(job.paths.folder),
        tasks=tasks,
        run_dir=str(run_dir_of(cfg).absolute()) if kind != "sweep" else "",
        env_file=cfg.cluster.env_file,
    )


def _check_run(cfg: Config) -> None:
    """The run-directory checks `run_training` does, here, before anything is queued."""
    from repro.config import identity

    checkpoint.check_run_dir(run_dir_of(cfg), identity(cfg))


def submit_run(cfg: Config) -> submitit.Job:
    """Submit one training run as one multi-task job; returns at once."""
    _check_run(cfg)
    per_node = _tasks_per_node(cfg)
    folder = job_folder(cfg.cluster, cfg.runs_root)
    executor = make_executor(cfg.cluster, folder, f"repro-{cfg.label}", per_node, cfg.cluster.nodes)
    job = executor.submit(TrainingJob(cfg))
    append_records(cfg.runs_root, [_record(job, "run", cfg.label, cfg, cfg.trainer.world_size)])
    return job


def submit_run_set(paper: str, scale: str, runs: list[tuple[str, Config]]) -> int:
    """Submit a reproduction's unfinished runs as job arrays, print the ids, return 0."""
    from repro.train.entry import finished_summary

    groups: dict[int, list[tuple[str, Config]]] = defaultdict(list)
    for label, cfg in runs:
        if finished_summary(cfg) is not None:
            print(f"skip {label}: finished earlier")
            continue
        _check_run(cfg)
        groups[_tasks_per_node(cfg)].append((label, cfg))
    if not groups:
        print(f"{paper} {scale}: every run has finished; `repro report {paper}` builds the report")
        return 0
    first = runs[0][1]
    folder = job_folder(first.cluster, first.runs_root)
    records = []
    for per_node, group in groups.items():
        executor = make_executor(
            first.cluster, folder, f"repro-{paper}-{scale}", per_node, first.cluster.nodes
        )
        with executor.batch():  # one sbatch --array for the whole group
            jobs = [executor.submit(TrainingJob(cfg)) for _, cfg in group]
        for job, (label, cfg) in zip(jobs, group, strict=True):
            print(f"submitted {label}: job {job.job_id}", flush=True)
            records.append(_record(job, "run_set", label, cfg, cfg.trainer.world_size))
    path = append_records(first.runs_root, records)
    print(
        f"{paper} {scale}: {len(records)} runs submitted (recorded in {path}); follow them "
        f"with `repro jobs --root {first.runs_root} --watch`, then `repro report {paper}`"
    )
    return 0


def submit_sweep(spec: SweepSpec, workers: int, cluster: str) -> int:
    """Submit `workers` sweep workers as one job array sharing the study; return 0.

    The study is created (and the spec checked against the config) here, before anything is
    queued, exactly as a local `repro sweep` would. Each worker is one task with CPUs for
    one trial's `trainer.world_size` spawned workers."""
    import time

    from repro.config import compose
    from repro.sweep.spec import base_overrides, check_config_keys
    from repro.sweep.storage import open_storage
    from repro.sweep.study import open_study

    if workers < 1:
        raise UserError(f"--workers={workers} must be at least 1")
    cfg = compose([*base_overrides(spec), f"cluster={cluster}"])
    if cfg.cluster.kind == "local":
        raise UserError(f"cluster={cluster} runs locally; drop --cluster to run the sweep here")
    check_config_keys(spec)
    open_study(spec, open_storage(spec))
    deadline = time.time() + spec.timeout_s if spec.timeout_s is not None else None
    folder = job_folder(cfg.cluster, cfg.runs_root)
    cpus = cfg.cluster.cpus_per_task * cfg.trainer.world_size
    executor = make_executor(cfg.cluster, folder, f"repro-sweep-{spec.name}", 1, 1, cpus)
    with executor.batch():
        jobs = [executor.submit(SweepWorkerJob(spec, i, deadline)) for i in range(workers)]
    records = [_record(job, "sweep", spec.name, cfg, 1) for job in jobs]
    path = append_records(cfg.runs_root, records)
    print(
        f"sweep {spec.name}: {workers} workers submitted as jobs "
        f"{', '.join(j.job_id for j in jobs)} (recorded in {path}); follow them with "
        f"`repro jobs --root {cfg.runs_root} --watch`, then `repro sweep show {spec.source}`"
    )
    return 0
