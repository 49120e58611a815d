"""Top-k exchanges and the Top-k strategy across N gloo workers, against one-process references.

One spawn per world size runs every scenario and returns its tensors; the references are
computed here from the same seeded inputs.
"""

import copy

import pytest
import torch

from repro.compress.exchange import (
    ag_topk_exchange,
    ar_topk_exchange,
    dense_exchange,
    star_leader,
    var_leader,
)
from repro.compress.policy import CollectivePolicy
from repro.compress.topk import compress, decompress, k_for, residual_after
from repro.dist.collectives import Collectives
from repro.dist.launch import init_process_group, spawn
from repro.netmodel.cost import Link
from repro.strategies.base import StepInfo
from repro.strategies.topk import TopKConfig, TopKStrategy

NUMEL, K, LAYERS = 1000, 10, [600, 390, 10]
STEPS = 3
LINK = Link(1e-3, 1e9 / 8)


def compensated_of(rank: int) -> torch.Tensor:
    """Worker `rank`'s G; ranks get different scales so VAR has a clear largest norm."""
    g = torch.randn(NUMEL, generator=torch.Generator().manual_seed(100 + rank))
    return g * (1.0 + ((rank * 7) % 5))


def grads_of(rank: int, step: int, shapes) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 * step + rank)
    return [torch.randn(s, generator=gen) for s in shapes]


def tiny_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.Tanh(), torch.nn.Linear(6, 3))


def run_strategy(comm, rank, cfg, steps):
    """Drive TopKStrategy with seeded gradients; returns p.grad per step and the residuals."""
    model = tiny_model()
    strategy = TopKStrategy(cfg, comm.world_size)
    strategy.setup(model, torch.optim.SGD(model.parameters(), lr=0.1), comm)
    shapes = [p.shape for p in model.parameters()]
    out = []
    for step in range(steps):
        for p, g in zip(model.parameters(), grads_of(rank, step, shapes), strict=True):
            p.grad = g
        records = strategy.after_backward(StepInfo(step, 0.0, 0.0, 0.1, 0.0, LINK))
        out.append(
            {
                "grads": [p.grad.clone() for p in model.parameters()],
                "metrics": strategy.metrics(),
                "ops": [(r.op, r.nbytes, r.algo) for r in records],
            }
        )
    return out, strategy.state_dict()["residuals"]


def run_moo(comm, rank):
    """A MOO step with a minimal snapshot/restore probe hook, then the same step at fixed c."""
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    data = torch.randn(40, 8, generator=torch.Generator().manual_seed(rank))
    position = [0]
    probe_calls = []

    def train_batch():
        x = data[position[0] % 40 : position[0] % 40 + 4]
        position[0] += 4
        optimizer.zero_grad()
        model(x).pow(2).sum().backward()

    def probe(n_steps, per_step):
        snapshot = (copy.deepcopy(model.state_dict()), copy.deepcopy(optimizer.state_dict()))
        start = position[0]
        for i in range(n_steps):
            train_batch()
            per_step(i)
            optimizer.step()
        model.load_state_dict(snapshot[0])
        optimizer.load_state_dict(snapshot[1])
        position[0] = start
        probe_calls.append(n_steps)

    cfg = TopKConfig(cr_controller="moo", collective="ar_ring", probe_steps=2)
    strategy = TopKStrategy(cfg, comm.world_size)
    strategy.setup(model, optimizer, comm)
    strategy.set_probe(probe)
    before = copy.deepcopy(model.state_dict())
    train_batch()
    live = [p.grad.clone() for p in model.parameters()]
    records = strategy.after_backward(StepInfo(0, 0.0, 0.0, 0.1, 0.0, LINK))
    chosen = strategy.controller.cr
    unchanged = all(torch.equal(before[k], v) for k, v in model.state_dict().items())

    # The same live gradients through a fixed-ratio strategy at the chosen c, fresh residuals.
    reference = TopKStrategy(TopKConfig(cr=chosen, collective="ar_ring"), comm.world_size)
    twin = tiny_model()
    reference.setup(twin, torch.optim.SGD(twin.parameters(), lr=0.1), comm)
    for p, g in zip(twin.parameters(), live, strict=True):
        p.grad = g.clone()
    reference.after_backward(StepInfo(0, 0.0, 0.0, 0.1, 0.0, LINK))
    same_as_fixed = all(
        torch.equal(a.grad, b.grad)
        for a, b in zip(model.parameters(), twin.parameters(), strict=True)
    )
    return {
        "cr": chosen,
        "probe_calls": probe_calls,
        "position": position[0],
        "params_unchanged": unchanged,
        "same_as_fixed": same_as_fixed,
        "probe_records": len(records),
        "gains": strategy.controller.gains,
    }


