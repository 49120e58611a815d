"""Collectives over the worker axis, and the only module that calls torch.distributed.

Every tensor a method hands to a collective carries a leading axis of the workers this
process holds: 1 under the process engine (one OS process per worker), all of them under
the simulated engine (`repro.comm.axis_collectives`). A collective means the same thing in
both, as JAX's collectives named over an axis do under vmap and pmap: `allreduce` sums over
every worker of the run, `allgather` gives each held worker every worker's row, and so on.
`ranks` lists the global ranks of the held workers, in axis order.

Every communicating call returns a `CommRecord` (operation, payload bytes of one worker,
measured seconds, participants), identical in both engines but for the seconds, so the
modeled clock and the metrics never ask which engine ran. The seconds are the device's
(`Stopwatch`: CUDA events on a GPU). Instrumentation traffic (metric sums, the clock
exchange) goes through the `*_untracked` helpers and is not recorded: it is not part of
the method being measured.

Which device each message lives on is checked before it is sent, because NCCL takes CUDA
tensors only and a CPU tensor reaching it fails at the first GPU run, never on a laptop:
the method's traffic must be on the device the workers compute on (carried by NCCL on a
GPU), instrumentation on the CPU (carried by gloo, which every process group includes).
A tensor on the wrong side raises `DeviceMismatch` on every machine, a CPU-only one too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from repro.comm.stopwatch import Stopwatch

CPU = torch.device("cpu")


class DeviceMismatch(RuntimeError):
    """A tensor handed to a collective lives where its kind of traffic must not travel."""


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


def backend_map(config: str) -> dict[str, str]:
    """Device type -> backend of a process group, from its backend string:
    'cpu:gloo,cuda:nccl' -> {'cpu': 'gloo', 'cuda': 'nccl'}."""
    out = {}
    for item in config.split(","):
        device, _, backend = item.strip().rpartition(":")
        if device:
            out[device] = backend
        elif backend == "nccl":  # a bare name: NCCL serves CUDA only, gloo both
            out["cuda"] = backend
        else:
            out.update(cpu=backend, cuda=backend)
    return out


class ProcessCollectives(Collectives):
    """Blocking torch.distributed collectives over one process group; one worker a process.

    Axis tensors here have a leading dimension of 1 (this process's worker). `device` is
    where the worker computes: every tensor of the method's traffic must live there, and
    the group must have a backend for it and one for the CPU (instrumentation).
    """

    def __init__(
        self,
        group: dist.ProcessGroup | None = None,
        algo: str = "ring",
        device: torch.device | str = "cpu",
    ):
        self.group = group
        rank = dist.get_rank()
        self.ranks = [rank]
        self.world_size = dist.get_world_size()
        self.group_size = dist.get_world_size(group)
        self._group_rank = dist.get_rank(group)
        self.algo = algo
        self.device = torch.device(device)
        config = dist.get_backend_config(group)
        self.backends = backend_map(config)
        for needed, carries in ((self.device.type, "the method's traffic"), ("cpu", "metrics")):
            if needed not in self.backends:
                raise DeviceMismatch(
                    f"the process group ({config}) has no backend for {needed} tensors, which "
                    f"carry {carries}; start it with repro.comm.launch.init_process_group"
                )
        self._subgroups: dict[tuple[tuple[int, ...], ...], ProcessCollectives] = {}

    def _method_traffic(self, t: torch.Tensor, op: str) -> None:
        """The method's messages live where the worker computes, so that on a GPU they
        travel over NCCL (a CPU tensor would quietly take gloo, or fail on NCCL alone)."""
        want = self.device
        if t.device.type != want.type or (want.index is not None and t.device.index != want.index):
            raise DeviceMismatch(
                f"{op} got a tensor on {t.device}; the method's traffic travels on {want} "
                f"over {self.backends[want.type]}: create it on the workers' device"
            )

    def allreduce(self, t: torch.Tensor, average: bool = False) -> CommRecord:
        """In-place sum (or mean) of `t` over the group."""
        self._method_traffic(t, "allreduce")
        secs = self._timed(lambda: dist.all_reduce(t, group=self.group), t)
        if average:
            t.div_(self.group_size)
        return self._record("allreduce", t, secs, self.algo)

    def allgather(self, t: torch.Tensor) -> tuple[torch.Tensor, CommRecord]:
        """Every worker's row: returns (1, group_size, *row shape)."""
        self._method_traffic(t, "allgather")
        return self._allgather(t)

    def _allgather(self, t: torch.Tensor) -> tuple[torch.Tensor, CommRecord]:
        row = t[0]
        out = torch.empty((self.group_size * row.numel(),), dtype=t.dtype, device=t.device)
        flat = row.contiguous().view(-1)
        secs = self._timed(lambda: dist.all_gather_single(out, flat, group=self.group), t)
        return out.view(1, self.group_size, *row.shape), self._record("allgather", t, secs)

    def broadcast(self, t: torch.Tensor, src: int) -> CommRecord:
        """In-place broadcast of global worker `src`'s row."""
        self._method_traffic(t, "broadcast")
        secs = self._timed(lambda: dist.broadcast(t, src, group=self.group), t)
        return self._record("broadcast", t, secs)

    def reduce_scatter(self, t: torch.Tensor) -> tuple[torch.Tensor, CommRecord]:
        """Sum over the group of rows (1, n * c, ...); this worker keeps its chunk of c."""
        self._method_traffic(t, "reduce_scatter")
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

        The send and the receive are issued as one group (`batch_isend_irecv`): NCCL may
        deadlock on large messages when both peers post a lone send first. `out`
        (contiguous, shaped like `send`) receives in place, so callers that exchange every
        step can reuse one buffer instead of allocating megabytes per call."""
        self._method_traffic(send, "sendrecv")
        recv = torch.empty_like(send) if out is None else out
        self._method_traffic(recv, "sendrecv")
        peer = peers[0]
        message = send.contiguous()

        def exchange():
            ops = [dist.P2POp(dist.isend, message, peer), dist.P2POp(dist.irecv, recv, peer)]
            for request in dist.batch_isend_irecv(ops):
                request.wait()

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
                    mine = ProcessCollectives(group, self.algo, self.device)
            if mine is None:
                raise ValueError(f"rank {self.ranks[0]} is in no part of {partition}")
            self._subgroups[key] = mine
        return self._subgroups[key]

    def allreduce_untracked(self, t: torch.Tensor) -> torch.Tensor:
        """In-place sum over the group of a CPU tensor for instrumentation (metrics, clocks),
        carried by the group's CPU backend."""
        self._instrumentation(t, "allreduce_untracked")
        dist.all_reduce(t, group=self.group)
        return t

    def allgather_untracked(self, t: torch.Tensor) -> torch.Tensor:
        """Every worker's row of a CPU tensor (instrumentation), over the CPU backend."""
        self._instrumentation(t, "allgather_untracked")
        return self._allgather(t)[0]

    def barrier(self) -> None:
        dist.barrier(group=self.group)
