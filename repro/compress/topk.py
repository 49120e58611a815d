"""Top-k sparsification of a flat gradient vector: pure tensor code, no communication.

Flexible Top-k (Tyagi & Swany 2023, Algorithm 1) compresses the whole model's gradient,
flattened into one vector, by keeping the k = c * size entries of largest magnitude. The
paper's Allgather baseline is layer-wise Top-k (each tensor compressed on its own). Its
per-tensor counts are the authors' and GRACE's, k = max(1, int(numel * c)) for every tensor
(`per_tensor_ks`), so each tensor, however small, is updated every step and the total can
exceed c * size by up to one entry per tensor. An exact-budget split (`layer_ks`: the
model's k shared by largest remainder, as many bytes as whole-model Top-k, a small tensor's
share possibly 0) is kept as an option.

Vectors carry the leading worker axis: x is (workers, size) and each row is compressed on
its own. Indices are positions in a row (int64, ready for indexing); the exchanges narrow
them to the values' width for the wire.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from repro.compress.select import topk_indices


def k_for(numel: int, cr: float) -> int:
    """Entries kept out of `numel` at ratio `cr`: floor(cr * numel), at least 1, at most numel."""
    if numel < 1:
        raise ValueError(f"cannot compress an empty vector (numel={numel})")
    if not 0 < cr <= 1:
        raise ValueError(f"compression ratio cr={cr} must be in (0, 1]")
    return min(numel, max(1, int(cr * numel)))


def per_tensor_ks(layer_sizes: Sequence[int], cr: float) -> list[int]:
    """Layer-wise Top-k's entries per tensor in the authors' baseline and GRACE:
    max(1, int(numel * cr)) for each tensor, so no tensor is left out of any step."""
    return [k_for(size, cr) for size in layer_sizes]


def layer_shares(layer_sizes: Sequence[int], cr: float, split: str) -> list[int]:
    """Entries kept per tensor at ratio `cr` by `split` (`method.layer_split`):
    "per_tensor" (`per_tensor_ks`, the authors') or "exact_budget" (`layer_ks` of the
    whole model's k_for(size, cr))."""
    if split == "per_tensor":
        return per_tensor_ks(layer_sizes, cr)
    if split == "exact_budget":
        return layer_ks(layer_sizes, k_for(sum(layer_sizes), cr))
    raise ValueError(f"layer split {split!r} is neither 'per_tensor' nor 'exact_budget'")


def layer_ks(layer_sizes: Sequence[int], k: int) -> list[int]:
    """Split `k` over tensors in proportion to their sizes, summing to exactly `k`.

    Largest-remainder rounding: every tensor gets floor(k * size / total), and the entries
    left over go to the tensors with the largest fractional parts (earlier tensors first on
    ties). A tensor's share can be 0 when k is small.
    """
    total = sum(layer_sizes)
    if not 1 <= k <= total:
        raise ValueError(f"k={k} must be in [1, {total}] for layers of {total} entries")
    shares = [k * size // total for size in layer_sizes]
    remainders = [(k * size) % total for size in layer_sizes]
    # The remainders sum to (k - sum(shares)) * total and each is below total, so at least
    # that many tensors have a non-zero remainder, hence a share below their size.
    order = sorted(range(len(layer_sizes)), key=lambda i: -remainders[i])
    for i in order[: k - sum(shares)]:
        shares[i] += 1
    return shares


def compress(
    x: torch.Tensor,
    k: int,
    layer_sizes: Sequence[int] | None = None,
    shares: Sequence[int] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's `k` entries of largest magnitude: (values, indices), both (workers, k).

    With `layer_sizes` (the sizes of consecutive tensors making up a row), each tensor keeps
    its own count, selected within that tensor: `shares` (one per tensor, summing to k), or
    by default its `layer_ks` share of k.
    """
    if x.dim() != 2:
        raise ValueError(f"compress expects (workers, size) rows, got shape {tuple(x.shape)}")
    if layer_sizes is None:
        indices = topk_indices(x, [k], [x.shape[1]])
        return x.gather(1, indices), indices
    if sum(layer_sizes) != x.shape[1]:
        raise ValueError(f"layer sizes sum to {sum(layer_sizes)}, the rows have {x.shape[1]}")
    if shares is None:
        shares = layer_ks(layer_sizes, k)
    elif len(shares) != len(layer_sizes) or sum(shares) != k:
        raise ValueError(f"{len(shares)} shares summing to {sum(shares)} do not split k={k}")
    indices = topk_indices(x, shares, layer_sizes)
    return x.gather(1, indices), indices


def decompress(values: torch.Tensor, indices: torch.Tensor, numel: int) -> torch.Tensor:
    """Rows of `numel` zeros holding each row's `values` at its `indices`."""
    dense = torch.zeros(values.shape[0], numel, dtype=values.dtype, device=values.device)
    return dense.scatter_(1, indices, values)
