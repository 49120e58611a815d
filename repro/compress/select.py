"""Exact Top-k selection by magnitude without sorting: a radix select on the floats' bits.

Flexible Top-k (Tyagi & Swany 2023, Algorithm 1) keeps each worker's k entries of largest
magnitude. `torch.topk` finds them with a partial sort whose cost grows with k: over 8 rows
of 271,224 float32 values on one CPU thread it took 3.2 ms at k = 271 (c = 0.001) and about
25 ms at k = 27,122 (c = 0.1), more than the whole dense training step. Which entries are
kept needs no order among them, only the k-th largest magnitude: the threshold.

The threshold is found by a radix select. With the sign bit cleared, a float's bits read as
a signed integer order exactly as its magnitude does (NaN above infinity, as `torch.topk`
ranks it), so the k-th largest magnitude is the k-th largest such integer, found 16 bits at
a time: a histogram of the top 16 bits locates the bucket holding it, a histogram of the
next 16 bits among that bucket's members narrows it further, and so on (2 passes for
float32, 4 for float64). A last pass writes out every index above the threshold and enough
indices equal to it, in index order. Cost: a few passes over the row, whatever k is.

Ties. Which of several equal magnitudes `torch.topk` keeps at the threshold is unspecified;
here it is always the lowest indices: the selected set is the first k of the row ordered by
(magnitude descending, index ascending), a stable sort's first k. Without ties at the
threshold the set is exactly `torch.topk`'s. Both paths below follow that rule: the compiled
loops on CPU float32/float64, and anywhere else (CUDA, half precision) `torch.topk`'s
threshold with the same tie rule applied. Indices come back in ascending order; nothing
downstream depends on the order of the selected entries.

The compiled loops are numba's, compiled on first use and cached beside this file, as
Adasum's fused loops are (`repro.comm.adasum_kernels`; a damaged cache is compiled again,
`repro.compiled_loops`). The selected positions are also where error feedback zeroes G
once they went out (`zero_selected`) and where AG-Topk adds every worker's values
(`add_selected`), by compiled loops too (`repro.compress.position_kernels`).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

import torch

_INT_VIEWS = {torch.float32: torch.int32, torch.float64: torch.int64}
_KEY_VIEWS = {**_INT_VIEWS, torch.float16: torch.int16, torch.bfloat16: torch.int16}


def topk_indices(x: torch.Tensor, ks: Sequence[int], sizes: Sequence[int]) -> torch.Tensor:
    """Indices of each row's largest magnitudes, per segment: (rows, sum(ks)), int64
    (`topk_entries`' indices)."""
    return topk_entries(x, ks, sizes)[1]


def topk_entries(
    x: torch.Tensor, ks: Sequence[int], sizes: Sequence[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's largest magnitudes, per segment: (values, indices), both (rows, sum(ks)),
    the values x's entries at the indices bit for bit, the indices int64.

    The row is cut into consecutive segments of `sizes` (one segment of the whole row for
    whole-model Top-k, one per tensor for layer-wise); segment j keeps its `ks[j]` entries
    of largest |x| (0 keeps none). Indices are positions in the row, ascending; ties at a
    segment's threshold go to the lowest indices (module doc). The compiled loops write each
    value as they write its index, while the row is still in cache: a separate gather of
    AG-Topk's 8 x 27,119 values at c = 0.1 took 1.2 ms of a training step, reading the
    8.7 MB of G again.
    """
    if x.dim() != 2 or sum(sizes) != x.shape[1] or len(ks) != len(sizes):
        raise ValueError(f"segments {list(sizes)} with ks {list(ks)} do not fit rows {x.shape}")
    if any(not 0 <= k <= size for k, size in zip(ks, sizes, strict=True)):
        raise ValueError(f"every k must lie in [0, its segment's size]: ks {list(ks)}")
    kernels = _compiled(x, writes=False)
    if kernels is not None:
        starts = torch.tensor([0, *sizes], dtype=torch.int64).cumsum(0)
        out = torch.empty(x.shape[0], sum(ks), dtype=torch.int64)
        values = torch.empty(x.shape[0], sum(ks), dtype=x.dtype)
        bits = x.detach().contiguous().view(_INT_VIEWS[x.dtype])
        kept = values.view(_INT_VIEWS[x.dtype]).numpy()
        kernels.select_rows(bits.numpy(), starts.numpy(), list(ks), out.numpy(), kept)
        return values, out
    indices = _by_torch(x, ks, sizes)
    return x.gather(1, indices), indices


def zero_selected(
    x: torch.Tensor, indices: torch.Tensor, taken: torch.Tensor | None = None
) -> None:
    """Zero each row of x (rows, n) at its `indices` (rows, k), in place: error feedback's
    residual once the selected entries went out (`repro.compress.memory`). One index row
    expanded over the rows (stride 0: AR-Topk's leader positions) zeroes the same positions
    in every row. `taken` (rows, k): each entry is first copied there, x[r, indices[r, j]]
    to taken[r, j] (AR-Topk's message, taken and zeroed in one visit of G).

    On the CPU a compiled loop writes the zeros: for 8 rows of 27,119 positions (AG-Topk at
    c = 0.1 on `cnn1d_wide`) in a buffer still in cache, torch's `scatter_` took 0.65 ms and
    the loop 0.12 ms, and such a training step took 0.65 ms less. Elsewhere torch's
    `gather` and `scatter_`. Both write the same values and zeros, and both refuse a
    position outside the rows.
    """
    shared = indices.shape[0] > 1 and indices.stride(0) == 0
    rows = indices[:1] if shared else indices
    kernels = _compiled(x, writes=True)
    if kernels is not None:
        into = x.new_empty(0, 0) if taken is None else taken
        kernels.zero_rows_at(x.detach().numpy(), rows.long().contiguous().numpy(), into.numpy())
        return
    every = rows.long().expand(x.shape[0], -1)
    if taken is not None:
        taken.copy_(x.gather(1, every))
    x.scatter_(1, every, 0.0)


def add_selected(total: torch.Tensor, indices: torch.Tensor, values: torch.Tensor) -> None:
    """total[indices[r, j]] += values[r, j] in place, row after row (AG-Topk's sum of every
    worker's sparse vector): `index_add_`'s sums over the flattened rows, bit for bit, as
    the compiled loop adds in the same order. `indices` may be of any integer type and both
    may be strided views (the gathered message's columns): the loop reads them there, where
    `index_add_` wanted them copied out contiguous and widened to int64 first (on a c = 0.1
    step, 0.9 ms for the copies and the sum; the loop takes about half).
    """
    kernels = _compiled(total, writes=True)
    if kernels is not None:
        kernels.add_rows_at(total.numpy(), indices.numpy(), values.detach().numpy())
    else:
        total.index_add_(0, indices.reshape(-1).long(), values.reshape(-1))


def _compiled(x: torch.Tensor, writes: bool) -> ModuleType | None:
    """The compiled loops where they serve `x` (a CPU float32 or float64 tensor, contiguous
    where they write into it), loaded on the first call: numba loads only when a selection
    runs. None: torch's own ops serve it (CUDA, half precision, a strided view)."""
    if x.device.type != "cpu" or x.dtype not in _INT_VIEWS or (writes and not x.is_contiguous()):
        return None
    # both at once: their loads are one moment of a run (`select_kernels._load_all`)
    from repro.compress import position_kernels, select_kernels

    return position_kernels if writes else select_kernels


def _by_torch(x: torch.Tensor, ks: Sequence[int], sizes: Sequence[int]) -> torch.Tensor:
    """The same selection from `torch.topk`'s k-th largest magnitude: everything above it,
    then the lowest-indexed entries equal to it. The magnitudes are ranked as the compiled
    loops rank them, by the floats' bits with the sign cleared, read as integers (NaN above
    infinity): compared as floats, a NaN equals no threshold and was neither above nor tied,
    and the selection came out short of k (a RuntimeError on a GPU's NaN gradient)."""
    keys = x.detach().contiguous().view(_KEY_VIEWS[x.dtype])
    keys = keys & torch.iinfo(keys.dtype).max
    parts = []
    offset = 0
    for k, size in zip(ks, sizes, strict=True):
        if k:
            mag = keys[:, offset : offset + size]
            threshold = torch.topk(mag, k, dim=1, sorted=True).values[:, -1:]
            above = mag > threshold
            tied = mag == threshold
            need = k - above.sum(1, keepdim=True)
            keep = above | (tied & (tied.cumsum(1) <= need))
            parts.append(keep.nonzero()[:, 1].view(x.shape[0], k) + offset)
        offset += size
    if not parts:
        return torch.empty(x.shape[0], 0, dtype=torch.int64, device=x.device)
    return torch.cat(parts, dim=1)
