"""What a training run tells wandb, read back with wandb's own offline reader.

A reproduction run and a sweep trial are opened exactly as the trainer opens them
(`RunLog` over a composed config), log a few points offline and finish; `wandb leet inspect
--json` then decodes the run's transaction log with wandb's Go core, independently of our
parser: the run's name carries its seed, its tags name paper, scale, method, seed and study,
a sweep trial sits in its study's group, not the reproduction's, and the metric records make
the modeled clock the default x axis with the min / max summaries computed over the points.
"""

from __future__ import annotations

import json
import math
from dataclasses import astuple, replace
from importlib.metadata import version
from pathlib import Path

import torch

from repro.config import compose
from repro.sweep.spec import load_spec
from repro.sweep.trial import arm_trial_overrides, sweep_trial_overrides
from repro.track.naming import run_identity
from repro.track.provenance import data_digest, environment
from repro.track.runs import read_run
from repro.track.wandb_metrics import SUMMARIES
from repro.train.run_log import RunLog
from repro.workload.config import WorkloadConfig
from repro.workload.data import Arrays, synthetic
from repro.workload.workload import Workload
from tests.integration.test_wandb_leet import leet

ROOT = Path(__file__).resolve().parents[2]
# Neither loss nor accuracy is monotone, so min / max differ from the first and last points.
LOSSES = [2.0, 0.7, 1.1, 0.9]
ACCS = [0.2, 0.8, 0.6, 0.7]
WORKLOAD = Workload(WorkloadConfig(), synthetic(64, seed=0), "cpu")


def logged_run(overrides: list[str], run_dir: Path) -> Path:
    """One finished offline run of LOSSES / ACCS through the trainer's RunLog; its segment."""
    cfg = compose([*overrides, "tracking=wandb_offline", f"run_dir={run_dir}"])
    log = RunLog(cfg, run_dir, first_process=True)
    log.open(WORKLOAD)
    for step, (loss, acc) in enumerate(zip(LOSSES, ACCS, strict=True)):
        log.log(
            {
                "step": step,
                "train/loss": loss,
                "test/acc": acc,
                "time/modeled_s": 0.5 * step,
                "time/wall_s": 2.0 * step,
            }
        )
    log.finish({**log.last_point, "target/reached": 0.0})
    (segment,) = (run_dir / "wandb").glob("offline-run-*")
    return segment


def records(segment: Path) -> tuple[dict, dict]:
    """The run record and the metric definitions (name -> record) wandb wrote."""
    lines = [json.loads(line) for line in leet(str(segment)).splitlines()]
    (run,) = [r["run"] for r in lines if r["type"] == "run"]
    metrics = {
        m.get("name") or m.get("glob_name"): m
        for m in (r["metric"] for r in lines if r["type"] == "metric")
    }
    return run, metrics


def test_reproduction_run_name_tags_group_axes_and_summaries(tmp_path):
    overrides = ["experiment=adacomm_small", "experiment.label=local_sgd_tau4", "seed=2"]
    segment = logged_run([*overrides, "method=local_sgd", "method.tau=4"], tmp_path / "run")
    run, metrics = records(segment)
    assert run["display_name"] == "local_sgd_tau4-s2"
    assert run["run_group"] == "adacomm_small"
    assert run["tags"] == ["paper:adacomm", "scale:small", "method:local_sgd", "seed:2"]

    # every curve against the modeled clock by default, the wall clock against steps
    assert metrics["*"]["step_metric"] == "time/modeled_s"
    assert metrics["train/loss"]["step_metric"] == "time/modeled_s"
    assert metrics["time/wall_s"]["step_metric"] == "step"
    assert {"step", "time/modeled_s"} <= metrics.keys()
    for name, kinds in SUMMARIES.items():
        assert set(metrics[name]["summary"]) == set(kinds.split(","))

    summary = json.loads(leet("--summary", str(segment)))["summary"]
    assert summary["train/loss"] == {"min": min(LOSSES), "last": LOSSES[-1]}
    assert summary["test/acc"] == {"max": max(ACCS), "last": ACCS[-1]}
    assert summary["target/reached"] == 0
    assert summary["time/modeled_s"] == 0.5 * (len(LOSSES) - 1)


