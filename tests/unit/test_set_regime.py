"""Whether a run is its run set's: every set makes its own runs, a setting that changes what
is computed departs while where and how do not, a claim reading a run made otherwise is
not assessed, and a report keeps the set's run over a newer one made otherwise."""

from dataclasses import replace

import pytest

from repro.claims.set_regime import changed_by, departures, label_configs, set_settings
from repro.claims.verdicts import evaluate
from repro.config import CONFIG_DIR, as_dict
from repro.errors import UserError
from repro.report.build import select_runs
from repro.report.summary import plain_verdict
from repro.reproduce.run_sets import run_set
from tests.unit.report_data import adacomm_set, as_set_runs, claim_dict, claims_file, seeded

# the sets whose runs claims are judged on (no claim is stated for the tiny scale)
SETS = sorted(
    p.stem for p in (CONFIG_DIR / "experiment").glob("*_*.yaml") if not p.stem.endswith("_tiny")
)


@pytest.mark.parametrize("experiment", SETS)
def test_every_run_set_makes_its_own_runs_at_every_seed(experiment):
    paper, scale = experiment.rsplit("_", 1)
    settings = set_settings(experiment)
    assert settings and set(settings) == set(label_configs(experiment))
    made = run_set(paper, scale, [], seeds=2)  # an added seed is the set's run too
    assert {cfg.experiment.label for _, cfg in made} == set(settings)
    for _, cfg in made:
        assert departures(as_dict(cfg), settings[cfg.experiment.label]) == [], cfg.experiment.label


def test_what_is_computed_departs_and_where_or_how_does_not():
    where_or_how = [
        "data.root=/elsewhere",
        "trainer.checkpoint_every=7",
        "trainer.vectorize=loop",
        "workload.eval_batch_size=13",
        "runs_root=/elsewhere/runs",
        "tracking=disabled",
        "seed=5",
    ]

    def made_with(extra):
        return [cfg for _, cfg in run_set("adacomm", "tiny", extra, seeds=2)]

    assert changed_by("adacomm_tiny", made_with(where_or_how)) == []
    assert changed_by(
        "adacomm_tiny", made_with([*where_or_how, "trainer.steps=7", "optim.lr=0.04"])
    ) == [
        "optim.lr=0.04 (set: 0.05)",
        "trainer.steps=7 (set: 400)",
    ]
    # a label's own overrides are the set's for that label only
    tau4 = as_dict(label_configs("adacomm_tiny")["local_sgd_tau4"])
    assert departures(tau4, set_settings("adacomm_tiny")["sync"]) == [
        "method.name=local_sgd (set: sync)",
        "experiment.label=local_sgd_tau4 (set: sync)",
    ]


def test_a_claim_reading_a_run_made_otherwise_is_not_assessed_and_says_which_setting():
    runs = seeded([*adacomm_set(), *adacomm_set(seed=1)])
    reads_sync = claim_dict()  # adacomm against sync
    own_only = claim_dict(
        id="tau_only",
        metric={
            "calculator": "final_metric",
            "params": {"run": "local_sgd_tau4", "metric": "train/loss"},
        },
    )
    claims = claims_file([reads_sync, own_only]).claims
    judged = evaluate(claims, runs, "small")
    off = {"sync": {1: ["trainer.steps=7 (set: 400)"]}}
    headline, tau = evaluate(claims, runs, "small", off)
    assert judged[0].verdict not in ("not assessed", "not run")
    assert (headline.verdict, headline.off_set) == ("not assessed", "trainer.steps=7 (set: 400)")
    assert headline.ours == judged[0].ours and headline.per_seed == judged[0].per_seed
    assert headline.note.startswith("its runs are not the run set's (trainer.steps=7 (set: 400))")
    assert plain_verdict(headline, "small") == (
        "not assessed: its runs are not the run set's (trainer.steps=7 (set: 400))"
    )
    assert tau == judged[1]  # it reads no run made otherwise
    # a claim stated for another scale says that first
    (other_scale,) = evaluate(
        claims_file([claim_dict(scales=["paper"])]).claims, runs, "small", off
    )
    assert (other_scale.verdict, other_scale.off_set) == ("not assessed", "")


def test_a_report_keeps_the_sets_run_over_a_newer_one_made_otherwise():
    own = as_set_runs(adacomm_set())
    sync = next(r for r in own if r.name == "sync")
    newer = replace(
        sync,
        run_id="id-sync-lr",
        config={**sync.config, "optim": {**sync.config["optim"], "lr": 0.5}},
        started=sync.started + 60,
    )
    _, runs, notes, off = select_runs([*own, newer], "adacomm", None, "runs")
    assert runs["sync"][0] is sync and off == {}
    assert notes == [
        "several runs labelled 'sync' with seed 0: kept run id-sync (the run set's own)"
    ]
    lr = set_settings("adacomm_small")["sync"]["optim.lr"]
    _, runs, notes, off = select_runs([*own[1:], newer], "adacomm", None, "runs")
    assert runs["sync"][0] is newer and notes == []
    assert off == {"sync": {0: [f"optim.lr=0.5 (set: {lr:.4g})"]}}


def test_a_way_of_running_the_label_itself_sets_departs():
    # Adasum's cost pair reads gloo's measured seconds between worker processes: the same
    # pair on the simulated engine measured in-process tensor operations
    simulated = [cfg for _, cfg in run_set("adasum", "tiny", ["trainer.engine=simulated"])]
    assert changed_by("adasum_tiny", simulated) == ["trainer.engine=simulated (set: processes)"]
    # labels that leave the engine to the default may run on either
    others = [c for c in simulated if not c.experiment.label.endswith("_b128")]
    assert others and changed_by("adasum_tiny", others) == []


def test_a_checkpoint_interval_a_label_sets_stays_how_it_ran():
    # topk_small's c = 0.001 labels set trainer.checkpoint_every; only the engine is pinned
    made = [cfg for _, cfg in run_set("topk", "small", ["trainer.checkpoint_every=100"])]
    assert changed_by("topk_small", made) == []


def test_a_set_that_names_another_papers_group_is_refused_before_any_run():
    """A set copied from another paper's wrote its runs into that paper's group, where that
    paper's report read them as its own, and its own report found none."""
    for override in ("experiment.group=adasum_tiny", "tracking.group=adasum_tiny"):
        with pytest.raises(UserError) as err:
            run_set("adacomm", "tiny", [override])
        assert str(err.value) == (
            "experiment=adacomm_tiny makes its run sync as paper adacomm, scale tiny, group "
            "adasum_tiny, where adacomm's report at tiny does not look; make it paper "
            "adacomm, scale tiny, group adacomm_tiny (experiment.paper, .scale, .group or "
            "tracking.group, in configs/experiment/adacomm_tiny.yaml or the overrides)"
        )
    with pytest.raises(UserError, match="as paper adacomm, scale small, group adacomm_tiny"):
        run_set("adacomm", "tiny", ["experiment.scale=small"])
    # no group of its own: the runs take the set's name as their group, where the report looks
    assert run_set("adacomm", "tiny", ["experiment.group="])
