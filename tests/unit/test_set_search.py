"""A run set's search as `repro reproduce` runs it: the shipped Top-k specs search their own
set, the study goes into the set's runs directory under a name that follows the config, and
a search of another set is refused before anything runs."""

from dataclasses import replace
from pathlib import Path

import pytest

from repro.config import compose
from repro.errors import UserError
from repro.reproduce.set_search import search_minutes, search_spec, set_dir_of
from repro.sweep.spec import load_spec
from tests.helpers import REPO


def _search(scale: str, extra: list[str]):
    experiment = compose([f"experiment=topk_{scale}", *extra]).experiment
    return experiment, search_spec(experiment, Path("/r/topk_" + scale), extra)


@pytest.mark.parametrize("scale", ["small", "tiny"])
def test_the_topk_sets_search_their_own_regime_like_the_full_sweep(scale):
    experiment, spec = _search(scale, [])
    full = load_spec(REPO / "sweeps" / "topk_cr_pareto.yaml")
    assert spec.experiment == experiment.name == f"topk_{scale}"
    assert (spec.space, spec.objectives) == (full.space, full.objectives)
    assert set(full.overrides) - {"experiment.group=topk_cr_pareto"} < set(spec.overrides)
    assert spec.study_dir.parent == Path(f"/r/topk_{scale}")
    assert spec.n_trials < full.n_trials
    # its trials run the MOO run's own horizon and network
    moo = compose([f"experiment=topk_{scale}", *experiment.runs["moo"]])
    base = compose([f"experiment=topk_{scale}", *spec.overrides])
    assert (base.trainer.steps, base.network) == (moo.trainer.steps, moo.network)
    assert set_dir_of(moo) == Path(moo.runs_root) / f"topk_{scale}"


def test_the_study_name_follows_the_search_config_not_where_runs_go():
    _, plain = _search("tiny", [])
    _, elsewhere = _search("tiny", ["runs_root=/elsewhere"])
    _, longer = _search("tiny", ["trainer.steps=32"])
    assert plain.name.startswith("topk_cr_pareto_tiny-")
    assert elsewhere.name == plain.name  # runs_root is not part of a run's identity
    assert longer.name != plain.name  # a changed setting is a fresh study
    assert longer.overrides[-1] == "trainer.steps=32"  # the command line's, in every trial


def test_a_search_of_another_set_is_refused(tmp_path):
    experiment = compose(["experiment=topk_tiny"]).experiment
    other = replace(experiment, search=str(REPO / "sweeps" / "topk_cr_pareto_small.yaml"))
    with pytest.raises(UserError, match="searches experiment topk_small, not this set's"):
        search_spec(other, tmp_path, [])
    missing = replace(experiment, search=str(tmp_path / "nope.yaml"))
    with pytest.raises(UserError, match="nope.yaml does not exist"):
        search_spec(missing, tmp_path, [])
    assert not list(tmp_path.iterdir())  # nothing written


def test_expected_time_of_the_search():
    experiment, spec = _search("small", [])
    measured = replace(experiment, search_minutes=7.0)
    assert search_minutes(spec, measured, 2).endswith("2 at a time: about 3.5 min")
    unmeasured = replace(experiment, search_minutes=0.0)
    assert search_minutes(spec, unmeasured, 2).endswith("not measured (experiment.search_minutes)")
