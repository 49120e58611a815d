"""Alpha-beta formulas against hand-computed numbers and against each other."""

import math

import pytest

from repro.comm.record import CommRecord
from repro.errors import UserError
from repro.netmodel import cost
from repro.netmodel.cost import Link

# N = 4 workers, M = 1e6 bytes, a = 1 ms, b = 1 ns/byte: log2 N = 2.
LINK = Link(latency_s=1e-3, bandwidth_Bps=1e9)
M, N = 1e6, 4


@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        (cost.ring_allreduce, 2 * 3 * 1e-3 + 2 * 3 / 4 * 1e-3),  # 6 ms + 1.5 ms
        (cost.tree_allreduce, 2 * 2 * 1e-3 + 2 * 2 * 1e-3),  # 4 ms + 4 ms
        (cost.allgather, 2 * 1e-3 + 3 * 1e-3),  # 2 ms + 3 ms
        (cost.broadcast, 2 * 1e-3 + 2 * 1e-3),
        (cost.reduce_scatter, 3 * 1e-3 + 0.75 * 1e-3),
        (cost.parameter_server, 2 * 1e-3 + 2 * 3 * 1e-3),
    ],
)
def test_dense_collectives_match_hand_values(fn, expected):
    assert fn(LINK, M, N) == pytest.approx(expected, rel=1e-12)


def test_hand_values_written_out():
    assert cost.ring_allreduce(LINK, M, N) == pytest.approx(7.5e-3)
    assert cost.tree_allreduce(LINK, M, N) == pytest.approx(8e-3)
    assert cost.sendrecv(LINK, M) == pytest.approx(2e-3)


def test_compressed_exchanges_match_hand_values():
    # c M = 1e4 bytes: b c M = 1e-5 s.
    assert cost.ag_topk(LINK, M, 0.01, N) == pytest.approx(2e-3 + 2 * 1e-5 * 3)
    assert cost.art_ring(LINK, M, 0.01, N) == pytest.approx(1e-3 * 8 + 1e-5 * 3.5)
    assert cost.art_tree(LINK, M, 0.01, N) == pytest.approx(3 * 2e-3 + 3 * 1e-5 * 2)


def test_adasum_hand_value():
    # L = 2, T = 10 tensors -> S = 240 bytes: 2La + 2(n-1)/n Mb + L(L+1)(a + Sb).
    expected = 4e-3 + 1.5e-3 + 6 * (1e-3 + 240e-9)
    assert cost.adasum_vhdd(LINK, M, N, 10) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("n", [2, 4, 8, 64])
def test_adasum_equals_sum_of_its_steps(n):
    tensors = 7
    levels = int(math.log2(n))
    steps = 0.0
    for k in range(1, levels + 1):  # halving: swap M / 2^k with the partner, then 3 scalars
        steps += cost.sendrecv(LINK, M / 2**k)
        steps += cost.tree_allreduce(LINK, 3 * 8 * tensors, 2**k)
    for k in range(levels, 0, -1):  # allgather phase walks back: M/n ... M/2
        steps += cost.sendrecv(LINK, M / 2**k)
    assert cost.adasum_vhdd(LINK, M, n, tensors) == pytest.approx(steps, rel=1e-12)


@pytest.mark.parametrize("n", [2, 3, 4, 8, 16])
@pytest.mark.parametrize("cr", [0.001, 0.01, 0.1, 1.0])
def test_art_is_index_broadcast_plus_value_allreduce(n, cr):
    msg = cr * M
    ring = cost.ring_allreduce(LINK, msg, n) + cost.broadcast(LINK, msg, n)
    tree = cost.tree_allreduce(LINK, msg, n) + cost.broadcast(LINK, msg, n)
    assert cost.art_ring(LINK, M, cr, n) == pytest.approx(ring, rel=1e-12)
    assert cost.art_tree(LINK, M, cr, n) == pytest.approx(tree, rel=1e-12)
    assert cost.ag_topk(LINK, M, cr, n) == pytest.approx(cost.allgather(LINK, 2 * msg, n))


def test_one_worker_costs_nothing():
    for fn in (
        cost.ring_allreduce,
        cost.tree_allreduce,
        cost.allgather,
        cost.broadcast,
        cost.reduce_scatter,
        cost.parameter_server,
    ):
        assert fn(LINK, M, 1) == 0.0
    for name, fn in cost.EXCHANGES.items():
        assert fn(LINK, M, 0.1, 1) == 0.0, name
    assert cost.adasum_vhdd(LINK, M, 1, 5) == 0.0


