"""The only module that calls torch.distributed.

Every communicating call returns a `CommRecord` (operation, payload bytes, measured seconds,
participants) so that the trainer can feed the modeled clock and the metrics without any
strategy reading either. Instrumentation traffic (metric reductions, clock exchange) goes
through the `*_untracked` helpers and is deliberately not recorded: it is not part of the
method being measured.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class CommRecord:
    """One collective as the cost model sees it.

    `nbytes` is the message size M each participant contributes (the M of the alpha-beta
    formulas), not the total traffic. `algo` is the allreduce algorithm the modeled clock
    charges ("ring" or "tree"); gloo picks its own algorithm, so this is a modeling choice.
    """

    op: str
    nbytes: int
    seconds: float
    group_size: int
    algo: str | None = None


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


class Collectives:
    """Blocking collectives over one process group, each timed and recorded."""

    def __init__(self, group: dist.ProcessGroup | None = None, algo: str = "ring"):
        self.group = group
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)
        self.algo = algo
        self._subgroups: dict[tuple[tuple[int, ...], ...], Collectives] = {}

    def _timed(self, fn, sample: torch.Tensor) -> float:
        start = time.perf_counter()
        fn()
        if sample.is_cuda:
            torch.cuda.synchronize(sample.device)
        return time.perf_counter() - start

    def _record(self, op: str, t: torch.Tensor, seconds: float, algo: str | None = None):
        return CommRecord(op, _nbytes(t), seconds, self.world_size, algo)

    def allreduce(self, t: torch.Tensor, average: bool = False) -> CommRecord:
        """In-place sum (or mean) of `t` over the group."""
        secs = self._timed(lambda: dist.all_reduce(t, group=self.group), t)
        if average:
            t.div_(self.world_size)
        return self._record("allreduce", t, secs, self.algo)

    def allgather(self, t: torch.Tensor) -> tuple[torch.Tensor, CommRecord]:
        """Gather equal-shaped tensors: returns a (world_size, *t.shape) tensor."""
        out = torch.empty((self.world_size * t.numel(),), dtype=t.dtype, device=t.device)
        flat = t.contiguous().view(-1)
        secs = self._timed(lambda: dist.all_gather_single(out, flat, group=self.group), t)
        return out.view(self.world_size, *t.shape), self._record("allgather", t, secs)

    def broadcast(self, t: torch.Tensor, src: int) -> CommRecord:
        """In-place broadcast from group rank `src`."""
        global_src = dist.get_global_rank(self.group, src) if self.group is not None else src
        secs = self._timed(lambda: dist.broadcast(t, global_src, group=self.group), t)
        return self._record("broadcast", t, secs)

    def reduce_scatter(self, t: torch.Tensor) -> tuple[torch.Tensor, CommRecord]:
        """Sum over the group, each rank keeping its 1/world_size chunk of dim 0."""
        out = torch.empty(
            (t.shape[0] // self.world_size, *t.shape[1:]), dtype=t.dtype, device=t.device
        )
        secs = self._timed(
            lambda: dist.reduce_scatter_single(out, t.contiguous(), group=self.group), t
        )
        return out, self._record("reduce_scatter", t, secs)

    def sendrecv(
        self, send: torch.Tensor, peer: int, out: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, CommRecord]:
        """Exchange equal-shaped tensors with group rank `peer` (both directions at once).

        `out` (contiguous, shaped like `send`) receives in place, so callers that exchange
        every step can reuse one buffer instead of allocating megabytes per call."""
        recv = torch.empty_like(send) if out is None else out
        global_peer = dist.get_global_rank(self.group, peer) if self.group is not None else peer

        def exchange():
            reqs = [
                dist.isend(send.contiguous(), global_peer, group=self.group),
                dist.irecv(recv, global_peer, group=self.group),
            ]
            for r in reqs:
                r.wait()

        secs = self._timed(exchange, send)
        return recv, CommRecord("sendrecv", _nbytes(send), secs, 2)

    def split(self, partition: list[list[int]]) -> Collectives:
        """Sub-group collectives for the part of `partition` holding this rank.

        Every rank must call this with the same partition (torch's new_group is itself a
        collective over the world); groups are created once and cached.
        """
        key = tuple(tuple(p) for p in partition)
        if key not in self._subgroups:
            mine = None
            for ranks in partition:
                group = dist.new_group(ranks=list(ranks))
                if self.rank in ranks:
                    mine = Collectives(group, self.algo)
            if mine is None:
                raise ValueError(f"rank {self.rank} is in no part of {partition}")
            self._subgroups[key] = mine
        return self._subgroups[key]

    def allreduce_untracked(self, t: torch.Tensor) -> torch.Tensor:
        """In-place sum for instrumentation (metrics, clocks): not a method's traffic."""
        dist.all_reduce(t, group=self.group)
        return t

    def allgather_untracked(self, t: torch.Tensor) -> torch.Tensor:
        out = torch.empty((self.world_size * t.numel(),), dtype=t.dtype, device=t.device)
        dist.all_gather_single(out, t.contiguous().view(-1), group=self.group)
        return out.view(self.world_size, *t.shape)

    def broadcast_untracked(self, t: torch.Tensor, src: int = 0) -> torch.Tensor:
        dist.broadcast(t, src, group=self.group)
        return t

    def barrier(self) -> None:
        dist.barrier(group=self.group)
