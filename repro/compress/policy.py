"""Which collective carries the Top-k exchange: fixed, or the cheapest by the cost model.

Flexible Top-k's switch (Sec. IV, Eq. 4): for the current latency a, bandwidth 1/b, gradient
bytes M, ratio c and N workers, evaluate AG-Topk (a log N + 2 M c b (N-1)), ART-Ring and
ART-Tree, and run the cheapest. Allgather wins at high compression and high bandwidth, the
allreduce forms at low bandwidth and low compression.

What the choice controls: AG versus AR-Topk is a real difference in what is sent. Between
ring and tree the backends differ: gloo picks its own allreduce algorithm internally and
cannot be told, so on gloo the ring/tree choice only changes which formula the modeled clock
charges (it is written into the allreduce's CommRecord). On NCCL the algorithm can be forced
through the NCCL_ALGO environment variable (`nccl_env`, which `TopKConfig.process_env` hands
the launcher).

NCCL reads NCCL_ALGO once, when a communicator is created, so the launcher must set it before
`init_process_group`; a per-step `auto` switch cannot reach NCCL and changes only the modeled
charge (as on gloo, which never lets the caller choose).

At CR = 1 nothing is sparse: the exchange is a dense allreduce, ring or tree, and `auto`
picks the cheaper of the two dense formulas.
"""

from __future__ import annotations

from repro.errors import require_choice
from repro.netmodel import cost
from repro.netmodel.cost import Link

COLLECTIVES = ("auto", "allgather", "ar_ring", "ar_tree")

# The cost model's names for the three compressed exchanges, as this policy names them.
_SPARSE = {"allgather": "ag_topk", "ar_ring": "art_ring", "ar_tree": "art_tree"}
_DENSE = {"ar_ring": "dense_ring", "ar_tree": "dense_tree"}
_FROM_COST = {cost_name: name for name, cost_name in _SPARSE.items()}


class CollectivePolicy:
    """Picks "allgather", "ar_ring" or "ar_tree" for each exchange.

    The decision is remembered and only re-made when its inputs (link, bytes, ratio, N)
    change, so a constant network and ratio give one decision for the whole phase.
    """

    def __init__(self, mode: str = "auto"):
        require_choice("method.collective", mode, COLLECTIVES)
        self.mode = mode
        self.last: str | None = None
        self._key: tuple[Link, float, float, int] | None = None

    def choose(self, link: Link, nbytes: float, cr: float, n: int) -> str:
        """The collective for an exchange of a `nbytes` dense gradient at ratio `cr`."""
        key = (link, nbytes, cr, n)
        if key != self._key:
            self.last = self.decide(link, nbytes, cr, n)
            self._key = key
        return self.last

    def decide(self, link: Link, nbytes: float, cr: float, n: int) -> str:
        """The choice for these inputs, without touching the remembered one."""
        if cr == 1:
            if self.mode == "allgather":
                raise ValueError("a dense exchange (cr=1) is an allreduce, not an allgather")
            if self.mode != "auto":
                return self.mode
            ring = cost.ring_allreduce(link, nbytes, n)
            return "ar_tree" if cost.tree_allreduce(link, nbytes, n) < ring else "ar_ring"
        if self.mode != "auto":
            return self.mode
        return _FROM_COST[cost.cheapest(link, nbytes, cr, n)[0]]

    @staticmethod
    def seconds(name: str, link: Link, nbytes: float, cr: float, n: int) -> float:
        """Modeled seconds of exchange `name` (dense when `cr` is 1), by the cost model."""
        table = _DENSE if cr == 1 else _SPARSE
        return cost.EXCHANGES[table[name]](link, nbytes, cr, n)


def nccl_env(collective: str) -> dict[str, str]:
    """Environment forcing NCCL's allreduce algorithm for a fixed ring or tree choice.

    Uses NCCL's per-collective form (NCCL >= 2.24) so that the allgather and broadcast keep
    their own algorithms; empty for `auto` and `allgather`, which leave NCCL's tuner alone.
    """
    algo = {"ar_ring": "ring", "ar_tree": "tree"}.get(collective)
    return {} if algo is None else {"NCCL_ALGO": f"allreduce:{algo}"}
