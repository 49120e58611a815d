"""Vector-halving distance-doubling Adasum over gloo against the single-process reference,
and the method=adasum delta flow against a replay of the same workers in one process."""

import math

import pytest
import torch

from repro.dist.adasum_allreduce import adasum_allreduce
from repro.dist.collectives import Collectives
from repro.dist.launch import init_process_group, spawn
from repro.netmodel.cost import Link
from repro.strategies.adasum import AdasumConfig, AdasumStrategy, adasum_per_tensor, adasum_reduce
from repro.strategies.base import StepInfo
from repro.train.lamb import Lamb
from tests.dist.adasum_inputs import DTYPES, LAYERS, TINY, _inputs

def _vhdd_worker(rank, world, shape_lists):
    init_process_group()
    comm = Collectives()
    results = []
    for shapes in shape_lists:
        for dtype in DTYPES:
            combined, records = adasum_allreduce(_inputs(rank, shapes, dtype), comm)
            summary = [(r.op, r.nbytes, r.group_size) for r in records]
            results.append((shapes, dtype, combined, summary))
    return results


@pytest.mark.parametrize("world, shape_lists", [(2, [LAYERS]), (4, [LAYERS]), (8, [LAYERS, TINY])])
def test_distributed_adasum_equals_reference_per_tensor(world, shape_lists):
    per_rank = spawn(_vhdd_worker, world, shape_lists)
    for case, (shapes, dtype, combined0, summary) in enumerate(per_rank[0]):
        inputs = [_inputs(r, shapes, dtype) for r in range(world)]
        reference = adasum_per_tensor(inputs)
        tol = dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else {}
        for r in range(world):
            combined = per_rank[r][case][2]
            assert all(torch.equal(a, b) for a, b in zip(combined, combined0, strict=True))
        for got, ref, x in zip(combined0, reference, inputs[0], strict=True):
            assert got.dtype == dtype and got.shape == x.shape
            torch.testing.assert_close(got, ref, **tol)
        if shapes == LAYERS:
            # The tiny layer against a float64 evaluation, with tolerances relative to the
            # layer's own scale (a fixed absolute tolerance would pass anything this small).
            assert combined0[3].abs().max() < 1e-35 and torch.isfinite(combined0[3]).all()
            exact = adasum_reduce([x[3].double() for x in inputs])
            rel = 1e-12 if dtype == torch.float64 else 1e-5
            scale = exact.abs().max().item()
            torch.testing.assert_close(combined0[3].double(), exact, rtol=rel, atol=rel * scale)
            assert not combined0[0].any()
            torch.testing.assert_close(combined0[2], sum(x[2] for x in inputs) / world, **tol)
            whole = adasum_reduce([torch.cat([t.reshape(-1) for t in x]) for x in inputs])
            flat = torch.cat([t.reshape(-1) for t in combined0])
            assert (flat - whole).abs().max() > 1e-2
        _check_records(summary, world, shapes, dtype)


def _check_records(summary, world, shapes, dtype):
    """Bytes moved: a reduce-scatter's worth of sendrecv, as much back, small scalars."""
    elem = torch.finfo(dtype).bits // 8
    padded = -(-sum(math.prod(s) for s in shapes) // world) * world
    levels = int(math.log2(world))
    sendrecv = [nbytes for op, nbytes, _ in summary if op == "sendrecv"]
    halving = [padded // 2 ** (j + 1) * elem for j in range(levels)]
    assert sendrecv == halving + halving[::-1]
    assert sum(halving) == padded * (world - 1) // world * elem
    scalars = [(size, nbytes) for op, nbytes, size in summary if op == "allreduce"]
    assert scalars == [(2 ** (j + 1), 3 * len(shapes) * 8) for j in range(levels)]
    assert {op for op, _, _ in summary} == {"sendrecv", "allreduce"}


OPTIMIZERS = ("sgd_momentum", "adam", "lamb")
COMBINERS = ("adasum", "sum", "mean")
# label -> config: the tiny model takes Adasum's gathering path by default; "adasum_halving"
# forces the vector-halving allreduce through the same flow.
CASES = {
    "adasum": AdasumConfig(combiner="adasum"),
    "adasum_halving": AdasumConfig(combiner="adasum", gather_below_kb=0),
    "sum": AdasumConfig(combiner="sum"),
    "mean": AdasumConfig(combiner="mean"),
}
STEPS = 3


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2)
    ).double()


