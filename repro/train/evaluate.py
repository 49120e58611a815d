"""Test metrics of the model the method would deliver: the worker-averaged model.

Parameters and float buffers are averaged over workers (local-update methods hold
different models between averagings, so evaluating one worker's copy would flatter or
punish them arbitrarily). The average is an allreduce in float64 on the workers' device
(the size of the model: on a GPU it belongs on NCCL, not on the CPU backend), whose record
is dropped: it is instrumentation, not the method's traffic, and never reaches the modeled
clock. Each worker evaluates its slice of the test set (rank::world) and the sums, a CPU
tensor like every metric, are added over workers, so both engines sum the same batches.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from repro.dist.collectives import Collectives
from repro.strategies.flat import flatten
from repro.train.replicas import Replicas
from repro.workload.workload import Workload


def averaged_model(replicas: Replicas, comm: Collectives) -> torch.nn.Module:
    """A plain module holding the average over every worker of the run."""
    tensors = replicas.float_tensors()
    if comm.world_size == 1:
        return replicas.module_with(flatten(tensors)[0])
    flat = flatten(tensors).double()
    comm.allreduce(flat)  # its record is not the method's traffic: dropped
    return replicas.module_with((flat[0] / comm.world_size).to(tensors[0].dtype))


def train_loss(loss_sums: Sequence[float], count: int, comm: Collectives) -> float:
    """Mean training loss over every worker of the run: each held worker's loss sum and
    step count, added over workers as a CPU tensor (a metric: the CPU backend carries it)."""
    sums = torch.tensor([[s, count] for s in loss_sums], dtype=torch.float64)
    comm.allreduce_untracked(sums)
    return (sums[0, 0] / sums[0, 1]).item()


def test_sums(model: torch.nn.Module, workload: Workload, comm: Collectives) -> torch.Tensor:
    """(loss sum, correct, count) over the whole test set, split by worker as the process
    engine splits it."""
    sums = torch.stack([workload.evaluate_shard(model, r, comm.world_size) for r in comm.ranks])
    comm.allreduce_untracked(sums)
    return sums[0]
