"""The command line's start-up: how long `repro train` takes to refuse a bad config, and to
reach its first training step.

Each command runs as a user runs it, in a fresh process, `REPEATS` times; the median wall
time and the median CPU time (user + system of the process and every child it waited for,
from the kernel's rusage) are printed. Baselines measured in the same run: an empty
interpreter, `import torch` (the floor of any run), and `import torch` plus one step of a
torch.optim optimizer, whose first use imports torch._dynamo, about as costly again: the
cost a run avoids by stepping with `repro.optim.stacked` and differentiating
without torch.func's transforms.

- Config errors: an unknown method and a bad value. Goal: under 1.5 s of CPU, reachable
  only because validating a config imports no torch (held by tests/integration/
  test_startup.py, which checks the modules loaded rather than the time).
- First training step: a one-step run of `experiment=adacomm_tiny` (2 simulated workers,
  the synthetic workload, no tracking), from the command to its exit; its summary's
  `time/wall_s` is the step itself, the rest is start-up (plus one small evaluation and
  the final model's write).
The machine's load average is printed beside the figures: on shared cores it moves them.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from repro.netmodel.calibrate import load_note

REPEATS = 3
CPU_GOAL_S = 1.5
FIRST_STEP = [
    "experiment=adacomm_tiny",
    "trainer.steps=1",
    "trainer.eval_every=1",
    "trainer.progress=false",
    "tracking=disabled",
]
OPTIMIZER = (
    "import torch; p = torch.zeros(1, requires_grad=True); p.grad = torch.ones(1); "
    "torch.optim.SGD([p], lr=0.1).step()"
)


def _timed(cmd: list[str], expect_rc: int, cwd: Path) -> tuple[float, float, str]:
    """(wall s, CPU s, stderr) of one run of `cmd`; a run that exits otherwise than
    `expect_rc` stops the benchmark, since its time would measure something else."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != expect_rc:
        raise RuntimeError(
            f"{' '.join(cmd)} exited {proc.returncode}, expected {expect_rc}: {proc.stderr[-500:]}"
        )
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.stderr


def _median(runs: list[tuple[float, float, str]]) -> tuple[float, float]:
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def _line(what: str, wall: float, cpu: float, tail: str = "") -> str:
    return f"{what:<50} wall {wall:5.2f} s, CPU {cpu:5.2f} s{tail}"


def run() -> list[str]:
    repro = str(Path(sys.executable).parent / "repro")
    lines = [f"{os.cpu_count()} CPUs, median of {REPEATS} runs each ({load_note()})"]
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        root = Path(tmp)
        baselines = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "python -c 'import torch'": [sys.executable, "-c", "import torch"],
            "import torch + one torch.optim step": [sys.executable, "-c", OPTIMIZER],
        }
        floor = {}
        for what, cmd in baselines.items():
            floor[what] = _median([_timed(cmd, 0, root) for _ in range(REPEATS)])
            lines.append(_line(f"baseline {what}:", *floor[what]))
        torch_cpu = floor["python -c 'import torch'"][1]
        errors = {
            "unknown method (method=foo)": ["method=foo"],
            "bad value (trainer.world_size=-1)": ["trainer.world_size=-1"],
        }
        for what, overrides in errors.items():
            runs = [_timed([repro, "train", *overrides], 2, root) for _ in range(REPEATS)]
            wall, cpu = _median(runs)
            verdict = "met" if cpu < CPU_GOAL_S else "NOT met"
            lines.append(
                _line(f"repro train, {what}:", wall, cpu)
                + f" = {cpu / torch_cpu:.2f}x import torch (goal CPU < {CPU_GOAL_S} s: {verdict})"
            )
            lines.append(f"  {runs[-1][2].strip()[:100]}")
        runs, steps = [], []
        for i in range(REPEATS):
            run_dir = root / f"first-step-{i}"
            args = [f"run_dir={run_dir}", f"data.root={root / 'data'}"]
            runs.append(_timed([repro, "train", *FIRST_STEP, *args], 0, root))
            summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
            steps.append(summary["time/wall_s"])
        wall, cpu = _median(runs)
        lines.append(
            _line("repro train, to the first training step:", wall, cpu)
            + f" (the step itself {statistics.median(steps):.2f} s; CPU beyond import torch"
            f" {cpu - torch_cpu:.2f} s)"
        )
    lines.append(f"({load_note()} at the end)")
    return lines


if __name__ == "__main__":
    print("\n".join(run()))
