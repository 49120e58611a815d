"""Adasum allreduce by vector halving, distance doubling (Maleki et al., MLSys 2021; Horovod).

Every rank contributes one list of tensors (one per layer) and ends with the per-tensor
Adasum of all ranks' lists, combined as the binary tree in rank order: pairs (0,1), (2,3),
..., then pairs of those results, which is what level L = 1, 2, 4, ... below produces.

The lists are flattened into one buffer, zero-padded to a multiple of the world size so that
every halving is exact. At level L each rank swaps half of its current slice with rank XOR L
(the lower rank keeps the left half), so the pair holds, on complementary halves, the
Adasum inputs a (from ranks below the split) and b (above it). Per tensor, the partial
(a.b, |a|^2, |b|^2) of the slice in float64 is summed over the aligned group of 2L ranks that
together cover the whole vector, giving each rank the exact per-tensor coefficients. After
log2(n) levels every rank owns 1/n of the result; the same exchanges in reverse order
(distance halving) return the full vector. Traffic per rank: a reduce-scatter's worth of
sendrecv, an allgather's worth back, and 3 float64 scalars per tensor and level. (gloo's
allgather measured several times slower than these exchanges here, hence sendrecv.)

Only power-of-two world sizes are served, as in Horovod: the tree pairs rank r with r XOR L,
which has no partner otherwise.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from repro.comm.adasum_rules import ADASUM_STATS_ALGO, ZERO_NORM_SQ, check_world_size
from repro.comm.collectives import Collectives
from repro.comm.flat_layout import FlatLayout
from repro.comm.record import CommRecord


def adasum_coefficients(
    dot: torch.Tensor, a_sq: torch.Tensor, b_sq: torch.Tensor, zero_norm_sq: float = ZERO_NORM_SQ
) -> tuple[torch.Tensor, torch.Tensor]:
    """The Adasum weights, elementwise over tensors (float64 in, float64 out).

    Adasum(a, b) = (1 - a.b / (2|a|^2)) a + (1 - a.b / (2|b|^2)) b; a weight stays 1 where
    its vector's squared norm is below `zero_norm_sq` (`ZERO_NORM_GUARDS`), so a zero input
    leaves the other as is, and two inputs both below it are summed. Shared by the reference
    operator, the gathering path and the distributed allreduce so all weigh alike.
    """
    one = torch.ones_like(dot)
    ca = torch.where(a_sq >= zero_norm_sq, 1 - dot / (2 * a_sq), one)
    cb = torch.where(b_sq >= zero_norm_sq, 1 - dot / (2 * b_sq), one)
    return ca, cb


def dot_stats(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(a.b, |a|^2, |b|^2) of two flat vectors, products and sums in float64.

    Float64 products keep float32 inputs near the smallest normal float from underflowing.
    On the CPU one fused pass (`repro.comm.adasum_kernels`); elsewhere (CUDA, half
    precision) torch upcasts and takes three dot products.
    """
    if kernels_serve(a, b):
        from repro.comm import adasum_kernels  # numba loads only when a CPU exchange runs

        return adasum_kernels.dot_stats(a, b)
    a64, b64 = a.double(), b.double()
    return torch.stack((torch.dot(a64, b64), torch.dot(a64, a64), torch.dot(b64, b64)))


def scaled_add_(own: torch.Tensor, other: torch.Tensor, c_own: float, c_other: float):
    """own <- c_own * own + c_other * other, in place; returns own.

    On the CPU, evaluated in float64 and rounded once (`repro.comm.adasum_kernels`).
    Elsewhere in own's dtype unless a weight exceeds its range (possible when one input is
    tiny next to the other, though the weighted term stays bounded by |other|); then in
    float64, rounded once.
    """
    if kernels_serve(own, other):
        from repro.comm import adasum_kernels

        adasum_kernels.scaled_add_(own, other, c_own, c_other)
        return own
    limit = torch.finfo(own.dtype).max
    if abs(c_own) <= limit and abs(c_other) <= limit:
        return own.mul_(c_own).add_(other, alpha=c_other)
    return own.copy_(own.double() * c_own + other.double() * c_other)


