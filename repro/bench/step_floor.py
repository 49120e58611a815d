"""Every small-scale run set's simulated step against its floor, with a breakdown.

The floor of a workload is one worker's dense step of the same model at the same total
batch (the run's workers x batch per worker), forward and backward with the model's own
plain torch kernels and an SGD step of torch's rule (`repro.optim.stacked.SGD`, the
run's momentum and weight decay): the same samples' arithmetic with nothing of the
method or of the worker axis. The simulated step is `Trainer.train_step` as the run set
runs it (its labels composed as `repro reproduce` composes them; the untuned learning
rates, which change no arithmetic), plus its evaluation amortised per step at the run's
`trainer.eval_every`. Goal: every step at most 1.5x its floor. Where the floor and the
run's evaluation together already exceed that (an evaluation cadence and test set fixed by
the run set's regime), the line says so with their ratio: no faster step can meet the goal.

The workloads: every Top-k label of the small set and the 8- and 32-worker Adasum runs;
of the AdaComm set, synchronous SGD and AdaComm (its fixed-period local SGD and
learning-rate-decay labels take the same CNN step at other periods and rates).

Floor steps and simulated steps alternate one by one in the same process (one torch
thread, as the simulated engine runs), so both see the same moments of load, and each is
taken as the mean of its fastest quarter of 40 (evaluation: the fastest of 5): on a shared
machine the least disturbed runs are the best estimate of the unloaded one. Steps that ran
different parts (a local-SGD step that averages against one that does not) are averaged
apart and weighted by how often they ran (`PartTimer.typical`), so an averaging is
charged at its period's rate. The machine's load average is printed at start and end.
The MOO run's probes (5 candidate ratios x 5 trial steps from a snapshot) are timed by
asking for extra probes and charged at the rate its run probes: 6 probes in 1,300 steps
(seed 0, `repro reproduce topk`, measured here; 8 before a re-solve on a network change
started a new gain block).

The breakdown is each part's own time per step (nested calls counted in the inner part),
by the same statistic as the step, so the parts add up to it: forward/backward, Top-k
selection, error feedback, collectives, Adasum's combination, the optimizer, the rest of
the exchange (flattening, scattering), MOO probes, the rest of the step (data, clocks,
metrics) and evaluation.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch
from torch.nn import functional as F

from repro.bench.step_parts import PartTimer, fastest_mean, instrument, module_parts
from repro.comm.axis_collectives import AxisCollectives
from repro.config import Config
from repro.netmodel.calibrate import load_note
from repro.optim.stacked import SGD
from repro.reproduce.run_sets import run_set
from repro.train.trainer import Trainer

TOPK = ["dense_ring"] + [
    f"{family}_topk_c{c}"
    for family in ("ag", "star", "var", "flex")
    for c in ("0.1", "0.01", "0.001")
]
LABELS = {"adacomm": ["sync", "adacomm"], "topk": [*TOPK, "moo"]}
ADASUM_WORKERS = (8, 32)
MOO_STEPS_PER_PROBE = 1300 / 6
GOAL = 1.5


class _Floor:
    """One worker's dense step of `model` at batch `batch` (module doc)."""

    def __init__(self, trainer: Trainer, batch: int):
        cfg = trainer.cfg.optim
        torch.manual_seed(0)
        self.model = trainer.workload.model_factory()
        self.optimizer = SGD(
            list(self.model.parameters()),
            lr=cfg.lr,
            momentum=cfg.momentum,
            weight_decay=cfg.weight_decay,
        )
        arrays = trainer.workload.arrays
        self.x, self.y = trainer.workload.batch(torch.arange(batch) % len(arrays.y_train), None)

    def step(self) -> None:
        loss = F.cross_entropy(self.model(self.x), self.y)
        for p in self.model.parameters():
            p.grad = None
        loss.backward()
        self.optimizer.step()