@pytest.mark.parametrize(
    "link",
    [Link(1e-3, 1e9), Link(50e-3, 125e6), Link(1e-6, 3.125e9), Link(0.0, 1e12)],
)
@pytest.mark.parametrize("cr", [0.001, 0.01, 0.1])
@pytest.mark.parametrize("n", [2, 8, 32])
def test_cheapest_is_the_minimum(link, cr, n):
    name, secs = cost.cheapest(link, 4e7, cr, n)
    values = {k: cost.EXCHANGES[k](link, 4e7, cr, n) for k in cost.COMPRESSED}
    assert secs == min(values.values())
    assert values[name] == secs


def test_cheapest_flips_with_the_network():
    # The paper: allgather wins at high compression and bandwidth, AR-Topk at low bandwidth.
    assert cost.cheapest(Link(1e-3, 3.125e9), 4.5e7, 0.001, 8)[0] == "ag_topk"
    assert cost.cheapest(Link(1e-3, 125e6), 4.5e7, 0.1, 8)[0] == "art_ring"
    # Many workers on a high-latency link: the tree's 3 log n latency terms win.
    assert cost.cheapest(Link(50e-3, 125e6), 4.5e7, 0.1, 32)[0] == "art_tree"


def test_dense_exchanges_ignore_cr():
    assert cost.EXCHANGES["dense_ring"](LINK, M, 0.01, N) == cost.ring_allreduce(LINK, M, N)
    assert cost.EXCHANGES["dense_tree"](LINK, M, 0.5, N) == cost.tree_allreduce(LINK, M, N)


def test_record_cost_dispatches_on_op_and_algo():
    rec = CommRecord
    assert cost.record_cost(rec("allreduce", 10**6, 0.0, 4, "ring"), LINK) == pytest.approx(7.5e-3)
    assert cost.record_cost(rec("allreduce", 10**6, 0.0, 4, "tree"), LINK) == pytest.approx(8e-3)
    assert cost.record_cost(rec("allreduce", 10**6, 0.0, 4), LINK) == pytest.approx(7.5e-3)
    assert cost.record_cost(rec("allgather", 10**6, 0.0, 4), LINK) == pytest.approx(5e-3)
    assert cost.record_cost(rec("broadcast", 10**6, 0.0, 4), LINK) == pytest.approx(4e-3)
    assert cost.record_cost(rec("reduce_scatter", 10**6, 0.0, 4), LINK) == pytest.approx(3.75e-3)
    assert cost.record_cost(rec("sendrecv", 10**6, 0.0, 2), LINK) == pytest.approx(2e-3)
    # bytes_scale multiplies the bytes only: 1e5 bytes x 10 = the 1e6-byte cost.
    scaled = cost.record_cost(rec("allreduce", 10**5, 0.0, 4, "ring"), LINK, bytes_scale=10.0)
    assert scaled == pytest.approx(7.5e-3)
    assert cost.record_cost(rec("allgather", 10**6, 0.0, 1), LINK) == 0.0


def test_record_cost_refuses_unknown_op_and_algo():
    with pytest.raises(ValueError, match="gather_scatter"):
        cost.record_cost(CommRecord("gather_scatter", 8, 0.0, 4), LINK)
    with pytest.raises(ValueError, match="butterfly"):
        cost.record_cost(CommRecord("allreduce", 8, 0.0, 4, "butterfly"), LINK)


def test_bad_inputs_raise_user_errors():
    with pytest.raises(UserError, match="bandwidth"):
        Link(1e-3, 0.0)
    with pytest.raises(UserError, match="bandwidth"):
        Link(1e-3, float("nan"))
    with pytest.raises(UserError, match="latency"):
        Link(-1e-3, 1e9)
    with pytest.raises(UserError, match=r"cr=1.5 must be in \(0, 1\]"):
        cost.art_ring(LINK, M, 1.5, 4)
    with pytest.raises(UserError, match="cr=0"):
        cost.ag_topk(LINK, M, 0.0, 4)
    with pytest.raises(UserError, match="n=0"):
        cost.ring_allreduce(LINK, M, 0)
    with pytest.raises(UserError, match="nbytes"):
        cost.broadcast(LINK, -1, 4)
    with pytest.raises(UserError, match="power-of-two"):
        cost.adasum_vhdd(LINK, M, 6, 3)
    with pytest.raises(UserError, match="bytes_scale"):
        cost.record_cost(CommRecord("allgather", 8, 0.0, 4), LINK, bytes_scale=0.0)


def test_link_beta_is_seconds_per_byte():
    assert Link(0.0, 4e9).beta == 2.5e-10
