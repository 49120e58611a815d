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
Each figure is taken beside its baseline, in turn (steps: the mean of the fastest quarter
of 12 blocks of 4 steps each, interleaved; runs: the faster of two each, interleaved), and
each goal line says whether it is met. The machine's load average is printed beside each:
on 2 shared cores it moves the figures.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from repro.bench.step_parts import fastest_mean
from repro.comm.axis_collectives import AxisCollectives
from repro.config import compose
from repro.netmodel.calibrate import load_note
from repro.train.trainer import Trainer

WORKERS = (4, 8, 32)
PERIOD = 4
METHODS = {"sync": ["method=sync"], "local_sgd": ["method=local_sgd", f"method.tau={PERIOD}"]}
STEP_REPEATS = 48
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


def _trainer(root: Path, workers: int, vectorize: str, method: list[str]) -> Trainer:
    """A simulated trainer of `workers` workers, warmed up by five steps."""
    cfg = compose(
        [
            *RUN,
            f"trainer.world_size={workers}",
            "trainer.engine=simulated",
            f"trainer.vectorize={vectorize}",
            f"data.root={root / 'data'}",
            f"run_dir={root / f'{vectorize}{workers}-{len(method)}'}",
            *method,
        ]
    )
    trainer = Trainer(cfg, AxisCollectives(workers), "cpu", vectorize)
    for step in range(1, 6):
        trainer.train_step(step)
    return trainer


def _step_seconds(trainers: dict[str, Trainer]) -> dict[str, float]:
    """Seconds per `train_step` of each trainer, timed over blocks of `PERIOD` steps (one
    local-SGD period: each block holds one averaging) taken in turn, one block of each per
    round, so that all see the same moments of load; each the mean of its fastest quarter
    of blocks (`fastest_mean`), per step."""
    times: dict[str, list[float]] = {name: [] for name in trainers}
    for first in range(6, 6 + STEP_REPEATS, PERIOD):
        for name, trainer in trainers.items():
            started = time.perf_counter()
            for step in range(first, first + PERIOD):
                trainer.train_step(step)
            times[name].append((time.perf_counter() - started) / PERIOD)
    return {name: fastest_mean(t) for name, t in times.items()}


def _run_seconds(root: Path, engine: str, turn: int) -> float:
    """Seconds of a whole run from the command line, in a directory of its own (the same
    one again would be skipped as finished)."""
    exe = Path(sys.executable).parent / "repro"
    run_dir = root / f"{engine}-{turn}"
    args = [f"trainer.engine={engine}", f"run_dir={run_dir}", f"data.root={root / 'data'}"]
    started = time.perf_counter()
    done = subprocess.run([str(exe), "train", *RUN, *args], capture_output=True, text=True)
    if done.returncode:
        said = done.stderr.strip().splitlines()
        raise RuntimeError(f"the {engine} run failed: {said[-1] if said else done.returncode}")
    return time.perf_counter() - started


def _mark(met: bool, goal: str) -> str:
    return f"  (goal {goal}: {'met' if met else 'NOT met'})"


def run() -> list[str]:
    torch.set_num_threads(1)
    lines = []
    with tempfile.TemporaryDirectory(prefix="bench-engines-") as tmp:
        root = Path(tmp)
        for name, method in METHODS.items():
            lines.append(f"{name} ({load_note()}):")
            for n in WORKERS:
                trainers = {
                    "one": _trainer(root, 1, "loop", method),
                    "auto": _trainer(root, n, "auto", method),
                    "vmap": _trainer(root, n, "vmap", method),
                    "batch": _trainer(root, 1, "loop", [*method, f"trainer.batch_size={32 * n}"]),
                }
                t = _step_seconds(trainers)
                ratio = t["auto"] / t["one"]
                goal = _mark(ratio <= 3, "<= 3x") if n == 8 else ""
                lines.append(
                    f"  simulated {n:>2} workers: {t['auto'] * 1e3:6.1f} ms/step = {ratio:5.2f}x"
                    f" one worker's {t['one'] * 1e3:.1f} ms{goal}; with vmap"
                    f" {t['vmap'] / t['one']:5.2f}x; one worker at batch {32 * n}"
                    f" {t['batch'] / t['one']:5.2f}x"
                )
        # in turn, twice, each engine's faster run kept: a run is one sample of its load
        runs: dict[str, list[float]] = {"processes": [], "simulated": []}
        for turn, order in enumerate((("processes", "simulated"), ("simulated", "processes"))):
            for engine in order:
                runs[engine].append(_run_seconds(root, engine, turn))
        processes, simulated = min(runs["processes"]), min(runs["simulated"])
        speedup = processes / simulated
        lines.append(
            f"4-worker run of 300 steps, start-up included ({load_note()}), faster of two "
            f"taken in turn: processes {processes:.1f} s, simulated {simulated:.1f} s = "
            f"{speedup:.2f}x faster{_mark(speedup >= 3, '>= 3x')}"
        )
    return lines


if __name__ == "__main__":
    print("\n".join(run()))
