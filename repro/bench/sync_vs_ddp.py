"""Step time of `method=sync` against torch DDP: same model, data, batch, 4 gloo ranks.

Both run in the same process group, one after the other in alternating blocks so that load
from other processes on the machine falls on both alike. The sync side is exactly the
trainer's path: `SyncStrategy.after_backward` (one flattened allreduce through
`Collectives`) between backward and the optimizer step; the DDP side is
`DistributedDataParallel` with its defaults (25 MB buckets, allreduce overlapped with
backward). The model is a wide MLP (5.3M parameters, 21 MB of gradients) so that the
allreduce is a sizeable part of a step, as it is for the papers' models on real networks.
Goal: sync / DDP <= 1.05.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from torch import nn

from repro.comm.launch import init_process_group, spawn
from repro.comm.process_collectives import ProcessCollectives
from repro.netmodel.calibrate import load_note
from repro.netmodel.cost import Link
from repro.strategies.base import StepInfo
from repro.strategies.sync import SyncConfig, SyncStrategy
from repro.train.replicas import Replicas

WORLD, BATCH, IN_DIM, WIDTH, CLASSES = 4, 32, 512, 2048, 10
WARMUP_STEPS, BLOCK_STEPS, BLOCKS = 3, 5, 6
GOAL = 1.05


def _model() -> nn.Module:
    torch.manual_seed(0)  # the same initial model on every rank and for both sides
    return nn.Sequential(
        nn.Linear(IN_DIM, WIDTH),
        nn.ReLU(),
        nn.Linear(WIDTH, WIDTH),
        nn.ReLU(),
        nn.Linear(WIDTH, CLASSES),
    )


def _batches(rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(1000 + rank)
    return [
        (
            torch.randn(BATCH, IN_DIM, generator=gen),
            torch.randint(0, CLASSES, (BATCH,), generator=gen),
        )
        for _ in range(4)
    ]


def _timed_block(step_fn, comm: ProcessCollectives, steps: int, start: int) -> float:
    """Seconds per step over `steps` steps, between barriers (the slowest rank's pace)."""
    comm.barrier()
    started = time.perf_counter()
    for i in range(steps):
        step_fn(start + i)
    comm.barrier()
    return (time.perf_counter() - started) / steps


def _worker(rank: int, world: int) -> dict[str, list[float]] | None:
    init_process_group()
    torch.set_num_threads(1)
    comm = ProcessCollectives()
    batches = _batches(rank)
    loss_fn = nn.CrossEntropyLoss()

    replicas = Replicas(_model(), 1, "loop")
    sync_opt = torch.optim.SGD(replicas.parameters(), lr=0.01, momentum=0.9)
    strategy = SyncStrategy(SyncConfig(), world)
    strategy.setup(replicas, sync_opt, comm, None)
    link = Link(0.0, 1e12)

    def sync_step(step: int) -> None:
        x, y = batches[step % len(batches)]
        # forward_backward writes the gradients into the p.grad rows (no zeroing needed)
        losses = replicas.forward_backward(x.unsqueeze(0), y.unsqueeze(0), loss_fn)
        strategy.after_backward(StepInfo(step, 0.0, losses, 0.01, 0.0, link))
        sync_opt.step()

    ddp_model = nn.parallel.DistributedDataParallel(_model())
    ddp_opt = torch.optim.SGD(ddp_model.parameters(), lr=0.01, momentum=0.9)

    def ddp_step(step: int) -> None:
        x, y = batches[step % len(batches)]
        ddp_opt.zero_grad(set_to_none=False)
        loss_fn(ddp_model(x), y).backward()
        ddp_opt.step()

    for fn in (sync_step, ddp_step):
        _timed_block(fn, comm, WARMUP_STEPS, 0)
    times: dict[str, list[float]] = {"sync": [], "ddp": []}
    for block in range(BLOCKS):
        # Alternate which side goes first so neither always follows the other's cache state.
        order = [("sync", sync_step), ("ddp", ddp_step)]
        for name, fn in order if block % 2 == 0 else order[::-1]:
            times[name].append(_timed_block(fn, comm, BLOCK_STEPS, block * BLOCK_STEPS))
    return times if rank == 0 else None


def run() -> list[str]:
    times = spawn(_worker, WORLD)[0]
    sync_s, ddp_s = float(np.median(times["sync"])), float(np.median(times["ddp"]))
    ratio = sync_s / ddp_s
    n_params = sum(p.numel() for p in _model().parameters())
    verdict = "meets" if ratio <= GOAL else "misses"
    return [
        f"wide MLP {n_params / 1e6:.2f}M parameters, batch {BATCH} per rank, {WORLD} gloo ranks, "
        f"median of {BLOCKS} alternating blocks of {BLOCK_STEPS} steps; {load_note()}",
        f"method=sync {sync_s * 1e3:.1f} ms/step, DDP {ddp_s * 1e3:.1f} ms/step",
        f"sync / DDP step time: {ratio:.3f} ({verdict} the goal of at most {GOAL})",
    ]


if __name__ == "__main__":
    print("\n".join(run()))
