"""Synchronous SGD on N workers at batch B follows single-process SGD at batch N*B."""

import pytest
import torch

from repro.dist.collectives import Collectives
from repro.dist.launch import init_process_group, spawn
from repro.strategies.base import StepInfo
from repro.strategies.sync import SyncConfig, SyncStrategy
from repro.netmodel.cost import Link
from repro.workload.data import ShardSampler, synthetic
from repro.workload.models import build_model

STEPS, BATCH, SEED = 25, 8, 3


def _trajectory(rank: int, world: int, batch: int, with_comm: bool) -> list[torch.Tensor]:
    data = synthetic(512, seed=SEED)
    torch.manual_seed(SEED)
    model = build_model("mlp", data.num_classes, in_dim=data.x_train.shape[1])
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sampler = ShardSampler(data.n_train, world, rank, batch, SEED)
    strategy = SyncStrategy(SyncConfig(), world)
    if with_comm:
        strategy.setup(model, opt, Collectives())
    out = []
    for step in range(1, STEPS + 1):
        idx = sampler.next_indices()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(data.x_train[idx]), data.y_train[idx]).backward()
        if with_comm:
            strategy.after_backward(StepInfo(step, 0.0, 0.0, 0.1, 0.0, Link(0.0, 1e9)))
        opt.step()
        out.append(torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()]))
    return out


def _worker(rank: int, world: int) -> list[torch.Tensor]:
    init_process_group()
    torch.set_num_threads(1)
    return _trajectory(rank, world, BATCH, with_comm=True)


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])
def test_sync_matches_single_process_large_batch(world):
    reference = _trajectory(0, 1, BATCH * world, with_comm=False)
    results = spawn(_worker, world)
    for rank_traj in results:
        assert len(rank_traj) == STEPS
        for step, (got, want) in enumerate(zip(rank_traj, reference, strict=True)):
            assert torch.allclose(got, want, rtol=1e-5, atol=1e-6), f"step {step + 1}"
    # every rank holds the same model, and the model really moved
    assert torch.equal(results[0][-1], results[-1][-1])
    assert (reference[-1] - reference[0]).abs().max() > 1e-2
