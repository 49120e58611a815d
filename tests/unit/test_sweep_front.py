"""A sweep's Pareto front drawn into a paper report, from a real Optuna journal study."""

import optuna
import pytest
import yaml
from optuna.distributions import CategoricalDistribution, FloatDistribution

from repro.report.build import default_claims_dir
from repro.report.claims import load_claims
from repro.report.sweep_front import SweepFrontSpec, draw_sweep_front
from repro.sweep.spec import load_spec
from repro.sweep.storage import open_storage

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
    )


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
    out = draw_sweep_front(_front_spec(path), tmp_path)
    assert out.file == "front.png" and (tmp_path / "front.png").stat().st_size > 10_000
    assert not out.missing


def test_missing_sweep_says_how_to_run_it(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({**SPEC, "out": str(tmp_path / "sweeps")}))
    out = draw_sweep_front(_front_spec(path), tmp_path)
    assert out.file is None and f"repro sweep {path}" in out.missing


def test_topk_claims_list_the_cr_front():
    claims = load_claims("topk", default_claims_dir())
    (front,) = claims.sweep_fronts
    assert front.spec == "sweeps/topk_cr_pareto.yaml" and front.band == [0.01, 0.1]


def test_bad_band_is_refused():
    from repro.errors import UserError

    with pytest.raises(UserError, match="band"):
        SweepFrontSpec(id="f", title="t", spec="s", x="a", y="b", param="p", band=[0.1, 0.01])
