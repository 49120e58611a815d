"""The simulated engine computes what the process engine computes, method by method.

Every registered method, in every variant its config declares (`repro.conformance`), runs
the same config and seed under both engines:
the process engine as real gloo workers (one OS process each), the simulated engine as
every worker on one tensor axis in this process. Each step's decisions (tau, compression
ratio, collective, leader, k, probe rounds), the modeled clock and every worker's
parameters are compared:
- at 2 workers bit for bit (a sum of two is order-free), with the simulated engine looping
  over its workers with a lone worker's kernels (`trainer.vectorize=loop`);
- at 4 workers within 1e-6 relative (||delta|| / ||theta||) after one step and 1e-3 after
  the run (gloo's ring sums in another order, and training amplifies rounding);
- vectorized (`stacked`, the CNN's own all-workers forward, and `vmap`) within rounding
  after one step;
- under `stacked`, bit for bit with and without the gradients put in place by the backward
  (`Strategy.gradient_targets`), over steps where the method has a residual or a buffer.
The divergence per step is printed (pytest -s shows it).
"""

from __future__ import annotations

import pytest
import torch

from repro.comm.axis_collectives import AxisCollectives
from repro.comm.launch import spawn
from repro.conformance import firsts, variants
from repro.train.trainer import Trainer
from repro.workload.workload import prepare
from tests.comm.engine_traces import config, process_traces, relative, simulated_trace, trace

STEPS = 10
# Every registered method in every variant its config declares.
VARIANTS = {v.id: v.overrides for v in variants()}


@pytest.fixture(scope="module")
def shared_root(tmp_path_factory) -> str:
    """One data set for every run of this module (each run keeps its own run directory)."""
    root = str(tmp_path_factory.mktemp("engines"))
    cfg = config([], "data", 2, root, "processes", STEPS)
    prepare(cfg.workload, cfg.data, 0)
    return root


@pytest.fixture(scope="module", params=[2, 4])
def engines(request, shared_root):
    """Every variant under both engines at one world size (one spawn for all variants)."""
    world, root = request.param, shared_root
    ranks = spawn(process_traces, world, VARIANTS, root, STEPS)
    processes = {
        n: [
            {**ranks[0][n][s], "params": torch.cat([r[n][s]["params"] for r in ranks])}
            for s in range(STEPS)
        ]
        for n in VARIANTS
    }
    torch.set_num_threads(1)
    simulated = {n: simulated_trace(o, n, world, root, STEPS) for n, o in VARIANTS.items()}
    return world, processes, simulated


@pytest.mark.slow
@pytest.mark.parametrize("name", list(VARIANTS))
def test_simulated_engine_equals_process_engine(engines, name):
    world, processes, simulated = engines
    divergence = []
    for step, (p, s) in enumerate(zip(processes[name], simulated[name], strict=True), start=1):
        assert s["decisions"] == p["decisions"], f"{name} step {step}"
        assert s["modeled_s"] == p["modeled_s"], f"{name} step {step}"
        divergence.append(relative(s["params"], p["params"]))
    print(f"{name} at {world} workers, divergence per step: {divergence}")
    if world == 2:
        assert divergence == [0.0] * STEPS
    else:
        assert divergence[0] <= 1e-6
        assert max(divergence) <= 1e-3
    # the run really trained: every worker moved from the shared start
    assert relative(processes[name][-1]["params"], processes[name][0]["params"]) > 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("variant", firsts(), ids=lambda v: v.id)
def test_vectorized_workers_match_looped_workers(shared_root, variant):
    """Each method's first variant, one step of 4 workers, against the looped workers."""
    root, name = shared_root, variant.id
    looped = simulated_trace(variant.overrides, name, 4, root, 1, "loop")
    for vectorize in ("stacked", "vmap"):
        vectorized = simulated_trace(variant.overrides, name, 4, root, 1, vectorize)
        assert vectorized[0]["decisions"] == looped[0]["decisions"], vectorize
        assert relative(vectorized[0]["params"], looped[0]["params"]) <= 1e-6, vectorize


# MOO re-probing mid-run (a gain change of any size re-probes), so probing steps follow
# steps whose gradients went in place
IN_PLACE = {
    **VARIANTS,
    "moo re-probing": [
        *("method=topk", "method.cr_controller=moo", "method.candidates=[0.1,0.01]"),
        *("method.probe_steps=2", "method.gain_window=1", "method.reprobe_change=1e-9"),
    ],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(IN_PLACE))
def test_gradients_put_in_place_train_as_fresh_ones_bit_for_bit(shared_root, name):
    """Every variant, 4 stacked workers, 6 steps: the run whose backward puts gradients
    where the strategy asks (added into residuals, written into the send buffer) and the
    same run with fresh gradients every step (the strategy offers no targets) take the same
    decisions and hold the same parameters, bit for bit, after every step. An exchange that
    ranks by ||g||^2 (VAR) is offered its gradients in place too, measured by the backward."""
    torch.set_num_threads(1)
    runs, measured = [], []
    for offered in (True, False):
        cfg = config(IN_PLACE[name], f"{name}-{offered}", 4, shared_root, "simulated", 6, "stacked")
        trainer = Trainer(cfg, AxisCollectives(4), "cpu", "stacked")
        if offered:
            offer = trainer.strategy.gradient_targets

            def watched(offer=offer):
                targets = offer()
                measured.append(targets is not None and bool(targets.sq_norms))
                return targets

            trainer.strategy.gradient_targets = watched
        else:
            trainer.strategy.gradient_targets = lambda: None
        runs.append(trace(trainer, 6))
    exchange = getattr(trainer.strategy, "exchange", None)
    assert any(measured) == getattr(exchange, "reads_gradients", False)
    for step, (put, fresh) in enumerate(zip(*runs, strict=True), start=1):
        assert put["decisions"] == fresh["decisions"], f"step {step}"
        assert put["modeled_s"] == fresh["modeled_s"], f"step {step}"
        assert torch.equal(put["params"], fresh["params"]), f"step {step}"
