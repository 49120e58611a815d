"""Starting a sweep: every check first, then K workers on the launcher the cluster group picks.

`repro sweep SPEC --workers K [--cluster NAME]`. The workers
go where `repro.cluster.launcher.Workers` puts them for the `cluster` group of the spec's base
config (or `NAME`): processes here, or one job array sharing the study's storage.

Before any worker starts or any job is queued, in this order, so that a refused sweep leaves
nothing behind (no study, no directory, no job):

1. the storage suits the cluster: workers on several SLURM hosts need Optuna's heartbeat, which
   only a database server gives. A journal file has none (a trial lost with a preempted worker
   job would stay RUNNING, count towards the budget, and leave the other workers idle until
   `timeout_s`), and a SQLite file cannot be shared between hosts;
2. every search key and value composes into a valid config;
3. a database answers (an unreachable one is one line naming it, its password masked);
4. the cluster can run the workers (sbatch, partition, CPUs);

and only then is the study created (or loaded, to continue it). A study that already has its
`n_trials` runs nothing and queues no job.
"""

from __future__ import annotations

import functools
import logging
import time
import warnings
from typing import Any

from repro.cluster.jobs import JobRecord
from repro.cluster.launcher import Workers
from repro.errors import UserError
from repro.schemas.cluster import ClusterConfig
from repro.sweep.spec import SweepSpec, base_overrides, check_config_keys
from repro.sweep.storage import SERVER_SCHEMES, open_storage, scheme
from repro.sweep.study import open_study, run_worker, tally

log = logging.getLogger("repro.sweep")


def check_storage_for(spec: SweepSpec, cluster: ClusterConfig) -> None:
    """Refuse a storage that workers on several hosts cannot share with a heartbeat."""
    if cluster.kind != "slurm":
        return  # local processes and submitit's LocalExecutor share this machine's locks
    if spec.storage is None:
        problem = f"the journal file {spec.storage_label}, which has no heartbeat"
    elif scheme(spec.storage) not in SERVER_SCHEMES:
        problem = f"{spec.storage_label}, a file that hosts cannot share safely"
    else:
        return
    raise UserError(
        f"sweep {spec.name}: cluster={cluster.name} runs workers on several hosts but storage "
        f"is {problem}; set `storage: postgresql://USER:PASSWORD@HOST/DB` in "
        f"{spec.source or 'the spec'} (`make pg-up` starts one on this machine)"
    )


def prepare_study(spec: SweepSpec, storage: Any) -> Any:
    """Create or load the study, refusing to start a new one over an earlier one's runs."""
    import optuna

    known = {s.study_name for s in storage.get_all_studies()}
    if spec.name not in known and any(spec.study_dir.glob("trial_*")):
        # A new study would reuse trial_<n> directories holding an earlier study's runs.
        raise UserError(
            f"{spec.study_dir} holds trial directories of an earlier study {spec.name}, which "
            f"{spec.storage_label} does not hold (deleted or replaced?); move them away or "
            "give the sweep another name or out directory"
        )
    study = open_study(spec, storage)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names(spec.metric_names)
    return study


def run_sweep(spec: SweepSpec, workers: int = 1, cluster: str | None = None) -> list[JobRecord]:
    """Run (or continue) the study with `workers` workers where the cluster group says.
    Returns the queued jobs: none when the workers ran here to the end."""
    from repro.config import compose

    if workers < 1:
        raise UserError(f"--workers={workers} must be at least 1")
    cfg = compose([*base_overrides(spec), *([f"cluster={cluster}"] if cluster else [])])
    check_storage_for(spec, cfg.cluster)
    check_config_keys(spec)
    database = open_storage(spec) if spec.storage is not None else None
    cpus = cfg.cluster.cpus_per_task * cfg.trainer.world_size  # a trial spawns its workers
    pool = Workers(cfg.cluster, cfg.runs_root, "sweep", spec.name, cpus)
    done, _ = tally(prepare_study(spec, database or open_storage(spec)))
    if done >= spec.n_trials:
        print(f"sweep {spec.name}: all {spec.n_trials} trials finished; nothing to run", flush=True)
        return []
    log.info(
        "sweep %s on %s: %d trials, %d workers (cluster=%s)",
        spec.name,
        spec.storage_label,
        spec.n_trials,
        workers,
        cfg.cluster.name,
    )
    deadline = time.time() + spec.timeout_s if spec.timeout_s is not None else None
    return pool.start(
        [functools.partial(run_worker, spec, i, deadline) for i in range(workers)],
        then=f"`repro sweep show {spec.source}`",
    )