def _timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def workloads(root: Path, labels: list[str] | None) -> list[tuple[str, str, Config]]:
    """(paper, label, config) of every workload benched, composed as `repro reproduce`
    composes the small run sets, each label for one seed. The learning rate does not
    change a step's arithmetic, so the untuned rates stand in (`experiment.tuned=false`:
    the bench runs whether or not a set's tuned file is current). Adasum's are the adasum
    combiner's simulated runs at 8 and 32 workers, whatever their labels."""
    out = []
    for paper in ("adacomm", "topk", "adasum"):
        extra = [
            "experiment.tuned=false",
            "tracking=disabled",
            "trainer.progress=false",
            f"data.root={root / 'data'}",
        ]
        for label, cfg in run_set(paper, "small", extra, seeds=1):
            if paper in LABELS:
                wanted = label in LABELS[paper]
            else:
                wanted = (
                    cfg.method.combiner == "adasum"
                    and cfg.trainer.world_size in ADASUM_WORKERS
                    and cfg.trainer.engine != "processes"
                )
            if wanted and (labels is None or label in labels):
                cfg.run_dir = str(root / "runs" / label)
                out.append((paper, label, cfg))
    return out


def measure(label: str, cfg: Config, rounds: int, steps: int) -> dict:
    """Seconds per step of the floor and of the run (evaluation amortised), and the parts."""
    n = cfg.trainer.world_size
    trainer = Trainer(cfg, AxisCollectives(n), "cpu", cfg.trainer.vectorize)
    floor = _Floor(trainer, n * cfg.trainer.batch_size)
    timer = PartTimer()
    instrument(trainer, timer)
    step = 0

    def train_step() -> None:
        nonlocal step
        step += 1
        timer.step(trainer.train_step, step)

    def untimed_step() -> float:
        nonlocal step
        step += 1
        started = time.perf_counter()
        trainer.train_step(step)
        return time.perf_counter() - started

    for _ in range(3):  # first calls: allocations, compiled loops loaded, MOO's first probe
        train_step()
        floor.step()
    timer.reset()
    floors, evals, probes = [], [], []
    with module_parts(timer):
        for _ in range(rounds):
            for _ in range(steps):  # one of each in turn: the same moments of load for both
                floors.append(_timed(floor.step))
                train_step()
            evals.append(_timed(lambda: trainer.log_point(step)))
            if label == "moo":
                trainer.strategy._probe_due = True  # the next step probes, as a re-probe does
                probes.append(untimed_step())
    evaluation = min(evals) / cfg.trainer.eval_every
    step_s, parts = timer.typical()
    if probes:
        # the probing steps' parts are left out; the probe is charged at the run's rate
        parts["MOO probes"] = (fastest_mean(probes) - step_s) / MOO_STEPS_PER_PROBE
        step_s += parts["MOO probes"]
    parts["evaluation"] = evaluation
    return {
        "floor": fastest_mean(floors),
        "step": step_s + evaluation,
        "parts": parts,
        "workers": n,
        "batch": n * cfg.trainer.batch_size,
    }


def row_lines(paper: str, label: str, r: dict) -> list[str]:
    """The two lines of one workload's result (`measure`): its ratio against the goal, and
    where the floor and its evaluation alone pass the goal, by how much; then its parts."""
    ratio = r["step"] / r["floor"]
    mark = "ok" if ratio <= GOAL else f"over {GOAL}x"
    bound = (r["floor"] + r["parts"]["evaluation"]) / r["floor"]
    if bound > GOAL:
        mark += f"; the floor and its evaluation alone: {bound:.2f}x"
    parts = "  ".join(f"{k} {v * 1e3:.2f}" for k, v in r["parts"].items() if v > 5e-5)
    return [
        f"{paper} {label} ({r['workers']} workers, batch {r['batch']}): step "
        f"{r['step'] * 1e3:.1f} ms / floor {r['floor'] * 1e3:.1f} ms = {ratio:.2f}x ({mark})",
        f"    ms/step: {parts}",
    ]


def run(labels: list[str] | None = None, rounds: int = 5, steps: int = 8) -> list[str]:
    torch.set_num_threads(1)
    lines = [f"start: {load_note()}"]
    with tempfile.TemporaryDirectory(prefix="bench-floor-") as tmp:
        for paper, label, cfg in workloads(Path(tmp), labels):
            lines += row_lines(paper, label, measure(label, cfg, rounds, steps))
    lines.append(f"end: {load_note()}")
    return lines


if __name__ == "__main__":
    print("\n".join(run()))
