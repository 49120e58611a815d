"""Starting workers: local spawn of N processes, or joining an `env://` rendezvous.

The same worker function runs under every launcher. `spawn` starts N local processes
(MASTER_ADDR=127.0.0.1, a free port) and collects each worker's return value; torchrun and
SLURM/submitit jobs set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT themselves, and
`init_process_group` simply reads them. On a GPU the group is NCCL for CUDA tensors and gloo
for CPU ones (`repro.comm.devices`), on the CPU gloo.

Worker faults under `spawn`. A worker that dies (exit code or signal) or stops answering
(SIGSTOP, a frozen node: its heartbeat stops) ends every worker of the run within the
collective timeout, with one line that names that worker and how it failed. Its peers
usually fail too (a closed connection, a collective timeout), and often report first, so
the parent looks for the worker that died or fell silent before it blames the first
report. Under torchrun or SLURM there is no such parent; there the process group's own
timeout (`init_process_group(timeout_s=...)`) ends the survivors.
"""

from __future__ import annotations

import os
import pickle
import signal
import socket
import threading
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from tqdm import tqdm

from repro.comm import forked
from repro.comm.devices import backend_for, cuda_problem
from repro.comm.worker_watch import WorkerWatch
from repro.errors import UserError, interrupts_held

# How long a worker may go without a heartbeat, and a collective may wait for a peer, before
# the run is ended. The trainer passes `trainer.collective_timeout_s` (same default).
DEFAULT_TIMEOUT_S = 60.0
# When a worker reports a failure, how long the parent keeps looking for its cause: a killed
# worker's peers see the closed connection before the parent can reap the dead process.
SETTLE_S = 1.0
# How long the workers of a stopped run may take to stop (their tracker's last records).
STOP_WAIT_S = 10.0
_STOP_ARRIVED = threading.Event()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_process_group(device: str = "cpu", timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Join the group described by the env:// variables (RANK, WORLD_SIZE, MASTER_*).

    On a CUDA `device` the group carries CUDA tensors over NCCL and CPU tensors over gloo
    (`cpu:gloo,cuda:nccl`), bound to this worker's GPU (`device_id`, which also creates the
    NCCL communicator at once rather than at the first collective); on the CPU it is gloo.
    `timeout_s` bounds the rendezvous and every collective: a peer that died or hangs ends
    this worker with an error after that long instead of blocking it forever."""
    if dist.is_initialized():
        return
    backend = backend_for(device)
    device_id = None
    if device.startswith("cuda"):
        problem = cuda_problem()
        if problem is not None:
            raise UserError(
                f"NCCL (process group backend {backend}) needs CUDA for {device} but "
                f"{problem}; use trainer.device=cpu cluster.gpus_per_node=0 "
                f"cluster.backend=auto, or run where CUDA works"
            )
        device_id = torch.device(device)
        torch.cuda.set_device(device_id)
    dist.init_process_group(
        backend=backend,
        init_method="env://",
        timeout=timedelta(seconds=timeout_s),
        device_id=device_id,
    )


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def _heartbeat(beats, rank: int, interval_s: float) -> None:
    # A daemon thread: it runs while the worker waits in a collective (torch releases the
    # GIL there) and stops exactly when the whole process stops (SIGSTOP) or dies.
    while True:
        beats[rank] = time.monotonic()
        time.sleep(interval_s)


def _worker(rank, world, port, fn, args, results, beats, beat_s, environ, launcher):
    signal.signal(signal.SIGINT, _stop_once)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # born held (`spawn`)
    forked.become_caller(environ, launcher)
    threading.Thread(
        target=_heartbeat, args=(beats, rank, beat_s), daemon=True, name="heartbeat"
    ).start()
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    torch.set_num_threads(1)
    # tqdm guards its bars with a multiprocessing lock, a named semaphore across processes. A
    # worker ended by SIGKILL after a fault cannot release it, and the resource tracker
    # then warns about it on stderr under the one-line message. Each worker draws its
    # own bar, so a thread lock is all it needs.
    tqdm.set_lock(threading.RLock())
    try:
        out = fn(rank, world, *args)
        # Plain pickle copies tensor data; torch's shared-memory pickling would need this
        # process alive until the parent has read the result.
        report = (rank, "ok", pickle.dumps(out))
    except UserError as e:
        # The exception itself travels, so subclasses (e.g. Diverged) keep their type.
        report = (rank, "user", pickle.dumps(e))
    except BaseException as e:  # noqa: BLE001  (reported to the parent, which re-raises)
        report = (rank, "crash", f"{type(e).__name__}: {e}\n{traceback.format_exc()}")
    try:
        results.put(report)
        # The report must be in the pipe before this worker's connections close: its peers
        # fail next, and the parent takes the first report as the cause.
        results.close()
        results.join_thread()
    finally:
        shutdown()


class WorkerCrash(RuntimeError):
    """A worker died with an unexpected exception (its traceback is in the message)."""


class WorkerFailed(UserError):
    """A worker died or stopped answering, so every worker of the run was ended."""


def lost_peer(err: BaseException) -> str | None:
    """The transport's reason where `err` is a collective that failed in this process, as
    when a peer process of the run is gone (gloo's pair errors, torch's DistError), in a
    few words; None for any other error."""
    text = str(err).strip()
    if not (isinstance(err, dist.DistError) or "gloo/transport" in text):
        return None
    # gloo: "[.../pair.cc:545] Read error [127.0.0.1]:32399: Connection reset by peer. This..."
    first = text.splitlines()[0] if text else type(err).__name__
    return first.split("] ", 1)[-1].split(". ", 1)[0]


def _stop(procs: list) -> None:
    """Stop every worker as a Ctrl-C stops a run in this process, before they are ended: the
    first worker's tracker then records the run as stopped (killed at once, it read as cut
    short). One that has not ended within `STOP_WAIT_S` is killed by `_end`."""
    for p in procs:
        if p.is_alive():
            os.kill(p.pid, signal.SIGINT)  # a worker takes only its first (`_stop_once`)
    deadline = time.monotonic() + STOP_WAIT_S
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))


def _stop_once(signum, frame) -> None:
    """A worker's SIGINT: the first stops its run, those after (a Ctrl-C to the whole
    process group, then the launcher's own) leave the stop to end in peace."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _STOP_ARRIVED.set()
    raise KeyboardInterrupt


