"""Local SGD's momentum options, averaged buffers and block momentum, on both engines.

Two real gloo ranks (`ProcessCollectives`, one row each) and the same two workers on one
axis in this process (`AxisCollectives`): each must follow the update rule, and the two
engines must agree bit for bit (two-term sums have only one order).
"""

import pytest
import torch

from repro.comm.axis_collectives import AxisCollectives
from repro.comm.launch import init_process_group, spawn
from repro.comm.process_collectives import ProcessCollectives
from repro.errors import UserError
from repro.netmodel.cost import Link
from repro.strategies.base import StepInfo
from repro.strategies.local_sgd import LocalSGDConfig, LocalSGDStrategy
from repro.train.replicas import Replicas

WORLD = 2


def _info(comm) -> StepInfo:
    return StepInfo(1, 0.0, torch.ones(len(comm.ranks)), 0.1, 0.0, Link(0.0, 1e9))


class _Workers:
    """The held workers' model, optimizer and strategy, and each worker's own data stream."""

    def __init__(
        self, comm, cfg: LocalSGDConfig, model: torch.nn.Module | None = None, lr: float = 0.1
    ):
        torch.manual_seed(0)
        model = torch.nn.Linear(3, 2) if model is None else model
        self.replicas = Replicas(model, len(comm.ranks), "loop")
        self.opt = torch.optim.SGD(self.replicas.parameters(), lr=lr, momentum=0.9)
        self.strategy = LocalSGDStrategy(cfg, WORLD)
        self.strategy.setup(self.replicas, self.opt, comm, None)
        self.gens = [torch.Generator().manual_seed(100 + r) for r in comm.ranks]  # data per rank
        self.info = _info(comm)

    def local_step(self, scale: float = 1.0) -> None:
        x = torch.stack([scale * torch.randn(4, 3, generator=g) for g in self.gens])
        y = torch.zeros(len(self.gens), 4)
        self.replicas.forward_backward(x, y, lambda out, _: out.pow(2).sum())
        self.opt.step()

    def flat(self) -> torch.Tensor:
        """(held workers, numel): each worker's model end to end."""
        rows = len(self.gens)
        return torch.cat([p.detach().reshape(rows, -1) for p in self.replicas.parameters()], 1)

    def momentum(self) -> list[torch.Tensor]:
        return [self.opt.state[p]["momentum_buffer"].clone() for p in self.replicas.parameters()]


def _average_momentum(comm) -> tuple[list, list, torch.Tensor]:
    w = _Workers(comm, LocalSGDConfig(tau=2, momentum="average"))
    w.local_step()
    w.strategy.after_step(w.info)
    w.local_step()
    before = w.momentum()
    w.strategy.after_step(w.info)
    return before, w.momentum(), w.flat()


def _block_momentum(comm) -> list[torch.Tensor]:
    w = _Workers(comm, LocalSGDConfig(tau=1, block_momentum=0.5))
    seen = [w.flat()]  # the common start
    for _ in range(3):
        w.local_step()
        seen.append(w.flat())  # each worker's model before averaging
        w.strategy.after_step(w.info)
        seen.append(w.flat())  # the global model after averaging
    return seen


def _average_momentum_worker(rank: int, world: int):
    init_process_group()
    before, after, flat = _average_momentum(ProcessCollectives())
    return [b[0] for b in before], [a[0] for a in after], flat[0]


def _block_momentum_worker(rank: int, world: int):
    init_process_group()
    return [rows[0] for rows in _block_momentum(ProcessCollectives())]


def _check_average_momentum(b0, a0, m0, b1, a1, m1) -> None:
    for x0, x1, y0, y1 in zip(b0, b1, a0, a1, strict=True):
        assert not torch.allclose(x0, x1)
        assert torch.allclose(y0, (x0 + x1) / 2) and torch.equal(y0, y1)
    assert torch.equal(m0, m1)


def _check_block_momentum(r0: list[torch.Tensor], r1: list[torch.Tensor]) -> None:
    # seen = [start, local_1, global_1, local_2, global_2, local_3, global_3] per rank
    assert all(torch.equal(a, b) for a, b in zip(r0[::2], r1[::2], strict=True))
    mean = [(r0[i] + r1[i]) / 2 for i in (1, 3, 5)]
    x_g, u = r0[0], torch.zeros_like(r0[0])  # the start is the first global model
    for k, avg in ((2, mean[0]), (4, mean[1]), (6, mean[2])):
        u = 0.5 * u + (x_g - avg)  # the first block's change is the first velocity
        x_g = x_g - u
        assert torch.allclose(r0[k], x_g, atol=1e-6)
    assert torch.allclose(r0[2], mean[0], atol=1e-6)  # the first averaging is plain
    # with momentum the global model moves further than plain averaging would
    assert not torch.allclose(r0[5], mean[2], atol=1e-4)


