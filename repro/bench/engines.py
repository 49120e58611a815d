"""The simulated engine's cost: a step of many workers, and a whole run, against baselines.

Two ratios, each against a baseline measured in the same run:
1. One training step of the simulated engine at 4, 8 and 32 workers (one thread, as the
   engine runs; `trainer.vectorize=auto`, which for this CNN is its own all-workers
   forward, `stacked`) over one worker's step as the process engine runs it (its lone
   worker's plain kernels), on the small scales' workload (MNIST-1D CNN, batch 32 per
   worker, synchronous SGD and local SGD). Goal: 8 workers cost at most 3x one worker.
   Beside it, torch.func's `vmap` (what a model without its own all-workers forward
   gets), and one worker's step at a batch as large as all the workers' together (the
   same arithmetic, one weight set, torch's convolution kernels).
2. A whole 4-worker run from the command line, start-up included, under each engine, on
   the data set the step measurements already wrote, so that neither run pays for
   generating it. Goal: the simulated engine at least 3x faster per run.
The machine's load average is printed beside each: on 2 shared cores it moves the figures.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from repro.comm.axis_collectives import AxisCollectives
from repro.config import compose
from repro.train.trainer import Trainer

WORKERS = (4, 8, 32)
METHODS = {"sync": ["method=sync"], "local_sgd": ["method=local_sgd", "method.tau=4"]}
STEP_REPEATS = 40
RUN = [
    "workload=mnist1d_cnn",
    "trainer.world_size=4",
    "trainer.batch_size=32",
    "trainer.steps=300",
    "trainer.eval_every=100",
    "trainer.progress=false",
    "compute.mode=sampled",
    "tracking=disabled",
    "optim.name=sgd",
    "optim.lr=0.05",
]


def _load() -> str:
    return "load " + "/".join(f"{x:.1f}" for x in os.getloadavg())


def _step_seconds(root: Path, workers: int, vectorize: str, method: list[str]) -> float:
    """Median seconds of one `train_step` after a warm-up."""
    cfg = compose(
        [
            *RUN,
            f"trainer.world_size={workers}",
            "trainer.engine=simulated",
            f"trainer.vectorize={vectorize}",
            f"data.root={root / 'data'}",
            f"run_dir={root / f'{vectorize}{workers}'}",
            *method,
        ]
    )
    trainer = Trainer(cfg, AxisCollectives(workers), "cpu", vectorize)
    for step in range(1, 6):
        trainer.train_step(step)
    times = []
    for step in range(6, 6 + STEP_REPEATS):
        started = time.perf_counter()
        trainer.train_step(step)
        times.append(time.perf_counter() - started)
    return sorted(times)[len(times) // 2]


def _run_seconds(root: Path, engine: str) -> float:
    exe = Path(sys.executable).parent / "repro"
    args = [f"trainer.engine={engine}", f"run_dir={root / engine}", f"data.root={root / 'data'}"]
    started = time.perf_counter()
    subprocess.run([str(exe), "train", *RUN, *args], check=True, capture_output=True)
    return time.perf_counter() - started


def run() -> list[str]:
    torch.set_num_threads(1)
    lines = []
    with tempfile.TemporaryDirectory(prefix="bench-engines-") as tmp:
        root = Path(tmp)
        for name, method in METHODS.items():
            one = _step_seconds(root, 1, "loop", method)
            lines.append(f"{name}: one worker's step {one * 1e3:.1f} ms ({_load()})")
            for n in WORKERS:
                t = _step_seconds(root, n, "auto", method)
                goal = "  (goal <= 3x)" if n == 8 else ""
                vmapped = _step_seconds(root, n, "vmap", method)
                batch = _step_seconds(root, 1, "loop", [*method, f"trainer.batch_size={32 * n}"])
                lines.append(
                    f"  simulated {n:>2} workers: {t * 1e3:6.1f} ms/step = {t / one:5.2f}x one"
                    f" worker{goal}; with vmap {vmapped / one:5.2f}x; one worker at batch"
                    f" {32 * n} {batch / one:5.2f}x"
                )
        processes = _run_seconds(root, "processes")
        simulated = _run_seconds(root, "simulated")
        lines.append(
            f"4-worker run of 300 steps, start-up included ({_load()}): processes "
            f"{processes:.1f} s, simulated {simulated:.1f} s = {processes / simulated:.2f}x "
            f"faster (goal >= 3x)"
        )
    return lines
