"""The Adasum operator as a pure single-process reference (Maleki et al., MLSys 2021, Sec. 3).

Adasum(a, b) = (1 - a.b / (2|a|^2)) a + (1 - a.b / (2|b|^2)) b: orthogonal inputs are summed,
parallel inputs (any magnitudes) averaged. Dot products and squared norms are taken in
float64 so that float32 inputs near the smallest normal float neither underflow nor lose
their direction; the weighted sum is evaluated in float64 and rounded once on the CPU (in
the input dtype elsewhere, unless a weight exceeds that dtype's range). These pieces are
shared with the distributed allreduce, so the two differ only in the order of their float64
sums.

n inputs are combined as a binary tree in rank order, the order the vector-halving
distance-doubling allreduce (`repro.comm.adasum_allreduce`) produces for n = 2^k. This
reference is what that allreduce is tested against.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from repro.comm.adasum_rules import ZERO_NORM_SQ

if TYPE_CHECKING:
    import torch


def adasum_pair(
    a: torch.Tensor, b: torch.Tensor, zero_norm_sq: float = ZERO_NORM_SQ
) -> torch.Tensor:
    """Adasum of two same-shaped, same-dtype tensors, treated as flat vectors.

    A coefficient stays 1 where its input's squared norm is below `zero_norm_sq`
    (`repro.comm.adasum_rules.ZERO_NORM_GUARDS`)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        raise ValueError(
            f"adasum_pair needs equal shapes and dtypes, got {tuple(a.shape)} {a.dtype} "
            f"and {tuple(b.shape)} {b.dtype}"
        )
    # imported here: method discovery imports this module, which must not load torch
    from repro.comm.adasum_allreduce import adasum_pair_

    out = a.detach().reshape(-1).clone()
    return adasum_pair_(out, b.detach().reshape(-1), zero_norm_sq).view(a.shape)


def adasum_reduce(tensors: list[torch.Tensor], zero_norm_sq: float = ZERO_NORM_SQ) -> torch.Tensor:
    """Adasum of all `tensors` as a binary tree: (0,1), (2,3), ..., then pairs of results.

    For 2^k inputs this is Adasum(Adasum(g[0:n/2]), Adasum(g[n/2:n])) at every depth. For
    other counts an unpaired last entry moves up a level unchanged (the distributed
    allreduce refuses such counts; this keeps the reference total).
    """
    if not tensors:
        raise ValueError("adasum_reduce needs at least one tensor")
    if len(tensors) == 1:
        return tensors[0].detach().clone()
    level = list(tensors)
    while len(level) > 1:
        paired = [
            adasum_pair(level[i], level[i + 1], zero_norm_sq) for i in range(0, len(level) - 1, 2)
        ]
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    return level[0]


def adasum_per_tensor(
    states: list[list[torch.Tensor]], zero_norm_sq: float = ZERO_NORM_SQ
) -> list[torch.Tensor]:
    """Per-layer Adasum over workers: `states[w][i]` is worker w's tensor for layer i.

    The paper applies the operator to each layer separately, so every layer gets its own
    coefficients rather than one pair of coefficients for the whole model.
    """
    if not states:
        raise ValueError("adasum_per_tensor needs at least one worker's tensors")
    n_layers = len(states[0])
    if any(len(s) != n_layers for s in states):
        raise ValueError("adasum_per_tensor needs the same number of tensors from every worker")
    return [adasum_reduce([s[i] for s in states], zero_norm_sq) for i in range(n_layers)]
