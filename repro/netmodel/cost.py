"""Alpha-beta costs of collectives, in seconds.

Notation (Flexible Top-k paper, Tyagi & Swany 2023, Table I and Eq. 4): `n` workers,
`M` = `nbytes` message bytes each worker contributes, `c` = `cr` fraction of entries kept,
`a` = latency (s), `b` = seconds per byte (1 / bandwidth), `log` = log2. `log2` is taken as a
real number, as in the paper's formulas, so a non-power-of-two `n` gets a fractional level
count rather than a rounded one. One worker communicates with nobody: every cost is 0 at n = 1.

The compressed exchanges count a sparse entry's value and its index as the same size, as the
paper does, so a Top-k message of `c * M` bytes of values also carries `c * M` bytes of indices.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from repro.comm.adasum_rules import ADASUM_STATS_ALGO
from repro.comm.record import CommRecord
from repro.errors import UserError

_SCALAR_BYTES = 8  # Adasum accumulates dot products and norms in float64


@dataclass(frozen=True)
class Link:
    """A network as the cost model sees it: latency alpha (s) and bandwidth (bytes/s)."""

    latency_s: float
    bandwidth_Bps: float

    def __post_init__(self) -> None:
        # `not (x > 0)` also rejects NaN, which would otherwise poison every cost silently.
        if not (self.bandwidth_Bps > 0):
            raise UserError(f"network bandwidth={self.bandwidth_Bps} B/s must be > 0")
        if not (self.latency_s >= 0):
            raise UserError(f"network latency={self.latency_s} s must be >= 0")

    @property
    def beta(self) -> float:
        """Seconds per byte."""
        return 1.0 / self.bandwidth_Bps


def _check(nbytes: float, n: int) -> None:
    if not (nbytes >= 0):
        raise UserError(f"message size nbytes={nbytes} must be >= 0")
    if n < 1:
        raise UserError(f"worker count n={n} must be >= 1")


def _check_cr(cr: float) -> None:
    if not (0 < cr <= 1):
        raise UserError(f"compression ratio cr={cr} must be in (0, 1]")


def ring_allreduce(link: Link, nbytes: float, n: int) -> float:
    """Ring allreduce (Table I): 2(n-1) a + 2(n-1)/n M b."""
    _check(nbytes, n)
    return 2 * (n - 1) * link.latency_s + 2 * (n - 1) / n * nbytes * link.beta


def tree_allreduce(link: Link, nbytes: float, n: int) -> float:
    """Tree allreduce, reduce then broadcast down a binary tree (Table I).

    2 a log n + 2 log n M b.
    """
    _check(nbytes, n)
    levels = math.log2(n)
    return 2 * levels * link.latency_s + 2 * levels * nbytes * link.beta


def allgather(link: Link, nbytes: float, n: int) -> float:
    """Allgather of M bytes from each worker (Table I): a log n + (n-1) M b."""
    _check(nbytes, n)
    return math.log2(n) * link.latency_s + (n - 1) * nbytes * link.beta


def broadcast(link: Link, nbytes: float, n: int) -> float:
    """Binomial-tree broadcast (Table I): a log n + log n M b."""
    _check(nbytes, n)
    levels = math.log2(n)
    return levels * link.latency_s + levels * nbytes * link.beta


def reduce_scatter(link: Link, nbytes: float, n: int) -> float:
    """Ring reduce-scatter, the first half of a ring allreduce: (n-1) a + (n-1)/n M b."""
    _check(nbytes, n)
    return (n - 1) * link.latency_s + (n - 1) / n * nbytes * link.beta


def parameter_server(link: Link, nbytes: float, n: int) -> float:
    """One parameter server, push then pull (Table I): 2 a + 2(n-1) M b."""
    _check(nbytes, n)
    if n == 1:
        return 0.0
    return 2 * link.latency_s + 2 * (n - 1) * nbytes * link.beta


def sendrecv(link: Link, nbytes: float) -> float:
    """Pairwise exchange, both directions at once on a full-duplex link: a + M b."""
    _check(nbytes, 2)
    return link.latency_s + nbytes * link.beta


def ag_topk(link: Link, nbytes: float, cr: float, n: int) -> float:
    """Allgather Top-k, every worker's own (values, indices) (Sec. III): a log n + 2 M c b (n-1).

    Equals `allgather(link, 2 c M, n)`.
    """
    _check_cr(cr)
    return allgather(link, 2 * cr * nbytes, n)


def art_ring(link: Link, nbytes: float, cr: float, n: int) -> float:
    """AR-Topk over a ring (Eq. 4a): a [2(n-1) + log n] + M c b [2(n-1)/n + log n].

    The leader broadcasts its c M bytes of indices, then the selected values are
    ring-allreduced: `broadcast(c M) + ring_allreduce(c M)`.
    """
    _check_cr(cr)
    _check(nbytes, n)
    levels = math.log2(n)
    msg = cr * nbytes
    return link.latency_s * (2 * (n - 1) + levels) + msg * link.beta * (2 * (n - 1) / n + levels)


def art_tree(link: Link, nbytes: float, cr: float, n: int) -> float:
    """AR-Topk over a tree (Eq. 4b): 3 a log n + 3 M c b log n.

    Index broadcast plus tree allreduce of the values: `broadcast(c M) + tree_allreduce(c M)`.
    """
    _check_cr(cr)
    _check(nbytes, n)
    levels = math.log2(n)
    return 3 * link.latency_s * levels + 3 * cr * nbytes * link.beta * levels


Step = tuple[str, float, int, str | None]


def adasum_stats_bytes(n_tensors: int) -> int:
    """Bytes of one level's statistics: (a.b, |a|^2, |b|^2) per tensor, in float64."""
    return 3 * _SCALAR_BYTES * n_tensors


