"""The process engine's collectives: blocking torch.distributed calls over one process group,
one worker a process. With `repro.comm.launch`, the only module that calls torch.distributed.

Axis tensors here have a leading dimension of 1 (this process's worker); what each
operation takes and returns is the contract's (`repro.comm.collectives`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from repro.comm.collectives import Collectives, DeviceMismatch, worker_nbytes
from repro.comm.record import CommRecord

# torch 2.14 names these *_single (its old names warn); a cluster's preinstalled torch, like
# the H100 image's 2.11 where `make gpu-check` first ran, has only the old ones
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


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
    """torch.distributed collectives over `group` (the world by default). `device` is
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
        self._method_traffic(t, "allreduce")
        secs = self._timed(lambda: dist.all_reduce(t, group=self.group), t)
        if average:
            t.div_(self.group_size)
        return self._record("allreduce", t, secs, self.algo)

    def allreduce_first(self, t: torch.Tensor) -> CommRecord:
        """One held row: the first is the only one."""
        return self.allreduce(t)

    def allgather(self, t: torch.Tensor) -> tuple[torch.Tensor, CommRecord]:
        self._method_traffic(t, "allgather")
        return self._allgather(t)

    def _allgather(self, t: torch.Tensor) -> tuple[torch.Tensor, CommRecord]:
        row = t[0]
        out = torch.empty((self.group_size * row.numel(),), dtype=t.dtype, device=t.device)
        flat = row.contiguous().view(-1)
        secs = self._timed(lambda: _all_gather(out, flat, group=self.group), t)
        return out.view(1, self.group_size, *row.shape), self._record("allgather", t, secs)

    def broadcast(self, t: torch.Tensor, src: int) -> CommRecord:
        self._method_traffic(t, "broadcast")
        secs = self._timed(lambda: dist.broadcast(t, src, group=self.group), t)
        return self._record("broadcast", t, secs)

    def reduce_scatter(self, t: torch.Tensor) -> tuple[torch.Tensor, CommRecord]:
        self._method_traffic(t, "reduce_scatter")
        row = t[0].contiguous()
        out = torch.empty(
            (row.shape[0] // self.group_size, *row.shape[1:]), dtype=t.dtype, device=t.device
        )
        secs = self._timed(lambda: _reduce_scatter(out, row, group=self.group), t)
        return out.unsqueeze(0), self._record("reduce_scatter", t, secs)

    def sendrecv(
        self, send: torch.Tensor, peers: Sequence[int], out: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, CommRecord]:
        """The send and the receive are issued as one group (`batch_isend_irecv`): NCCL may
        deadlock on large messages when both peers post a lone send first."""
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
        """The part of `partition` holding this worker. Every rank must call it with the
        same partition because torch's new_group is itself a collective over the world;
        groups are created once and cached."""
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
        """Carried by the group's CPU backend (gloo), never NCCL."""
        self._instrumentation(t, "allreduce_untracked")
        dist.all_reduce(t, group=self.group)
        return t

    def allgather_untracked(self, t: torch.Tensor) -> torch.Tensor:
        """Carried by the group's CPU backend (gloo), never NCCL."""
        self._instrumentation(t, "allgather_untracked")
        return self._allgather(t)[0]

    def barrier(self) -> None:
        dist.barrier(group=self.group)
