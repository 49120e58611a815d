"""A run checkpointed mid-way and resumed by a fresh trainer ends exactly as the run that
wrote the checkpoint and went on: every registered method, in every variant its config
declares, under both engines at 2 workers.

The checkpoint falls at step 5 of 10, inside what each method carries across steps: local
SGD's period (tau 3) and its block momentum, AdaComm's interval and tau, Top-k's residual,
its gain window (3 steps) and ratio controller, VAR's norm window, Adam's and LAMB's
moments. The resumed trainer is built from the config alone and restores every part from
the checkpoint files (`Trainer.save` / `Trainer.restore`), as a restarted run does; its
parameters, decisions and modeled clock at every later step, and its strategy's metrics at
the end, must equal the other run's bit for bit. A SIGKILLed run of each method's first
variant against a run never checkpointed there, from the command line, is
`tests/integration/test_kill_resume.py`.
"""

from __future__ import annotations

import math

import pytest
import torch

from repro.comm.axis_collectives import AxisCollectives
from repro.comm.launch import spawn
from repro.conformance import variants
from repro.workload.workload import prepare
from tests.comm.engine_traces import config, process_resumes, resumed_and_straight

STEPS, SAVED_AT, WORLD = 10, 5, 2
VARIANTS = {v.id: v.overrides for v in variants()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every variant under both engines: one spawn of the process engine for all of them."""
    root = str(tmp_path_factory.mktemp("resume"))
    cfg = config([], "data", WORLD, root, "processes", STEPS)
    prepare(cfg.workload, cfg.data, 0)
    ranks = spawn(process_resumes, WORLD, VARIANTS, root, SAVED_AT, STEPS)
    torch.set_num_threads(1)
    comm = AxisCollectives(WORLD)
    simulated = {
        n: resumed_and_straight(o, n, root, "simulated", comm, SAVED_AT, STEPS)
        for n, o in VARIANTS.items()
    }
    return {"processes": ranks, "simulated": [simulated]}


def _same(a: object, b: object) -> bool:
    """Equal, a NaN (a metric not measured yet) equal to a NaN."""
    nan = isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
    return nan or a == b


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["processes", "simulated"])
@pytest.mark.parametrize("name", list(VARIANTS))
def test_resumed_run_equals_uninterrupted_run(runs, engine, name):
    for held in runs[engine]:  # one result per process
        straight, resumed = held[name]
        for step, (s, r) in enumerate(zip(straight, resumed, strict=True), start=SAVED_AT + 1):
            # what differs first, and where to look: a state the checkpoint does not carry
            lost = f"{name}: the resumed run's {{}} differ at step {step} (checkpoint: {SAVED_AT})"
            lost += "; a part's state_dict (the strategy's, its compressor's, its ratio "
            lost += "controller's) leaves out state it carries across steps"
            assert r["params"].equal(s["params"]), lost.format("parameters")
            assert r["decisions"] == s["decisions"], lost.format("decisions")
            assert r["modeled_s"] == s["modeled_s"], lost.format("modeled clocks")
        metrics = straight[-1]["metrics"]
        assert resumed[-1]["metrics"].keys() == metrics.keys()
        assert all(_same(resumed[-1]["metrics"][k], v) for k, v in metrics.items()), name
        # the resumed steps trained: the parameters moved after the checkpoint
        assert not resumed[-1]["params"].equal(resumed[0]["params"])
