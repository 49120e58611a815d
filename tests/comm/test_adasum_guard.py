"""`method.zero_norm_guard=fixed_1e-8` (a fixed 1e-8 on a squared norm): the halving allreduce,
the gathering path and the delta flow apply it as the reference operator does, under both
engines, on inputs that fall under the guard (and that Horovod's sqrt(DBL_MIN) weighs)."""

import pytest
import torch

from repro.comm.adasum_allreduce import adasum_allreduce
from repro.comm.adasum_gather import adasum_gather_
from repro.comm.adasum_rules import ZERO_NORM_GUARDS
from repro.comm.axis_collectives import AxisCollectives
from repro.comm.flat_layout import FlatLayout
from repro.comm.launch import init_process_group, spawn
from repro.comm.process_collectives import ProcessCollectives
from repro.netmodel.cost import Link
from repro.strategies.adasum import AdasumConfig, AdasumStrategy, adasum_per_tensor
from repro.strategies.base import StepInfo
from repro.train.replicas import Replicas

FIXED = ZERO_NORM_GUARDS["fixed_1e-8"]
SHAPES = [(6,), (3, 4), (5,)]


def _inputs(rank: int) -> list[torch.Tensor]:
    """Layer 0 under the guard on every rank (|.|^2 ~ 1e-10; sums of 8 stay under 1e-8),
    layer 1 normal, layer 2 under the guard on rank 0 only."""
    g = torch.Generator().manual_seed(50 + rank)
    out = [torch.randn(s, generator=g, dtype=torch.float64) for s in SHAPES]
    out[0] *= 4e-6
    if rank == 0:
        out[2] *= 4e-6
    return out


def _paths(comm) -> dict[str, list[torch.Tensor]]:
    """Both Adasum paths under the fixed 1e-8 guard: each held worker's combined tensors."""
    tensors = [torch.stack(layer) for layer in zip(*(_inputs(r) for r in comm.ranks), strict=True)]
    halving, _ = adasum_allreduce(tensors, comm, FIXED)
    layout = FlatLayout([t[0] for t in tensors], comm.world_size)
    buf = layout.flatten(tensors)
    adasum_gather_(buf, layout, comm, FIXED)
    gathered = layout.unflatten(buf)
    return {
        "halving": [[t[row].clone() for t in halving] for row in range(len(comm.ranks))],
        "gather": [[t[row].clone() for t in gathered] for row in range(len(comm.ranks))],
    }


def _check_paths(per_rank: list[dict], world: int) -> None:
    inputs = [_inputs(r) for r in range(world)]
    reference = adasum_per_tensor(inputs, FIXED)
    unguarded = adasum_per_tensor(inputs)
    plain = sum(x[0] for x in inputs)
    torch.testing.assert_close(reference[0], plain, rtol=1e-14, atol=0)
    assert not torch.allclose(unguarded[0], plain, rtol=1e-3, atol=0)
    assert not torch.allclose(unguarded[2], reference[2], rtol=1e-3, atol=0)
    for r in range(world):
        assert all(torch.equal(a, b) for a, b in zip(per_rank[r]["gather"], reference, strict=True))
        for got, ref in zip(per_rank[r]["halving"], reference, strict=True):
            torch.testing.assert_close(got, ref, rtol=1e-12, atol=0)


def _deltas(comm, world: int) -> dict[str, list[torch.Tensor]]:
    """Two delta-flow steps at a learning rate small enough that every per-tensor delta falls
    under the fixed 1e-8 guard; each held worker's total parameter change per configuration."""
    out = {}
    configs = {
        "fixed": AdasumConfig(zero_norm_guard="fixed_1e-8", gather_below_kb=0),
        "fixed_gather": AdasumConfig(zero_norm_guard="fixed_1e-8"),
        "horovod": AdasumConfig(gather_below_kb=0),
        "sum": AdasumConfig(combiner="sum", flow="delta"),
    }
    for label, cfg in configs.items():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
        replicas = Replicas(model.double(), len(comm.ranks), "loop")
        start = [p.detach().clone() for p in replicas.parameters()]
        opt = torch.optim.SGD(replicas.parameters(), lr=1e-6)
        strategy = AdasumStrategy(cfg, world)
        strategy.setup(replicas, opt, comm, None)
        for step in range(2):
            gens = [torch.Generator().manual_seed(10 * r + step) for r in comm.ranks]
            x = torch.stack([torch.randn(8, 4, generator=g, dtype=torch.float64) for g in gens])
            y = torch.stack([torch.randn(8, 2, generator=g, dtype=torch.float64) for g in gens])
            losses = replicas.forward_backward(x, y, torch.nn.functional.mse_loss)
            info = StepInfo(step, 0.0, losses, 1e-6, 0.0, Link(1e-4, 1e9))
            strategy.after_backward(info)
            opt.step()
            strategy.after_step(info)
        change = [p.detach() - s for p, s in zip(replicas.parameters(), start, strict=True)]
        out[label] = [
            torch.cat([c[row].reshape(-1) for c in change]) for row in range(len(comm.ranks))
        ]
    return out


def _check_deltas(per_rank: list[dict], world: int) -> None:
    for r in range(world):
        moved = per_rank[r]
        assert moved["sum"].abs().max() > 0
        for label in ("fixed", "fixed_gather"):
            torch.testing.assert_close(moved[label], moved["sum"], rtol=1e-9, atol=0)
        assert not torch.allclose(moved["horovod"], moved["sum"], rtol=1e-2, atol=0)
        for label in moved:
            assert torch.equal(moved[label], per_rank[0][label])


def _worker(rank, world):
    init_process_group()
    comm = ProcessCollectives()
    paths = _paths(comm)
    deltas = _deltas(comm, world)
    return {k: v[0] for k, v in paths.items()}, {k: v[0] for k, v in deltas.items()}


def _axis(world):
    comm = AxisCollectives(world)
    paths, deltas = _paths(comm), _deltas(comm, world)
    return [
        ({k: v[r] for k, v in paths.items()}, {k: v[r] for k, v in deltas.items()})
        for r in range(world)
    ]


@pytest.mark.parametrize("world", [2, 4, 8])
def test_axis_engine_applies_the_fixed_guard(world):
    per_rank = _axis(world)
    _check_paths([p for p, _ in per_rank], world)
    _check_deltas([d for _, d in per_rank], world)


def test_process_engine_applies_the_fixed_guard_as_the_axis_engine_does():
    world = 2
    per_rank = spawn(_worker, world)
    _check_paths([p for p, _ in per_rank], world)
    _check_deltas([d for _, d in per_rank], world)
    for (paths, deltas), (axis_paths, axis_deltas) in zip(per_rank, _axis(world), strict=True):
        for key in paths:
            assert all(torch.equal(a, b) for a, b in zip(paths[key], axis_paths[key], strict=True))
        for key in deltas:
            assert torch.equal(deltas[key], axis_deltas[key])
