"""A sweep's Pareto front drawn into a paper report, from real Optuna journal studies: the
set's own search (where `repro reproduce` puts it), the full sweep once it has finished, and
the line a page shows when neither has run."""

import csv
import html
import os
import shutil
from dataclasses import replace
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.distributions import CategoricalDistribution, FloatDistribution

from repro.claims.claims_file import load_claims
from repro.claims.figure_specs import SweepFrontSpec
from repro.report.build import default_claims_dir
from repro.report.sweep_front import _page_note, chosen_shares, draw_sweep_front
from repro.sweep.spec import identity_name, load_spec
from repro.sweep.storage import open_storage
from repro.track.runs import RunData
from tests.helpers import REPO

DISTS = {
    "method.cr": FloatDistribution(0.001, 1.0, log=True),
    "method.collective": CategoricalDistribution(["allgather", "ar_ring", "ar_tree"]),
}
# (cr, collective, accuracy, throughput): 0.5 is dominated by 1.0; the knee (scaled to
# [0, 1]: (1, 0), (0.6, 0.5), (0, 1)) is the 0.1 trial, 0.64 from (1, 1) against 1 and 1
TRIALS = (
    (1.0, "ar_ring", 0.95, 100.0),
    (0.1, "allgather", 0.93, 300.0),
    (0.01, "allgather", 0.90, 500.0),
    (0.5, "ar_tree", 0.94, 90.0),
)


def front_spec(full: Path) -> SweepFrontSpec:
    claims = load_claims("topk", default_claims_dir())
    (front,) = claims.sweep_fronts
    return replace(front, spec=str(full))


def study_at(spec, trials=TRIALS) -> None:
    """A journal study at `spec`'s place holding `trials` as completed trials."""
    spec.study_dir.mkdir(parents=True, exist_ok=True)
    study = optuna.create_study(
        study_name=spec.name,
        storage=open_storage(spec),
        directions=["maximize", "maximize"],
        load_if_exists=True,
    )
    for cr, collective, acc, thr in trials:
        study.add_trial(
            optuna.trial.create_trial(
                params={"method.cr": cr, "method.collective": collective},
                distributions=DISTS,
                values=[acc, thr],
            )
        )


def set_search(set_dir: Path, experiment: str, suffix: str = "a1b2c3d4e5"):
    """The set's search spec as `repro reproduce` places it: in the set's directory."""
    spec = load_spec(REPO / "sweeps" / f"topk_cr_pareto_{experiment.split('_')[1]}.yaml")
    return replace(spec, name=f"{spec.name}-{suffix}", out=str(set_dir))


def full_sweep(tmp_path: Path, n_trials: int) -> Path:
    """The full sweep's spec, its study under tmp_path."""
    raw = yaml.safe_load((REPO / "sweeps" / "topk_cr_pareto.yaml").read_text())
    raw.update(out=str(tmp_path / "sweeps"), n_trials=n_trials)
    path = tmp_path / "topk_cr_pareto.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _moo_run(seed: int, crs, set_dir: Path, experiment: str) -> RunData:
    history = [{"step": 10 * (i + 1), "method/cr": cr} for i, cr in enumerate(crs)]
    history[-1].update(
        {"test/acc": 0.92 + seed / 100, "throughput/run_modeled_samples_per_s": 400.0}
    )
    config = {"seed": seed, "experiment": {"name": experiment, "label": "moo"}}
    return RunData(f"moo{seed}", "moo", "g", None, [], config, history, {}, set_dir / "moo-x", 0)


def moo_runs(set_dir: Path = Path("runs/topk_small"), experiment: str = "topk_small") -> dict:
    """The MOO run's choices over two seeds: 0.1 at 3 of 8 log points, 0.0333.. at 4, 0.011
    at 1 (fresh objects for each test, which may extend them)."""
    return {
        "moo": {
            0: _moo_run(0, [0.1, 0.1, 1 / 30, 1 / 30], set_dir, experiment),
            1: _moo_run(1, [0.1, 1 / 30, 1 / 30, 0.011], set_dir, experiment),
        }
    }