def _axis_average_momentum():
    before, after, flat = _average_momentum(AxisCollectives(WORLD))
    return [([b[r] for b in before], [a[r] for a in after], flat[r]) for r in range(WORLD)]


def _axis_block_momentum():
    seen = _block_momentum(AxisCollectives(WORLD))
    return [[rows[r] for rows in seen] for r in range(WORLD)]


def _equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.slow
def test_momentum_average_averages_the_buffers_too():
    (b0, a0, m0), (b1, a1, m1) = spawn(_average_momentum_worker, WORLD)
    _check_average_momentum(b0, a0, m0, b1, a1, m1)
    axis = _axis_average_momentum()
    assert _equal(axis, [(b0, a0, m0), (b1, a1, m1)])


def test_momentum_average_on_the_axis_engine():
    (b0, a0, m0), (b1, a1, m1) = _axis_average_momentum()
    _check_average_momentum(b0, a0, m0, b1, a1, m1)


@pytest.mark.slow
def test_block_momentum_follows_its_update_rule():
    r0, r1 = spawn(_block_momentum_worker, WORLD)
    _check_block_momentum(r0, r1)
    assert _equal(_axis_block_momentum(), [r0, r1])


def test_block_momentum_on_the_axis_engine():
    _check_block_momentum(*_axis_block_momentum())


def test_block_momentum_moves_the_parameters_alone():
    """Block momentum extrapolates the averaged parameters; BatchNorm's running statistics
    and averaged momentum buffers stay plain averages. Inputs of a tenth of unit scale make
    the running variance fall from 1 towards 0.01: extrapolated with it, it went below zero
    at the fourth averaging (-0.07), and evaluation's sqrt(var + eps) was NaN."""
    model = torch.nn.Sequential(torch.nn.BatchNorm1d(3), torch.nn.Linear(3, 2))
    cfg = LocalSGDConfig(tau=5, momentum="average", block_momentum=0.5)
    w = _Workers(AxisCollectives(WORLD), cfg, model, lr=0.01)
    stats = [b for b in w.replicas.buffers if b.is_floating_point()]
    x_g = w.flat()[0]
    u = torch.zeros_like(x_g)
    for _ in range(4):
        for _ in range(cfg.tau - 1):
            w.local_step(scale=0.1)
            w.strategy.after_step(w.info)
        w.local_step(scale=0.1)
        stats_mean = [b.mean(0) for b in stats]
        momentum_mean = [m.mean(0) for m in w.momentum()]
        mean = w.flat().mean(0)
        w.strategy.after_step(w.info)
        for b, m in zip(stats, stats_mean, strict=True):
            assert torch.allclose(b[0], m, atol=1e-6) and torch.equal(b[0], b[1])
        for b, m in zip(w.momentum(), momentum_mean, strict=True):
            assert torch.allclose(b[0], m, atol=1e-6)
        u = 0.5 * u + x_g - mean
        x_g = x_g - u
        assert torch.allclose(w.flat()[0], x_g, atol=1e-6)
    assert stats[1].min() > 0


@pytest.mark.parametrize("held", ["none", "with_buffers", "parameters_alone"])
def test_a_block_momentum_checkpoint_of_the_earlier_rule_is_refused_in_one_line(held):
    """Checkpoints written before block momentum started from the common model held none
    before the first averaging, and after it the float buffers' columns too, or (a model
    without float buffers, such as the MNIST-1D CNN) the parameters alone with the first
    block left out of the velocity; resuming one mixed two rules in a run (or stopped on a
    None or a shape in a traceback)."""
    bn = held == "with_buffers"
    model = torch.nn.Sequential(torch.nn.BatchNorm1d(3), torch.nn.Linear(3, 2))
    cfg = LocalSGDConfig(tau=1, block_momentum=0.5)
    w = _Workers(AxisCollectives(WORLD), cfg, model if bn else None)
    state = w.strategy.state_dict()
    own = state["averager"]["global_model"].clone()
    w.local_step()
    averaged = w.flat().mean(0, keepdim=True).expand_as(own)  # the earlier first averaging
    wider = torch.zeros(own.shape[0], own.shape[1] + 6)
    global_model, velocity = {
        "none": (None, None),
        "with_buffers": (wider, wider.clone()),
        "parameters_alone": (averaged.clone(), torch.zeros_like(own)),  # the same shape
    }[held]
    earlier = {"global_model": global_model, "velocity": velocity}
    with pytest.raises(UserError, match="earlier version of repro"):
        w.strategy.load_state_dict({**state, "averager": earlier})
    w.strategy.load_state_dict(state)  # its own state resumes
    w.strategy.after_step(w.info)
    assert torch.allclose(w.strategy.averager.velocity, own - averaged, atol=1e-7)  # x_0 - mean
