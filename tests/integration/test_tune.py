"""`repro tune` end to end: real simulated runs as trials, two arms side by
side; equal budgets in the written file and in the Optuna studies; a finished search runs
nothing again; a trial lost with a killed worker is failed and its design point run again; an
unknown paper is one line and writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from repro.config import compose
from repro.errors import UserError
from repro.sweep.launch import run_tune
from repro.sweep.space import suggest
from repro.sweep.spec import spec_from_dict
from repro.sweep.study import ask_point, open_arm_study, open_journal
from tests.helpers import repro_cli, reproduce_tiny_args
from tests.sweep_runs import dashboard_studies

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ARMS = ("sync", "local_sgd_tau4")
RUNS = compose(["experiment=adacomm_tiny"]).experiment.runs


def small_search(tmp_path: Path, arms: tuple[str, ...] = ARMS) -> Path:
    """sweeps/tune/adacomm_tiny.yaml with only `arms` tuned (the others untuned), its trials'
    runs and journal under tmp_path: a real search of a few seconds."""
    raw = yaml.safe_load((ROOT / "sweeps" / "tune" / "adacomm_tiny.yaml").read_text())
    raw["export"]["untuned"] = {
        name: "left out to keep the test short" for name in raw["arms"] if name not in arms
    }
    raw["arms"] = {name: arm for name, arm in raw["arms"].items() if name in arms}
    raw["overrides"] += [f"data.root={tmp_path / 'data'}"]
    raw["out"] = str(tmp_path / "tune")
    path = tmp_path / "adacomm_tiny.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def studies(tmp_path: Path, spec_path: Path) -> dict[str, optuna.Study]:
    spec = spec_from_dict(yaml.safe_load(spec_path.read_text()), str(spec_path))
    storage = open_journal(spec)
    return {name: optuna.load_study(study_name=name, storage=storage) for name in spec.arms}


def test_tune_writes_equal_budget_values_and_does_not_rerun(tmp_path):
    spec_path = small_search(tmp_path)
    args = [
        "tune",
        "adacomm",
        "scale=tiny",
        "--spec",
        str(spec_path),
        "--out",
        str(tmp_path / "tuned"),
    ]
    ran = repro_cli(*args, "--workers", "2", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert "tune adacomm_tiny [sync 2/2]" in ran.stdout
    # a trial's line shows its point as the sweep's lines do, to 4 significant digits
    assert " optim.lr=0.01581 -> " in ran.stdout and " optim.lr=0.1581 -> " in ran.stdout
    tuned_file = tmp_path / "tuned" / "adacomm_tiny.yaml"
    data = yaml.safe_load(tuned_file.read_text())

    # equal budgets in the written data: one space, trial count, seed list for both arms
    assert data["search"]["trials_per_arm"] == 2 and data["search"]["seeds"] == [1000]
    assert {data["arms"][a]["space"] for a in ARMS} == {"lr"}
    assert all(data["arms"][a]["trials"] == 2 for a in ARMS)

    # ... and in the studies: same distribution, seeds and trial count, and the same design
    # points, the midpoints of the two halves of log(lr): 0.005 x 100^(1/4) and 100^(3/4)
    found = studies(tmp_path, spec_path)
    done = {a: found[a].get_trials(states=(TrialState.COMPLETE,)) for a in ARMS}
    assert [len(done[a]) for a in ARMS] == [2, 2]
    assert len({repr(t.distributions) for a in ARMS for t in done[a]}) == 1
    assert {tuple(t.user_attrs["seeds"]) for a in ARMS for t in done[a]} == {(1000,)}
    for a in ARMS:
        assert sorted(t.user_attrs["design_index"] for t in done[a]) == [0, 1]
        lrs = sorted(t.params["optim.lr"] for t in done[a])
        assert lrs == pytest.approx([0.005 * 100**0.25, 0.005 * 100**0.75], rel=1e-12)

    # each trial's value is its run's final train/loss; the file holds each arm's best
    for a in ARMS:
        for t in done[a]:
            (run_dir,) = t.user_attrs["run_dirs"]
            summary = json.loads((Path(run_dir) / "summary.json").read_text())
            assert t.value == summary["train/loss"]
        best = min(done[a], key=lambda t: t.value)
        assert data["arms"][a]["chosen"] == best.params
        assert data["runs"][a] == [f"optim.lr={best.params['optim.lr']!r}"]
    assert data["runs"]["adacomm"] == [] and "adacomm" in data["untuned"]

    again = repro_cli(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "every arm has its 2 trials; nothing to run" in again.stdout
    assert sum(len(s.get_trials()) for s in studies(tmp_path, spec_path).values()) == 4
    assert yaml.safe_load(tuned_file.read_text()) == data
    # the dashboard lists every arm's study; `show` has no front to draw and says so
    assert sorted(dashboard_studies(spec_path, cwd=tmp_path)) == sorted(ARMS)
    shown = repro_cli("sweep", "show", str(spec_path), cwd=tmp_path)
    assert shown.returncode == 2 and "`repro sweep dashboard` shows its studies" in shown.stderr


def test_a_trial_lost_with_its_worker_is_retried_at_its_point(tmp_path):
    spec_path = small_search(tmp_path, arms=("sync",))
    spec = spec_from_dict(yaml.safe_load(spec_path.read_text()), str(spec_path))
    storage = open_journal(spec)
    study = open_arm_study(spec, spec.arms["sync"], RUNS, storage)
    # design point 0 asked by a worker that then died (no process holds its index lock)
    lost = ask_point(spec, study, storage, 0, {"optim.lr": 0.02}, "gone:1")
    assert suggest(lost, spec.spaces["lr"][0]) == 0.02

    run_tune(spec, workers=1, out=tmp_path / "tuned")

    trials = study.get_trials()
    assert trials[0].state == TrialState.FAIL
    assert trials[0].user_attrs["stale"] == "worker gone:1 died"
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    assert sorted(t.user_attrs["design_index"] for t in done) == [0, 1]  # 0 retried, 1 run
    assert len(trials) == 3


def test_unknown_paper_is_one_line_and_writes_nothing(tmp_path):
    ran = repro_cli("tune", "resnet", "--out", str(tmp_path / "tuned"), cwd=tmp_path)
    assert ran.returncode == 2
    assert ran.stderr.strip() == (
        "error: unknown paper 'resnet'; choose one of ['adacomm', 'adasum', 'topk']"
    )
    assert list(tmp_path.iterdir()) == []


def test_scale_without_a_spec_is_one_line(tmp_path):
    ran = repro_cli("tune", "adacomm", "scale=paper", cwd=tmp_path)
    assert ran.returncode == 2
    assert ran.stderr.strip() == (
        "error: scale=paper: adacomm has no tuning spec sweeps/tune/adacomm_paper.yaml; "
        "tuned scales: ['small', 'tiny']"
    )
    assert list(tmp_path.iterdir()) == []


def test_tuned_run_set_without_values_names_repro_tune(tmp_path: Path) -> None:
    ran = repro_cli(*reproduce_tiny_args("adacomm", tmp_path), "experiment.tuned=true")
    assert ran.returncode == 2
    assert ran.stderr.strip().endswith("run `repro tune adacomm scale=tiny` to make it")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("*.json"))


def test_a_run_set_changed_since_the_search_is_refused_and_an_older_stamp_still_loads(tmp_path):
    spec_path = small_search(tmp_path, arms=("sync",))
    spec = spec_from_dict(yaml.safe_load(spec_path.read_text()), str(spec_path))
    storage = open_journal(spec)
    study = open_arm_study(spec, spec.arms["sync"], RUNS, storage)
    # the run set's sync run steps 10x slower now: the trials made before are of another run
    slower = {**RUNS, "sync": [*RUNS["sync"], "compute.mean_ms=50.0"]}
    with pytest.raises(UserError) as err:
        open_arm_study(spec, spec.arms["sync"], slower, storage)
    assert str(err.value) == (
        f"the study of arm sync in {spec.study_dir / 'journal.log'} was made by a different "
        f"search (the run set's settings); remove {spec.study_dir} to start this one afresh"
    )
    # where the run set is only listed differently, its composed run is the same: accepted
    assert open_arm_study(spec, spec.arms["sync"], dict(RUNS), storage).study_name == "sync"
    # a stamp written before it held the run set's settings is checked on what it holds
    older = json.loads(study.user_attrs["search"])
    del older["settings"]
    study.set_user_attr("search", json.dumps(older, sort_keys=True))
    assert open_arm_study(spec, spec.arms["sync"], slower, storage).study_name == "sync"
