"""Test metrics of the model the method would deliver: the worker-averaged model.

Parameters and float buffers are averaged over workers (local-update methods hold
different models between averagings, so evaluating one worker's copy would flatter or
punish them arbitrarily). The average is an allreduce in float64 on the workers' device
(the size of the model: on a GPU it belongs on NCCL, not on the CPU backend), whose record
is dropped: it is instrumentation, not the method's traffic, and never reaches the modeled
clock. Each worker evaluates its slice of the test set (rank::world) and the sums, a CPU
tensor like every metric, are added over workers.

A process holding every worker (the simulated engine) needs neither collective: it sums the
workers' rows in rank order in float64 itself, the very sum the allreduce forms, and
evaluates the union of the slices, the whole test set, in full batches (the counts are the
same; the loss sum differs from the per-slice one by float rounding). At 32 workers the
slices were 32 passes of 62 samples each.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from repro.comm.collectives import Collectives
from repro.strategies.flat import flatten
from repro.train.replicas import Replicas
from repro.workload.workload import Workload


def averaged_model(replicas: Replicas, comm: Collectives) -> torch.nn.Module:
    """A plain module holding the average over every worker of the run."""
    tensors = replicas.float_tensors()
    if comm.world_size == 1:
        return replicas.module_with(flatten(tensors)[0])
    if len(comm.ranks) == comm.world_size:
        total = _sum_in_rank_order(tensors)
    else:
        flat = flatten(tensors).double()
        comm.allreduce(flat)  # its record is not the method's traffic: dropped
        total = flat[0]
    return replicas.module_with((total / comm.world_size).to(tensors[0].dtype))


def _sum_in_rank_order(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """The float64 sum over the worker axis of every tensor, end to end, when this process
    holds every worker: the sum the allreduce would form (rows added in rank order, each
    float32 value widened exactly), without first widening and copying every worker's
    row and writing the sum back into each."""
    n = tensors[0].shape[0]
    rows = [t.detach().reshape(n, -1) for t in tensors]
    total = torch.empty(sum(r.shape[1] for r in rows), dtype=torch.float64, device=rows[0].device)
    offset = 0
    for r in rows:
        part = total[offset : offset + r.shape[1]]
        part.copy_(r[0])
        for i in range(1, n):
            part.add_(r[i])
        offset += r.shape[1]
    return total


def train_loss(loss_sums: Sequence[float], count: int, comm: Collectives) -> float:
    """Mean training loss over every worker of the run: each held worker's loss sum and
    step count, added over workers as a CPU tensor (a metric: the CPU backend carries it)."""
    sums = torch.tensor([[s, count] for s in loss_sums], dtype=torch.float64)
    comm.allreduce_untracked(sums)
    return (sums[0, 0] / sums[0, 1]).item()


def test_sums(model: torch.nn.Module, workload: Workload, comm: Collectives) -> torch.Tensor:
    """(loss sum, correct, count) over the whole test set, split by worker as the process
    engine splits it. Where this process holds every worker, their shards together are the
    whole test set, evaluated in one pass of full batches instead of one small pass per
    worker: the same counts, the loss sum to float rounding (other batches)."""
    if len(comm.ranks) == comm.world_size:
        return workload.evaluate_shard(model, 0, 1)
    sums = torch.stack([workload.evaluate_shard(model, r, comm.world_size) for r in comm.ranks])
    comm.allreduce_untracked(sums)
    return sums[0]
