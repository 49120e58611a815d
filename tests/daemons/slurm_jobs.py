"""What the tests against the local SLURM cluster share: settings, waits, run comparison.

The SLURM test modules (`test_slurm_submit`, `test_slurm_faults`, `test_slurm_sweep`) submit
real jobs through sbatch, slurmctld, slurmd and srun and read their states from sacct. Each
test has its own runs_root (and so its own submitit folder and jobs.jsonl). Every wait has a
deadline after which the test fails, and `cancel_leftovers` (tests/daemons/conftest.py,
autouse) cancels what the test submitted, so nothing hangs or outlives its test.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from repro.cluster.jobs import ACTIVE, read_records
from repro.cluster.jobs import job_states as states_of
from tests.helpers import TINY

GUARD_S = 240.0  # hang guard for a job on a loaded 2-core machine, not a speed check
EQUAL_KEYS = (
    "step",
    "train/loss",
    "test/loss",
    "test/acc",
    "comm/bytes",
    "comm/collectives",
    "time/modeled_s",
)
# A cluster launch runs processes; its local twin is pinned to the same engine (the local
# default at this scale would be the simulated one, equal only to float rounding).
TWO_WORKERS = [
    *TINY,
    "trainer.world_size=2",
    "trainer.engine=processes",
    "compute.mode=sampled",
    "network=eth1g",
]
# 50 ms of modeled compute per step that each worker really sleeps: a run long enough to
# requeue or kill in the middle, with the same numbers as the run without sleeping.
SLOW = ["compute.dist=constant", "compute.mean_ms=50", "network.inject=true"]


def _slurm_overrides(tmp: Path) -> list[str]:
    return [
        "cluster=slurm_local",
        "tracking=disabled",
        f"runs_root={tmp / 'runs'}",
        f"data.root={tmp / 'data'}",
    ]


def _wait(root: Path, guard_s: float = GUARD_S) -> dict[str, str]:
    """Poll the recorded jobs' states (sacct) until every job has ended."""
    records = read_records(root)
    deadline = time.monotonic() + guard_s
    while True:
        states = states_of(records)
        if _ended(states):
            return states
        if time.monotonic() > deadline:
            pytest.fail(f"jobs under {root} not done after {guard_s:.0f} s: {states}")
        time.sleep(1.0)


def _ended(states: dict[str, str]) -> bool:
    return all(s not in ACTIVE and s != "UNKNOWN" for s in states.values())


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def _assert_same_run(a: Path, b: Path) -> None:
    sa, sb = _summary(a), _summary(b)
    for key in EQUAL_KEYS:
        assert sa[key] == sb[key], key
    ma, mb = torch.load(a / "final_model.pt"), torch.load(b / "final_model.pt")
    assert all(torch.equal(ma[k], mb[k]) for k in mb)