def adasum_vhdd_steps(nbytes: float, n: int, n_tensors: int) -> list[Step]:
    """The collectives of one Adasum allreduce, in the order it runs them.

    Each is (op, bytes per worker, group size, allreduce algo), what the allreduce records
    (`repro.comm.adasum_allreduce`) when `nbytes` splits evenly over `n` workers: at level
    k = 1..log2 n a swap of M / 2^k bytes with the rank at distance 2^(k-1), then the 2^k-rank
    group's statistics allreduce; then the gather phase's swaps of M/n, 2M/n, ..., M/2.
    """
    _check(nbytes, n)
    if n_tensors < 1:
        raise UserError(f"tensor count n_tensors={n_tensors} must be >= 1")
    if n & (n - 1):
        raise UserError(f"Adasum needs a power-of-two worker count, got n={n}")
    levels = n.bit_length() - 1
    halving: list[Step] = []
    for k in range(1, levels + 1):
        halving.append(("sendrecv", nbytes / 2**k, 2, None))
        halving.append(("allreduce", adasum_stats_bytes(n_tensors), 2**k, ADASUM_STATS_ALGO))
    gathering: list[Step] = [("sendrecv", nbytes / 2**k, 2, None) for k in range(levels, 0, -1)]
    return halving + gathering


def adasum_vhdd(link: Link, nbytes: float, n: int, n_tensors: int) -> float:
    """Adasum's vector-halving distance-doubling allreduce (Maleki et al. 2021, as in Horovod).

    The sum of `charge` over `adasum_vhdd_steps`, the same charge the modeled clock puts on
    the allreduce's records. With L = log2 n levels, S = 24 T bytes of statistics for T
    tensors, and the statistics allreduced by tree (2 k a + 2 k S b in the 2^k-rank group):

        2 L a + 2 (n-1)/n M b + L (L+1) (a + S b)

    The data volume equals a ring reduce-scatter plus allgather; the scalar allreduces add
    the latency that grows as L^2. Horovod runs Adasum on power-of-two worker counts only,
    so any other `n` is refused.
    """
    return sum(charge(link, *step) for step in adasum_vhdd_steps(nbytes, n, n_tensors))


Exchange = Callable[[Link, float, float, int], float]

# One signature for every gradient exchange, (link, nbytes, cr, n) -> seconds, so a policy can
# compare them by name; the dense allreduces send all M bytes and ignore cr.
EXCHANGES: dict[str, Exchange] = {
    "dense_ring": lambda link, nbytes, cr, n: ring_allreduce(link, nbytes, n),
    "dense_tree": lambda link, nbytes, cr, n: tree_allreduce(link, nbytes, n),
    "ag_topk": ag_topk,
    "art_ring": art_ring,
    "art_tree": art_tree,
}

COMPRESSED = ("ag_topk", "art_ring", "art_tree")


def cheapest(link: Link, nbytes: float, cr: float, n: int) -> tuple[str, float]:
    """The compressed exchange the Top-k paper's switch picks: the cheapest of the three.

    Ties go to the first in `COMPRESSED` order (allgather, then ring, then tree).
    """
    costs = [(name, EXCHANGES[name](link, nbytes, cr, n)) for name in COMPRESSED]
    return min(costs, key=lambda item: item[1])


_BY_OP: dict[str, Callable[[Link, float, int], float]] = {
    "allgather": allgather,
    "broadcast": broadcast,
    "reduce_scatter": reduce_scatter,
}
_ALLREDUCE: dict[str, Callable[[Link, float, int], float]] = {
    "ring": ring_allreduce,
    "tree": tree_allreduce,
}


def charge(link: Link, op: str, nbytes: float, group_size: int, algo: str | None = None) -> float:
    """Modeled seconds of one collective: `op` moving `nbytes` per worker in a group of
    `group_size`. An allreduce is charged by its `algo` ("ring" when unset, the usual
    large-message choice)."""
    if op == "sendrecv":
        return sendrecv(link, nbytes)
    if op == "allreduce":
        algo = algo or "ring"
        if algo not in _ALLREDUCE:
            raise ValueError(f"allreduce algo {algo!r} has no cost model (ring or tree)")
        return _ALLREDUCE[algo](link, nbytes, group_size)
    if op not in _BY_OP:
        raise ValueError(f"collective {op!r} has no cost model")
    return _BY_OP[op](link, nbytes, group_size)


def record_cost(record: CommRecord, link: Link, bytes_scale: float = 1.0) -> float:
    """Modeled seconds of one recorded collective on `link` (`charge`).

    The record's bytes are multiplied by `bytes_scale` (a small model standing for a large
    one); `n` is the record's group size.
    """
    if not (bytes_scale > 0):
        raise UserError(f"network.bytes_scale={bytes_scale} must be > 0")
    return charge(link, record.op, record.nbytes * bytes_scale, record.group_size, record.algo)