def worker(rank: int, world: int) -> dict:
    init_process_group()
    comm = Collectives()
    g = compensated_of(rank)
    ag = ag_topk_exchange(comm, g, K)
    ag_layers = ag_topk_exchange(comm, g, K, LAYERS)
    star = star_leader(world + 1, world)
    ar_star = ar_topk_exchange(comm, g, K, star, "tree")
    leader, var_record = var_leader(comm, g.pow(2).sum().item())
    ar_var = ar_topk_exchange(comm, g, K, leader, "ring", LAYERS)
    dense = dense_exchange(comm, g, "ring")

    def pack(result):
        ops = [(r.op, r.nbytes, r.algo) for r in result.records]
        return result.average, result.sent, result.gain, ops

    strategy_runs = {
        name: run_strategy(comm, rank, TopKConfig(**kwargs), STEPS)
        for name, kwargs in {
            "star": {"cr": 0.1, "collective": "ar_ring", "leader": "star"},
            "var": {"cr": 0.1, "collective": "ar_tree", "leader": "var"},
            "ag_layers": {"cr": 0.1, "collective": "allgather", "layerwise": True},
            "dense": {"cr": 1.0, "collective": "auto"},
            "auto": {"cr": 0.01, "collective": "auto"},
        }.items()
    }
    return {
        "ag": pack(ag),
        "ag_layers": pack(ag_layers),
        "ar_star": pack(ar_star),
        "star": star,
        "var_leader": leader,
        "var_record": (var_record.op, var_record.nbytes),
        "ar_var": pack(ar_var),
        "dense": pack(dense),
        "strategy": strategy_runs,
        "moo": run_moo(comm, rank),
    }


@pytest.fixture(scope="module", params=[2, 4])
def world(request):
    return request.param, spawn(worker, request.param)


def own_topk_sum(world_size, layers=None):
    total = torch.zeros(NUMEL)
    for r in range(world_size):
        values, indices = compress(compensated_of(r), K, layers)
        total += decompress(values, indices, NUMEL)
    return total / world_size


def test_ag_topk_equals_sum_of_own_topk(world):
    n, results = world
    for key, layers in (("ag", None), ("ag_layers", LAYERS)):
        expected = own_topk_sum(n, layers)
        gains = []
        for rank, out in enumerate(results):
            average, sent, gain, ops = out[key]
            torch.testing.assert_close(average, expected, rtol=1e-6, atol=0)
            _, own = compress(compensated_of(rank), K, layers)
            assert sorted(sent.tolist()) == sorted(own.tolist())
            # one allgather of values + indices (int32, the float32 width) + two norms
            assert ops == [("allgather", (2 * K + 2) * 4, None)]
            gains.append(gain)
        sent_sq = sum(compress(compensated_of(r), K, layers)[0].pow(2).sum() for r in range(n))
        total_sq = sum(compensated_of(r).pow(2).sum() for r in range(n))
        assert gains == [gains[0]] * n
        assert gains[0] == pytest.approx((sent_sq / total_sq).item(), rel=1e-5)


def ar_reference(n, leader, layers=None):
    _, indices = compress(compensated_of(leader), K, layers)
    mean = sum(compensated_of(r) for r in range(n)) / n
    return decompress(mean[indices], indices, NUMEL), indices


def test_ar_topk_star_equals_mean_on_leader_indices(world):
    n, results = world
    leader = results[0]["star"]
    assert leader == (n + 1) % n
    expected, indices = ar_reference(n, leader)
    for rank, out in enumerate(results):
        average, sent, _, ops = out["ar_star"]
        torch.testing.assert_close(average, expected, rtol=1e-6, atol=1e-7)
        assert torch.equal(sent, indices)
        g = compensated_of(rank)
        residual = residual_after(g, sent)
        assert torch.equal(residual + decompress(g[sent], sent, NUMEL), g)
        assert ops == [("broadcast", K * 4, None), ("allreduce", (K + 2) * 4, "tree")]


def test_ar_topk_var_picks_the_largest_norm(world):
    n, results = world
    norms = [compensated_of(r).pow(2).sum().item() for r in range(n)]
    leader = max(range(n), key=lambda r: norms[r])
    assert all(out["var_leader"] == leader for out in results)
    assert all(out["var_record"] == ("allgather", 4) for out in results)
    expected, indices = ar_reference(n, leader, LAYERS)
    for out in results:
        average, sent, _, ops = out["ar_var"]
        torch.testing.assert_close(average, expected, rtol=1e-6, atol=1e-7)
        assert torch.equal(sent, indices)
        assert ops[1][2] == "ring"


