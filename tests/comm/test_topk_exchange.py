"""Top-k exchanges across N workers, against one-process references, under both engines
(`tests.comm.topk_scenarios`); at two workers the engines must agree bit for bit (two-term
sums have only one order), strategy scenarios included.
"""

import pytest
import torch

from repro.compress.topk import compress, decompress
from tests.comm.topk_scenarios import (
    ENGINES,
    LAYERS,
    NUMEL,
    WORLDS,
    K,
    compensated_of,
    engine_results,
)
from tests.helpers import residual_after


@pytest.fixture(scope="module", params=WORLDS)
def world(request):
    """(N, {engine: per-worker results})."""
    return request.param, engine_results(request.param)


def _same(a, b) -> bool:
    """Exactly equal, tensors bit for bit, through nested dicts, lists and tuples."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def test_engines_agree_bit_for_bit_at_two_workers(world):
    n, engines = world
    if n != 2:
        pytest.skip("with more workers the engines sum in different orders")
    for rank in range(n):
        for key, value in engines["processes"][rank].items():
            assert _same(value, engines["axis"][rank][key]), (rank, key)


def own_topk_sum(world_size, layers=None):
    total = torch.zeros(NUMEL)
    for r in range(world_size):
        values, indices = compress(compensated_of(r), K, layers)
        total += decompress(values, indices, NUMEL)[0]
    return total / world_size


@pytest.mark.parametrize("engine", ENGINES)
def test_ag_topk_equals_sum_of_own_topk(world, engine):
    n, engines = world
    results = engines[engine]
    for key, layers in (("ag", None), ("ag_layers", LAYERS)):
        expected = own_topk_sum(n, layers)
        gains = []
        for rank, out in enumerate(results):
            average, sent, gain, ops = out[key]
            torch.testing.assert_close(average, expected, rtol=1e-6, atol=0)
            _, own = compress(compensated_of(rank), K, layers)
            assert sorted(sent.tolist()) == sorted(own[0].tolist())
            # one allgather of values + indices (int32, the float32 width) + two norms
            assert ops == [("allgather", (2 * K + 2) * 4, None)]
            gains.append(gain)
        sent_sq = sum(compress(compensated_of(r), K, layers)[0].pow(2).sum() for r in range(n))
        total_sq = sum(compensated_of(r).pow(2).sum() for r in range(n))
        assert gains == [gains[0]] * n
        assert gains[0] == pytest.approx((sent_sq / total_sq).item(), rel=1e-5)


def ar_reference(n, leader, layers=None):
    """The mean of every worker's G on the leader's own Top-k indices, and those indices."""
    _, indices = compress(compensated_of(leader), K, layers)
    mean = sum(compensated_of(r) for r in range(n)) / n
    return decompress(mean.gather(1, indices), indices, NUMEL)[0], indices[0]


@pytest.mark.parametrize("engine", ENGINES)
def test_ar_topk_star_equals_mean_on_leader_indices(world, engine):
    n, engines = world
    results = engines[engine]
    leader = results[0]["star"]
    assert leader == (n + 1) % n  # step n + 2; steps count from 1, rank 0 leads step 1
    expected, indices = ar_reference(n, leader)
    for rank, out in enumerate(results):
        average, sent, _, ops = out["ar_star"]
        torch.testing.assert_close(average, expected, rtol=1e-6, atol=1e-7)
        assert torch.equal(sent, indices)
        g = compensated_of(rank)
        residual = residual_after(g, sent.view(1, -1))
        assert torch.equal(out["left"]["ar_star"], residual[0])  # what error feedback keeps
        sent_part = decompress(g.gather(1, sent.view(1, -1)), sent.view(1, -1), NUMEL)
        assert torch.equal(residual + sent_part, g)
        assert ops == [("broadcast", K * 4, None), ("allreduce", (K + 2) * 4, "tree")]


@pytest.mark.parametrize("engine", ENGINES)
def test_ar_topk_var_picks_the_largest_norm(world, engine):
    n, engines = world
    results = engines[engine]
    norms = [compensated_of(r).pow(2).sum().item() for r in range(n)]
    leader = max(range(n), key=lambda r: norms[r])
    assert all(out["var_leader"] == leader for out in results)
    assert all(out["var_record"] == ("allgather", 4) for out in results)
    expected, indices = ar_reference(n, leader, LAYERS)
    for rank, out in enumerate(results):
        g = compensated_of(rank)
        average, sent, _, ops = out["ar_var"]
        torch.testing.assert_close(average, expected, rtol=1e-6, atol=1e-7)
        assert torch.equal(sent, indices)
        assert torch.equal(out["left"]["ar_var"], residual_after(g, sent.view(1, -1))[0])
        assert ops[1][2] == "ring"


@pytest.mark.parametrize("engine", ENGINES)
def test_dense_exchange_is_the_average(world, engine):
    n, engines = world
    expected = (sum(compensated_of(r) for r in range(n)) / n)[0]
    for out in engines[engine]:
        average, sent, gain, ops = out["dense"]
        torch.testing.assert_close(average, expected, rtol=1e-6, atol=1e-7)
        assert sent is None and gain == 1.0
        assert ops == [("allreduce", NUMEL * 4, "ring")]
