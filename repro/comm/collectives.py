"""The collectives contract: every operation a method may call, over the worker axis.

Every tensor a method hands to a collective carries a leading axis of the workers this
process holds, H below: 1 under the process engine (one OS process per worker,
`repro.comm.process_collectives`), all n of them under the simulated engine
(`repro.comm.axis_collectives`). A collective means the same thing in both, as JAX's
collectives named over an axis do under vmap and pmap: `allreduce` sums over every worker
of the group whichever process holds it, `allgather` hands each held worker every row of
its group, and so on. G is the group's size (every worker, or a part after `split`);
`ranks` lists the global ranks of the held workers in axis order; row i of an axis tensor
is worker `ranks[i]`'s.

    operation                     argument              returns
    allreduce(t, average)         t (H, ...)            record; t summed (averaged) in place
    allreduce_first(t)            t (H, ...)            record; t[0] summed in place
    allgather(t)                  t (H, *row)           (H, G, *row) the group's rows, record
    broadcast(t, src)             t (H, ...)            record; t = worker src's row, in place
    reduce_scatter(t)             t (H, G * c, ...)     (H, c, ...) own chunk of the sum, record
    sendrecv(send, peers, out)    send (H, ...)         (H, ...) row i = peers[i]'s row, record
    split(partition)              lists of ranks        the collectives of each part
    allreduce_untracked(t)        CPU t (H, ...)        t summed in place, no record
    allgather_untracked(t)        CPU t (H, *row)       (H, G, *row), no record
    barrier()                     -                     -

Every communicating call returns a `CommRecord` (`repro.comm.record`): the operation, the
bytes of one worker's row (`worker_nbytes`, the message M of one participant), the
seconds the call took on the device (`Stopwatch`: CUDA events on a GPU), the group's size
(2 for a pairwise exchange) and, for an allreduce, the algorithm the modeled clock charges.
The records are identical in both engines but for the seconds, so the modeled clock and
the metrics never ask which engine ran. Instrumentation traffic (metric sums, the clock
exchange) goes through the `*_untracked` operations and is not recorded: it is not part
of the method being measured.

Which device each message lives on is checked before it is sent, because NCCL takes CUDA
tensors only and a CPU tensor reaching it fails at the first GPU run, never on a laptop:
the method's traffic must be on the device the workers compute on (carried by NCCL on a
GPU), instrumentation on the CPU (carried by gloo, which every process group includes).
A tensor on the wrong side raises `DeviceMismatch` on every machine, a CPU-only one too.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import torch

from repro.comm.record import CommRecord
from repro.comm.stopwatch import Stopwatch


class DeviceMismatch(RuntimeError):
    """A tensor handed to a collective lives where its kind of traffic must not travel."""


def worker_nbytes(t: torch.Tensor) -> int:
    """Bytes of one worker's row of an axis tensor (the message M of one participant)."""
    return t[0].numel() * t.element_size()


class Collectives(ABC):
    """The operations of the table above, each implemented by both engines; a method sees
    only this interface. Sums run over the group in each engine's order: bit for bit alike
    at 2 workers (a sum of two is order-free), within rounding beyond."""

    ranks: list[int]
    world_size: int
    group_size: int
    algo: str

    @abstractmethod
    def allreduce(self, t: torch.Tensor, average: bool = False) -> CommRecord:
        """Every held row of `t` becomes the sum over the group's rows (divided by G when
        `average`), in place. Record: op "allreduce", one row's bytes, `algo`."""

    @abstractmethod
    def allreduce_first(self, t: torch.Tensor) -> CommRecord:
        """The first held row of `t` becomes the sum over its group's rows, in place; the
        other held rows are left undefined. For a method whose held workers all apply one
        update read from one row (their parameters one shared row): the simulated engine
        then writes one row, not every worker's copy of the same sum (a dense step of
        `cnn1d_wide` at 8 workers spent about half its allreduce copying the sum back).
        Record: that of `allreduce`."""

    @abstractmethod
    def allgather(self, t: torch.Tensor) -> tuple[torch.Tensor, CommRecord]:
        """(H, G, *row): every held worker gets its group's rows of `t` in rank order. The
        result may share storage between held workers: read it, do not write it. Record:
        op "allgather", one row's bytes."""

    @abstractmethod
    def broadcast(self, t: torch.Tensor, src: int) -> CommRecord:
        """Every held row of `t` in `src`'s group becomes global worker `src`'s row, in
        place. Record: op "broadcast", one row's bytes."""

    @abstractmethod
    def reduce_scatter(self, t: torch.Tensor) -> tuple[torch.Tensor, CommRecord]:
        """`t` (H, G * c, ...) summed over the group; the worker at position i of its group
        keeps chunk i: (H, c, ...). Record: op "reduce_scatter", one row's bytes (G * c)."""

    @abstractmethod
    def sendrecv(
        self, send: torch.Tensor, peers: Sequence[int], out: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, CommRecord]:
        """The pairwise exchange: held row i is sent to global rank `peers[i]` and replaced,
        in the result, by that rank's row (both directions at once; the pairing must be
        symmetric). `out` (contiguous, shaped like `send`) receives in place, so a caller
        that exchanges every step can reuse one buffer. Record: op "sendrecv", one row's
        bytes, group size 2."""

    @abstractmethod
    def split(self, partition: list[list[int]]) -> Collectives:
        """The collectives of disjoint equal-sized groups of global ranks (`partition`
        covers every rank), reduced separately and side by side; every worker calls it with
        the same partition. Calls on the result take the same axis tensors as this one."""

    @abstractmethod
    def allreduce_untracked(self, t: torch.Tensor) -> torch.Tensor:
        """Instrumentation (metric sums, clocks): the sum over the group of a CPU tensor,
        in place and returned, without a record."""

    @abstractmethod
    def allgather_untracked(self, t: torch.Tensor) -> torch.Tensor:
        """Instrumentation: the group's rows of a CPU tensor, (H, G, *row), without a
        record."""

    @abstractmethod
    def barrier(self) -> None:
        """Return once every worker of the group has called it."""

    def local_index(self, rank: int) -> int | None:
        """Axis position of global worker `rank` in this process, or None if not held."""
        try:
            return self.ranks.index(rank)
        except ValueError:
            return None

    def _timed(self, fn, sample: torch.Tensor) -> float:
        """Seconds of `fn`'s work on `sample`'s device (queued kernels included)."""
        return Stopwatch(sample.device).time(fn)[1]

    @staticmethod
    def _instrumentation(t: torch.Tensor, op: str) -> None:
        """Metric sums and clock exchanges live on the CPU in every engine: they are small,
        and on a GPU cluster they must travel over gloo, never NCCL."""
        if t.device.type != "cpu":
            raise DeviceMismatch(
                f"{op} got a tensor on {t.device}; instrumentation (metric sums, clock "
                f"exchange) must be a CPU tensor"
            )

    def _record(self, op: str, t: torch.Tensor, seconds: float, algo: str | None = None):
        return CommRecord(op, worker_nbytes(t), seconds, self.group_size, algo)