def test_dense_exchange_is_the_average(world):
    n, results = world
    expected = sum(compensated_of(r) for r in range(n)) / n
    for out in results:
        average, sent, gain, ops = out["dense"]
        torch.testing.assert_close(average, expected, rtol=1e-6, atol=1e-7)
        assert sent is None and gain == 1.0
        assert ops == [("allreduce", NUMEL * 4, "ring")]


def simulate(n, cr, leader_rule, layerwise):
    """One-process Algorithm 1 (or AG-Topk when leader_rule is None) over STEPS steps."""
    model = tiny_model()
    params = list(model.parameters())
    names = [name for name, _ in model.named_parameters()]
    shapes = [p.shape for p in params]
    sizes = [p.numel() for p in params]
    numel = sum(sizes)
    k = numel if cr == 1 else k_for(numel, cr)
    layers = sizes if layerwise else None
    residuals = [torch.zeros(numel) for _ in range(n)]
    steps = []
    for step in range(STEPS):
        comp = [
            torch.cat([g.reshape(-1) for g in grads_of(r, step, shapes)]) + residuals[r]
            for r in range(n)
        ]
        if cr == 1:
            avg = sum(comp) / n
            sent = [torch.arange(numel)] * n
        elif leader_rule is None:
            picks = [compress(c, k, layers) for c in comp]
            avg = sum(decompress(v, i, numel) for v, i in picks) / n
            sent = [i for _, i in picks]
        else:
            if leader_rule == "star":
                leader = step % n
            else:
                leader = max(range(n), key=lambda r: comp[r].pow(2).sum().item())
            _, idx = compress(comp[leader], k, layers)
            avg = decompress((sum(comp) / n)[idx], idx, numel)
            sent = [idx] * n
        residuals = [residual_after(comp[r], sent[r]) for r in range(n)]
        steps.append(avg)
    final = [dict(zip(names, res.split(sizes), strict=True)) for res in residuals]
    return steps, final, sizes


@pytest.mark.parametrize(
    ("name", "cr", "leader_rule", "layerwise"),
    [
        ("star", 0.1, "star", False),
        ("var", 0.1, "var", False),
        ("ag_layers", 0.1, None, True),
        ("dense", 1.0, None, False),
    ],
)
def test_strategy_matches_reference(world, name, cr, leader_rule, layerwise):
    n, results = world
    steps, residuals, sizes = simulate(n, cr, leader_rule, layerwise)
    for rank, out in enumerate(results):
        history, final = out["strategy"][name]
        for step, expected in enumerate(steps):
            got = torch.cat([g.reshape(-1) for g in history[step]["grads"]])
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
            metrics = history[step]["metrics"]
            assert metrics["method/cr"] == cr
            assert metrics["method/k"] == (sum(sizes) if cr == 1 else k_for(sum(sizes), cr))
        for key, value in residuals[rank].items():
            torch.testing.assert_close(final[key], value, rtol=1e-5, atol=1e-6)
    collectives = {out["strategy"][name][0][0]["metrics"]["method/collective"] for out in results}
    assert len(collectives) == 1


def test_strategy_auto_logs_the_cheapest_collective(world):
    n, results = world
    model = tiny_model()
    nbytes = sum(p.numel() for p in model.parameters()) * 4
    expected = CollectivePolicy().decide(LINK, nbytes, 0.01, n)
    for out in results:
        history, _ = out["strategy"]["auto"]
        assert {h["metrics"]["method/collective"] for h in history} == {expected}
        ops = [op for op, _, _ in history[0]["ops"]]
        assert ops == (["allgather"] if expected == "allgather" else ["broadcast", "allreduce"])


def test_moo_probe_restores_everything_but_the_ratio(world):
    n, results = world
    crs = {out["moo"]["cr"] for out in results}
    assert len(crs) == 1  # every worker decided the same ratio
    cr = crs.pop()
    assert 0.001 <= cr <= 0.1
    for out in results:
        moo = out["moo"]
        assert moo["probe_calls"] == [2] * 5  # every candidate, probe_steps iterations each
        assert moo["position"] == 4  # the data position came back to after the live batch
        assert moo["params_unchanged"]
        assert moo["same_as_fixed"]
        assert moo["probe_records"] == 5 * 2 * 2 + 2  # probes and the live step
        assert sorted(moo["gains"]) == sorted([0.1, 0.033, 0.011, 0.004, 0.001])
        assert all(0 < g <= 1 for g in moo["gains"].values())
