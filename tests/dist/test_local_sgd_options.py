"""Local SGD's momentum options on 2 real gloo ranks: averaged buffers and block momentum."""

import pytest
import torch

from repro.dist.collectives import Collectives
from repro.dist.launch import init_process_group, spawn
from repro.netmodel.cost import Link
from repro.strategies.base import StepInfo
from repro.strategies.local_sgd import LocalSGDConfig, LocalSGDStrategy

INFO = StepInfo(1, 0.0, 1.0, 0.1, 0.0, Link(0.0, 1e9))


def _setup(rank: int, cfg: LocalSGDConfig):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    strategy = LocalSGDStrategy(cfg, 2)
    strategy.setup(model, opt, Collectives())
    torch.manual_seed(100 + rank)  # different data per rank
    return model, opt, strategy


def _local_step(model, opt):
    opt.zero_grad()
    model(torch.randn(4, 3)).pow(2).sum().backward()
    opt.step()


def _flat(model):
    return torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])


def _average_momentum(rank: int, world: int):
    init_process_group()
    model, opt, strategy = _setup(rank, LocalSGDConfig(tau=2, momentum="average"))
    _local_step(model, opt)
    strategy.after_step(INFO)
    _local_step(model, opt)
    before = [opt.state[p]["momentum_buffer"].clone() for p in model.parameters()]
    strategy.after_step(INFO)
    after = [opt.state[p]["momentum_buffer"].clone() for p in model.parameters()]
    return before, after, _flat(model)


def _block_momentum(rank: int, world: int):
    init_process_group()
    model, opt, strategy = _setup(rank, LocalSGDConfig(tau=1, block_momentum=0.5))
    seen = []
    for _ in range(3):
        _local_step(model, opt)
        seen.append(_flat(model))  # this rank's model before averaging
        strategy.after_step(INFO)
        seen.append(_flat(model))  # the global model after averaging
    return seen


@pytest.mark.slow
def test_momentum_average_averages_the_buffers_too():
    (b0, a0, m0), (b1, a1, m1) = spawn(_average_momentum, 2)
    for x0, x1, y0, y1 in zip(b0, b1, a0, a1, strict=True):
        assert not torch.allclose(x0, x1)
        assert torch.allclose(y0, (x0 + x1) / 2) and torch.equal(y0, y1)
    assert torch.equal(m0, m1)


@pytest.mark.slow
def test_block_momentum_follows_its_update_rule():
    r0, r1 = spawn(_block_momentum, 2)
    # seen = [local_1, global_1, local_2, global_2, local_3, global_3] per rank
    assert all(torch.equal(a, b) for a, b in zip(r0[1::2], r1[1::2], strict=True))
    mean = [(r0[i] + r1[i]) / 2 for i in (0, 2, 4)]
    x_g = mean[0]  # the first averaging starts the global model
    assert torch.allclose(r0[1], x_g, atol=1e-6)
    u = torch.zeros_like(x_g)
    for k, avg in ((3, mean[1]), (5, mean[2])):
        u = 0.5 * u + (x_g - avg)
        x_g = x_g - u
        assert torch.allclose(r0[k], x_g, atol=1e-6)
    # with momentum the global model moves further than plain averaging would
    assert not torch.allclose(r0[5], mean[2], atol=1e-4)
