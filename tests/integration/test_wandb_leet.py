"""Our `.wandb` parser (repro.track.runs) reads what wandb's own reader reads.

`wandb leet inspect --json` decodes a run's transaction log with wandb's Go core; every
history point and the summary our parser returns for the same offline run must equal its
output. pyproject.toml bounds wandb to the versions this test has passed on: a new wandb
may change the log's records, and this test is what says whether the parser still holds.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from repro.config import flat  # nested metrics as leet keys its history items: `a.b`
from repro.schemas.tracking import TrackingConfig
from repro.track.runs import read_run
from repro.track.wandb_run import Tracker
from tests.helpers import repro_cli

WANDB = Path(sys.executable).parent / "wandb"
# leet's JSON (Go's encoder) cannot hold non-finite floats and writes them as strings.
NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def leet(*args: str) -> str:
    proc = subprocess.run(
        [str(WANDB), "leet", "inspect", "--json", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def decoded(value):
    if isinstance(value, str):
        return NON_FINITE.get(value, value)
    if isinstance(value, list):
        return [decoded(v) for v in value]
    if isinstance(value, dict):
        return {k: decoded(v) for k, v in value.items()}
    return value


def public(d: dict) -> dict:
    """Without wandb's own `_step`, `_runtime`, `_timestamp`, `_wandb` keys."""
    return {k: decoded(v) for k, v in d.items() if not k.startswith("_")}


def pruned(d: dict) -> dict:
    """Without empty sections (`cluster.sbatch_args: {}`): the log holds them, but leet's
    config view, built from flattened keys, has no key to show them under."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            v = pruned(v)
            if not v:
                continue
        out[k] = v
    return out


def same(a, b) -> bool:
    """Equality in which NaN equals NaN, an int equals the same float (leet writes 0.0 as
    0) and a bool equals only a bool."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def assert_matches_leet(run_dir: Path) -> None:
    (segment,) = (run_dir / "wandb").glob("offline-run-*")
    records = [json.loads(line) for line in leet(str(segment)).splitlines()]
    theirs = [
        {**public(r["history"]["item"]), "step": r["history"]["step"]["num"]}
        for r in records
        if r["type"] == "history"
    ]
    state = json.loads(leet("--summary", str(segment)))
    ours = read_run(run_dir)

    assert len(theirs) >= 3
    assert len(ours.history) == len(theirs)
    for mine, wandbs in zip(ours.history, theirs, strict=True):
        assert same(flat(mine), wandbs), (mine, wandbs)
    assert same(ours.summary, public(state["summary"])), (ours.summary, state["summary"])
    assert pruned(ours.config) == public(state["config"])
    assert (ours.run_id, ours.name, ours.exit_code) == (
        state["run_id"],
        state["name"],
        state["exit_code"],
    )


@pytest.mark.slow
def test_training_run_reads_as_wandb_reads_it(tmp_path):
    """A real `repro train` run with the default offline tracking."""
    run_dir = tmp_path / "run"
    proc = repro_cli(
        "train",
        "workload=synthetic_mlp",
        "trainer.steps=30",
        "trainer.eval_every=10",
        "trainer.batch_size=16",
        "trainer.progress=false",
        "tracking=wandb_offline",
        f"run_dir={run_dir}",
        f"data.root={tmp_path}/data",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert_matches_leet(run_dir)


@pytest.mark.slow
def test_every_value_kind_reads_as_wandb_reads_it(tmp_path):
    """Values a trainer rarely logs but the parser must decode as wandb does: non-finite
    floats, nested metrics, booleans, None, lists, large ints, strings."""
    run_dir = tmp_path / "run"
    tracker = Tracker(
        TrackingConfig(mode="offline", tags=["leet"]),
        run_dir,
        "kinds",
        "group",
        "check",
        {"optim": {"name": "sgd", "lr": 0.1}, "seed": 3},
    )
    tracker.log(
        {
            "nan": math.nan,
            "inf": math.inf,
            "neg_inf": -math.inf,
            "nested": {"a": 1, "b": "x"},
            "flag": True,
            "none": None,
            "never_set": None,
            "list": [1, 2.5],
            "big": 2**40,
            "tiny": 1e-300,
            "name": "ring",
        },
        step=0,
    )
    tracker.log({"nan": 1.0, "none": 2.0, "flag": False}, step=1)
    tracker.log({"none": None, "name": "tree"}, step=5)
    tracker.set_summary({"final": 0.5})
    tracker.finish()
    assert_matches_leet(run_dir)