def _optimizer(name: str, model: torch.nn.Module) -> torch.optim.Optimizer:
    if name == "sgd_momentum":
        return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(model.parameters(), lr=0.05)
    return Lamb(model.parameters(), lr=0.05, weight_decay=0.01)


def _backward(model: torch.nn.Module, opt: torch.optim.Optimizer, rank: int, step: int) -> float:
    g = torch.Generator().manual_seed(100 * rank + step)
    x = torch.randn(8, 4, generator=g, dtype=torch.float64)
    y = torch.randn(8, 2, generator=g, dtype=torch.float64)
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss.item()


def _strategy_worker(rank, world):
    init_process_group()
    comm = Collectives()
    out = {}
    for label, cfg in CASES.items():
        for opt_name in OPTIMIZERS:
            model = _model()
            opt = _optimizer(opt_name, model)
            strategy = AdasumStrategy(cfg, world)
            strategy.setup(model, opt, comm)
            for step in range(STEPS):
                loss = _backward(model, opt, rank, step)
                info = StepInfo(step, 0.0, loss, 0.05, 0.0, Link(1e-4, 1e9))
                assert strategy.after_backward(info) == []
                opt.step()
                strategy.after_step(info)
            params = [p.detach().clone() for p in model.parameters()]
            out[label, opt_name] = (params, strategy.metrics())
    return out


def _replay(world: int, combiner: str, opt_name: str) -> list[list[torch.Tensor]]:
    """All workers in one process: local steps, then the combiner on the per-layer deltas."""
    models = [_model() for _ in range(world)]
    opts = [_optimizer(opt_name, m) for m in models]
    for step in range(STEPS):
        starts = [[p.detach().clone() for p in m.parameters()] for m in models]
        for r, (m, o) in enumerate(zip(models, opts, strict=True)):
            _backward(m, o, r, step)
            o.step()
        deltas = [
            [p.detach() - s for p, s in zip(m.parameters(), st, strict=True)]
            for m, st in zip(models, starts, strict=True)
        ]
        if combiner == "adasum":
            combined = adasum_per_tensor(deltas)
        else:
            combined = [sum(layer) for layer in zip(*deltas, strict=True)]
            if combiner == "mean":
                combined = [c / world for c in combined]
        with torch.no_grad():
            for m, st in zip(models, starts, strict=True):
                for p, s, c in zip(m.parameters(), st, combined, strict=True):
                    p.copy_(s + c)
    return [[p.detach() for p in m.parameters()] for m in models]


def test_delta_flow_matches_replay_for_every_combiner_and_optimizer():
    world = 2
    per_rank = spawn(_strategy_worker, world)
    finals = {}
    for (label, opt_name), (params, metrics) in per_rank[0].items():
        combiner = CASES[label].combiner
        expected = _replay(world, combiner, opt_name)
        for r in range(world):
            for got, ref in zip(per_rank[r][label, opt_name][0], expected[r], strict=True):
                torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)
        assert metrics["method/combiner"] == combiner and metrics["method/bytes"] > 0
        finals[label, opt_name] = torch.cat([p.reshape(-1) for p in params])
    for opt_name in OPTIMIZERS:  # the combiner matters: three different trajectories
        a, s, m = (finals[c, opt_name] for c in COMBINERS)
        assert not torch.allclose(a, s) and not torch.allclose(a, m)


def test_one_worker_equals_the_plain_optimizer():
    (per_combiner,) = spawn(_strategy_worker, 1)
    for opt_name in OPTIMIZERS:
        model = _model()
        opt = _optimizer(opt_name, model)
        for step in range(STEPS):
            _backward(model, opt, 0, step)
            opt.step()
        for label, cfg in CASES.items():
            params, metrics = per_combiner[label, opt_name]
            for got, ref in zip(params, model.parameters(), strict=True):
                torch.testing.assert_close(got, ref.detach(), rtol=1e-14, atol=1e-15)
            if cfg.combiner == "adasum":
                assert metrics["method/bytes"] == 0.0
