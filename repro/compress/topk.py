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
its own. Indices are positions in a row (int64, ready for indexing); on the wire they are
narrowed to the values' width (int32 beside float32, int64 beside float64), the byte count
the paper's cost formulas assume (values and indices the same size).

As parts (`repro.compress.compressor`): `TopK` is the configured compressor, `TopKAt` Top-k
at one k, a sparsifier that an allgather (every worker's own indices) or AR-Topk's leader
exchange carries; at c = 1 nothing is compressed and `TopK` hands the dense compressor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from repro.compress.compressor import DENSE, Dense, Encoded
from repro.compress.memory import sq_norms
from repro.compress.select import add_selected, topk_entries

_INDEX_DTYPES = {4: torch.int32, 8: torch.int64}


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
        return topk_entries(x, [k], [x.shape[1]])
    if sum(layer_sizes) != x.shape[1]:
        raise ValueError(f"layer sizes sum to {sum(layer_sizes)}, the rows have {x.shape[1]}")
    if shares is None:
        shares = layer_ks(layer_sizes, k)
    elif len(shares) != len(layer_sizes) or sum(shares) != k:
        raise ValueError(f"{len(shares)} shares summing to {sum(shares)} do not split k={k}")
    return topk_entries(x, shares, layer_sizes)


def decompress(values: torch.Tensor, indices: torch.Tensor, numel: int) -> torch.Tensor:
    """Rows of `numel` zeros holding each row's `values` at its `indices`."""
    dense = torch.zeros(values.shape[0], numel, dtype=values.dtype, device=values.device)
    return dense.scatter_(1, indices, values)


def index_dtype(x: torch.Tensor) -> torch.dtype:
    """The integer type of x's width that carries indices into x's rows on the wire."""
    width = x.element_size()
    if width not in _INDEX_DTYPES or not x.is_floating_point():
        raise ValueError(f"Top-k exchange supports float32 or float64 gradients, got {x.dtype}")
    if x.numel() > torch.iinfo(_INDEX_DTYPES[width]).max:
        raise ValueError(f"{x.numel()} entries do not fit indices of {_INDEX_DTYPES[width]}")
    return _INDEX_DTYPES[width]


class TopKAt:
    """Top-k at one k (layer-wise with `layer_sizes` and `shares`): a sparsifier.

    Its allgather payload is each row's values and, bit for bit in the values' dtype, their
    indices, so (values, indices) is one allgather as in the paper's single-allgather cost.
    """

    def __init__(
        self,
        k: int,
        layer_sizes: Sequence[int] | None = None,
        shares: Sequence[int] | None = None,
    ):
        self.k, self.layer_sizes, self.shares = k, layer_sizes, shares

    def select(self, x: torch.Tensor) -> torch.Tensor:
        return compress(x, self.k, self.layer_sizes, self.shares)[1]

    def encode(self, x: torch.Tensor) -> Encoded:
        idx_dtype = index_dtype(x)
        values, indices = compress(x, self.k, self.layer_sizes, self.shares)
        payload = [values, indices.to(idx_dtype).view(values.dtype)]
        return Encoded(payload, sent=indices, sent_sq=sq_norms(values))

    def combine(self, rows: torch.Tensor, workers: int, numel: int) -> torch.Tensor:
        """The sum of every worker's sparse vector, divided by the workers."""
        k = self.k
        indices = rows[:, k : 2 * k].view(_INDEX_DTYPES[rows.element_size()])
        total = torch.zeros(numel, dtype=rows.dtype, device=rows.device)
        add_selected(total, indices, rows[:, :k])
        return total.div_(workers)


class TopK:
    """Flexible Top-k's compressor: whole-model Top-k, or layer-wise (`layer_split`:
    "per_tensor", the authors' and GRACE's, or "exact_budget"), at the ratio of each
    exchange."""

    def __init__(self, layerwise: bool = False, layer_split: str = "per_tensor"):
        self.layerwise, self.layer_split = layerwise, layer_split
        self.sizes: list[int] = []

    def bind(self, shapes: list[tuple[int, ...]]) -> None:
        self.sizes = [math.prod(s) for s in shapes]
        self.numel = sum(self.sizes)

    def ks(self, cr: float) -> tuple[int, list[int] | None]:
        """Entries kept per worker at ratio `cr`, and per tensor when layer-wise."""
        if cr == 1:
            return self.numel, None
        if not self.layerwise:
            return k_for(self.numel, cr), None
        shares = layer_shares(self.sizes, cr, self.layer_split)
        return sum(shares), shares

    def for_exchange(self, ratio: float | None) -> TopKAt | Dense:
        if ratio == 1:
            return DENSE
        k, shares = self.ks(ratio)
        return TopKAt(k, self.sizes if shares is not None else None, shares)

    def metrics(self, ratio: float | None) -> dict[str, float]:
        return {"method/k": self.ks(ratio)[0]}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Top-k keeps nothing across steps (its residuals are the memory's)."""
