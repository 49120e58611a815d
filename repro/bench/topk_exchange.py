"""Measured cost of Flexible Top-k's exchanges on loopback gloo, and of its Top-k selection.

1. AG-Topk and AR-Topk (STAR leader, ring allreduce) at c = 0.1 and 0.001 on 4 gloo workers,
   against a dense allreduce of the same 2M-entry float32 vector (8 MiB) measured in the
   same processes, each repeat from each rank's own gradient. Each exchange is timed
   whole, as a training step runs it: the Top-k selection, the collectives, the sum or
   scatter into a dense average. The figure per exchange is the slowest rank's median over
   the repeats, each repeat starting at a barrier. On loopback bandwidth is plentiful and
   latency tiny, so this shows the real compute-plus-copy overheads, not the alpha-beta
   regime the modeled clock charges. The selection alone (`repro.compress.topk.compress`
   over the whole vector: every rank's in AG-Topk, the leader's in AR-Topk) is timed in
   the same workers beside each pair, every rank at once as in AG-Topk, since on CPU it
   can outweigh the communication. Each rank is one process holding one worker
   (`ProcessCollectives`), so the gradient is one row, (1, NUMEL), on the worker axis the
   exchanges take.
2. The Top-k selection alone on the MNIST-1D CNN's flattened gradient at both ratios,
   against one training step of that model (forward, backward, optimizer step at the small
   experiment's batch of 64), both on one thread in this process.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from repro.comm.launch import init_process_group, spawn
from repro.comm.process_collectives import ProcessCollectives
from repro.compress.exchange import ag_topk_exchange, ar_topk_exchange, dense_exchange
from repro.compress.topk import compress, k_for
from repro.netmodel.calibrate import load_note
from repro.workload.models import build_model

WORLD = 4
NUMEL = 2**21
RATIOS = (0.1, 0.001)
REPEATS, WARMUP = 10, 2
BATCH = 64


def _median_seconds(fn: Callable[[], object], before: Callable[[], None], repeats: int) -> float:
    for _ in range(WARMUP):
        before()
        fn()
    times = []
    for _ in range(repeats):
        before()
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _exchange_worker(rank: int, world: int) -> dict[str, float]:
    init_process_group()
    torch.set_num_threads(1)
    comm = ProcessCollectives()
    grad = torch.randn(1, NUMEL, generator=torch.Generator().manual_seed(rank))
    work = grad.clone()

    def fresh() -> None:
        """Each repeat from this rank's own gradient: the dense allreduce sums in place, and
        every rank's equal sums would give every rank the same Top-k."""
        work.copy_(grad)
        comm.barrier()

    def timed(fn: Callable[[], object]) -> float:
        return _median_seconds(fn, fresh, REPEATS)

    out = {"dense": timed(lambda: dense_exchange(comm, work, "ring"))}
    for c in RATIOS:
        k = k_for(NUMEL, c)
        out[f"ag {c}"] = timed(lambda k=k: ag_topk_exchange(comm, work, k))
        out[f"ar {c}"] = timed(lambda k=k: ar_topk_exchange(comm, work, k, leader=0))
        # as inside AG-Topk: every rank selecting at once, on the cores they share
        out[f"select {c}"] = timed(lambda k=k: compress(work, k))
    return out


def _selection_vs_step() -> list[str]:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = build_model("cnn1d", 10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(BATCH, 1, 40), torch.randint(0, 10, (BATCH,))

    def step() -> None:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    step_s = _median_seconds(step, lambda: None, 50)
    flat = torch.cat([p.grad.reshape(1, -1) for p in model.parameters()], dim=1)  # one row
    lines = [f"MNIST-1D CNN ({flat.numel():,} params), batch {BATCH}: step {step_s * 1e3:.3f} ms"]
    for c in RATIOS:
        k = k_for(flat.numel(), c)
        select_s = _median_seconds(lambda k=k: compress(flat, k), lambda: None, 200)
        lines.append(
            f"  Top-k selection c={c:g} (k={k}): {select_s * 1e3:.4f} ms = "
            f"{select_s / step_s:.3f} x the step"
        )
    return lines


def run() -> list[str]:
    results = spawn(_exchange_worker, WORLD)
    slowest = {name: max(r[name] for r in results) for name in results[0]}
    dense = slowest["dense"]
    lines = [
        f"{WORLD} gloo workers on loopback, {NUMEL:,}-entry float32 gradient "
        f"({NUMEL * 4 / 2**20:.0f} MiB); slowest rank's median of {REPEATS}; {load_note()}",
        f"  dense allreduce: {dense * 1e3:.2f} ms",
    ]
    for c in RATIOS:
        for kind, label in (("ag", "AG-Topk"), ("ar", "AR-Topk (STAR)")):
            t = slowest[f"{kind} {c}"]
            lines.append(f"  {label} c={c:g}: {t * 1e3:.2f} ms = {t / dense:.3f} x dense")
        select_s = slowest[f"select {c}"]
        lines.append(
            f"    of which one Top-k selection (k={k_for(NUMEL, c):,}, every rank at once): "
            f"{select_s * 1e3:.2f} ms = {select_s / dense:.3f} x dense"
        )
    return [*lines, *_selection_vs_step(), f"end: {load_note()}"]


if __name__ == "__main__":
    print("\n".join(run()))