def test_sweep_trial_sits_in_its_study_group_not_the_reproductions(tmp_path):
    spec = load_spec(ROOT / "sweeps" / "topk_cr_pareto.yaml")
    params = {p.key: p.probe_values()[0] for p in spec.space}
    overrides = sweep_trial_overrides(spec, 3, params, tmp_path / "trial_3")
    run, _ = records(logged_run(overrides, tmp_path / "trial_3"))
    cfg = compose(overrides)
    assert run["run_group"] == spec.name != "topk_small"  # never the reproduction's group
    assert cfg.experiment.group == spec.name  # so a report of the set never reads a trial
    assert run["display_name"] == f"{cfg.label}-s{cfg.seed}"
    assert run["tags"] == [
        "paper:topk",
        "scale:small",
        f"method:{cfg.method.name}",
        f"seed:{cfg.seed}",
        "sweep",
        f"study:{spec.name}",
        "trial:3",
    ]


def test_tuning_trials_have_their_own_group_and_tags():
    spec = load_spec(ROOT / "sweeps" / "tune" / "topk_small.yaml")
    runs = compose([f"experiment={spec.experiment}"]).experiment.runs
    arm = spec.arms["star_topk"]
    params = {p.key: p.low for p in spec.space_of(arm)}
    cfg = compose(arm_trial_overrides(spec, runs, arm, params, spec.seeds[0]))
    who = run_identity(cfg)
    assert who.group == "tune_topk_small" != cfg.experiment.group
    assert who.name == f"{arm.trained}-s{spec.seeds[0]}"
    assert who.tags[-3:] == ["tune", "study:tune_topk_small", "arm:star_topk"]


def test_each_run_records_what_it_was_made_with_and_a_resumed_run_both(tmp_path):
    overrides = ["experiment=adacomm_small", "experiment.label=sync", "method=sync"]
    run, _ = records(logged_run(overrides, tmp_path / "run"))
    made_with = environment(torch.device("cpu"), WORKLOAD.arrays)
    assert run["config"]["update"]["environment"] == made_with  # read by wandb's own reader
    assert f"torch {version('torch')}" in made_with["software"]
    threads = torch.get_num_threads()
    assert made_with["machine"].endswith(f"{threads} torch thread{'s' * (threads != 1)}")

    # resumed on other data (as another numpy would generate): each segment's, in turn
    cfg = compose([*overrides, "tracking=wandb_offline", f"run_dir={tmp_path / 'run'}"])
    other = Workload(WorkloadConfig(), synthetic(64, seed=1), "cpu")
    log = RunLog(cfg, tmp_path / "run", first_process=True)
    log.open(other)
    log.finish({"step": 3})
    recorded = read_run(tmp_path / "run").config["environment"]
    assert recorded["data"] == f"{made_with['data']}; then {data_digest(other.arrays)}"
    assert recorded["software"] == made_with["software"]  # unchanged: said once


def test_the_data_digest_tells_apart_one_changed_bit_and_a_changed_shape():
    arrays = synthetic(64, seed=0)
    same = Arrays(*(t.clone() for t in astuple(arrays)[:4]), arrays.num_classes)
    assert data_digest(same) == data_digest(arrays)
    nudged = arrays.x_test.clone()
    nudged[5, 3] = torch.nextafter(nudged[5, 3], torch.tensor(math.inf))
    assert data_digest(replace(arrays, x_test=nudged)) != data_digest(arrays)
    reshaped = replace(arrays, x_train=arrays.x_train.reshape(-1, 8, 2))
    assert data_digest(reshaped) != data_digest(arrays)  # the same bytes, another shape
