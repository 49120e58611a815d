"""Horovod's baselines in `method=adasum` against optimizers stepped independently.

combiner=mean is Horovod's op=Average: one optimizer step on the workers' mean gradient;
combiner=sum is op=Sum: one step on their summed gradient. The reference here is torch's
own optimizer (our LAMB for LAMB, which torch lacks) on one plain model, fed the mean (sum)
of the gradients each worker's batch gives; at 2 workers the simulated engine must match it
bit for bit (a sum of two is order-free). flow=delta, this suite's own arm, is checked
against two independently stepped optimizers whose deltas are averaged.
"""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn
from torch.nn.functional import cross_entropy

from repro.comm.axis_collectives import AxisCollectives
from repro.netmodel.cost import Link
from repro.optim.config import OptimConfig, build_optimizer
from repro.optim.lamb import Lamb
from repro.strategies.adasum import AdasumConfig, AdasumStrategy
from repro.strategies.base import StepInfo
from repro.train.replicas import Replicas

WORKERS, STEPS = 2, 6
OPTIMS = {
    "sgd": OptimConfig(name="sgd", lr=0.1, momentum=0.9),
    "adam": OptimConfig(name="adam", lr=0.01),
    "lamb": OptimConfig(name="lamb", lr=0.02, weight_decay=0.01),
}


def _template() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))


