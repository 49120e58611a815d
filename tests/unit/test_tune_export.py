"""The export step of a tuning search (`repro.sweep.tuned.export_data`): from finished arm
studies, the tuned file holds each arm's best trial, every point tried in design order, the
values at the edge of what was tried and the search's timing, byte for byte as computed here
by hand from the trials (and as the search wrote it before tuning became a sweep)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import optuna
import yaml
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from repro.sweep.spec import spec_from_dict
from repro.sweep.tuned import export_data, write_tuned

ROOT = Path(__file__).resolve().parents[2]
LR = FloatDistribution(0.005, 0.5, log=True)
TAU0 = IntDistribution(1, 64, log=True)
# (arm, design index, params, value, diverged seeds, start minute, seconds it took)
TRIALS = [
    ("sync", 1, {"optim.lr": 0.15811388300841897}, 0.62, [], 0, 30),
    ("sync", 0, {"optim.lr": 0.015811388300841896}, 0.41, [], 1, 40),
    ("adacomm", 0, {"optim.lr": 0.015811388300841896, "method.tau0": 2}, 0.55, [], 2, 25),
    ("adacomm", 1, {"optim.lr": 0.15811388300841897, "method.tau0": 20}, 1.386294, [1000], 3, 5),
]


def tiny_spec():
    raw = yaml.safe_load((ROOT / "sweeps" / "tune" / "adacomm_tiny.yaml").read_text())
    raw["export"]["untuned"] = {a: "left out" for a in raw["arms"] if a not in ("sync", "adacomm")}
    raw["arms"] = {a: raw["arms"][a] for a in ("sync", "adacomm")}
    return spec_from_dict(raw, str(ROOT / "sweeps" / "tune" / "adacomm_tiny.yaml"))


def finished_studies(storage) -> dict[str, optuna.Study]:
    """Each arm's study with its two completed trials (in the order listed in TRIALS)."""
    studies = {
        arm: optuna.create_study(study_name=arm, storage=storage, direction="minimize")
        for arm in ("sync", "adacomm")
    }
    for n, (arm, index, params, value, diverged, minute, took) in enumerate(TRIALS):
        dists = {"optim.lr": LR, "method.tau0": TAU0}
        studies[arm].add_trial(
            FrozenTrial(
                number=n,
                state=TrialState.COMPLETE,
                value=value,
                datetime_start=datetime(2025, 1, 1, 12, minute, 0),
                datetime_complete=datetime(2025, 1, 1, 12, minute, took),
                params=params,
                distributions={k: dists[k] for k in params},
                user_attrs={"design_index": index, "diverged": diverged, "seeds": [1000]},
                system_attrs={},
                intermediate_values={},
                trial_id=n,
            )
        )
    return studies


def expected() -> dict:
    """The file's data computed by hand from TRIALS: sync's best is its index 0 (0.41),
    adacomm's its index 0 (0.55); both best points are the lower end of what was tried."""
    lr = {"key": "optim.lr", "type": "float", "low": 0.005, "high": 0.5, "log": True}
    tau0 = {"key": "method.tau0", "type": "int", "low": 1, "high": 64, "log": True}
    lo, hi = 0.015811388300841896, 0.15811388300841897

    def arm(run: str, extra: list) -> dict:  # fresh lists: shared ones would dump as anchors
        return {"run": run, "labels": [run], "space": "lr", "extra": extra, "overrides": []}

    return {
        "paper": "adacomm",
        "scale": "tiny",
        "experiment": "adacomm_tiny",
        "spec": "sweeps/tune/adacomm_tiny.yaml",
        "search": {
            "spaces": {"lr": [lr]},
            "trials_per_arm": 2,
            "seeds": [1000],
            "objective": "final train/loss (minimize; a diverged seed scores 1.38629)",
            "design": (
                "scrambled Sobol design (seed 0) centred in its cells: one point per equal "
                "slice of each range, the same points for arms sharing a space"
            ),
            "overrides": ["tracking=disabled", "trainer.time_budget_s=0.5"],
            "started": "2025-01-01T12:00:00",
            "finished": "2025-01-01T12:03:05",
            "elapsed_s": 185.0,
            "trial_s": 100.0,
        },
        "arms": {
            "sync": {
                **arm("sync", []),
                "chosen": {"optim.lr": lo},
                "objective": 0.41,
                "best_trial": 1,
                "trials": 2,
                "diverged_trials": 0,
                "tried": [{"optim.lr": lo, "objective": 0.41}, {"optim.lr": hi, "objective": 0.62}],
                "at_edge": ["optim.lr"],
            },
            "adacomm": {
                **arm("adacomm", [tau0]),
                "chosen": {"optim.lr": lo, "method.tau0": 2},
                "objective": 0.55,
                "best_trial": 0,
                "trials": 2,
                "diverged_trials": 1,
                "tried": [
                    {"optim.lr": lo, "method.tau0": 2, "objective": 0.55},
                    {"optim.lr": hi, "method.tau0": 20, "objective": 1.386294},
                ],
                "at_edge": ["optim.lr", "method.tau0"],
            },
        },
        "untuned": {
            a: "left out" for a in ("local_sgd_tau4", "local_sgd_tau16", "adacomm_lrdecay")
        },
        "runs": {
            "sync": [f"optim.lr={lo!r}"],
            "adacomm": [f"optim.lr={lo!r}", "method.tau0=2"],
            "local_sgd_tau4": [],
            "local_sgd_tau16": [],
            "adacomm_lrdecay": [],
        },
    }


def test_export_writes_the_hand_computed_file_byte_for_byte(tmp_path):
    spec = tiny_spec()
    studies = finished_studies(optuna.storages.InMemoryStorage())
    path = write_tuned(export_data(spec, studies), tmp_path)
    head = (
        "# Tuned values of the adacomm run set at scale tiny: written by `repro tune adacomm "
        "scale=tiny` from sweeps/tune/adacomm_tiny.yaml.\n"
        "# Data, not settings: run the search again rather than edit it by hand.\n"
    )
    assert path == tmp_path / "adacomm_tiny.yaml"
    assert path.read_text() == head + yaml.safe_dump(expected(), sort_keys=False, width=100)
