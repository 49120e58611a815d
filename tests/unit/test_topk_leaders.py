"""AR-Topk's leaders: STAR's round robin from rank 0, and VAR's smoothed-norm option
(`method.var_norm=ewma_grad`) against a plain-Python rendering of the authors' rule: keep
the last W norms, and once W are there, take their mean weighted by (1 - a)^j, j = 1 for the
newest; 0 before, so rank 0 leads the first W - 1 steps. And the message every worker
then sends on the leader's positions, however its rows are read."""

import math

import pytest
import torch

import repro.compress.exchange as exchange
from repro.comm.axis_collectives import AxisCollectives
from repro.compress.exchange import leader_exchange, star_leader
from repro.compress.smoothed_norm import WindowedNorm
from repro.netmodel.cost import Link
from repro.strategies.base import StepInfo
from repro.strategies.topk import TopKConfig, TopKStrategy
from repro.train.replicas import Replicas
from tests.helpers import residual_after


def test_star_starts_at_rank_0_and_goes_round_robin():
    # the trainer's steps count from 1; the authors' global step from 0 picks rank 0 first
    assert [star_leader(step, 3) for step in range(1, 8)] == [0, 1, 2, 0, 1, 2, 0]
    assert star_leader(1, 8) == 0


@pytest.mark.parametrize(
    "parts", [None, [[0, 1, 2, 3], [4, 5, 6, 7]], [[0, 2, 4, 6], [1, 3, 5, 7]]]
)
def test_the_leaders_positions_reach_every_row_of_its_group_alone(parts):
    """The simulated broadcast of the leader's indices: every row of the source's group
    holds the source's row afterwards (one group copies it to all rows at once, split
    groups by their ranks), and the other groups' rows are as they were."""
    comm = AxisCollectives(8) if parts is None else AxisCollectives(8).split(parts)
    before = torch.arange(8 * 5, dtype=torch.int32).view(8, 5)
    for src in (0, 5):
        t = before.clone()
        record = comm.broadcast(t, src)
        group = next(p for p in comm.parts if src in p)
        for r in range(8):
            assert t[r].tolist() == before[src if r in group else r].tolist()
        assert (record.op, record.nbytes) == ("broadcast", 5 * 4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("k", [3, 400, 2_000])
def test_leader_message_takes_g_at_the_positions_and_leaves_the_residual(k, dtype):
    """AR-Topk's message (values, ||g_c||^2, ||G||^2) against torch's gather and norms,
    each row the bits of that row alone, as a worker process forms it; G left the
    residual, zero at the positions and untouched elsewhere, by the compiled loop and by
    torch's ops (a strided G) alike; the exchange's average and gain from that message."""
    gen = torch.Generator().manual_seed(3)
    g = (torch.randn(6, 5_000, generator=gen) * torch.rand(6, 1, generator=gen) * 10).to(dtype)
    chosen = torch.randperm(5_000, generator=gen)[:k].sort().values
    residual = residual_after(g, chosen.expand(6, -1))
    got = g.clone()
    message = exchange._leader_message(got, chosen)
    assert torch.equal(got, residual)
    alone = [g[r : r + 1].clone() for r in range(6)]
    assert torch.equal(message, torch.cat([exchange._leader_message(a, chosen) for a in alone]))
    wide = torch.zeros(6, 10_000, dtype=dtype)
    wide[:, ::2] = g
    strided = exchange._leader_message(wide[:, ::2], chosen)  # norms read in another order
    assert torch.equal(strided[:, :k], message[:, :k])
    torch.testing.assert_close(strided, message, rtol=1e-5, atol=0)
    assert torch.equal(wide[:, ::2], residual) and not wide[:, 1::2].any()
    assert torch.equal(message[:, :k], g[:, chosen])
    torch.testing.assert_close(message[:, k], g[:, chosen].pow(2).sum(1), rtol=1e-5, atol=0)
    torch.testing.assert_close(message[:, k + 1], g.pow(2).sum(1), rtol=1e-5, atol=0)
    given = g.clone()
    result = leader_exchange(AxisCollectives(6), _Leader(k, chosen), given, leader=2)
    assert result.zeroed and torch.equal(given, residual)
    # the allreduce sums in its own order
    expected = torch.zeros(5_000, dtype=dtype)
    expected[chosen] = message[:, :k].sum(0) / 6
    torch.testing.assert_close(result.average, expected.expand(6, -1), rtol=1e-5, atol=1e-6)
    assert not result.average[:, residual[0] != 0].any()
    gain = message[:, k].sum().item() / message[:, k + 1].sum().item()
    assert result.gain == pytest.approx(gain, rel=1e-6)


class _Leader:
    """A sparsifier whose selection is fixed positions: the message is what is tested."""

    def __init__(self, k: int, chosen: torch.Tensor):
        self.k, self.chosen = k, chosen

    def select(self, rows: torch.Tensor) -> torch.Tensor:
        return self.chosen.view(1, -1).expand(rows.shape[0], -1)


def authors_smoothed(norms: list[float], window: int, a: float) -> list[float]:
    """The smoothed value after each step for one worker, by the rule in the module doc."""
    out, kept, value = [], [], 0.0
    for x in norms:
        kept.append(x)
        if len(kept) == window:
            weights = [math.pow(1 - a, len(kept) - i) for i in range(len(kept))]
            value = sum(w * v for w, v in zip(weights, kept, strict=True)) / sum(weights)
            kept.pop(0)
        out.append(value)
    return out


@pytest.mark.parametrize(("window", "a"), [(25, 0.001), (4, 0.3), (1, 0.0)])
def test_windowed_norm_matches_the_authors_rule(window, a):
    gen = torch.Generator().manual_seed(window)
    norms = torch.rand(40, 3, generator=gen, dtype=torch.float64) * 10
    meter = WindowedNorm(window, a)
    got = torch.stack([meter.update(step.pow(2)) for step in norms])
    for worker in range(3):
        expected = authors_smoothed(norms[:, worker].tolist(), window, a)
        torch.testing.assert_close(got[:, worker].tolist(), expected, rtol=1e-12, atol=0)


def test_windowed_norm_resumes_from_its_state():
    norms = torch.rand(30, 2, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    straight = WindowedNorm(5, 0.1)
    expected = [straight.update(n) for n in norms]
    first = WindowedNorm(5, 0.1)
    for n in norms[:3]:  # mid-window: the saved history is not yet full
        first.update(n)
    resumed = WindowedNorm(5, 0.1)
    resumed.load_state_dict(first.state_dict())
    for n, want in zip(norms[3:], expected[3:], strict=True):
        assert torch.equal(resumed.update(n), want)


def _strategy(var_norm: str, window: int = 3):
    comm = AxisCollectives(2)
    torch.manual_seed(0)
    replicas = Replicas(torch.nn.Linear(4, 2), 2, "loop")
    cfg = TopKConfig(
        cr=0.25,
        collective="ar_tree",
        leader="var",
        var_norm=var_norm,
        var_window=window,
        var_smoothing=0.0,
    )
    strategy = TopKStrategy(cfg, 2)
    strategy.setup(replicas, torch.optim.SGD(replicas.parameters(), lr=0.1), comm, None)
    return strategy, replicas


# per-entry gradient value of worker 0 and worker 1 at each step
SCALES = [(5, 1), (5, 1), (5, 1), (1, 6), (1, 6), (1, 6), (4, 1)]


def _leaders(strategy, replicas, steps) -> list[int]:
    leaders = []
    for step in steps:
        for p in replicas.parameters():
            w0, w1 = SCALES[step - 1]
            p.grad = torch.stack(
                [torch.full(p.shape[1:], float(w0)), torch.full(p.shape[1:], float(w1))]
            )
        strategy.after_backward(StepInfo(step, 0.0, torch.zeros(2), 0.1, 0.0, Link(1e-3, 1e9)))
        leaders.append(strategy.metrics()["method/leader"])
    return leaders


def test_var_ewma_ranks_by_the_smoothed_norm_and_resumes():
    numel = 4 * 2 + 2
    norms = [[w * math.sqrt(numel) for w in pair] for pair in SCALES]
    smoothed = [authors_smoothed([n[r] for n in norms], 3, 0.0) for r in range(2)]
    # ties (0 before the window is full) go to the lowest rank, as torch.argmax and the
    # authors' list.index(max(...)) both break them
    expected = [0 if s0 >= s1 else 1 for s0, s1 in zip(*smoothed, strict=True)]
    strategy, replicas = _strategy("ewma_grad")
    assert _leaders(strategy, replicas, range(1, 8)) == expected
    per_step, replicas_g = _strategy("grad")
    assert _leaders(per_step, replicas_g, range(1, 8)) != expected  # the option matters
    # the window is in the strategy's state: a restart at step 4 ranks as before
    first, replicas_a = _strategy("ewma_grad")
    _leaders(first, replicas_a, range(1, 4))
    resumed, replicas_b = _strategy("ewma_grad")
    resumed.load_state_dict(first.state_dict())
    assert _leaders(resumed, replicas_b, range(4, 8)) == expected[3:]
