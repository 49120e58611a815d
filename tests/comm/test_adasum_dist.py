"""Vector-halving distance-doubling Adasum against the single-process reference, and the
method=adasum delta flow against a replay of the same workers in one process, under both
engines: gloo processes holding one row each, and every worker on one axis in this process.
At two workers the engines agree bit for bit (two-term sums have only one order)."""

import math

import pytest
import torch

from repro.comm.adasum_allreduce import adasum_allreduce
from repro.comm.axis_collectives import AxisCollectives
from repro.comm.launch import init_process_group, spawn
from repro.comm.process_collectives import ProcessCollectives
from repro.netmodel.cost import Link
from repro.optim.lamb import Lamb
from repro.strategies.adasum import AdasumConfig, AdasumStrategy, adasum_per_tensor, adasum_reduce
from repro.strategies.base import StepInfo
from repro.train.replicas import Replicas
from tests.comm.adasum_inputs import DTYPES, LAYERS, TINY, _inputs, axis_inputs

CASES = [(2, [LAYERS]), (4, [LAYERS]), (8, [LAYERS, TINY])]


def _vhdd(comm, shape_lists):
    """Per case: each held worker's combined tensors, and the records' summary."""
    results = []
    for shapes in shape_lists:
        for dtype in DTYPES:
            combined, records = adasum_allreduce(axis_inputs(comm.ranks, shapes, dtype), comm)
            summary = [(r.op, r.nbytes, r.group_size, r.algo) for r in records]
            rows = [[t[row] for t in combined] for row in range(len(comm.ranks))]
            results.append((shapes, dtype, rows, summary))
    return results


def _vhdd_worker(rank, world, shape_lists):
    init_process_group()
    return [
        (shapes, dtype, rows[0], summary)
        for shapes, dtype, rows, summary in _vhdd(ProcessCollectives(), shape_lists)
    ]


def _check_vhdd(per_rank, world):
    """per_rank[r][case] = (shapes, dtype, worker r's combined tensors, records summary)."""
    for case, (shapes, dtype, combined0, summary) in enumerate(per_rank[0]):
        inputs = [_inputs(r, shapes, dtype) for r in range(world)]
        reference = adasum_per_tensor(inputs)
        tol = dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else {}
        for r in range(world):
            combined = per_rank[r][case][2]
            assert all(torch.equal(a, b) for a, b in zip(combined, combined0, strict=True))
            assert per_rank[r][case][3] == summary
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


def _axis_vhdd(world, shape_lists):
    cases = _vhdd(AxisCollectives(world), shape_lists)
    return [[(s, d, rows[r], summary) for s, d, rows, summary in cases] for r in range(world)]


@pytest.mark.parametrize("world, shape_lists", CASES)
def test_distributed_adasum_equals_reference_per_tensor(world, shape_lists):
    per_rank = spawn(_vhdd_worker, world, shape_lists)
    _check_vhdd(per_rank, world)
    if world == 2:
        axis = _axis_vhdd(world, shape_lists)
        for got, want in zip(axis, per_rank, strict=True):
            for (_, _, a, _), (_, _, b, _) in zip(got, want, strict=True):
                assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("world, shape_lists", CASES)
def test_axis_adasum_equals_reference_per_tensor(world, shape_lists):
    _check_vhdd(_axis_vhdd(world, shape_lists), world)


def _check_records(summary, world, shapes, dtype):
    """Bytes moved: a reduce-scatter's worth of sendrecv, as much back, small scalars
    allreduced by the algorithm the cost model charges for them (`ADASUM_STATS_ALGO`)."""
    elem = torch.finfo(dtype).bits // 8
    padded = -(-sum(math.prod(s) for s in shapes) // world) * world
    levels = int(math.log2(world))
    sendrecv = [nbytes for op, nbytes, _, _ in summary if op == "sendrecv"]
    halving = [padded // 2 ** (j + 1) * elem for j in range(levels)]
    assert sendrecv == halving + halving[::-1]
    assert sum(halving) == padded * (world - 1) // world * elem
    scalars = [(size, nbytes, algo) for op, nbytes, size, algo in summary if op == "allreduce"]
    assert scalars == [(2 ** (j + 1), 3 * len(shapes) * 8, "tree") for j in range(levels)]
    assert {op for op, _, _, _ in summary} == {"sendrecv", "allreduce"}


OPTIMIZERS = ("sgd_momentum", "adam", "lamb")
COMBINERS = ("adasum", "sum", "mean")
# label -> config: the tiny model takes Adasum's gathering path by default; "adasum_halving"
# forces the vector-halving allreduce through the same flow. sum and mean take the delta
# flow here (method.flow=delta, this suite's own arm); their default, Horovod's gradient
# flow, is checked in tests/unit/test_adasum_flows.py.
CASES_STRATEGY = {
    "adasum": AdasumConfig(combiner="adasum"),
    "adasum_halving": AdasumConfig(combiner="adasum", gather_below_kb=0),
    "sum": AdasumConfig(combiner="sum", flow="delta"),
    "mean": AdasumConfig(combiner="mean", flow="delta"),
}
STEPS = 3


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2)
    ).double()


