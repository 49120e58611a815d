"""Fused CPU loops for Adasum's two per-element passes: the statistics and the weighted sum.

Adasum (Maleki et al., Eq. 6) needs, per tensor, (a.b, |a|^2, |b|^2) with products and sums
in float64, then a <- c_a a + c_b b. Written with torch ops on float32 inputs, each of these
is several passes over memory (upcast copies, then the products; a scale, then an add),
and on a CPU the Adasum allreduce is bound by exactly those passes: measured on 8M float32
elements, one thread, torch's cache-blocked Gram product took 12.5 ms and these loops 3.4 ms
for the statistics; 3.7 ms against 3.2 ms for the weighted sum. Each loop here reads every
element once, upcasts it in a register and keeps the accumulators in float64, so the
results are those of the float64 formulas (up to summation order), as Horovod's CPU Adasum
also accumulates in double in one loop.

numba compiles them on first use (cached on disk beside this file when it is writable, and
compiled again where that cache is damaged: `repro.compiled_loops`), so importing this
module costs nothing until an Adasum exchange runs on the CPU.
"""

from __future__ import annotations

import numpy as np
import torch

from repro.compiled_loops import njit

# "reassoc" lets LLVM split each float64 sum over several vector lanes (the speed); the sum
# order then differs from a sequential loop only at float64 rounding level.
_FAST = {"reassoc", "contract"}


@njit(fastmath=_FAST)
def _stats(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    ab = 0.0
    aa = 0.0
    bb = 0.0
    for i in range(a.shape[0]):
        x = np.float64(a[i])
        y = np.float64(b[i])
        ab += x * y
        aa += x * x
        bb += y * y
    return ab, aa, bb


# No "contract": the upper rank of a pair evaluates cb*b + ca*a where the reference (and the
# lower rank) evaluates ca*a + cb*b. Rounded products commute exactly under addition; a
# fused multiply-add would round the two orders differently, and Adasum magnifies that ulp
# when two deltas nearly cancel.
@njit()
def _scaled_add(own: np.ndarray, other: np.ndarray, c_own: float, c_other: float) -> None:
    for i in range(own.shape[0]):
        own[i] = c_own * np.float64(own[i]) + c_other * np.float64(other[i])


@njit()
def _tree(rows: np.ndarray, offsets: np.ndarray, zero_norm_sq: float) -> None:
    d = 1
    while d < rows.shape[0]:
        for i in range(0, rows.shape[0] - d, 2 * d):
            for t in range(offsets.shape[0] - 1):
                a = rows[i, offsets[t] : offsets[t + 1]]
                b = rows[i + d, offsets[t] : offsets[t + 1]]
                dot, a_sq, b_sq = _stats(a, b)
                # `pair_coefficients`' float64 operations, in its order
                ca = 1 - dot / (2 * a_sq) if a_sq >= zero_norm_sq else 1.0
                cb = 1 - dot / (2 * b_sq) if b_sq >= zero_norm_sq else 1.0
                _scaled_add(a, b, ca, cb)
        d *= 2


def dot_stats(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """(a.b, |a|^2, |b|^2) in float64 of two contiguous float32/float64 CPU vectors."""
    return torch.tensor(_stats(a.numpy(), b.numpy()), dtype=torch.float64)


def scaled_add_(own: torch.Tensor, other: torch.Tensor, c_own: float, c_other: float) -> None:
    """own <- c_own own + c_other other, evaluated in float64 and rounded once to own's dtype.

    A float64 evaluation cannot overflow on a weight beyond float32's range (a tiny input
    beside a large one) when the weighted term itself is representable.
    """
    _scaled_add(own.numpy(), other.numpy(), float(c_own), float(c_other))


def tree_reduce_rows_(rows: torch.Tensor, offsets: list[int], zero_norm_sq: float) -> None:
    """`repro.comm.adasum_gather.tree_reduce_rows_` in one compiled call: the same pairs in
    the same order, each tensor's statistics, coefficients and weighted sum as one
    `adasum_pair_` computes them. Per pair from Python, the calls' own cost was most of
    the tree: 31 pairs x 8 tensors for 32 workers of MNIST-1D's CNN."""
    _tree(rows.numpy(), np.asarray(offsets, dtype=np.int64), float(zero_norm_sq))
