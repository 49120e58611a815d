"""Synchronous SGD on N workers at batch B follows single-process SGD at batch N*B.

Both engines are held to it: N gloo processes (`ProcessCollectives`, one row each) and all
N workers on one axis in this process (`AxisCollectives`). At two workers the engines
agree bit for bit: the same per-worker kernels, and a two-term sum has only one order.
"""

import pytest
import torch

from repro.comm.axis_collectives import AxisCollectives
from repro.comm.launch import init_process_group, spawn
from repro.comm.process_collectives import ProcessCollectives
from repro.netmodel.cost import Link
from repro.strategies.base import StepInfo
from repro.strategies.sync import SyncConfig, SyncStrategy
from repro.train.replicas import Replicas
from repro.workload.data import ShardSampler, synthetic
from repro.workload.models import build_model

STEPS, BATCH, SEED = 25, 8, 3
LINK = Link(0.0, 1e9)


def _model(data) -> torch.nn.Module:
    torch.manual_seed(SEED)
    return build_model("mlp", data.num_classes, in_dim=data.x_train.shape[1])


def _reference(batch: int) -> list[torch.Tensor]:
    """One plain module, no communication, at the whole cluster's batch."""
    data = synthetic(512, seed=SEED)
    model = _model(data)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sampler = ShardSampler(data.n_train, 1, 0, batch, SEED)
    out = []
    for _ in range(STEPS):
        idx = sampler.next_indices()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(data.x_train[idx]), data.y_train[idx]).backward()
        opt.step()
        out.append(torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()]))
    return out


def _trajectory(comm, world: int, vectorize: str = "loop") -> list[torch.Tensor]:
    """Every held worker's flat model after each step: (steps) of (held workers, numel)."""
    data = synthetic(512, seed=SEED)
    replicas = Replicas(_model(data), len(comm.ranks), vectorize)
    opt = torch.optim.SGD(replicas.parameters(), lr=0.1, momentum=0.9)
    samplers = [ShardSampler(data.n_train, world, r, BATCH, SEED) for r in comm.ranks]
    strategy = SyncStrategy(SyncConfig(), world)
    strategy.setup(replicas, opt, comm, None)
    out = []
    for step in range(1, STEPS + 1):
        idx = [s.next_indices() for s in samplers]
        x = torch.stack([data.x_train[i] for i in idx])
        y = torch.stack([data.y_train[i] for i in idx])
        losses = replicas.forward_backward(x, y, torch.nn.functional.cross_entropy)
        strategy.after_backward(StepInfo(step, 0.0, losses, 0.1, 0.0, LINK))
        opt.step()
        rows = len(comm.ranks)
        out.append(torch.cat([p.detach().reshape(rows, -1) for p in replicas.parameters()], 1))
    return out


def _worker(rank: int, world: int) -> list[torch.Tensor]:
    init_process_group()
    torch.set_num_threads(1)
    return [rows[0].clone() for rows in _trajectory(ProcessCollectives(), world)]


def _axis_trajectory(world: int, vectorize: str) -> list[torch.Tensor]:
    """All workers in this process, on one thread as each worker process runs."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _trajectory(AxisCollectives(world), world, vectorize)
    finally:
        torch.set_num_threads(threads)


def _assert_follows(trajectory: list[torch.Tensor], reference: list[torch.Tensor]) -> None:
    assert len(trajectory) == STEPS
    for step, (got, want) in enumerate(zip(trajectory, reference, strict=True)):
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-6), f"step {step + 1}"


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])
def test_sync_matches_single_process_large_batch(world):
    reference = _reference(BATCH * world)
    results = spawn(_worker, world)
    for rank_traj in results:
        _assert_follows(rank_traj, reference)
    # every rank holds the same model, and the model really moved
    assert torch.equal(results[0][-1], results[-1][-1])
    assert (reference[-1] - reference[0]).abs().max() > 1e-2

    axis = _axis_trajectory(world, "loop")
    for rank in range(world):
        _assert_follows([rows[rank] for rows in axis], reference)
        if world == 2:
            assert all(torch.equal(a[rank], p) for a, p in zip(axis, results[rank], strict=True))


@pytest.mark.parametrize("world", [2, 4])
def test_axis_engine_vmap_matches_single_process_large_batch(world):
    """The batched forward/backward takes other kernels; the trajectory still follows."""
    reference = _reference(BATCH * world)
    axis = _axis_trajectory(world, "vmap")
    for rank in range(world):
        _assert_follows([rows[rank] for rows in axis], reference)
    assert torch.equal(axis[-1][0], axis[-1][-1])
