"""Tuning specs: the committed specs cover their run sets, a spec that
breaks the equal-budget rule or misses a run is refused in one line, and trials are scored
as the spec says (steps to target with its penalty, a diverged seed's score)."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from repro.errors import UserError
from repro.sweep.launch import check_coverage
from repro.sweep.spec import load_spec, spec_from_dict
from repro.sweep.study import search_of
from repro.sweep.trial import seed_score

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted((ROOT / "sweeps" / "tune").glob("*.yaml"))


def experiment_runs(experiment: str) -> dict[str, list[str]]:
    """The run set's labels as its experiment file lists them."""
    raw = yaml.safe_load((ROOT / "configs" / "experiment" / f"{experiment}.yaml").read_text())
    return raw["experiment"]["runs"]


def tiny_raw() -> dict:
    return yaml.safe_load((ROOT / "sweeps" / "tune" / "adacomm_tiny.yaml").read_text())


def test_every_paper_has_a_small_and_a_tiny_spec():
    assert {p.stem for p in SPECS} == {
        f"{paper}_{scale}" for paper in ("adacomm", "topk", "adasum") for scale in ("small", "tiny")
    }


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_committed_spec_covers_its_run_set_with_one_budget(path):
    spec = load_spec(path)
    assert spec.experiment == path.stem
    check_coverage(spec, experiment_runs(spec.experiment))
    # one trial count, seed list, objective and design for all arms, by construction; arms of
    # one space search the same entries, so their studies' stamps differ only in the run
    by_space: dict[str, set[str]] = {}
    for arm in spec.arms.values():
        stamp = yaml.safe_load(search_of(spec, arm, experiment_runs(spec.experiment)))
        shared = [e for e in stamp["space"] if e["key"] in {p.key for p in spec.spaces[arm.space]}]
        by_space.setdefault(arm.space, set()).add(
            repr((shared, stamp["seeds"], stamp["objective"], stamp["design"]))
        )
    assert all(len(stamps) == 1 for stamps in by_space.values())


def test_a_run_in_no_arm_is_refused_naming_it():
    raw = tiny_raw()
    del raw["arms"]["local_sgd_tau16"]
    spec = spec_from_dict(raw, "t.yaml")
    with pytest.raises(
        UserError, match="run local_sgd_tau16 of experiment=adacomm_tiny is in no arm"
    ):
        check_coverage(spec, experiment_runs("adacomm_tiny"))


def test_a_run_the_set_lacks_is_refused():
    raw = tiny_raw()
    raw["arms"]["sync"]["labels"] = ["sync", "local_sgd_tau7"]
    spec = spec_from_dict(raw, "t.yaml")
    with pytest.raises(UserError, match="sync lists run local_sgd_tau7, which experiment"):
        check_coverage(spec, experiment_runs("adacomm_tiny"))


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {
                "arms": {
                    "a": {"space": "lr", "labels": ["sync"]},
                    "b": {"space": "lr", "labels": ["sync"]},
                }
            },
            "run sync is in arms a and b",
        ),
        ({"arms": {"a": {"space": "momentum", "labels": ["sync"]}}}, "is not one of the spaces"),
        ({"n_trials": 0}, "n_trials=0 must be at least 1"),
        ({"seeds": [1, 1]}, "has duplicates"),
        ({"n_trials": 6}, "n_trials=6 must be a power of 2"),
        (
            {"sampler": {"name": "tpe", "seed": 0}},
            "a search with arms tries a fixed design; use sampler sobol",
        ),
        (
            {"objectives": [{"metric": "train/loss", "direction": "minimize"}]},
            r"set objectives\[0\]\.diverged",
        ),
        (
            {"objectives": [{"metric": "test/accuracy", "direction": "maximize", "diverged": 0}]},
            "is not logged",
        ),
        (
            {"arms": {"a": {"space": "lr", "labels": ["sync"], "tau": 3}}},
            r"arms\.a: unknown key\(s\) tau",
        ),
        ({"minutes_per_trial": -1}, "minutes_per_trial=-1 must be a number >= 0"),
        ({"minutes_per_trial": float("nan")}, "minutes_per_trial=nan must be a finite number"),
        ({"seeds": [1, "2"]}, r"t\.yaml: seeds\[1\]='2' must be an integer"),
        ({"spaces": {"lr": []}}, "spaces.lr is empty"),
    ],
)
def test_bad_specs_are_one_line(change, message):
    raw = {**tiny_raw(), **change}
    with pytest.raises(UserError, match=message) as err:
        spec_from_dict(raw, "t.yaml")
    assert "\n" not in str(err.value)


def cfg(steps: int, target: float) -> SimpleNamespace:
    return SimpleNamespace(trainer=SimpleNamespace(steps=steps, target_acc=target))


def test_steps_to_target_scores_and_penalty():
    objective = spec_from_dict(
        {**tiny_raw(), "objectives": [{"metric": "steps_to_target", "direction": "minimize"}]}
    ).objective
    reached = {"step": 130, "test/acc": 0.86, "target/reached": 1.0}
    assert seed_score(objective, cfg(500, 0.85), reached) == 130.0
    # never reached: 500 x (1 + (0.85 - 0.68) / 0.85) = 500 x 1.2 = 600
    missed = {"step": 500, "test/acc": 0.68, "target/reached": 0.0}
    assert seed_score(objective, cfg(500, 0.85), missed) == pytest.approx(600.0)
    # a miss always ranks behind reaching the target on the last step
    assert seed_score(objective, cfg(500, 0.85), {**missed, "test/acc": 0.849}) > 500.0
    assert seed_score(objective, cfg(500, 0.85), None) == 1000.0  # diverged: twice the budget


