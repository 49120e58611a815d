"""Seeded inputs and the Top-k exchange and strategy scenarios that both Top-k test files
check, run once per world size by both engines and shared (`engine_results`).

Both engines run every scenario: one spawn of N gloo workers per world size
(`ProcessCollectives`, one row each) and all N workers on one axis in this process
(`AxisCollectives`). The tests compute their references from the same seeded inputs.
"""

import copy
import functools

import torch

from repro.comm.axis_collectives import AxisCollectives
from repro.comm.launch import init_process_group, spawn
from repro.comm.process_collectives import ProcessCollectives
from repro.compress.exchange import (
    ag_topk_exchange,
    ar_topk_exchange,
    dense_exchange,
    star_leader,
    var_leader,
)
from repro.netmodel.cost import Link
from repro.strategies.base import StepInfo
from repro.strategies.topk import TopKConfig, TopKStrategy
from repro.train.replicas import Replicas

NUMEL, K, LAYERS = 1000, 10, [600, 390, 10]
STEPS = 3
LINK = Link(1e-3, 1e9 / 8)
ENGINES = ("processes", "axis")
WORLDS = (2, 4)


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
        for i, p in enumerate(replicas.parameters()):  # fresh tensors, as a backward gives
            p.grad = torch.stack([grads[i] for grads in per_rank])
        records = strategy.after_backward(_info(comm, step + 1))  # the trainer counts from 1
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
    optimizer and data position, all restored after each run; it records each run's length."""

    def __init__(self, workers: _Workers):
        self.workers, self.calls = workers, []

    def rehearse(self, n_steps, *runs) -> None:
        w = self.workers
        snapshot = (w.replicas.state_dict(), copy.deepcopy(w.optimizer.state_dict()), w.position)
        for per_step in runs:
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
    # AR-Topk leaves its G the residual: each takes a copy, kept to be checked
    left = {name: g.clone() for name in ("ar_star", "ar_var")}
    ag = ag_topk_exchange(comm, g, K)
    ag_layers = ag_topk_exchange(comm, g, K, LAYERS)
    star = star_leader(world + 2, world)
    ar_star = ar_topk_exchange(comm, left["ar_star"], K, star, "tree")
    leader, var_record = var_leader(comm, g.pow(2).sum(1))
    ar_var = ar_topk_exchange(comm, left["ar_var"], K, leader, "ring", LAYERS)
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
            "left": {name: x[row] for name, x in left.items()},
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


@functools.cache
def engine_results(n: int) -> dict[str, list[dict]]:
    """{engine: per-worker results} at N workers; cached so the test files share one spawn."""
    return {"processes": spawn(worker, n), "axis": axis_scenarios(n)}
