"""Top-k exchanges and the Top-k strategy across N workers, against one-process references.

Both engines run every scenario: one spawn of N gloo workers per world size
(`ProcessCollectives`, one row each) and all N workers on one axis in this process
(`AxisCollectives`). The references are computed here from the same seeded inputs, and at
two workers the engines must agree bit for bit (two-term sums have only one order).
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
from repro.dist.axis_collectives import AxisCollectives
from repro.dist.collectives import ProcessCollectives
from repro.dist.launch import init_process_group, spawn
from repro.netmodel.cost import Link
from repro.strategies.base import StepInfo
from repro.strategies.topk import TopKConfig, TopKStrategy
from repro.train.replicas import Replicas

NUMEL, K, LAYERS = 1000, 10, [600, 390, 10]
STEPS = 3
LINK = Link(1e-3, 1e9 / 8)
ENGINES = ("processes", "axis")


def compensated_of(rank: int) -> torch.Tensor:
    """Worker `rank`'s G, one row; ranks get different scales so VAR has a clear largest
    norm."""
    g = torch.randn(1, NUMEL, generator=torch.Generator().manual_seed(100 + rank))
    return g * (1.0 + ((rank * 7) % 5))


def grads_of(rank: int, step: int, shapes) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 * step + rank)
    return [torch.randn(s, generator=gen) for s in shapes]


def tiny_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.Tanh(), torch.nn.Linear(6, 3))


def _info(comm, step: int) -> StepInfo:
    return StepInfo(step, 0.0, torch.zeros(len(comm.ranks)), 0.1, 0.0, LINK)


def run_strategy(comm, cfg, steps):
    """Drive TopKStrategy with seeded gradients written into the held workers' `p.grad`
    rows; returns, per held worker, p.grad per step and the final residuals."""
    rows = len(comm.ranks)
    replicas = Replicas(tiny_model(), rows, "loop")
    strategy = TopKStrategy(cfg, comm.world_size)
    strategy.setup(replicas, torch.optim.SGD(replicas.parameters(), lr=0.1), comm, None)
    shapes = [p.shape[1:] for p in replicas.parameters()]
    history = [[] for _ in range(rows)]
    for step in range(steps):
        per_rank = [grads_of(r, step, shapes) for r in comm.ranks]
        for i, p in enumerate(replicas.parameters()):
            p.grad.copy_(torch.stack([grads[i] for grads in per_rank]))
        records = strategy.after_backward(_info(comm, step))
        for row in range(rows):
            history[row].append(
                {
                    "grads": [p.grad[row].clone() for p in replicas.parameters()],
                    "metrics": strategy.metrics(),
                    "ops": [(r.op, r.nbytes, r.algo) for r in records],
                }
            )
    residuals = strategy.state_dict()["residuals"]
    return [(history[row], {name: r[row] for name, r in residuals.items()}) for row in range(rows)]


class _Workers:
    """The held workers of the MOO scenario: stacked models, optimizer, per-worker data."""

    def __init__(self, comm):
        self.replicas = Replicas(tiny_model(), len(comm.ranks), "loop")
        self.optimizer = torch.optim.SGD(self.replicas.parameters(), lr=0.1, momentum=0.9)
        self.data = [
            torch.randn(40, 8, generator=torch.Generator().manual_seed(r)) for r in comm.ranks
        ]
        self.position = 0

    def train_batch(self) -> None:
        at = self.position % 40
        x = torch.stack([d[at : at + 4] for d in self.data])
        y = torch.zeros(len(self.data), 4)
        self.position += 4
        self.replicas.forward_backward(x, y, lambda out, _: out.pow(2).sum())


class _Rehearsal:
    """The `Rehearsal` protocol at its smallest: trial steps from a snapshot of the models,
    optimizer and data position, all restored afterwards; it records each call's length."""

    def __init__(self, workers: _Workers):
        self.workers, self.calls = workers, []

    def rehearse(self, n_steps, per_step) -> None:
        w = self.workers
        snapshot = (w.replicas.state_dict(), copy.deepcopy(w.optimizer.state_dict()), w.position)
        for i in range(n_steps):
            w.train_batch()
            per_step(i)
            w.optimizer.step()
        w.replicas.load_state_dict(snapshot[0])
        w.optimizer.load_state_dict(snapshot[1])
        w.position = snapshot[2]
        self.calls.append(n_steps)


def run_moo(comm):
    """A MOO step probing through a rehearsal, then the same step at fixed c; per held worker."""
    workers = _Workers(comm)
    rehearsal = _Rehearsal(workers)
    cfg = TopKConfig(cr_controller="moo", collective="ar_ring", probe_steps=2)
    strategy = TopKStrategy(cfg, comm.world_size)
    strategy.setup(workers.replicas, workers.optimizer, comm, rehearsal)
    before = workers.replicas.state_dict()
    workers.train_batch()
    live = [p.grad.clone() for p in workers.replicas.parameters()]
    records = strategy.after_backward(_info(comm, 0))
    chosen = strategy.controller.cr
    after = workers.replicas.state_dict()
    unchanged = all(
        torch.equal(a, b) for a, b in zip(before["params"], after["params"], strict=True)
    )

    # The same live gradients through a fixed-ratio strategy at the chosen c, fresh residuals.
    reference = TopKStrategy(TopKConfig(cr=chosen, collective="ar_ring"), comm.world_size)
    twin = Replicas(tiny_model(), len(comm.ranks), "loop")
    reference.setup(twin, torch.optim.SGD(twin.parameters(), lr=0.1), comm, None)
    for p, g in zip(twin.parameters(), live, strict=True):
        p.grad.copy_(g)
    reference.after_backward(_info(comm, 0))
    mine, twins = workers.replicas.parameters(), twin.parameters()
    return [
        {
            "cr": chosen,
            "probe_calls": rehearsal.calls,
            "position": workers.position,
            "params_unchanged": unchanged,
            "same_as_fixed": all(
                torch.equal(a.grad[row], b.grad[row]) for a, b in zip(mine, twins, strict=True)
            ),
            "probe_records": len(records),
            "gains": strategy.controller.gains,
        }
        for row in range(len(comm.ranks))
    ]


