"""Collectives of the simulated engine: every worker of the run on one tensor axis.

The process holds all n workers, so each operation of the contract (`repro.comm.collectives`)
is a tensor operation along the leading axis: an allreduce is a sum over it, an allgather
hands every row the whole axis, a broadcast copies one row, a pairwise exchange permutes
rows. The records are those the
process engine writes for the same call (one worker's bytes, the group's size), so the
modeled clock charges both engines alike; their seconds are the tensor operation's, not a
network's.

Sums run in rank order, row by row. For two workers that is the only order there is
(a + b == b + a in floating point), so two-worker runs match the process engine bit for
bit; with more, gloo's ring sums in another order and results agree to rounding.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from repro.comm.collectives import Collectives, worker_nbytes
from repro.comm.record import CommRecord


def _ordered_sum(rows: torch.Tensor) -> torch.Tensor:
    """Sum over the leading axis in index order: ((r0 + r1) + r2) + ..., as an allreduce
    would accumulate arriving messages; torch's own reduction may pair them differently."""
    total = rows[0].clone()
    for r in rows[1:]:
        total.add_(r)
    return total


class AxisCollectives(Collectives):
    """Collectives over the worker axis of tensors holding all `world_size` workers.

    `parts` (from `split`) are groups of global ranks reduced separately, side by side,
    as disjoint sub-groups of a cluster would be.
    """

    def __init__(self, world_size: int, algo: str = "ring", parts: list[list[int]] | None = None):
        self.world_size = world_size
        self.ranks = list(range(world_size))
        self.algo = algo
        self.parts = parts or [list(range(world_size))]
        sizes = {len(p) for p in self.parts}
        if len(sizes) != 1 or sorted(r for p in self.parts for r in p) != self.ranks:
            raise ValueError(f"parts {self.parts} must split ranks 0..{world_size - 1} evenly")
        self.group_size = sizes.pop()
        self._split: dict[tuple[tuple[int, ...], ...], AxisCollectives] = {}

    def _check(self, t: torch.Tensor) -> None:
        if t.shape[0] != self.world_size:
            raise ValueError(
                f"axis tensor holds {t.shape[0]} workers, this engine has {self.world_size}"
            )

    def _reduce_(self, t: torch.Tensor, first_only: bool = False) -> None:
        """Each group's sum in its rows, or (`first_only`, one group) in row 0 alone."""
        if len(self.parts) == 1:
            # one group of every rank in order: row 0 adds the others as `_ordered_sum`
            # does, in place, with no gathered copy
            for r in t[1:]:
                t[0].add_(r)
            if not first_only:
                t[1:].copy_(t[:1].expand_as(t[1:]))
            return
        for part in self.parts:
            total = _ordered_sum(t[part])
            t[part] = total

    def allreduce(self, t: torch.Tensor, average: bool = False) -> CommRecord:
        self._check(t)
        secs = self._timed(lambda: self._reduce_(t), t)
        if average:
            t.div_(self.group_size)
        return self._record("allreduce", t, secs, self.algo)

    def allreduce_first(self, t: torch.Tensor) -> CommRecord:
        """With one group the sum stays in row 0, not copied back; with several, every part
        is reduced."""
        self._check(t)
        secs = self._timed(lambda: self._reduce_(t, first_only=True), t)
        return self._record("allreduce", t, secs, self.algo)

    def allgather(self, t: torch.Tensor) -> tuple[torch.Tensor, CommRecord]:
        """With one group every worker's copy is the same storage (an expanded view of one
        gathered copy, not world_size copies)."""
        self._check(t)
        if len(self.parts) == 1:
            copy: list[torch.Tensor] = []
            secs = self._timed(lambda: copy.append(t.clone()), t)
            gathered = copy[0].unsqueeze(0).expand(self.world_size, *t.shape)
            return gathered, self._record("allgather", t, secs)
        out = torch.empty(
            (self.world_size, self.group_size, *t.shape[1:]), dtype=t.dtype, device=t.device
        )

        def gather():
            for part in self.parts:
                out[part] = t[part].unsqueeze(0)

        secs = self._timed(gather, t)
        return out, self._record("allgather", t, secs)

    def broadcast(self, t: torch.Tensor, src: int) -> CommRecord:
        self._check(t)
        part = next(p for p in self.parts if src in p)

        def copy():
            row = t[src].clone()
            if len(self.parts) == 1:
                # every row, by one strided copy: written by a list of ranks, the 8 rows of
                # STAR-Topk's indices at c = 0.1 (8 x 27,119) took 0.36 ms against 0.04
                t.copy_(row.expand_as(t))
            else:
                t[part] = row.unsqueeze(0)

        secs = self._timed(copy, t)
        return self._record("broadcast", t, secs)

    def reduce_scatter(self, t: torch.Tensor) -> tuple[torch.Tensor, CommRecord]:
        self._check(t)
        chunk = t.shape[1] // self.group_size
        out = torch.empty((self.world_size, chunk, *t.shape[2:]), dtype=t.dtype, device=t.device)

        def scatter():
            for part in self.parts:
                total = _ordered_sum(t[part])
                for i, r in enumerate(part):
                    out[r] = total[i * chunk : (i + 1) * chunk]

        secs = self._timed(scatter, t)
        return out, self._record("reduce_scatter", t, secs)

    def sendrecv(
        self, send: torch.Tensor, peers: Sequence[int], out: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, CommRecord]:
        """A permutation of the rows, refused unless the pairing is symmetric."""
        self._check(send)
        if any(peers[p] != r for r, p in enumerate(peers)):
            raise ValueError(f"sendrecv peers {list(peers)} are not a symmetric pairing")
        recv = torch.empty_like(send) if out is None else out
        index = torch.as_tensor(list(peers), device=send.device)
        secs = self._timed(lambda: torch.index_select(send, 0, index, out=recv), send)
        return recv, CommRecord("sendrecv", worker_nbytes(send), secs, 2)

    def split(self, partition: list[list[int]]) -> AxisCollectives:
        """Every part at once: the result holds all of them, each reduced separately."""
        key = tuple(tuple(p) for p in partition)
        if key not in self._split:
            self._split[key] = AxisCollectives(self.world_size, self.algo, [list(p) for p in key])
        return self._split[key]

    def allreduce_untracked(self, t: torch.Tensor) -> torch.Tensor:
        """The tensor lives on the CPU here as in the process engine."""
        self._instrumentation(t, "allreduce_untracked")
        self._reduce_(t)
        return t

    def allgather_untracked(self, t: torch.Tensor) -> torch.Tensor:
        self._instrumentation(t, "allgather_untracked")
        return self.allgather(t)[0]

    def barrier(self) -> None:
        """One process: nothing to wait for."""
