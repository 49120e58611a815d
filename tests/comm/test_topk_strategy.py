"""The Top-k strategy across N workers, against a one-process Algorithm 1, under both
engines (`tests.comm.topk_scenarios`): the averaged gradients, residuals and leaders, the
logged collective, MOO probing, and what VAR-Topk ranks workers by.
"""

import pytest
import torch

from repro.comm.axis_collectives import AxisCollectives
from repro.compress.policy import CollectivePolicy
from repro.compress.topk import compress, decompress, k_for
from repro.strategies.topk import TopKConfig, TopKStrategy
from repro.train.replicas import Replicas
from tests.comm.topk_scenarios import (
    ENGINES,
    LINK,
    STEPS,
    WORLDS,
    _info,
    engine_results,
    grads_of,
    tiny_model,
)
from tests.helpers import residual_after


@pytest.fixture(scope="module", params=WORLDS)
def world(request):
    """(N, {engine: per-worker results})."""
    return request.param, engine_results(request.param)


def simulate(n, cr, leader_rule, layerwise):
    """One-process Algorithm 1 (or AG-Topk when leader_rule is None) over STEPS steps,
    written per worker on one-row vectors (no worker axis beyond that). STAR's first leader
    is rank 0 (the authors' code). VAR ranks workers by ||g||^2 ("var", the paper's) or by
    ||g + residual||^2 ("var_residual"). Layer-wise, every tensor keeps
    max(1, int(numel * cr)) entries (the authors' and GRACE's count)."""
    model = tiny_model()
    params = list(model.parameters())
    names = [name for name, _ in model.named_parameters()]
    shapes = [p.shape for p in params]
    sizes = [p.numel() for p in params]
    numel = sum(sizes)
    shares = [max(1, int(size * cr)) for size in sizes] if layerwise else None
    k = numel if cr == 1 else sum(shares) if layerwise else k_for(numel, cr)
    layers = sizes if layerwise else None
    residuals = [torch.zeros(1, numel) for _ in range(n)]
    steps, leaders = [], []
    for step in range(STEPS):
        grads = [
            torch.cat([g.reshape(1, -1) for g in grads_of(r, step, shapes)], 1) for r in range(n)
        ]
        comp = [grads[r] + residuals[r] for r in range(n)]
        if cr == 1:
            avg = sum(comp) / n
            sent = [torch.arange(numel).view(1, -1)] * n
        elif leader_rule is None:
            picks = [compress(c, k, layers, shares) for c in comp]
            avg = sum(decompress(v, i, numel) for v, i in picks) / n
            sent = [i for _, i in picks]
        else:
            if leader_rule == "star":
                leader = step % n
            else:
                ranked = grads if leader_rule == "var" else comp
                leader = max(range(n), key=lambda r: ranked[r].pow(2).sum().item())
            leaders.append(leader)
            _, idx = compress(comp[leader], k, layers, shares)
            avg = decompress((sum(comp) / n).gather(1, idx), idx, numel)
            sent = [idx] * n
        residuals = [residual_after(comp[r], sent[r]) for r in range(n)]
        steps.append(avg[0])
    final = [dict(zip(names, res[0].split(sizes), strict=True)) for res in residuals]
    return steps, final, k, leaders


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(
    ("name", "cr", "leader_rule", "layerwise"),
    [
        ("star", 0.1, "star", False),
        ("var", 0.1, "var", False),
        ("var_residual", 0.1, "var_residual", False),
        ("ag_layers", 0.1, None, True),
        ("dense", 1.0, None, False),
    ],
)
def test_strategy_matches_reference(world, engine, name, cr, leader_rule, layerwise):
    n, engines = world
    results = engines[engine]
    steps, residuals, k, leaders = simulate(n, cr, leader_rule, layerwise)
    for rank, out in enumerate(results):
        history, final = out["strategy"][name]
        if leaders:
            assert [h["metrics"]["method/leader"] for h in history] == leaders
        for step, expected in enumerate(steps):
            got = torch.cat([g.reshape(-1) for g in history[step]["grads"]])
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
            metrics = history[step]["metrics"]
            assert metrics["method/cr"] == cr
            assert metrics["method/k"] == k
        if cr == 1:  # all of G went: the reference's residuals are zero, none is kept
            assert final == {} and all(not v.any() for v in residuals[rank].values())
        for key, value in final.items():
            torch.testing.assert_close(value, residuals[rank][key], rtol=1e-5, atol=1e-6)
        assert cr == 1 or final.keys() == residuals[rank].keys()
    collectives = {out["strategy"][name][0][0]["metrics"]["method/collective"] for out in results}
    assert len(collectives) == 1


@pytest.mark.parametrize("engine", ENGINES)
def test_strategy_auto_logs_the_cheapest_collective(world, engine):
    n, engines = world
    model = tiny_model()
    nbytes = sum(p.numel() for p in model.parameters()) * 4
    expected = CollectivePolicy().decide(LINK, nbytes, 0.01, n)
    for out in engines[engine]:
        history, _ = out["strategy"]["auto"]
        assert {h["metrics"]["method/collective"] for h in history} == {expected}
        ops = [op for op, _, _ in history[0]["ops"]]
        assert ops == (["allgather"] if expected == "allgather" else ["broadcast", "allreduce"])


@pytest.mark.parametrize("engine", ENGINES)
def test_moo_probe_restores_everything_but_the_ratio(world, engine):
    n, engines = world
    results = engines[engine]
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


@pytest.mark.parametrize("var_norm, leader", [("grad", 1), ("grad_plus_residual", 0)])
def test_var_norm_decides_the_leader(var_norm, leader):
    """Worker 1 has the larger gradient, worker 0 the larger gradient plus residual: the
    paper's ||g||^2 makes worker 1 the leader, ||g + residual||^2 worker 0."""
    comm = AxisCollectives(2)
    replicas = Replicas(tiny_model(), 2, "loop")
    cfg = TopKConfig(cr=0.1, collective="ar_ring", leader="var", var_norm=var_norm)
    strategy = TopKStrategy(cfg, 2)
    strategy.setup(replicas, torch.optim.SGD(replicas.parameters(), lr=0.1), comm, None)
    names = [name for name, _ in replicas.named_parameters()]
    for p in replicas.parameters():
        p.grad.copy_(torch.stack([torch.full(p.shape[1:], 1.0), torch.full(p.shape[1:], 2.0)]))
    residual = {
        name: torch.stack([torch.full((p[0].numel(),), 3.0), torch.zeros(p[0].numel())])
        for name, p in zip(names, replicas.parameters(), strict=True)
    }
    strategy.memory.load_state_dict(residual)
    # ||g||^2 per entry: 1 against 4; ||g + residual||^2: 16 against 4.
    records = strategy.after_backward(_info(comm, 0))
    assert strategy.metrics()["method/leader"] == leader
    assert records[0].op == "allgather" and records[0].nbytes == 4  # the N norms
