"""Shared helpers for tests that train: compose a config and run it in a temp directory."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from repro.config import compose
from repro.train.entry import run_training

REPO = Path(__file__).resolve().parent.parent
TINY = [
    "workload=synthetic_mlp",
    "trainer.batch_size=16",
    "trainer.steps=40",
    "trainer.eval_every=10",
    "trainer.checkpoint_every=20",
    "trainer.progress=false",
    "optim.name=sgd",
    "optim.lr=0.1",
]


def train(tmp: Path, *overrides: str, tracking: str = "disabled") -> dict:
    cfg = compose(
        [
            *TINY,
            f"tracking={tracking}",
            f"runs_root={tmp / 'runs'}",
            f"data.root={tmp / 'data'}",
            *overrides,
        ]
    )
    return run_training(cfg)


def repro_cli(
    *args: str, cwd: Path | None = None, timeout: float = 300, under: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    """Run the `repro` console command as a user would (`under` a wrapper such as
    `taskset -c 0`, when given)."""
    env = {**os.environ, "WANDB_SILENT": "true", "PYTHONUNBUFFERED": "1"}
    env.pop("WANDB_API_KEY", None)
    exe = Path(sys.executable).parent / "repro"
    return subprocess.run(
        [*under, str(exe), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@contextlib.contextmanager
def on_one_core():
    """This thread narrowed to one of its cores, as a SLURM job's cpuset or `taskset -c`
    narrows a command (the cores a process may use, not the node's), restored on leaving."""
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, allowed)


def reproduce_tiny_args(paper: str, tmp: Path) -> list[str]:
    """`repro reproduce PAPER scale=tiny` with runs, data and reports under `tmp`."""
    return [
        "reproduce",
        paper,
        "scale=tiny",
        f"runs_root={tmp}/runs",
        f"data.root={tmp}/data",
        "--reports",
        str(tmp / "reports"),
    ]


def residual_after(x, indices):
    """What error feedback keeps when each row's `x[indices]` is sent: `x` with those entries
    zeroed (zeroing, not subtracting, so residual + sent is `x` bit for bit)."""
    return x.clone().scatter_(1, indices, 0.0)


def unshare_works() -> bool:
    """Whether this machine lets a test run a command in a user and mount namespace of its
    own (`unshare -rm`), where root is an ordinary user to files of unmapped owners and a
    folder can be mounted read-only: what a test running as root cannot otherwise meet."""
    return shutil.which("unshare") is not None and (
        subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode == 0
    )
