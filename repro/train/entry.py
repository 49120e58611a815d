"""One training run, from a validated Config to its summary, under any launcher.

`run_training` checks the run directory (writable, not another config's), prepares the data
once (MNIST-1D generation or the CIFAR download fails here, before any worker starts), then
runs the workers by `trainer.engine`: `simulated` holds all of them in this process on a
worker axis (`AxisCollectives`); `processes` runs one worker in this process when there is
one, `spawn`s several, or joins the env:// rendezvous when torchrun or a SLURM job already
set RANK and WORLD_SIZE.
"""

from __future__ import annotations

import functools
import os
import sys

import torch
from torch import distributed as dist

from repro.comm import launch
from repro.comm.axis_collectives import AxisCollectives
from repro.comm.devices import pick_device
from repro.comm.main_guard import unguarded_main_line
from repro.comm.process_collectives import ProcessCollectives
from repro.config import Config, config_hash, identity, run_dir_of
from repro.errors import UserError
from repro.locks import RUN_LOCK
from repro.schemas.cluster import env_rank_world
from repro.storage import NewDir
from repro.train import checkpoint
from repro.train.caller_state import caller_state_kept
from repro.train.checkpoint_pick import choose, finished_summary, shorter_run_note
from repro.train.divergence import Diverged
from repro.train.engine_checks import check_memory, check_process_cores, check_process_memory
from repro.train.run_lock import run_lock
from repro.train.trainer import Trainer
from repro.workload.workload import Workload, prepare

__all__ = ["Diverged", "run_training", "train_worker"]


def train_worker(rank: int, world: int, cfg: Config) -> dict | None:
    """Body of one worker process; the env:// variables are already set."""
    torch.set_num_threads(1)
    os.environ.update(cfg.method.process_env())
    device = worker_device(cfg)
    launch.init_process_group(device, timeout_s=cfg.trainer.collective_timeout_s)
    return Trainer(cfg, ProcessCollectives(device=device), device).run()


def worker_device(cfg: Config) -> str:
    """This process's device; asking for GPUs where CUDA is unusable is refused here."""
    cluster = cfg.cluster
    return pick_device(cfg.trainer.device, cluster.gpus_per_node, cluster.backend)


def check_simulated_memory(cfg: Config, device: str) -> None:
    """Refuse, before the run directory is written, workers that would not fit in memory."""
    workload = Workload(cfg.workload, prepare(cfg.workload, cfg.data, cfg.seed), device)
    sample = workload.sample(cfg.trainer.batch_size)
    evaluated = min(cfg.workload.eval_batch_size, len(workload.arrays.y_test))
    check_memory(cfg, workload.model_factory(), sample, evaluated, device)


def run_simulated(cfg: Config, device: str) -> dict:
    """Every worker of the run in this process."""
    torch.set_num_threads(1)  # as each worker process does: the same kernels, the same sums
    comm = AxisCollectives(cfg.trainer.world_size)
    return Trainer(cfg, comm, device, cfg.trainer.vectorize).run()


def run_training(cfg: Config) -> dict:
    """Run (or resume, or skip if finished) one training run; return its summary.

    The launcher (or rank 0 of an external launch) holds the run directory's lock for the
    run's life, so a second launch of the same run is refused rather than run twice. What
    the run sets of this process is put back afterwards (`caller_state_kept`): a notebook
    or script may go on after it."""
    with caller_state_kept(cfg.method.process_env()):
        return _run_training(cfg)


def _run_training(cfg: Config) -> dict:
    done = finished_summary(cfg)
    if done is not None:
        return done
    device = worker_device(cfg)  # a GPU request without CUDA fails before anything is written
    if device == "cpu" and cfg.experiment.scale == "paper" and cfg.trainer.device == "auto":
        print(
            "note: a paper-scale run on the CPU (no CUDA device here); trainer.device=cuda "
            "makes that an error instead",
            file=sys.stderr,
            flush=True,
        )
    check_process_engine(cfg)  # the config says it all: before any data is made
    check_method_model(cfg, prepare(cfg.workload, cfg.data, cfg.seed))
    check_memory_of(cfg, device)
    external = env_rank_world()
    check_external(cfg, external)
    if external is not None and external[0] != 0:
        return _train(cfg, device, external)
    run_dir = run_dir_of(cfg)
    if note := shorter_run_note(cfg, run_dir):
        print(note, file=sys.stderr, flush=True)
    folder = NewDir(run_dir, "run_dir")
    with run_lock(run_dir), folder.undone_on_failure((checkpoint.CONFIG_FILE, RUN_LOCK)):
        # a run that held the lock a moment ago may have finished it
        return finished_summary(cfg) or _train(cfg, device, external)


