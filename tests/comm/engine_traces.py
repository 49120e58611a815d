"""Step-by-step traces of short runs under either engine, straight or resumed from a
checkpoint, for the conformance tests.

Kept apart from the test modules so that the process engine's workers, which import the
function they run, do not compose every method's config again (the test modules list
the variants at import, for their parameters).
"""

from __future__ import annotations

import re

import torch

from repro.comm.axis_collectives import AxisCollectives
from repro.comm.launch import init_process_group
from repro.comm.process_collectives import ProcessCollectives
from repro.config import Config, compose
from repro.train.trainer import Trainer

SGD = ["optim.name=sgd", "optim.lr=0.05", "optim.momentum=0.9"]
DECISIONS = (
    "method/tau",
    "method/cr",
    "method/collective",
    "method/k",
    "method/leader",
    "method/probes",
)


def config(
    overrides: list[str],
    name: str,
    world: int,
    root: str,
    engine: str,
    steps: int,
    vectorize: str = "loop",
) -> Config:
    """The MNIST-1D CNN on 2000 samples, batch 16 per worker, SGD with momentum unless the
    variant names another optimizer; its run directory under `root` named after `name`."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
    return compose(
        [
            "workload=mnist1d_cnn",
            "workload.num_samples=2000",
            "tracking=disabled",
            "compute.mode=sampled",
            f"trainer.world_size={world}",
            "trainer.batch_size=16",
            f"trainer.steps={steps}",
            "trainer.progress=false",
            f"trainer.engine={engine}",
            f"trainer.vectorize={vectorize}",
            f"data.root={root}/data",
            f"run_dir={root}/{engine}-{vectorize}-{world}-{slug}",
            *SGD,
            *overrides,
        ]
    )


def point(trainer: Trainer) -> dict:
    """Every held worker's parameters, the strategy's decisions and the modeled time."""
    metrics = trainer.strategy.metrics()
    rows = [p.detach().reshape(p.shape[0], -1) for p in trainer.replicas.params]
    return {
        "params": torch.cat(rows, 1),
        "decisions": {k: metrics[k] for k in DECISIONS if k in metrics},
        "modeled_s": trainer.time.now(),
    }


def trace(trainer: Trainer, steps: int, first: int = 1) -> list[dict]:
    """`point` after each of the steps first .. first + steps - 1."""
    out = []
    for step in range(first, first + steps):
        trainer.train_step(step)
        out.append(point(trainer))
    return out


def process_traces(rank: int, world: int, variants: dict[str, list[str]], root: str, steps: int):
    """A process engine worker: every variant's trace in turn, over one process group."""
    init_process_group()
    torch.set_num_threads(1)
    comm = ProcessCollectives()
    return {
        name: trace(Trainer(config(o, name, world, root, "processes", steps), comm, "cpu"), steps)
        for name, o in variants.items()
    }


def simulated_trace(
    overrides: list[str], name: str, world: int, root: str, steps: int, vectorize: str = "loop"
) -> list[dict]:
    cfg = config(overrides, name, world, root, "simulated", steps, vectorize)
    return trace(Trainer(cfg, AxisCollectives(world), "cpu", vectorize), steps)


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a - b|| / ||b|| in float64."""
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def resumed_and_straight(
    overrides: list[str], name: str, root: str, engine: str, comm, at: int, steps: int
):
    """(the points after step `at` of a run that saves a checkpoint at `at` and goes on,
    those of a fresh trainer that resumes from that checkpoint's files), the last point of
    each with the strategy's metrics."""
    cfg = config(overrides, name, comm.world_size, root, engine, steps)

    def rest(trainer: Trainer) -> list[dict]:
        out = trace(trainer, steps - at, at + 1)
        out[-1]["metrics"] = trainer.strategy.metrics()
        return out

    straight = Trainer(cfg, comm, "cpu")
    trace(straight, at)
    straight.save(at)
    expected = rest(straight)
    resumed = Trainer(cfg, comm, "cpu")
    if resumed.restore() != at:
        raise AssertionError(f"{name}: the resumed trainer did not find step {at}")
    return expected, rest(resumed)


def process_resumes(
    rank: int, world: int, variants: dict[str, list[str]], root: str, at: int, steps: int
):
    """A process engine worker: `resumed_and_straight` for every variant in turn."""
    init_process_group()
    torch.set_num_threads(1)
    comm = ProcessCollectives()
    return {
        name: resumed_and_straight(o, name, root, "processes", comm, at, steps)
        for name, o in variants.items()
    }
