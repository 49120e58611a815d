"""The collective policy (Flexible Top-k, Sec. IV, Eq. 4) against the paper's cost formulas,
written out independently of the package."""

import itertools
import math

import pytest

from repro.compress.policy import CollectivePolicy
from repro.errors import UserError
from repro.netmodel.cost import Link


def paper_costs(a, bw, m, c, n):
    """Flexible Top-k, Sec. III and Eq. 4a/4b, written out independently of the package."""
    b, lg = 1 / bw, math.log2(n)
    return {
        "allgather": a * lg + 2 * m * c * b * (n - 1),
        "ar_ring": a * (2 * (n - 1) + lg) + m * c * b * (2 * (n - 1) / n + lg),
        "ar_tree": 3 * a * lg + 3 * m * c * b * lg,
    }


def test_auto_policy_is_the_formulas_argmin_on_a_grid():
    latencies = [1e-5, 1e-3, 4e-3, 5e-2]
    bandwidths = [1e9 / 8, 20e9 / 8, 100e9 / 8]
    ratios = [0.1, 0.033, 0.01, 0.001]
    workers = [2, 4, 8, 16, 32]
    sizes = [4 * 11_200_000, 4 * 100_000]
    winners = set()
    for a, bw, c, n, m in itertools.product(latencies, bandwidths, ratios, workers, sizes):
        costs = paper_costs(a, bw, m, c, n)
        best = min(costs.values())
        choice = CollectivePolicy("auto").choose(Link(a, bw), m, c, n)
        assert costs[choice] == pytest.approx(best, rel=1e-12), (a, bw, c, n, m, costs)
        winners.add(min(costs, key=costs.get))
    assert winners == {"allgather", "ar_ring", "ar_tree"}  # the grid exercises every branch


def test_paper_regimes():
    # Allgather at high compression and bandwidth; AR-Topk at low bandwidth, low compression.
    m, n = 4 * 11_200_000, 8
    assert CollectivePolicy().choose(Link(1e-3, 25e9 / 8), m, 0.001, n) == "allgather"
    assert CollectivePolicy().choose(Link(1e-3, 1e9 / 8), m, 0.1, n).startswith("ar_")


def test_fixed_modes_and_dense():
    link, m = Link(1e-3, 1e9 / 8), 4e6
    for mode in ("allgather", "ar_ring", "ar_tree"):
        assert CollectivePolicy(mode).choose(link, m, 0.01, 8) == mode
    # cr = 1 is a dense allreduce: auto takes the cheaper of 2(n-1)a + 2(n-1)/n M b and
    # 2 a log n + 2 log n M b.
    assert CollectivePolicy().choose(Link(1e-3, 1e12), m, 1.0, 32) == "ar_tree"
    assert CollectivePolicy().choose(Link(0.0, 1e8), m, 1.0, 32) == "ar_ring"
    assert CollectivePolicy("ar_tree").choose(link, m, 1.0, 8) == "ar_tree"
    with pytest.raises(ValueError, match="dense"):
        CollectivePolicy("allgather").choose(link, m, 1.0, 8)
    with pytest.raises(UserError, match="method.collective='bcast'"):
        CollectivePolicy("bcast")


def test_policy_remembers_until_link_or_ratio_changes():
    policy = CollectivePolicy()
    m, n = 4 * 11_200_000, 8
    fast, slow = Link(1e-3, 25e9 / 8), Link(1e-3, 1e9 / 8)
    assert policy.last is None
    assert policy.choose(fast, m, 0.001, n) == "allgather"
    assert policy.choose(fast, m, 0.001, n) == "allgather"
    assert policy.choose(slow, m, 0.1, n) != "allgather"
    assert policy.last == policy.choose(slow, m, 0.1, n)
    assert policy.decide(fast, m, 0.001, n) == "allgather"
    assert policy.last != "allgather"  # decide() leaves the remembered choice alone


def test_policy_seconds_are_the_formulas():
    link, m, n = Link(4e-3, 20e9 / 8), 4e7, 8
    expected = paper_costs(4e-3, 20e9 / 8, m, 0.01, n)
    for name, value in expected.items():
        assert CollectivePolicy.seconds(name, link, m, 0.01, n) == pytest.approx(value)
    assert CollectivePolicy.seconds("ar_ring", link, m, 1.0, n) == pytest.approx(
        2 * 7 * 4e-3 + 2 * 7 / 8 * m * 8 / 20e9
    )