def check_process_engine(cfg: Config) -> None:
    """Refuse, before anything is written, a processes-engine run this process cannot
    start: more workers than cores, a caller's script its spawned workers would run again
    (`unguarded_main_line`), or a process group of the caller's, which a worker held here
    (a lone worker, or this process's rank of an external launch) would take for its own,
    with the caller's timeout, and destroy at its end."""
    if cfg.trainer.engine != "processes":
        return
    external = env_rank_world()
    if external is None:
        check_process_cores(cfg)
        script = unguarded_main_line() if cfg.trainer.world_size > 1 else None
        if script is not None:
            raise UserError(
                f"{script[0]}, line {script[1]}: the processes engine's workers start by "
                "importing this script again, and would each run this line: put it under "
                '`if __name__ == "__main__":`'
            )
    if (external is not None or cfg.trainer.world_size == 1) and dist.is_initialized():
        raise UserError(
            "this process already has a torch.distributed process group, which the "
            "processes engine's worker here would take for its own and end: call "
            "torch.distributed.destroy_process_group() first, or use trainer.engine=simulated"
        )


def check_external(cfg: Config, external: tuple[int, int] | None) -> None:
    """Refuse, before the run directory is written, a process an external launcher
    (torchrun, srun: RANK and WORLD_SIZE set) started that cannot join the run: more or
    fewer processes than the run's workers, or no rendezvous address to meet them at."""
    if external is None:
        return
    if external[1] != cfg.trainer.world_size:
        raise UserError(
            f"the launcher started {external[1]} processes but trainer.world_size="
            f"{cfg.trainer.world_size}; make them equal"
        )
    missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(k)]
    if missing:
        these, are = ("them", "are") if len(missing) > 1 else ("it", "is")
        raise UserError(
            f"RANK and WORLD_SIZE are set, as a launcher (torchrun, srun) sets them, but "
            f"{' and '.join(missing)} {are} not: set {these} as the launcher does, or unset "
            "RANK and WORLD_SIZE to let repro start the workers"
        )


def check_method_model(cfg: Config, arrays) -> None:
    """Refuse, before the run directory is written, a model the method cannot serve."""
    model = Workload(cfg.workload, arrays, "cpu").model_factory()
    cfg.method.validate_model({name: tuple(p.shape) for name, p in model.named_parameters()})


def check_memory_of(cfg: Config, device: str) -> None:
    """Refuse, before the run directory is written, workers that would not fit here."""
    if cfg.trainer.engine == "simulated":
        check_simulated_memory(cfg, device)
    elif env_rank_world() is None and (cfg.trainer.world_size > 1 or device == "cpu"):
        # a lone worker runs in this process: on a GPU its activations are not the host's
        workload = Workload(cfg.workload, prepare(cfg.workload, cfg.data, cfg.seed), "cpu")
        sample = workload.sample(cfg.trainer.batch_size)
        shard = -(-len(workload.arrays.y_test) // cfg.trainer.world_size)  # its test slice
        evaluated = min(cfg.workload.eval_batch_size, shard)
        check_process_memory(cfg, workload.model_factory(), sample, evaluated)


def _train(cfg: Config, device: str, external: tuple[int, int] | None) -> dict:
    run_dir = run_dir_of(cfg)
    fallback = choose(run_dir, config_hash(cfg)).line(run_dir)  # refuses before any write
    if external is None or external[0] == 0:
        if fallback:
            print(fallback, file=sys.stderr, flush=True)
        # the lock's holder alone: the other ranks of a second launch, whose rank 0 the lock
        # refuses, would clear the live run's checkpoint in the making
        checkpoint.record_run_dir(run_dir, identity(cfg))
    if cfg.trainer.engine == "simulated":
        return run_simulated(cfg, device)
    world = cfg.trainer.world_size
    if external is not None:
        try:  # gloo's threads left running at exit abort the process (SIGABRT) now and then
            out = train_worker(external[0], world, cfg)  # rank 0's alone is the summary
        except RuntimeError as err:
            # the launcher names the worker that died; the others say why they stopped
            cause = launch.lost_peer(err)
            if cause is None:
                raise
            raise launch.WorkerFailed(
                f"worker {external[0]} of {world}: a collective failed ({cause}), as when "
                f"another worker of the run stops; {checkpoint.resume_hint(run_dir)}"
            ) from None
        finally:
            launch.shutdown()
        return out if out is not None else {"run_dir": str(run_dir)}
    if world == 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(launch.free_port()))
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
        try:  # the variables go with the rest of the run's process state (`run_training`)
            return train_worker(0, 1, cfg)
        finally:
            launch.shutdown()
    return launch.spawn(
        train_worker,
        world,
        cfg,
        collective_timeout_s=cfg.trainer.collective_timeout_s,
        resume_hint=functools.partial(checkpoint.resume_hint, run_dir),
    )[0]