def test_metric_objective_scores_final_value_or_the_diverged_score():
    objective = spec_from_dict(tiny_raw()).objective
    assert seed_score(objective, cfg(400, 0.0), {"train/loss": 0.25}) == 0.25
    assert seed_score(objective, cfg(400, 0.0), None) == pytest.approx(math.log(4), abs=1e-6)
    assert seed_score(objective, cfg(400, 0.0), {"train/loss": math.nan}) == pytest.approx(
        math.log(4), abs=1e-6
    )


def test_expected_time_prefers_the_specs_measured_minutes_per_trial():
    from repro.sweep.launch import expected_line

    spec = spec_from_dict(tiny_raw(), "t.yaml")
    # 10 trials x 1 seed, 2 at a time: 0.5 min per run from the set's average -> 2.5 min
    assert "about 2.5 min (10 trials x 1 seed = 10 runs, 2 at a time; from experiment." in (
        expected_line(spec, 10, 2, 0.5)
    )
    assert "(1 trial x 1 seed = 1 run, 2 at a time;" in expected_line(spec, 1, 2, 0.5)
    measured = spec_from_dict({**tiny_raw(), "minutes_per_trial": 1.2}, "t.yaml")
    assert "about 6.0 min" in expected_line(measured, 10, 2, 0.5)
    assert "from the spec's minutes_per_trial" in expected_line(measured, 10, 2, 0.5)
    assert "not measured" in expected_line(spec, 10, 2, 0.0)


def test_arm_trial_overrides_compose_the_run_the_set_composes_at_the_point(tmp_path):
    from repro.config import compose
    from repro.sweep.trial import arm_trial_overrides

    spec = spec_from_dict({**tiny_raw(), "out": str(tmp_path)}, "t.yaml")
    runs, arm = experiment_runs("adacomm_tiny"), spec.arms["adacomm"]
    params = {"optim.lr": 0.05, "method.tau0": 4}
    overrides = arm_trial_overrides(spec, runs, arm, params, 1000)
    assert overrides == [
        "experiment=adacomm_tiny",
        "experiment.label=adacomm",
        *runs["adacomm"],
        "tracking=disabled",
        "trainer.time_budget_s=0.5",
        "optim.lr=0.05",
        "method.tau0=4",
        "seed=1000",
        f"runs_root={tmp_path / 'adacomm_tiny' / 'runs'}",
        "trainer.progress=false",
        "tracking.group=tune_adacomm_tiny",
        "tracking.tags=['tune','study:tune_adacomm_tiny','arm:adacomm']",
    ]
    # the order the search composed before its overrides were a sweep's: the same config
    before = [*overrides[:-3], *overrides[-2:], overrides[-3]]
    assert compose(overrides) == compose(before)


def test_an_arms_study_stamp_is_the_one_earlier_searches_wrote():
    """A journal made before tuning specs were sweep specs must still load: its stamp's design
    is the trial count, sampler name and seed, its objective the metric, direction and score of
    a diverged seed."""
    spec = spec_from_dict(tiny_raw(), "t.yaml")
    stamp = yaml.safe_load(search_of(spec, spec.arms["sync"], experiment_runs("adacomm_tiny")))
    assert stamp["design"] == {"trials": 2, "name": "sobol", "seed": 0}
    assert stamp["objective"] == {
        "metric": "train/loss",
        "direction": "minimize",
        "diverged": 1.386294,
    }


@pytest.mark.parametrize(
    "change, message",
    [
        ({"sampler": "sobol"}, "sampler sobol belong(s) to a search with arms"),
        ({"seeds": [1]}, "seeds belong(s) to a search with arms"),
        ({"export": {"untuned": {}}}, "export belong(s) to a search with arms"),
        (
            {"objectives": [{"metric": "steps_to_target", "direction": "minimize"}]},
            "objectives[0]: steps_to_target and diverged belong to a search with arms",
        ),
    ],
)
def test_what_belongs_to_arms_is_refused_in_a_sweep(change, message):
    raw = {**yaml.safe_load((ROOT / "sweeps" / "tiny.yaml").read_text()), **change}
    with pytest.raises(UserError) as err:
        spec_from_dict(raw, "t.yaml")
    assert message in str(err.value) and str(err.value).startswith("t.yaml: ")


def test_sweep_show_of_a_search_with_arms_is_one_line(tmp_path, capsys):
    from repro.sweep.cli import main as sweep_main

    path = tmp_path / "adacomm_tiny.yaml"
    path.write_text(yaml.safe_dump({**tiny_raw(), "out": str(tmp_path / "tune")}))
    assert sweep_main(["show", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: {path} is a search with arms, one study per arm and no front to show: its "
        f"result is the tuned file `repro sweep {path}` writes (configs/tuned/), and `repro "
        "sweep dashboard` shows its studies\n"
    )
    assert not (tmp_path / "tune").exists()
