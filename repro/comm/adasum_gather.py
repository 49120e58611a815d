"""Adasum for small messages: one allgather, then the binary tree on every rank.

The vector-halving distance-doubling allreduce (`repro.comm.adasum_allreduce`) moves the
fewest bytes, but it takes 3 log2(n) dependent steps (an exchange and a statistics
allreduce per halving level, an exchange per gathering level), so for a small model its
time is all latency. Gathering every rank's buffer once costs one collective and (n-1) M
bytes per rank; each rank then applies the pairwise operator as the same binary tree in
rank order that `adasum_reduce` (and the halving allreduce) uses, per tensor, with the same
statistics and weighted-sum code. Every rank computes on identical data in identical order,
so all ranks end bit for bit equal, and equal to the reference.

Measured at 4 gloo ranks on 2 cores (`make bench`, adasum_allreduce; median of 15), the
tree one compiled call: 16-256 KB in 2-6 ms against 13-16 ms for the halving allreduce,
1 MB in 11 ms against 13-16; the two meet between 1 and 2 MB, and at 4 MB the gather is
twice as slow (40 ms against 18-20). Which path a run takes is `method.gather_below_kb`.
"""

from __future__ import annotations

import torch

from repro.comm.adasum_allreduce import (
    ZERO_NORM_SQ,
    adasum_pair_,
    check_world_size,
    kernels_serve,
)
from repro.comm.collectives import Collectives
from repro.comm.flat_layout import FlatLayout
from repro.comm.record import CommRecord


def tree_reduce_rows_(
    rows: torch.Tensor, layout: FlatLayout, zero_norm_sq: float = ZERO_NORM_SQ
) -> torch.Tensor:
    """Per-tensor Adasum of the rows of `rows` (one per rank) into row 0, in place.

    Level by level, row i takes Adasum(row i, row i + d) for d = 1, 2, 4, ...: the pairs
    (0,1), (2,3), ..., then pairs of those results, as `adasum_reduce` combines a list.
    On the CPU the whole tree is one compiled call (`repro.comm.adasum_kernels`), the
    same operations in the same order: the same bits.
    """
    if kernels_serve(rows):
        from repro.comm import adasum_kernels  # numba loads only when a CPU exchange runs

        adasum_kernels.tree_reduce_rows_(rows, layout.offsets, zero_norm_sq)
        return rows[0]
    n = rows.shape[0]
    d = 1
    while d < n:
        for i in range(0, n - d, 2 * d):
            for s, e in zip(layout.offsets[:-1], layout.offsets[1:], strict=True):
                adasum_pair_(rows[i, s:e], rows[i + d, s:e], zero_norm_sq)
        d *= 2
    return rows[0]


def adasum_gather_(
    buf: torch.Tensor, layout: FlatLayout, comm: Collectives, zero_norm_sq: float = ZERO_NORM_SQ
) -> list[CommRecord]:
    """The per-tensor Adasum of every worker's row of `buf` into `buf`, through one allgather.

    Same contract as `adasum_allreduce_`: `buf` holds one row per held worker, laid out by
    `layout` (padding zero), and every row holds the combined result on return. Every held
    worker gathers the same rows, so the tree runs once, on a copy of the first worker's.
    """
    check_world_size(comm.world_size)
    if buf.shape != (len(comm.ranks), layout.padded):
        raise ValueError(
            f"buffer of shape {tuple(buf.shape)} does not fit {len(comm.ranks)} rows of "
            f"{layout.padded} values"
        )
    gathered, rec = comm.allgather(buf[:, : layout.total])
    combined = tree_reduce_rows_(gathered[0].clone(), layout, zero_norm_sq)
    buf[:, : layout.total] = combined
    return [rec]