def test_the_sets_own_search_is_drawn_beside_the_moo_choices(tmp_path):
    set_dir = tmp_path / "runs" / "topk_small"
    spec = set_search(set_dir, "topk_small")
    study_at(spec)
    out = draw_sweep_front(front_spec(full_sweep(tmp_path, 24)), tmp_path, moo_runs(set_dir))
    assert not out.missing and out.file == "cr_pareto_front.svg"
    svg = (tmp_path / out.file).read_text()
    assert "<svg" in svg
    # the same study and runs give the same file: no date, no random ids
    draw_sweep_front(front_spec(full_sweep(tmp_path, 24)), tmp_path, moo_runs(set_dir))
    assert (tmp_path / out.file).read_text() == svg and "<dc:date>" not in svg
    assert f"Pareto search {spec.name}, 4 completed of 8 trials" in out.caption
    assert "knee (ringed): trial 1, cr 0.1, collective allgather" in out.caption
    assert "coloured by method.collective" in out.caption
    assert "all seeds): 0.011 (12%), 0.0333 (50%), 0.1 (38%)." in out.caption
    assert "Crosses: where the moo run ended, each seed." in out.caption
    with (tmp_path / "cr_pareto_front.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["trial"], r["knee"]) for r in rows] == [("2", ""), ("1", "yes"), ("0", "")]
    page = (tmp_path / "cr_pareto_front.html").read_text()
    assert page.count('class="pt"') == 4 and "method.collective = ar_tree" in page
    # the page's title promises the paper's ratios, which only the report's figure draws
    text = html.unescape(page.replace("<wbr>", ""))
    assert "the report's figure (cr_pareto_front.svg) sets it beside CRs the paper's" in text


def test_the_newest_study_of_the_sets_search_is_read(tmp_path):
    set_dir = tmp_path / "runs" / "topk_small"
    study_at(set_search(set_dir, "topk_small", "old0000000"))
    newer = set_search(set_dir, "topk_small", "new0000000")
    study_at(newer, TRIALS[:2])
    out = draw_sweep_front(front_spec(full_sweep(tmp_path, 24)), tmp_path, moo_runs(set_dir))
    assert f"Pareto search {newer.name}, 2 completed" in out.caption


def test_the_sets_own_settings_study_is_read_over_a_newer_one_made_otherwise(tmp_path):
    set_dir = tmp_path / "runs" / "topk_small"
    shipped = replace(load_spec(REPO / "sweeps" / "topk_cr_pareto_small.yaml"), out=str(set_dir))
    own = replace(shipped, name=identity_name(shipped))  # as `repro reproduce topk` names it
    other = set_search(set_dir, "topk_small", "0ther00000")  # e.g. trainer.steps=300
    study_at(own)
    study_at(other, TRIALS[:2])
    os.utime(own.study_dir / "journal.log", (1, 1))  # the other study is the newer
    spec = front_spec(full_sweep(tmp_path, 24))
    out = draw_sweep_front(spec, tmp_path, moo_runs(set_dir))
    assert f"Pareto search {own.name}, 4 completed of 8 trials, {own.study_dir}; filled" in (
        out.caption
    )
    shutil.rmtree(own.study_dir)  # alone, the other is drawn and says what it is
    out = draw_sweep_front(spec, tmp_path, moo_runs(set_dir))
    assert (
        f"Pareto search {other.name}, 2 completed of 8 trials, {other.study_dir}; not the "
        "set's own search: its trials ran with settings other than the set's; filled"
    ) in out.caption


def test_the_full_sweep_is_drawn_once_it_has_finished(tmp_path):
    set_dir = tmp_path / "runs" / "topk_small"
    study_at(set_search(set_dir, "topk_small"))
    full = full_sweep(tmp_path, 5)
    study_at(load_spec(full), TRIALS)  # 4 of 5: the set's own search is drawn
    out = draw_sweep_front(front_spec(full), tmp_path, moo_runs(set_dir))
    assert "topk_cr_pareto_small-" in out.caption
    study_at(load_spec(full), TRIALS[:1])  # the fifth
    out = draw_sweep_front(front_spec(full), tmp_path, moo_runs(set_dir))
    assert "Pareto search topk_cr_pareto, 5 completed of 5 trials" in out.caption


def test_another_scales_full_sweep_is_never_drawn(tmp_path):
    set_dir = tmp_path / "runs" / "topk_tiny"
    full = full_sweep(tmp_path, 4)  # a small-scale search, finished
    study_at(load_spec(full))
    out = draw_sweep_front(front_spec(full), tmp_path, moo_runs(set_dir, "topk_tiny"))
    assert out.file is None
    assert out.missing == (
        "the set's Pareto search (sweeps/topk_cr_pareto_tiny.yaml) has not run: `repro "
        "reproduce topk scale=tiny` runs it after the set (finished runs are skipped)"
    )


def test_a_set_without_a_search_says_what_to_set(tmp_path):
    runs = moo_runs(tmp_path / "runs" / "topk_paper", "topk_paper")
    out = draw_sweep_front(front_spec(full_sweep(tmp_path, 4)), tmp_path, runs)
    assert out.file is None and out.missing == (
        "experiment topk_paper names no Pareto search and "
        f"{tmp_path / 'topk_cr_pareto.yaml'} searches topk_small: name a sweep spec of this set "
        "in experiment.search"
    )


@pytest.mark.parametrize(
    ("setting", "name", "known"),
    [
        ("param", "method.crx", "method.cr, method.collective"),
        ("y", "test/accc", "test/acc, throughput/run_modeled_samples_per_s"),
    ],
)
def test_an_axis_or_parameter_the_search_lacks_is_one_line(tmp_path, setting, name, known):
    from repro.errors import UserError

    set_dir = tmp_path / "runs" / "topk_small"
    study_at(set_search(set_dir, "topk_small"))
    spec = replace(front_spec(full_sweep(tmp_path, 24)), **{setting: name})
    with pytest.raises(UserError) as err:
        draw_sweep_front(spec, tmp_path, moo_runs(set_dir))
    assert str(err.value) == (
        f"sweep_fronts cr_pareto_front: {setting} '{name}' is not in the search "
        f"sweeps/topk_cr_pareto_small.yaml; use one of {known}"
    )
    assert not list(tmp_path.glob("cr_pareto_front.*"))  # nothing drawn


def test_chosen_shares_pool_every_seed_and_ignore_missing_points():
    front = SweepFrontSpec(
        id="f",
        title="t",
        spec="s",
        x="a",
        y="b",
        param="p",
        chosen_run="moo",
        chosen_metric="method/cr",
    )
    runs = {**moo_runs(), "other": {0: _moo_run(0, [0.5], Path("."), "topk_small")}}
    runs["moo"][0].history.append({"step": 50})  # a log point without a ratio
    assert chosen_shares(front, runs) == {0.011: 1 / 8, 0.0333: 4 / 8, 0.1: 3 / 8}
    assert chosen_shares(front, {}) == {}


def test_chosen_run_needs_its_metric():
    from repro.errors import UserError

    with pytest.raises(UserError, match="chosen_run and chosen_metric"):
        SweepFrontSpec(id="f", title="t", spec="s", x="a", y="b", param="p", chosen_run="moo")


def test_topk_claims_list_the_cr_front():
    claims = load_claims("topk", default_claims_dir())
    (front,) = claims.sweep_fronts
    assert front.spec == "sweeps/topk_cr_pareto.yaml" and front.band == [0.01, 0.1]
    assert (front.chosen_run, front.chosen_metric) == ("moo", "method/cr")


def test_bad_band_is_refused():
    from repro.errors import UserError

    with pytest.raises(UserError, match="band"):
        SweepFrontSpec(id="f", title="t", spec="s", x="a", y="b", param="p", band=[0.1, 0.01])


def test_the_front_page_says_where_the_paper_side_is_drawn_whatever_the_spec_gives():
    front = SweepFrontSpec(id="f", title="t", spec="s", x="a", y="b", param="method.cr")
    assert _page_note(front, "study X") == "Study: study X."  # nothing beside it: nothing said
    banded = replace(front, band=[0.01, 0.1])
    assert _page_note(banded, "study X").endswith(
        "the report's figure (f.svg) sets it beside the band 0.01-0.1 of method.cr."
    )
    chosen = replace(banded, band_label="CRs of the paper", chosen_run="moo", chosen_metric="c")
    assert _page_note(chosen, "study X").endswith(
        "sets it beside CRs of the paper and the values of method.cr the moo run chose."
    )