def _batches(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(workers, 16, 6) inputs and (workers, 16) labels, a different batch per worker."""
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(WORKERS, 16, 6, generator=g), torch.randint(0, 3, (WORKERS, 16), generator=g)


def _strategy_run(opt: str, **method) -> tuple[list[torch.Tensor], float]:
    """Every worker's flat parameters after STEPS steps of `method=adasum` with `method`,
    simulated (one worker after another, a lone worker's kernels); and the last step's bytes."""
    replicas = Replicas(_template(), WORKERS, "loop")
    optimizer = build_optimizer(OPTIMS[opt], replicas.parameters())
    strategy = AdasumStrategy(AdasumConfig(**method), WORKERS)
    strategy.setup(replicas, optimizer, AxisCollectives(WORKERS), None)
    for step in range(STEPS):
        x, y = _batches(step)
        losses = replicas.forward_backward(x, y, cross_entropy)
        info = StepInfo(step, 0.0, losses, OPTIMS[opt].lr, 0.0, Link(1e-4, 1e9))
        strategy.after_backward(info)
        optimizer.step()
        strategy.after_step(info)
    flat = torch.cat([p.detach().reshape(WORKERS, -1) for p in replicas.parameters()], 1)
    return list(flat), strategy.metrics()["method/bytes"]


def _plain_optimizer(opt: str, params) -> torch.optim.Optimizer | Lamb:
    cfg = OPTIMS[opt]
    if opt == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum)
    if opt == "adam":
        return torch.optim.Adam(params, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps)
    return Lamb(params, lr=cfg.lr, betas=tuple(cfg.betas), eps=cfg.eps, weight_decay=0.01)


def _worker_grads(model: nn.Module, step: int) -> list[list[torch.Tensor]]:
    x, y = _batches(step)
    params = list(model.parameters())
    return [list(torch.autograd.grad(cross_entropy(model(x[w]), y[w]), params)) for w in range(2)]


def _reference_gradient_flow(opt: str, average: bool) -> torch.Tensor:
    """One plain model stepped by the plain optimizer on the workers' mean (or sum) gradient."""
    model = _template()
    optimizer = _plain_optimizer(opt, model.parameters())
    for step in range(STEPS):
        g0, g1 = _worker_grads(model, step)
        for p, a, b in zip(model.parameters(), g0, g1, strict=True):
            p.grad = (a + b) / 2 if average else a + b
        optimizer.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


@pytest.mark.parametrize("opt", sorted(OPTIMS))
def test_average_is_one_step_on_the_mean_gradient(opt):
    workers, nbytes = _strategy_run(opt, combiner="mean")
    reference = _reference_gradient_flow(opt, average=True)
    for w in workers:
        assert torch.equal(w, reference), opt
    assert nbytes == reference.numel() * 4  # one allreduce of the float32 gradients


@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_sum_is_one_step_on_the_summed_gradient(opt):
    workers, _ = _strategy_run(opt, combiner="sum")
    reference = _reference_gradient_flow(opt, average=False)
    for w in workers:
        assert torch.equal(w, reference), opt


def _reference_averaged_deltas(opt: str) -> torch.Tensor:
    """Two plain models, each stepped by its own optimizer on its own gradient from the
    shared start; both then move to start + the mean of their deltas."""
    models = [_template(), _template()]
    optimizers = [_plain_optimizer(opt, m.parameters()) for m in models]
    for step in range(STEPS):
        start = [p.detach().clone() for p in models[0].parameters()]
        x, y = _batches(step)
        for w, (model, optimizer) in enumerate(zip(models, optimizers, strict=True)):
            params = list(model.parameters())
            grads = torch.autograd.grad(cross_entropy(model(x[w]), y[w]), params)
            for p, g in zip(params, grads, strict=True):
                p.grad = g
            optimizer.step()
        with torch.no_grad():
            for s, p0, p1 in zip(
                start, models[0].parameters(), models[1].parameters(), strict=True
            ):
                combined = s + ((p0 - s) + (p1 - s)) / 2
                p0.copy_(combined)
                p1.copy_(combined)
    return torch.cat([p.detach().reshape(-1) for p in models[0].parameters()])


@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_delta_flow_averages_local_steps(opt):
    workers, _ = _strategy_run(opt, combiner="mean", flow="delta")
    reference = _reference_averaged_deltas(opt)
    for w in workers:
        torch.testing.assert_close(w, reference, rtol=1e-6, atol=1e-7)


def test_delta_and_gradient_flows_agree_for_momentum_sgd_only():
    # momentum SGD's step is linear in the gradient, so averaging the local steps is a step
    # on the averaged gradient (up to rounding); Adam's is not, and the two arms part
    sgd_delta, _ = _strategy_run("sgd", combiner="mean", flow="delta")
    sgd_gradient, _ = _strategy_run("sgd", combiner="mean")
    torch.testing.assert_close(sgd_delta[0], sgd_gradient[0], rtol=1e-5, atol=1e-6)
    adam_delta, _ = _strategy_run("adam", combiner="mean", flow="delta")
    adam_gradient, _ = _strategy_run("adam", combiner="mean")
    gap = (adam_delta[0] - adam_gradient[0]).norm() / adam_gradient[0].norm()
    assert gap > 1e-3


@pytest.mark.parametrize("gather_below_kb", [0, 1024], ids=["halving", "one_allgather"])
def test_adasums_measured_seconds_count_its_arithmetic_with_its_collectives(gather_below_kb):
    """comm/measured_s of an Adasum combination is the whole operation's, as Horovod's op
    and gloo's summing allreduce are timed: work inside the operation but in no collective
    (here a pause after the real combination, standing for the dot products and weighted
    sums) is in the records' seconds; bytes and algorithms are unchanged."""
    replicas = Replicas(_template(), 4, "loop")
    optimizer = build_optimizer(OPTIMS["sgd"], replicas.parameters())
    cfg = AdasumConfig(combiner="adasum", gather_below_kb=gather_below_kb)
    strategy = AdasumStrategy(cfg, 4)
    strategy.setup(replicas, optimizer, AxisCollectives(4), None)
    combine = strategy._adasum
    plain: list = []

    def with_arithmetic(*args):
        records = combine(*args)
        plain.extend(records)
        time.sleep(0.05)
        return records

    strategy._adasum = with_arithmetic
    x, y = torch.randn(4, 16, 6), torch.randint(0, 3, (4, 16))
    info = StepInfo(
        1, 0.0, replicas.forward_backward(x, y, cross_entropy), 0.1, 0.0, Link(1e-4, 1e9)
    )
    strategy.after_backward(info)
    optimizer.step()
    records = strategy.after_step(info)
    assert sum(r.seconds for r in records) >= sum(r.seconds for r in plain) + 0.05
    assert [(r.op, r.nbytes, r.algo) for r in records] == [(r.op, r.nbytes, r.algo) for r in plain]