def scenarios(comm) -> list[dict]:
    """Every exchange and strategy scenario on the held workers; one dict per held worker."""
    world = comm.world_size
    g = torch.cat([compensated_of(r) for r in comm.ranks])
    ag = ag_topk_exchange(comm, g, K)
    ag_layers = ag_topk_exchange(comm, g, K, LAYERS)
    star = star_leader(world + 1, world)
    ar_star = ar_topk_exchange(comm, g, K, star, "tree")
    leader, var_record = var_leader(comm, g.pow(2).sum(1))
    ar_var = ar_topk_exchange(comm, g, K, leader, "ring", LAYERS)
    dense = dense_exchange(comm, g, "ring")

    def pack(result, row):
        ops = [(r.op, r.nbytes, r.algo) for r in result.records]
        sent = None if result.sent is None else result.sent[row]
        return result.average[row], sent, result.gain, ops

    strategy_runs = {
        name: run_strategy(comm, TopKConfig(**kwargs), STEPS)
        for name, kwargs in {
            "star": {"cr": 0.1, "collective": "ar_ring", "leader": "star"},
            "var": {"cr": 0.1, "collective": "ar_tree", "leader": "var"},
            "var_residual": {
                "cr": 0.1,
                "collective": "ar_tree",
                "leader": "var",
                "var_norm": "grad_plus_residual",
            },
            "ag_layers": {"cr": 0.1, "collective": "allgather", "layerwise": True},
            "dense": {"cr": 1.0, "collective": "auto"},
            "auto": {"cr": 0.01, "collective": "auto"},
        }.items()
    }
    moo = run_moo(comm)
    return [
        {
            "ag": pack(ag, row),
            "ag_layers": pack(ag_layers, row),
            "ar_star": pack(ar_star, row),
            "star": star,
            "var_leader": leader,
            "var_record": (var_record.op, var_record.nbytes),
            "ar_var": pack(ar_var, row),
            "dense": pack(dense, row),
            "strategy": {name: runs[row] for name, runs in strategy_runs.items()},
            "moo": moo[row],
        }
        for row in range(len(comm.ranks))
    ]


def worker(rank: int, world: int) -> dict:
    init_process_group()
    return scenarios(ProcessCollectives())[0]


def axis_scenarios(world: int) -> list[dict]:
    """All workers in this process, on one thread as each worker process runs."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return scenarios(AxisCollectives(world))
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module", params=[2, 4])
def world(request):
    """(N, {engine: per-worker results})."""
    n = request.param
    return n, {"processes": spawn(worker, n), "axis": axis_scenarios(n)}


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
    assert leader == (n + 1) % n
    expected, indices = ar_reference(n, leader)
    for rank, out in enumerate(results):
        average, sent, _, ops = out["ar_star"]
        torch.testing.assert_close(average, expected, rtol=1e-6, atol=1e-7)
        assert torch.equal(sent, indices)
        g = compensated_of(rank)
        residual = residual_after(g, sent.view(1, -1))
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
    for out in results:
        average, sent, _, ops = out["ar_var"]
        torch.testing.assert_close(average, expected, rtol=1e-6, atol=1e-7)
        assert torch.equal(sent, indices)
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


def simulate(n, cr, leader_rule, layerwise):
    """One-process Algorithm 1 (or AG-Topk when leader_rule is None) over STEPS steps,
    written per worker on one-row vectors (no worker axis beyond that). VAR ranks workers by
    ||g||^2 ("var", the paper's) or by ||g + residual||^2 ("var_residual")."""
    model = tiny_model()
    params = list(model.parameters())
    names = [name for name, _ in model.named_parameters()]
    shapes = [p.shape for p in params]
    sizes = [p.numel() for p in params]
    numel = sum(sizes)
    k = numel if cr == 1 else k_for(numel, cr)
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
            picks = [compress(c, k, layers) for c in comp]
            avg = sum(decompress(v, i, numel) for v, i in picks) / n
            sent = [i for _, i in picks]
        else:
            if leader_rule == "star":
                leader = step % n
            else:
                ranked = grads if leader_rule == "var" else comp
                leader = max(range(n), key=lambda r: ranked[r].pow(2).sum().item())
            leaders.append(leader)
            _, idx = compress(comp[leader], k, layers)
            avg = decompress((sum(comp) / n).gather(1, idx), idx, numel)
            sent = [idx] * n
        residuals = [residual_after(comp[r], sent[r]) for r in range(n)]
        steps.append(avg[0])
    final = [dict(zip(names, res[0].split(sizes), strict=True)) for res in residuals]
    return steps, final, sizes, leaders


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
    steps, residuals, sizes, leaders = simulate(n, cr, leader_rule, layerwise)
    for rank, out in enumerate(results):
        history, final = out["strategy"][name]
        if leaders:
            assert [h["metrics"]["method/leader"] for h in history] == leaders
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
