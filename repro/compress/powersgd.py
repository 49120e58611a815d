"""PowerSGD (Vogels et al., NeurIPS 2019): rank-r compression by one power iteration per
step, warm-started; pure tensor code (the allreduces are the exchange's).

Algorithm 1 of the paper, per gradient matrix M (n x m; a tensor is viewed as its first
axis by the rest): P = M Q, P summed over workers, P orthogonalized, Q = M^T P, Q summed and
divided by the workers; every worker applies P Q^T, the average of the workers' rank-r
approximations in the common basis P. Q starts random and, warm-started, is the previous
step's Q, orthogonalized. With error feedback the residual is G - P Q^T (local minus
applied), added to the next gradient (Vogels et al., Algorithm 2).

The rules that decide what is compressed, and how, follow PyTorch's DDP communication hook
(`torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook`), the reference this suite is
checked against: a matrix is compressed at rank min(n, m, r) when that saves at least
`min_compression_rate` times its size, (n + m) r rate < n m; every other tensor (vectors
always) is averaged uncompressed, by one allreduce of them all, so a step is three
allreduces: the uncompressed tensors, every P, every Q. The first `start_iter` exchanges
are plain averages. Columns are orthogonalized by Gram-Schmidt up to rank 2 (dividing by
the norm plus `epsilon`), by Householder QR above. A random start draws one seed from
numpy's RandomState(`seed`) and Q's entries from torch's generator at that seed, for the
matrices in the order the hook sees them: backward order (the parameters reversed), those
of one shape together, in order of the shape's first appearance.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from repro.compress.compressor import DENSE, Dense, Rounds


def orthogonalize(columns: torch.Tensor, epsilon: float = 0.0) -> None:
    """Make each matrix's columns orthonormal, in place: (batch, n, r), r <= n."""
    rank = columns.shape[2]
    if rank > 2:
        columns.copy_(torch.linalg.qr(columns).Q)
        return
    for i in range(rank):
        col = columns[:, :, i : i + 1]
        norm = torch.linalg.vector_norm(col, dim=1, keepdim=True)
        col /= norm + epsilon if epsilon else norm
        if i + 1 < rank:
            later = columns[:, :, i + 1 :]
            later -= torch.sum(col * later, dim=1, keepdim=True) * col


def compressed_rank(n: int, m: int, rank: int, min_rate: float) -> int | None:
    """The rank an n x m matrix is compressed at, min(n, m, rank), or None where that does not
    save `min_rate` times its size and it is sent whole (the hook's rule)."""
    r = min(n, m, rank)
    return r if (n + m) * r * min_rate < n * m else None