def stop_arrived() -> bool:
    """Whether this worker's stop has arrived: a collective that fails after it failed
    because a peer stopped first, and the run is stopped, not failed."""
    return _STOP_ARRIVED.is_set()


def _end(procs: list, timeout_s: float, kill: bool = True) -> None:
    """Wait for every process to exit, killing them first (`kill`) or once `timeout_s` is
    up."""
    if kill:
        for p in procs:
            p.kill()
    for p in procs:
        p.join(timeout=timeout_s)
        if p.is_alive():
            p.kill()
            p.join()


def spawn(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    collective_timeout_s: float = DEFAULT_TIMEOUT_S,
    resume_hint: Callable[[], str] | None = None,
) -> list[Any]:
    """Run `fn(rank, world_size, *args)` in `world_size` worker processes; return results.

    `fn` must be importable (a module-level function). The rendezvous variables are set
    before `fn` runs, so `fn` calls `init_process_group()` itself, and should pass it
    `collective_timeout_s` too. A `UserError` in any worker is re-raised here as itself; a
    worker that dies or is silent for `collective_timeout_s` ends the run with
    `WorkerFailed`; any other exception in a worker becomes `WorkerCrash`. In both of the
    last two cases every worker is ended first, and `resume_hint()`, when given, adds what
    re-running the command will do (it reads the checkpoint the workers left).
    """
    if not collective_timeout_s > 0:
        raise ValueError(f"collective_timeout_s={collective_timeout_s} must be > 0")
    ctx = forked.context()
    results = ctx.Queue()
    beats = ctx.RawArray("d", world_size)  # monotonic time of each worker's last beat; 0: none
    # Ten beats per timeout: a live worker's heartbeat is never more than a tenth old.
    beat_s = min(1.0, collective_timeout_s / 10)
    port = free_port()
    caller = forked.caller()
    procs = [
        ctx.Process(
            target=_worker,
            args=(r, world_size, port, fn, args, results, beats, beat_s, *caller),
            daemon=False,
        )
        for r in range(world_size)
    ]
    try:
        with interrupts_held():  # the forkserver too, and so every worker forked from it
            for p in procs:
                p.start()
    except BaseException:
        # a stop (Ctrl-C, kill) while they start: the started ones would start on after we
        # are gone and fail on the results queue we took down, each with a traceback
        _end([p for p in procs if p.pid is not None], collective_timeout_s)
        raise
    watch = WorkerWatch(procs, results, beats, collective_timeout_s)
    fault: tuple[int, str] | None = None
    try:
        # Two beats short of the timeout, so that the run ends within it after a stop.
        silent_s = collective_timeout_s - 2 * beat_s
        while not watch.done() and not watch.reports and fault is None:
            watch.receive(beat_s)
            fault = watch.fault(silent_s)
        if watch.reports and fault is None:
            # A peer of a silent worker may time out in its collective before the silence
            # is noticed here, so half the timeout already marks the silent one.
            deadline = time.monotonic() + SETTLE_S
            while fault is None and time.monotonic() < deadline:
                watch.receive(0.1)
                fault = watch.fault(collective_timeout_s / 2)
    except BaseException as stop:
        if not isinstance(stop, Exception):  # Ctrl-C, a kill (`Terminated`), a sweep's stop
            _stop(procs)
        raise
    finally:
        # After a failure (or Ctrl-C here) survivors may be blocked in a collective.
        _end(procs, collective_timeout_s, kill=not watch.done())
    hint = f"; {resume_hint()}" if resume_hint is not None else ""
    if fault is not None:
        rank, cause = fault
        raise WorkerFailed(
            f"worker {rank} of {world_size} {cause}; all {world_size} workers were ended{hint}"
        )
    if watch.reports:
        rank, kind, payload = watch.reports[0]
        if kind == "user":
            raise pickle.loads(payload)
        first, _, trace = payload.partition("\n")
        raise WorkerCrash(f"worker {rank} of {world_size} failed: {first}{hint}\n{trace}")
    return [watch.outs[r] for r in range(world_size)]