def adasum_pair_(
    a: torch.Tensor, b: torch.Tensor, zero_norm_sq: float = ZERO_NORM_SQ
) -> torch.Tensor:
    """a <- Adasum(a, b) in place, for two flat vectors of one dtype; returns a.

    The single-process form of the operator, shared by the reference and the gather path
    so that both weigh alike.
    """
    dot, a_sq, b_sq = dot_stats(a, b).tolist()
    ca, cb = pair_coefficients(dot, a_sq, b_sq, zero_norm_sq)
    return scaled_add_(a, b, ca, cb)


def pair_coefficients(
    dot: float, a_sq: float, b_sq: float, zero_norm_sq: float = ZERO_NORM_SQ
) -> tuple[float, float]:
    """`adasum_coefficients` of one pair, in Python floats: the same float64 operations in
    the same order, so the same bits, without a dozen tensor operations on 0-d tensors
    (70 us a pair, most of a 32-worker gather tree's 31 pairs x 8 tensors)."""
    ca = 1 - dot / (2 * a_sq) if a_sq >= zero_norm_sq else 1.0
    cb = 1 - dot / (2 * b_sq) if b_sq >= zero_norm_sq else 1.0
    return ca, cb


def kernels_serve(*tensors: torch.Tensor) -> bool:
    """Contiguous float32/float64 CPU tensors take the fused loops."""
    return all(
        t.device.type == "cpu" and t.dtype in (torch.float32, torch.float64) and t.is_contiguous()
        for t in tensors
    )


def _row_slices(buf: torch.Tensor, starts: list[int], size: int) -> torch.Tensor:
    """Row i's slice [starts[i], starts[i] + size) of every row, as one (rows, size) tensor:
    a view of `buf` when it holds one row, a copy when the rows' slices differ in place."""
    if buf.shape[0] == 1:
        return buf[:, starts[0] : starts[0] + size]
    return torch.stack([buf[i, s : s + size] for i, s in enumerate(starts)])


def _exchange_into(
    comm: Collectives,
    buf: torch.Tensor,
    send_starts: list[int],
    recv_starts: list[int],
    size: int,
    peers: list[int],
) -> CommRecord:
    """Send each row's slice at send_starts, receive the partner's into recv_starts."""
    send = _row_slices(buf, send_starts, size)
    if buf.shape[0] == 1:
        return comm.sendrecv(send, peers, out=_row_slices(buf, recv_starts, size))[1]
    recv, rec = comm.sendrecv(send, peers)
    for i, s in enumerate(recv_starts):
        buf[i, s : s + size] = recv[i]
    return rec


def _combine_slices(
    buf: torch.Tensor,
    recv: torch.Tensor,
    lowers: list[bool],
    starts: list[int],
    layout: FlatLayout,
    group: Collectives,
    zero_norm_sq: float,
) -> CommRecord:
    """Adasum of each row's kept slice (at starts[i]) and the received one, in place, per
    tensor.

    The coefficients come from the whole group's statistics: each worker adds its slice's
    partial (a.b, |a|^2, |b|^2) per tensor, zeros for tensors outside its slice. The record
    carries `ADASUM_STATS_ALGO`, the algorithm `repro.netmodel.cost.adasum_vhdd` charges.
    """
    size = recv.shape[1]
    rows = buf.shape[0]
    stats = torch.zeros(rows, 3, len(layout.sizes), dtype=torch.float64, device=buf.device)
    pieces = [layout.segments(lo, lo + size) for lo in starts]
    for i, (lo, lower) in enumerate(zip(starts, lowers, strict=True)):
        own, other = buf[i, lo : lo + size], recv[i]
        a, b = (own, other) if lower else (other, own)
        for t, s, e in pieces[i]:
            stats[i, :, t] = dot_stats(a[s - lo : e - lo], b[s - lo : e - lo])
    rec = replace(group.allreduce(stats), algo=ADASUM_STATS_ALGO)
    for i, (lo, lower) in enumerate(zip(starts, lowers, strict=True)):
        own, other = buf[i, lo : lo + size], recv[i]
        coefficients = adasum_coefficients(stats[i, 0], stats[i, 1], stats[i, 2], zero_norm_sq)
        ca, cb = (c.tolist() for c in coefficients)
        for t, s, e in pieces[i]:
            c_own, c_other = (ca[t], cb[t]) if lower else (cb[t], ca[t])
            scaled_add_(own[s - lo : e - lo], other[s - lo : e - lo], c_own, c_other)
    return rec