def _flat(pieces: list[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    """(rows, *) pieces end to end; no piece (nothing of that kind) is an empty message."""
    return torch.cat(pieces, dim=1) if pieces else like[:, :0].clone()


def _each_row(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a[i] @ b[0] for every row i of `a`, flat: (rows, n * r)."""
    return torch.cat([torch.bmm(a[i : i + 1], b).reshape(1, -1) for i in range(a.shape[0])])


class PowerSGD:
    """The configured compressor: which tensors are compressed at what rank, the factors Q
    kept across steps, the exchanges counted for the plain-average start."""

    lossless = False

    def __init__(
        self,
        rank: int,
        start_iter: int = 0,
        warm_start: bool = True,
        min_compression_rate: float = 2.0,
        epsilon: float = 0.0,
        seed: int = 0,
    ):
        self.rank, self.start_iter, self.warm_start = rank, start_iter, warm_start
        self.min_rate, self.epsilon, self.seed = min_compression_rate, epsilon, seed
        self.exchanges = 0
        self.draws = 0
        self._seeds = np.random.RandomState(seed)
        self._q: torch.Tensor | None = None  # the last step's averaged Q, every matrix's

    def bind(self, shapes: list[tuple[int, ...]]) -> None:
        offsets = [0, *np.cumsum([math.prod(s) for s in shapes]).tolist()]
        self.plain: list[tuple[int, int]] = []  # (start, stop) of each uncompressed tensor
        by_shape: dict[tuple[int, int], list[int]] = {}
        for i in reversed(range(len(shapes))):
            n = shapes[i][0] if shapes[i] else 1
            m = math.prod(shapes[i]) // n
            if compressed_rank(n, m, self.rank, self.min_rate) is not None:
                by_shape.setdefault((n, m), []).append(offsets[i])
            else:
                self.plain.append((offsets[i], offsets[i + 1]))
        # (start, n, m, r) of each compressed matrix, in the order its Q is drawn
        self.matrices = [
            (start, n, m, min(n, m, self.rank))
            for (n, m), starts in by_shape.items()
            for start in starts
        ]

    def for_exchange(self, ratio: float | None) -> PowerSGD | Dense:
        self.exchanges += 1
        return DENSE if self.exchanges <= self.start_iter else self

    def rounds(self, x: torch.Tensor, workers: int) -> Rounds:
        """Three messages: the uncompressed tensors, every P, every Q (module doc).

        A sum is the same for every worker and is summed into the first row alone, so what
        follows from it (the orthogonal P, the average) is computed once, from that row,
        and shared; what differs per worker (M Q, M^T P) is computed row by row with one
        worker's kernel, as a lone worker process computes it (a batch of rows may take
        another kernel, whose sums round differently)."""
        rows = x.shape[0]
        plain = _flat([x[:, a:b] for a, b in self.plain], x)
        yield plain
        grads = [x[:, s : s + n * m].view(rows, n, m) for s, n, m, _ in self.matrices]
        qs = self._start_q(x)
        p_flat = _flat([_each_row(g, q) for g, q in zip(grads, qs, strict=True)], x)
        yield p_flat
        ps = self._views(p_flat[:1], [n for _, n, _, _ in self.matrices])
        for p in ps:
            orthogonalize(p, self.epsilon)
        q_flat = _flat([_each_row(g.transpose(1, 2), p) for g, p in zip(grads, ps, strict=True)], x)
        yield q_flat
        shared_q = q_flat[:1].div_(workers)
        self._q = shared_q.clone() if self.warm_start else None
        qs = self._views(shared_q, [m for _, _, m, _ in self.matrices])
        average = torch.empty_like(x[:1])
        shared_plain = plain[:1].div_(workers)
        at = 0
        for a, b in self.plain:
            average[:, a:b] = shared_plain[:, at : at + b - a]
            at += b - a
        for (s, n, m, _), p, q in zip(self.matrices, ps, qs, strict=True):
            torch.bmm(p, q.transpose(1, 2), out=average[:, s : s + n * m].view(1, n, m))
        average = average.expand_as(x)
        return average, average

    def _views(self, flat: torch.Tensor, sides: list[int]) -> list[torch.Tensor]:
        """Each matrix's (rows, side, r) factor inside the rounds' flat message."""
        out, at = [], 0
        for side, (_, _, _, r) in zip(sides, self.matrices, strict=True):
            out.append(flat[:, at : at + side * r].view(flat.shape[0], side, r))
            at += side * r
        return out

    def _start_q(self, x: torch.Tensor) -> list[torch.Tensor]:
        """This step's Q, (1, m, r) each, orthogonalized: the last step's, or a seeded
        random start."""
        if self._q is None:
            gen = torch.Generator().manual_seed(int(self._seeds.randint(1_000_000_000)))
            self.draws += 1
            start = [
                torch.randn(m, r, generator=gen, dtype=x.dtype) for _, _, m, r in self.matrices
            ]
            self._q = _flat([q.reshape(1, -1) for q in start], x[:1]).to(x.device)
        qs = self._views(self._q.clone(), [m for _, _, m, _ in self.matrices])
        for q in qs:
            orthogonalize(q, self.epsilon)
        return qs

    def metrics(self, ratio: float | None) -> dict[str, float]:
        """The rank, and whether this step compressed (0 in the plain-average start)."""
        compressed = self.exchanges > self.start_iter
        return {"method/rank": self.rank, "method/compressed": int(compressed)}

    def state_dict(self) -> dict:
        q = None if self._q is None else self._q.clone()
        return {"exchanges": self.exchanges, "draws": self.draws, "q": q}

    def load_state_dict(self, state: dict) -> None:
        self.exchanges, self.draws = state["exchanges"], state["draws"]
        self._seeds = np.random.RandomState(self.seed)
        for _ in range(self.draws):  # the seeds already drawn, so the next one is the same
            self._seeds.randint(1_000_000_000)
        self._q = None if state["q"] is None else state["q"].clone()
