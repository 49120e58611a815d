"""Tuned values as data: a tuned run set takes each label's chosen values
into its composed config; a missing file or label is one line naming `repro tune PAPER`;
the report's table states the search."""

from __future__ import annotations

import pytest

from repro.config import compose
from repro.errors import UserError
from repro.sweep.tuned import run_overrides, tuned_overrides, tuning_table, write_tuned

TINY_LABELS = ("sync", "local_sgd_tau4", "local_sgd_tau16", "adacomm", "adacomm_lrdecay")
LR = {"key": "optim.lr", "type": "float", "low": 0.005, "high": 0.5, "log": True}
TAU0 = {"key": "method.tau0", "type": "int", "low": 1, "high": 64, "log": True}


def tuned_data(runs: dict[str, list[str]]) -> dict:
    """A tuned file as `repro tune adacomm scale=tiny` writes it."""
    arm = {
        "run": "sync",
        "labels": ["sync"],
        "space": "lr",
        "extra": [],
        "overrides": [],
        "chosen": {"optim.lr": 0.0123},
        "objective": 0.41,
        "best_trial": 1,
        "trials": 2,
        "diverged_trials": 0,
        "at_edge": [],
    }
    adacomm = {
        **arm,
        "run": "adacomm",
        "labels": ["adacomm"],
        "extra": [TAU0],
        "chosen": {"optim.lr": 0.2, "method.tau0": 64},
        "diverged_trials": 1,
        "at_edge": ["method.tau0"],
    }
    return {
        "paper": "adacomm",
        "scale": "tiny",
        "experiment": "adacomm_tiny",
        "spec": "sweeps/tune/adacomm_tiny.yaml",
        "search": {
            "spaces": {"lr": [LR]},
            "trials_per_arm": 2,
            "seeds": [1000],
            "objective": "final train/loss (minimize; a diverged seed scores 1.38629)",
            "design": "scrambled Sobol design (seed 0); arms of one space share its points",
            "overrides": ["tracking=disabled"],
            "started": "2026-01-01T10:00:00",
            "finished": "2026-01-01T10:03:00",
            "elapsed_s": 180.0,
            "trial_s": 300.0,
        },
        "arms": {"sync": arm, "adacomm": adacomm},
        "untuned": {},
        "runs": runs,
    }


def experiment(tuned: bool):
    return compose(["experiment=adacomm_tiny", f"experiment.tuned={str(tuned).lower()}"]).experiment


def test_tuned_overrides_change_the_composed_run(tmp_path):
    runs = {label: ["optim.lr=0.0123"] for label in TINY_LABELS}
    runs["adacomm"] = ["optim.lr=0.2", "method.tau0=64"]
    write_tuned(tuned_data(runs), tmp_path)
    exp = experiment(tuned=True)
    base = ["experiment=adacomm_tiny", "experiment.label=adacomm", *exp.runs["adacomm"]]
    hand_set = compose(base)
    tuned = compose([*base, *run_overrides(exp, "adacomm", tmp_path)])
    assert (hand_set.optim.lr, hand_set.method.tau0) == (0.05, 16)
    assert (tuned.optim.lr, tuned.method.tau0) == (0.2, 64)
    assert run_overrides(experiment(tuned=False), "adacomm", tmp_path) == []


def test_missing_tuned_file_names_repro_tune(tmp_path):
    with pytest.raises(UserError) as err:
        run_overrides(experiment(tuned=True), "sync", tmp_path)
    assert str(err.value) == (
        f"{tmp_path}/adacomm_tiny.yaml is missing: the adacomm run set at scale tiny is tuned "
        "(experiment.tuned), so its runs take their values from it; run "
        "`repro tune adacomm scale=tiny` to make it"
    )
    with pytest.raises(UserError, match="run `repro tune adacomm` to make it$"):
        tuned_overrides("adacomm", "small", "sync", tmp_path)


def test_a_label_missing_from_the_tuned_file_names_repro_tune(tmp_path):
    write_tuned(tuned_data({"sync": ["optim.lr=0.0123"]}), tmp_path)
    assert tuned_overrides("adacomm", "tiny", "sync", tmp_path) == ["optim.lr=0.0123"]
    with pytest.raises(UserError) as err:
        tuned_overrides("adacomm", "tiny", "local_sgd_tau4", tmp_path)
    assert "no tuned values for run local_sgd_tau4" in str(err.value)
    assert "`repro tune adacomm scale=tiny` again" in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("adacomm", "shown"),
    [
        (None, "empty"),  # a file cut after `adacomm:` still parses
        (["optim.lr=0.2"], "['optim.lr=0.2']"),  # cut after its first value
        (["optim.lr=0.3", "method.tau0=64"], "['optim.lr=0.3', 'method.tau0=64']"),  # edited
    ],
)
def test_a_run_that_does_not_take_its_arms_chosen_values_is_refused(tmp_path, adacomm, shown):
    write_tuned(tuned_data({"sync": ["optim.lr=0.0123"], "adacomm": adacomm}), tmp_path)
    with pytest.raises(UserError) as err:
        tuned_overrides("adacomm", "tiny", "sync", tmp_path)
    assert str(err.value) == (
        f"{tmp_path}/adacomm_tiny.yaml: runs.adacomm is {shown}, not arm adacomm's chosen "
        "values ['optim.lr=0.2', 'method.tau0=64'] (the file was cut short or edited); run "
        "`repro tune adacomm scale=tiny` again (or restore the file from git)"
    )


def test_an_untuned_run_keeps_its_values(tmp_path):
    write_tuned(tuned_data({"sync": ["optim.lr=0.0123"], "toy": []}), tmp_path)
    assert tuned_overrides("adacomm", "tiny", "toy", tmp_path) == []


def test_tuning_table_states_space_trials_and_choices(tmp_path):
    assert tuning_table("adacomm", "tiny", tmp_path) is None
    data = tuned_data({"sync": ["optim.lr=0.066683"]})
    data["arms"]["sync"]["chosen"] = {"optim.lr": 0.066683}
    write_tuned(data, tmp_path)
    table = tuning_table("adacomm", "tiny", tmp_path)
    assert "2 trials per arm, seeds [1000] per trial" in table.summary
    assert "lr: optim.lr in [0.005, 0.5], log" in table.summary
    assert "took 3.0 min" in table.summary
    assert table.rows == [
        # the digits the setup table gives the same learning rate (`fmt`)
        ["sync", "sync", "lr", "optim.lr=0.06668", "0.41", "2 (0 with a diverged seed)"],
        [
            "adacomm",
            "adacomm",
            "lr + method.tau0",
            "optim.lr=0.2, method.tau0=64 (the end of the range tried: method.tau0)",
            "0.41",
            "2 (1 with a diverged seed)",
        ],
    ]
