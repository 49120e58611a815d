"""Collectives over the worker axis, and the only module that calls torch.distributed.

Every tensor a method hands to a collective carries a leading axis of the workers this
process holds: 1 under the process engine (one OS process per worker), all of them under
the simulated engine (`repro.dist.axis_collectives`). A collective means the same thing in
both, as JAX's collectives named over an axis do under vmap and pmap: `allreduce` sums over
every worker of the run, `allgather` gives each held worker every worker's row, and so on.
`ranks` lists the global ranks of the held workers, in axis order.

Every communicating call returns a `CommRecord` (operation, payload bytes of one worker,
measured seconds, participants), identical in both engines but for the seconds, so the
modeled clock and the metrics never ask which engine ran. Instrumentation traffic (metric
reductions, clock exchange) goes through the `*_untracked` helpers and is not recorded: it
is not part of the method being measured.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
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


def worker_nbytes(t: torch.Tensor) -> int:
    """Bytes of one worker's row of an axis tensor (the message M of one participant)."""
    return t[0].numel() * t.element_size()


class Collectives:
    """What every engine's collectives share: the held ranks, timing, records.

    Subclasses implement the operations; methods see only this interface.
    """

    ranks: list[int]
    world_size: int
    group_size: int
    algo: str

    def local_index(self, rank: int) -> int | None:
        """Axis position of global worker `rank` in this process, or None if not held."""
        try:
            return self.ranks.index(rank)
        except ValueError:
            return None

    def _timed(self, fn, sample: torch.Tensor) -> float:
        start = time.perf_counter()
        fn()
        if sample.is_cuda:
            torch.cuda.synchronize(sample.device)
        return time.perf_counter() - start

    def _record(self, op: str, t: torch.Tensor, seconds: float, algo: str | None = None):
        return CommRecord(op, worker_nbytes(t), seconds, self.group_size, algo)


class ProcessCollectives(Collectives):
    """Blocking torch.distributed collectives over one process group; one worker a process.

    Axis tensors here have a leading dimension of 1 (this process's worker).
    """

    def __init__(self, group: dist.ProcessGroup | None = None, algo: str = "ring"):
        self.group = group
        rank = dist.get_rank()
        self.ranks = [rank]
        self.world_size = dist.get_world_size()
        self.group_size = dist.get_world_size(group)
        self._group_rank = dist.get_rank(group)
        self.algo = algo
        self._subgroups: dict[tuple[tuple[int, ...], ...], ProcessCollectives] = {}

    def allreduce(self, t: torch.Tensor, average: bool = False) -> CommRecord:
        """In-place sum (or mean) of `t` over the group."""
        secs = self._timed(lambda: dist.all_reduce(t, group=self.group), t)
        if average:
            t.div_(self.group_size)
        return self._record("allreduce", t, secs, self.algo)

    def allgather(self, t: torch.Tensor) -> tuple[torch.Tensor, CommRecord]:
        """Every worker's row: returns (1, group_size, *row shape)."""
        row = t[0]
        out = torch.empty((self.group_size * row.numel(),), dtype=t.dtype, device=t.device)
        flat = row.contiguous().view(-1)
        secs = self._timed(lambda: dist.all_gather_single(out, flat, group=self.group), t)
        return out.view(1, self.group_size, *row.shape), self._record("allgather", t, secs)

    def broadcast(self, t: torch.Tensor, src: int) -> CommRecord:
        """In-place broadcast of global worker `src`'s row."""
        secs = self._timed(lambda: dist.broadcast(t, src, group=self.group), t)
        return self._record("broadcast", t, secs)

    def reduce_scatter(self, t: torch.Tensor) -> tuple[torch.Tensor, CommRecord]:
        """Sum over the group of rows (1, n * c, ...); this worker keeps its chunk of c."""
        row = t[0].contiguous()
        out = torch.empty(
            (row.shape[0] // self.group_size, *row.shape[1:]), dtype=t.dtype, device=t.device
        )
        secs = self._timed(lambda: dist.reduce_scatter_single(out, row, group=self.group), t)
        return out.unsqueeze(0), self._record("reduce_scatter", t, secs)

    def sendrecv(
        self, send: torch.Tensor, peers: Sequence[int], out: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, CommRecord]:
        """Exchange equal-shaped rows with `peers[i]`, the global rank paired with held row i
        (both directions at once; the pairing must be symmetric).

        `out` (contiguous, shaped like `send`) receives in place, so callers that exchange
        every step can reuse one buffer instead of allocating megabytes per call."""
        recv = torch.empty_like(send) if out is None else out
        peer = peers[0]

        def exchange():
            reqs = [dist.isend(send.contiguous(), peer), dist.irecv(recv, peer)]
            for r in reqs:
                r.wait()

        secs = self._timed(exchange, send)
        return recv, CommRecord("sendrecv", worker_nbytes(send), secs, 2)

    def split(self, partition: list[list[int]]) -> ProcessCollectives:
        """Sub-group collectives over the part of `partition` holding this worker.

        Every rank must call this with the same partition (torch's new_group is itself a
        collective over the world); groups are created once and cached.
        """
        key = tuple(tuple(p) for p in partition)
        if key not in self._subgroups:
            mine = None
            for ranks in partition:
                group = dist.new_group(ranks=list(ranks))
                if self.ranks[0] in ranks:
                    mine = ProcessCollectives(group, self.algo)
            if mine is None:
                raise ValueError(f"rank {self.ranks[0]} is in no part of {partition}")
            self._subgroups[key] = mine
        return self._subgroups[key]

    def allreduce_untracked(self, t: torch.Tensor) -> torch.Tensor:
        """In-place sum over the group for instrumentation (metrics, clocks)."""
        dist.all_reduce(t, group=self.group)
        return t

    def allgather_untracked(self, t: torch.Tensor) -> torch.Tensor:
        return self.allgather(t)[0]

    def barrier(self) -> None:
        dist.barrier(group=self.group)
