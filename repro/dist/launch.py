"""Starting workers: local spawn of N gloo processes, or joining an `env://` rendezvous.

The same worker function runs under every launcher. `spawn` starts N local processes
(MASTER_ADDR=127.0.0.1, a free port) and collects each worker's return value; torchrun and
SLURM/submitit jobs set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT themselves, and
`init_process_group` simply reads them. NCCL is used when CUDA is present, gloo otherwise.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import queue
import signal
import socket
import traceback
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from repro.errors import UserError

_PR_SET_PDEATHSIG = 1


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def backend_for(device: str) -> str:
    return "nccl" if device.startswith("cuda") else "gloo"


def pick_device(requested: str = "auto") -> str:
    """`auto` means one CUDA device per local rank when CUDA exists, else the CPU."""
    if requested != "auto":
        return requested
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", "0"))
        return f"cuda:{local % torch.cuda.device_count()}"
    return "cpu"


def init_process_group(device: str = "cpu", timeout_s: float = 600.0) -> None:
    """Join the group described by the env:// variables (RANK, WORLD_SIZE, MASTER_*)."""
    if dist.is_initialized():
        return
    dist.init_process_group(
        backend=backend_for(device), init_method="env://", timeout=timedelta(seconds=timeout_s)
    )


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def env_rank_world() -> tuple[int, int] | None:
    """(rank, world) when an external launcher (torchrun, SLURM) already set them."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    return None


def die_with_parent() -> None:
    # A SIGKILLed launcher must not leave workers blocked in a collective forever.
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


def _worker(rank, world, port, fn, args, results):
    die_with_parent()
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    torch.set_num_threads(1)
    try:
        out = fn(rank, world, *args)
        # Plain pickle copies tensor data; torch's shared-memory pickling would need this
        # process alive until the parent has read the result.
        results.put((rank, "ok", pickle.dumps(out)))
    except UserError as e:
        # The exception itself travels, so subclasses (e.g. Diverged) keep their type.
        results.put((rank, "user", pickle.dumps(e)))
    except BaseException as e:  # noqa: BLE001  (reported to the parent, which re-raises)
        results.put((rank, "crash", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
    finally:
        shutdown()


class WorkerCrash(RuntimeError):
    """A worker died with an unexpected exception (its traceback is in the message)."""


def spawn(fn: Callable[..., Any], world_size: int, *args: Any) -> list[Any]:
    """Run `fn(rank, world_size, *args)` in `world_size` fresh processes; return results.

    `fn` must be importable (a module-level function). The rendezvous variables are set
    before `fn` runs, so `fn` calls `init_process_group()` itself. A `UserError` in any
    worker is re-raised here as a `UserError`; any other failure as `WorkerCrash`.
    """
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(target=_worker, args=(r, world_size, port, fn, args, results), daemon=False)
        for r in range(world_size)
    ]
    for p in procs:
        p.start()
    outs: dict[int, Any] = {}
    failure: tuple[int, str, str] | None = None
    try:
        while len(outs) < world_size and failure is None:
            try:
                rank, kind, payload = results.get(timeout=1.0)
            except queue.Empty:
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead:
                    failure = (procs.index(dead[0]), "crash", f"exit code {dead[0].exitcode}")
                continue
            if kind == "ok":
                outs[rank] = pickle.loads(payload)
            else:
                failure = (rank, kind, payload)
    finally:
        if failure is not None:
            for p in procs:
                if p.is_alive():
                    p.kill()
        for p in procs:
            p.join()
    if failure is not None:
        rank, kind, msg = failure
        if kind == "user":
            raise pickle.loads(msg)
        raise WorkerCrash(f"worker {rank} failed: {msg}")
    return [outs[r] for r in range(world_size)]
