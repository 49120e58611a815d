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
log2(n) levels every rank owns 1/n of the result, and one allgather returns the full vector.
Traffic per rank: a reduce-scatter's worth of sendrecv plus an allgather, plus 3 float64
scalars per tensor and level.

Only power-of-two world sizes are served, as in Horovod: the tree pairs rank r with r XOR L,
which has no partner otherwise.
"""

from __future__ import annotations

import torch

from repro.dist.collectives import Collectives, CommRecord
from repro.errors import UserError

# sqrt of the smallest normal float64: a squared norm below it is a zero vector for every
# practical purpose, and dividing by it would overflow or lose all precision.
ZERO_NORM_SQ = torch.finfo(torch.float64).tiny ** 0.5


def adasum_coefficients(
    dot: torch.Tensor, a_sq: torch.Tensor, b_sq: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The Adasum weights, elementwise over tensors (float64 in, float64 out).

    Adasum(a, b) = (1 - a.b / (2|a|^2)) a + (1 - a.b / (2|b|^2)) b; a weight stays 1 where
    its vector's squared norm is (numerically) zero, so a zero input leaves the other as is.
    Shared by the reference operator and the distributed allreduce so both weigh alike.
    """
    one = torch.ones_like(dot)
    ca = torch.where(a_sq >= ZERO_NORM_SQ, 1 - dot / (2 * a_sq), one)
    cb = torch.where(b_sq >= ZERO_NORM_SQ, 1 - dot / (2 * b_sq), one)
    return ca, cb


def check_world_size(world_size: int) -> None:
    """Refuse worker counts the halving tree cannot serve."""
    if world_size < 1 or world_size & (world_size - 1):
        raise UserError(
            f"Adasum needs a power-of-two number of workers (1, 2, 4, 8, ...), got "
            f"{world_size}; change the worker count or use method.combiner=sum|mean"
        )


def _bit_reverse(x: int, bits: int) -> int:
    return int(format(x, f"0{bits}b")[::-1], 2) if bits else 0


class _Layout:
    """Where each tensor lives in the padded flat buffer, and a tensor id per element."""

    def __init__(self, tensors: list[torch.Tensor], world_size: int):
        self.shapes = [t.shape for t in tensors]
        self.sizes = [t.numel() for t in tensors]
        self.total = sum(self.sizes)
        self.padded = -(-self.total // world_size) * world_size
        device = tensors[0].device
        counts = torch.tensor([*self.sizes, self.padded - self.total], device=device)
        # Padding gets id len(tensors): a bucket whose statistics are dropped.
        self.ids = torch.repeat_interleave(torch.arange(len(tensors) + 1, device=device), counts)

    def flatten(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        buf = torch.zeros(self.padded, dtype=tensors[0].dtype, device=tensors[0].device)
        torch.cat([t.detach().reshape(-1) for t in tensors], out=buf[: self.total])
        return buf

    def unflatten(self, buf: torch.Tensor) -> list[torch.Tensor]:
        parts = buf[: self.total].split(self.sizes)
        return [p.view(shape).clone() for p, shape in zip(parts, self.shapes, strict=True)]


def _combine_slice(
    a: torch.Tensor, b: torch.Tensor, ids: torch.Tensor, n_tensors: int, group: Collectives
) -> tuple[torch.Tensor, CommRecord]:
    """Adasum of a and b on one slice, with coefficients from the whole group's statistics."""
    a64, b64 = a.double(), b.double()
    stats = torch.zeros(3, n_tensors + 1, dtype=torch.float64, device=a.device)
    stats[0].index_add_(0, ids, a64 * b64)
    stats[1].index_add_(0, ids, a64 * a64)
    stats[2].index_add_(0, ids, b64 * b64)
    totals = stats[:, :n_tensors].contiguous()
    rec = group.allreduce(totals)
    ca, cb = adasum_coefficients(totals[0], totals[1], totals[2])
    one = torch.ones(1, dtype=torch.float64, device=a.device)
    ca_elem = torch.cat((ca, one))[ids]
    cb_elem = torch.cat((cb, one))[ids]
    return (a64 * ca_elem + b64 * cb_elem).to(a.dtype), rec


def _level_group(comm: Collectives, level: int) -> Collectives:
    """The aligned block of 2*level ranks whose slices together cover the whole vector."""
    width = 2 * level
    if width == comm.world_size:
        return comm
    return comm.split([list(range(s, s + width)) for s in range(0, comm.world_size, width)])


def adasum_allreduce(
    tensors: list[torch.Tensor], comm: Collectives
) -> tuple[list[torch.Tensor], list[CommRecord]]:
    """Per-tensor Adasum of every rank's `tensors` over `comm`; all ranks get the same result.

    The tensors must share one dtype and device. Returns new tensors (the inputs are left
    untouched) and the records of every collective used.
    """
    n, rank = comm.world_size, comm.rank
    check_world_size(n)
    if not tensors:
        raise ValueError("adasum_allreduce needs at least one tensor")
    if len({(t.dtype, t.device) for t in tensors}) != 1:
        raise ValueError("adasum_allreduce needs tensors of one dtype on one device")
    if n == 1:
        return [t.detach().clone() for t in tensors], []

    layout = _Layout(tensors, n)
    buf = layout.flatten(tensors)
    records: list[CommRecord] = []
    lo, hi, level = 0, layout.padded, 1
    while level < n:
        mid = (lo + hi) // 2
        lower = rank & level == 0
        (klo, khi), (glo, ghi) = ((lo, mid), (mid, hi)) if lower else ((mid, hi), (lo, mid))
        recv, rec = comm.sendrecv(buf[glo:ghi], rank ^ level)
        records.append(rec)
        own = buf[klo:khi]
        a, b = (own, recv) if lower else (recv, own)
        combined, rec = _combine_slice(
            a, b, layout.ids[klo:khi], len(tensors), _level_group(comm, level)
        )
        records.append(rec)
        buf[klo:khi] = combined
        lo, hi, level = klo, khi, level * 2

    gathered, rec = comm.allgather(buf[lo:hi])
    records.append(rec)
    # Rank r's bits, lowest first, chose left/right at each level, so its slice sits at
    # position bit_reverse(r); the permutation is its own inverse.
    bits = n.bit_length() - 1
    order = torch.tensor([_bit_reverse(p, bits) for p in range(n)], device=buf.device)
    return layout.unflatten(gathered[order].reshape(-1)), records