def _level_group(comm: Collectives, level: int) -> Collectives:
    """The aligned blocks of 2*level ranks whose slices together cover the whole vector."""
    width = 2 * level
    if width == comm.world_size:
        return comm
    return comm.split([list(range(s, s + width)) for s in range(0, comm.world_size, width)])


def adasum_allreduce(
    tensors: list[torch.Tensor], comm: Collectives, zero_norm_sq: float = ZERO_NORM_SQ
) -> tuple[list[torch.Tensor], list[CommRecord]]:
    """Per-tensor Adasum of every worker's `tensors` (axis tensors, one row per held worker)
    over `comm`; every worker gets the same result. `zero_norm_sq`: see `adasum_coefficients`.

    The tensors must share one dtype and device. Returns new tensors (views into one fresh
    buffer; the inputs are left untouched) and the records of every collective used.
    """
    check_world_size(comm.world_size)
    if not tensors:
        raise ValueError("adasum_allreduce needs at least one tensor")
    if len({(t.dtype, t.device) for t in tensors}) != 1:
        raise ValueError("adasum_allreduce needs tensors of one dtype on one device")
    if comm.world_size == 1:
        return [t.detach().clone() for t in tensors], []
    layout = FlatLayout([t[0] for t in tensors], comm.world_size)
    buf = layout.flatten(tensors)
    return layout.unflatten(buf), adasum_allreduce_(buf, layout, comm, zero_norm_sq)


def adasum_allreduce_(
    buf: torch.Tensor, layout: FlatLayout, comm: Collectives, zero_norm_sq: float = ZERO_NORM_SQ
) -> list[CommRecord]:
    """The allreduce in place on (rows, padded) buffers laid out by `layout` (padding zero).

    Returns the records of every collective used. On return every row of every worker's
    `buf` holds the per-tensor Adasum of all workers' rows.
    """
    n = comm.world_size
    check_world_size(n)
    if buf.shape != (len(comm.ranks), layout.padded):
        raise ValueError(
            f"buffer of shape {tuple(buf.shape)} does not fit {len(comm.ranks)} rows of "
            f"{layout.padded} values"
        )
    records: list[CommRecord] = []
    # Each row's kept slice start per level; the gather phase walks them back.
    halvings: list[tuple[list[int], list[int], int]] = []
    scratch = layout.receive_buffer(buf)
    rows = buf.shape[0]
    starts, size, level = [0] * rows, layout.padded, 1
    while level < n:
        size //= 2
        lowers = [r & level == 0 for r in comm.ranks]
        kept = [lo if lower else lo + size for lo, lower in zip(starts, lowers, strict=True)]
        given = [lo + size if lower else lo for lo, lower in zip(starts, lowers, strict=True)]
        peers = [r ^ level for r in comm.ranks]
        send = _row_slices(buf, given, size)
        recv, rec = comm.sendrecv(send, peers, out=scratch[: rows * size].view(rows, size))
        records.append(rec)
        group = _level_group(comm, level)
        records.append(_combine_slices(buf, recv, lowers, kept, layout, group, zero_norm_sq))
        halvings.append((kept, given, size))
        starts, level = kept, level * 2

    # Distance halving: each exchange hands the partner the finished half it lacks.
    for kept, given, size in reversed(halvings):
        level //= 2
        peers = [r ^ level for r in comm.ranks]
        records.append(_exchange_into(comm, buf, kept, given, size, peers))
    return records