def _optimizer(name: str, params, worker_axis: bool = False) -> torch.optim.Optimizer:
    """`worker_axis`: the parameters are stacked workers' copies (LAMB's trust ratio is
    then taken per worker; SGD and Adam are elementwise either way)."""
    if name == "sgd_momentum":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=0.05)
    return Lamb(params, lr=0.05, weight_decay=0.01, worker_axis=worker_axis)


def _batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 * rank + step)
    x = torch.randn(8, 4, generator=g, dtype=torch.float64)
    y = torch.randn(8, 2, generator=g, dtype=torch.float64)
    return x, y


def _backward(model: torch.nn.Module, rank: int, step: int) -> float:
    x, y = _batch(rank, step)
    model.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss.item()


def _run_strategy(comm, world):
    """Every (combiner, optimizer) case through AdasumStrategy on the held workers'
    `Replicas`; returns each held worker's final parameters and the strategy's metrics."""
    out = {}
    rows = len(comm.ranks)
    for label, cfg in CASES_STRATEGY.items():
        for opt_name in OPTIMIZERS:
            replicas = Replicas(_model(), rows, "loop")
            opt = _optimizer(opt_name, replicas.parameters(), worker_axis=True)
            strategy = AdasumStrategy(cfg, world)
            strategy.setup(replicas, opt, comm, None)
            for step in range(STEPS):
                batches = [_batch(r, step) for r in comm.ranks]
                x = torch.stack([b[0] for b in batches])
                y = torch.stack([b[1] for b in batches])
                losses = replicas.forward_backward(x, y, torch.nn.functional.mse_loss)
                info = StepInfo(step, 0.0, losses, 0.05, 0.0, Link(1e-4, 1e9))
                assert strategy.after_backward(info) == []
                opt.step()
                strategy.after_step(info)
            params = [[p[r].detach().clone() for p in replicas.parameters()] for r in range(rows)]
            out[label, opt_name] = (params, strategy.metrics())
    return out


def _strategy_worker(rank, world):
    init_process_group()
    out = _run_strategy(ProcessCollectives(), world)
    return {key: (params[0], metrics) for key, (params, metrics) in out.items()}


def _axis_strategy(world):
    """The same cases with every worker on one axis, split into per-worker results."""
    out = _run_strategy(AxisCollectives(world), world)
    return [
        {key: (params[r], metrics) for key, (params, metrics) in out.items()} for r in range(world)
    ]


def _replay(world: int, combiner: str, opt_name: str) -> list[list[torch.Tensor]]:
    """All workers in one process: local steps, then the combiner on the per-layer deltas."""
    models = [_model() for _ in range(world)]
    opts = [_optimizer(opt_name, m.parameters()) for m in models]
    for step in range(STEPS):
        starts = [[p.detach().clone() for p in m.parameters()] for m in models]
        for r, (m, o) in enumerate(zip(models, opts, strict=True)):
            _backward(m, r, step)
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


def _check_delta_flow(per_rank, world):
    """Every case against the replay."""
    finals = {}
    for (label, opt_name), (params, metrics) in per_rank[0].items():
        combiner = CASES_STRATEGY[label].combiner
        expected = _replay(world, combiner, opt_name)
        for r in range(world):
            for got, ref in zip(per_rank[r][label, opt_name][0], expected[r], strict=True):
                torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)
        assert metrics["method/combiner"] == combiner and metrics["method/bytes"] > 0
        finals[label, opt_name] = torch.cat([p.reshape(-1) for p in params])
    for opt_name in OPTIMIZERS:  # the combiner matters: three different trajectories
        a, s, m = (finals[c, opt_name] for c in COMBINERS)
        assert not torch.allclose(a, s) and not torch.allclose(a, m)


def test_delta_flow_matches_replay_for_every_combiner_and_optimizer():
    world = 2
    per_rank = spawn(_strategy_worker, world)
    _check_delta_flow(per_rank, world)
    axis = _axis_strategy(world)
    for got, want in zip(axis, per_rank, strict=True):
        for key, (params, metrics) in want.items():
            assert all(torch.equal(a, b) for a, b in zip(got[key][0], params, strict=True)), key
            assert got[key][1] == metrics


@pytest.mark.parametrize("world", [2, 4])
def test_axis_delta_flow_matches_replay(world):
    """Including Adam on the halving path at 4 workers, where two nearly antiparallel first
    deltas make Adasum amplify any rounding difference between the pair's two ranks."""
    _check_delta_flow(_axis_strategy(world), world)


def _check_one_worker(per_combiner):
    for opt_name in OPTIMIZERS:
        model = _model()
        opt = _optimizer(opt_name, model.parameters())
        for step in range(STEPS):
            _backward(model, 0, step)
            opt.step()
        for label, cfg in CASES_STRATEGY.items():
            params, metrics = per_combiner[label, opt_name]
            for got, ref in zip(params, model.parameters(), strict=True):
                torch.testing.assert_close(got, ref.detach(), rtol=1e-14, atol=1e-15)
            if cfg.combiner == "adasum":
                assert metrics["method/bytes"] == 0.0


def test_one_worker_equals_the_plain_optimizer():
    (per_combiner,) = spawn(_strategy_worker, 1)
    _check_one_worker(per_combiner)
    (axis,) = _axis_strategy(1)
    _check_one_worker(axis)
