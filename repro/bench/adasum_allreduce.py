"""Adasum's vector-halving distance-doubling allreduce against a plain gloo allreduce.

Maleki et al. (MLSys 2021) call their Adasum allreduce "almost as efficient as simply
summing gradients": it moves a reduce-scatter's plus an allgather's worth of data, like a
ring allreduce, and adds per-level dot products and three float64 scalars per tensor.
Here both run over 4 spawned gloo ranks on 1 MiB to 64 MiB of float32 split into 8 tensors
of unequal sizes (a model's layers), both in place on one persistent flat buffer, as
`method=adasum` runs them: the plain allreduce sums it (the `combiner=sum` path), Adasum
(`adasum_allreduce_`) combines it per tensor. Each time is the median over repeats of the
slowest rank, after a warm-up call, every call from each rank's own buffer. Goal: Adasum
at most 1.5x the plain allreduce at 64 MiB.

A second table times the small-message path (`repro.comm.adasum_gather`: one allgather,
the tree applied locally) beside the halving allreduce from 16 KiB to 4 MiB, the range in
which `method.gather_below_kb` (default 256) switches between them, and says where the
gather path stops being the faster.

Bytes moved per rank: Adasum's are its recorded sendrecv and scalar payloads; the plain
allreduce's are a ring allreduce's 2 (n-1)/n M, since gloo does not report its own.

Each rank is one process holding one worker (`ProcessCollectives`), so its buffer is one row
of the (workers, padded) layout the strategy keeps.
"""

from __future__ import annotations

import functools
import statistics
import time

import torch

from repro.comm.adasum_allreduce import adasum_allreduce_
from repro.comm.adasum_gather import adasum_gather_
from repro.comm.flat_layout import FlatLayout
from repro.comm.launch import init_process_group, spawn
from repro.comm.process_collectives import ProcessCollectives
from repro.netmodel.calibrate import load_note

WORLD = 4
SIZES_MIB = (1, 4, 16, 64)
SMALL_KIB = (16, 64, 256, 1024, 2048, 4096)
# Relative layer sizes: a few large weight matrices and small biases.
LAYER_SHARES = (0.30, 0.001, 0.25, 0.001, 0.20, 0.002, 0.2455, 0.0005)
GOAL = 1.5


def _layers(nbytes: int, rank: int) -> list[torch.Tensor]:
    total = nbytes // 4
    sizes = [max(1, int(total * s)) for s in LAYER_SHARES]
    sizes[0] += total - sum(sizes)
    g = torch.Generator().manual_seed(rank)
    return [torch.randn(n, generator=g) for n in sizes]


def _slowest(comm: ProcessCollectives, seconds: float) -> float:
    t = torch.tensor([[seconds]], dtype=torch.float64)
    return comm.allgather_untracked(t).max().item()


def _row_buffer(layers: list[torch.Tensor], world: int) -> tuple[FlatLayout, torch.Tensor]:
    """This worker's layers in one (1, padded) buffer, as `method=adasum` keeps them."""
    layout = FlatLayout(layers, world)
    return layout, layout.flatten([t.unsqueeze(0) for t in layers])


def _time(comm: ProcessCollectives, fn, flat: torch.Tensor, repeats: int) -> float:
    """Median seconds of the slowest rank's `fn`, each call from this rank's own `flat`:
    both paths combine in place, and ranks that all held the same sums would time a
    combination of equal vectors."""
    own = flat.clone()
    times = []
    for i in range(repeats + 1):  # the first a warm-up: gloo connections, allocator
        flat.copy_(own)
        comm.barrier()
        start = time.perf_counter()
        fn()
        if i:
            times.append(_slowest(comm, time.perf_counter() - start))
    flat.copy_(own)
    return statistics.median(times)


def _worker(rank: int, world: int, repeats: int) -> tuple[list, list]:
    torch.set_num_threads(1)
    init_process_group()
    comm = ProcessCollectives()
    rows, small = [], []
    for mib in SIZES_MIB:
        layout, flat = _row_buffer(_layers(mib << 20, rank), world)
        t_plain = _time(comm, functools.partial(comm.allreduce, flat), flat, repeats)
        adasum = functools.partial(adasum_allreduce_, flat, layout, comm)
        t_adasum = _time(comm, adasum, flat, repeats)
        moved = sum(r.nbytes for r in adasum())
        rows.append((mib, t_plain, t_adasum, moved))
    for kib in SMALL_KIB:
        layout, flat = _row_buffer(_layers(kib << 10, rank), world)
        times = [
            _time(comm, functools.partial(fn, *args), flat, 3 * repeats)
            for fn, args in (
                (comm.allreduce, (flat,)),
                (adasum_allreduce_, (flat, layout, comm)),
                (adasum_gather_, (flat, layout, comm)),
            )
        ]
        small.append((kib, *times))
    return rows, small


def _small_table(small: list) -> list[str]:
    lines = [
        f"{'size':>7}{'allreduce s':>13}{'halving s':>11}{'ratio':>7}{'gather s':>10}{'ratio':>7}"
    ]
    for kib, t_plain, t_halving, t_gather in small:
        lines.append(
            f"{kib:>4}KiB{t_plain:>13.4f}{t_halving:>11.4f}{t_halving / t_plain:>7.2f}"
            f"{t_gather:>10.4f}{t_gather / t_plain:>7.2f}"
        )
    return lines


def crossover_line(small: list) -> str:
    """Where the gather path stops being the faster: the largest size at which it wins
    and the next size measured (`method.gather_below_kb` is meant to sit between)."""
    sizes = [kib for kib, *_ in small]
    wins = [kib for kib, _, halving, gather in small if gather < halving]
    if not wins:
        return f"the halving allreduce is the faster at every size from {sizes[0]} KiB"
    if wins[-1] == sizes[-1]:
        return f"the gather path is the faster at every size up to {sizes[-1]} KiB"
    after = sizes[sizes.index(wins[-1]) + 1]
    return (
        f"the gather path is the faster up to {wins[-1]} KiB, the halving allreduce at {after} KiB"
    )


def run(repeats: int = 5) -> list[str]:
    rows, small = spawn(_worker, WORLD, repeats)[0]
    lines = [
        f"{WORLD} gloo ranks, 8 tensors, median of {repeats} (slowest rank); {load_note()}",
        f"{'size':>7}{'allreduce s':>13}{'adasum s':>11}{'ratio':>7}"
        f"{'ring MiB/rank':>15}{'adasum MiB/rank':>17}",
    ]
    ratio = float("nan")
    for mib, t_plain, t_adasum, moved in rows:
        ratio = t_adasum / t_plain
        ring = 2 * (WORLD - 1) / WORLD * mib
        lines.append(
            f"{mib:>4}MiB{t_plain:>13.4f}{t_adasum:>11.4f}{ratio:>7.2f}"
            f"{ring:>15.2f}{moved / 2**20:>17.2f}"
        )
    verdict = "met" if ratio <= GOAL else "NOT met"
    lines.append(
        f"goal: adasum <= {GOAL}x allreduce at {SIZES_MIB[-1]} MiB: {ratio:.2f}x, {verdict}"
    )
    lines.append(f"small messages, median of {3 * repeats}: halving allreduce and gather path")
    return [*lines, *_small_table(small), crossover_line(small), f"end: {load_note()}"]


if __name__ == "__main__":
    print("\n".join(run()))
