"""A sweep's Pareto front drawn into a paper report, from a real Optuna journal study."""

from pathlib import Path

import optuna
import pytest
import yaml
from optuna.distributions import CategoricalDistribution, FloatDistribution

from repro.report.build import default_claims_dir
from repro.report.claims import load_claims
from repro.report.sweep_front import SweepFrontSpec, chosen_shares, draw_sweep_front
from repro.sweep.spec import load_spec
from repro.sweep.storage import open_storage
from repro.track.runs import RunData

SPEC = {
    "name": "front_test",
    "experiment": None,
    "overrides": ["workload=synthetic_mlp", "method=topk"],
    "space": [
        {"key": "method.cr", "type": "float", "low": 0.001, "high": 1.0, "log": True},
        {"key": "method.collective", "type": "categorical", "choices": ["allgather", "ar_ring"]},
    ],
    "objectives": [
        {"metric": "test/acc", "direction": "maximize"},
        {"metric": "throughput/modeled_samples_per_s", "direction": "maximize"},
    ],
    "n_trials": 4,
}


def _front_spec(path) -> SweepFrontSpec:
    return SweepFrontSpec(
        id="front",
        title="CR front",
        spec=str(path),
        x="throughput/modeled_samples_per_s",
        y="test/acc",
        param="method.cr",
        band=[0.01, 0.1],
        chosen_run="moo",
        chosen_metric="method/cr",
    )


def _moo_run(seed: int, crs) -> RunData:
    history = [{"step": 10 * (i + 1), "method/cr": cr} for i, cr in enumerate(crs)]
    return RunData(f"moo{seed}", "moo", "g", None, [], {"seed": seed}, history, {}, Path("."), 0)


def moo_runs() -> dict:
    """The MOO run's choices over two seeds: 0.1 at 3 of 8 log points, 0.0333.. at 4, 0.011
    at 1 (fresh objects for each test, which may extend them)."""
    return {
        "moo": {
            0: _moo_run(0, [0.1, 0.1, 1 / 30, 1 / 30]),
            1: _moo_run(1, [0.1, 1 / 30, 1 / 30, 0.011]),
        }
    }


def test_front_is_drawn_from_the_study(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({**SPEC, "out": str(tmp_path / "sweeps")}))
    spec = load_spec(path)
    spec.study_dir.mkdir(parents=True, exist_ok=True)
    study = optuna.create_study(
        study_name=spec.name, storage=open_storage(spec), directions=["maximize", "maximize"]
    )
    dists = {
        "method.cr": FloatDistribution(0.001, 1.0, log=True),
        "method.collective": CategoricalDistribution(["allgather", "ar_ring"]),
    }
    # (cr, accuracy, throughput): the 0.5 trial is dominated by the 1.0 trial
    for cr, acc, thr in (
        (1.0, 0.95, 100.0),
        (0.1, 0.93, 300.0),
        (0.01, 0.9, 500.0),
        (0.5, 0.94, 90.0),
    ):
        study.add_trial(
            optuna.trial.create_trial(
                params={"method.cr": cr, "method.collective": "ar_ring"},
                distributions=dists,
                values=[acc, thr],
            )
        )
    out = draw_sweep_front(_front_spec(path), tmp_path, moo_runs())
    assert out.file == "front.png" and (tmp_path / "front.png").stat().st_size > 10_000
    assert not out.missing
    assert "all seeds): 0.011 (12%), 0.0333 (50%), 0.1 (38%)." in out.caption


def test_chosen_shares_pool_every_seed_and_ignore_missing_points(tmp_path):
    front = _front_spec(tmp_path / "spec.yaml")
    runs = {**moo_runs(), "other": {0: _moo_run(0, [0.5])}}
    runs["moo"][0].history.append({"step": 50})  # a log point without a ratio
    assert chosen_shares(front, runs) == {0.011: 1 / 8, 0.0333: 4 / 8, 0.1: 3 / 8}
    assert chosen_shares(front, {}) == {}


def test_chosen_run_needs_its_metric():
    from repro.errors import UserError

    with pytest.raises(UserError, match="chosen_run and chosen_metric"):
        SweepFrontSpec(id="f", title="t", spec="s", x="a", y="b", param="p", chosen_run="moo")


def test_missing_sweep_says_how_to_run_it(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({**SPEC, "out": str(tmp_path / "sweeps")}))
    out = draw_sweep_front(_front_spec(path), tmp_path, moo_runs())
    assert out.file is None and f"repro sweep {path}" in out.missing


def test_topk_claims_list_the_cr_front():
    claims = load_claims("topk", default_claims_dir())
    (front,) = claims.sweep_fronts
    assert front.spec == "sweeps/topk_cr_pareto.yaml" and front.band == [0.01, 0.1]
    assert (front.chosen_run, front.chosen_metric) == ("moo", "method/cr")


def test_bad_band_is_refused():
    from repro.errors import UserError

    with pytest.raises(UserError, match="band"):
        SweepFrontSpec(id="f", title="t", spec="s", x="a", y="b", param="p", band=[0.1, 0.01])
