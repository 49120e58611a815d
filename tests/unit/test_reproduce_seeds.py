"""`repro reproduce PAPER seeds=N`: each run of the set for seeds seed .. seed + N - 1, each in
its own run directory, and the expected time printed before the set starts."""

import copy
import os

import pytest

from repro.cluster.launcher import at_once, expected_time
from repro.config import compose, config_hash, run_dir_of
from repro.errors import UserError
from repro.reproduce.reproduce_cli import main, parse, parse_seeds
from repro.reproduce.run_sets import run_set
from tests.helpers import REPO, on_one_core

LABELS = ["sync", "local_sgd_tau4", "local_sgd_tau16", "adacomm", "adacomm_lrdecay"]


def test_each_label_runs_for_every_seed_in_its_own_directory():
    runs = run_set("adacomm", "tiny", [], seeds=3)
    assert len(runs) == 15
    # seed by seed: a set stopped early has whole seeds
    assert [name for name, _ in runs[:6]] == [f"{label} seed=0" for label in LABELS] + [
        "sync seed=1"
    ]
    assert [(cfg.experiment.label, cfg.seed) for _, cfg in runs[::5]] == [
        ("sync", 0),
        ("sync", 1),
        ("sync", 2),
    ]
    assert len({run_dir_of(cfg) for _, cfg in runs}) == 15
    assert {cfg.experiment.seeds for _, cfg in runs} == {3}
    # the number of seeds is not part of a run's identity: seed 0 of a three-seed set is the
    # run a one-seed set made, so it is skipped rather than repeated
    (one,) = [cfg for name, cfg in run_set("adacomm", "tiny", []) if name == "sync"]
    assert one.experiment.seeds == 1 and config_hash(one) == config_hash(runs[0][1])


def test_seeds_start_at_the_seed_override():
    runs = run_set("adacomm", "tiny", ["seed=5"], seeds=2)
    assert sorted({cfg.seed for _, cfg in runs}) == [5, 6]
    assert runs[0][0] == "sync seed=5"


@pytest.mark.parametrize(
    ("experiment", "seeds"),
    [
        ("adacomm_tiny", 1),
        ("adacomm_small", 3),
        ("adacomm_paper", 3),
        ("adasum_tiny", 1),
        ("adasum_small", 3),
        ("adasum_paper", 3),
    ],
)
def test_default_seeds_per_scale(experiment, seeds):
    assert compose([f"experiment={experiment}"]).experiment.seeds == seeds


@pytest.mark.parametrize("text", ["0", "-1", "abc", "1.5", ""])
def test_seeds_below_one_or_not_an_integer_is_one_line(text):
    with pytest.raises(UserError) as err:
        parse_seeds(text)
    assert str(err.value) == (
        f"seeds={text} must be an integer >= 1 (how many seeds each run of the set runs; "
        "e.g. seeds=3)"
    )
    with pytest.raises(UserError, match=f"seeds={text} must be an integer"):
        parse(["adacomm", "scale=tiny", f"seeds={text}"])


def test_experiment_seeds_is_checked_where_it_is_composed():
    with pytest.raises(UserError, match=r"experiment.seeds=0 must be an integer >= 1"):
        compose(["experiment=adacomm_tiny", "experiment.seeds=0"])
    assert parse(["adacomm", "seeds=4", "seed=1"])[1:] == ("small", 4, ["seed=1"])


def test_expected_time_scales_with_runs_and_side_by_side_slots(monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    runs = run_set("adacomm", "tiny", [], seeds=2)
    assert {cfg.trainer.engine for _, cfg in runs} == {"simulated"}
    # 10 runs of 1.5 minutes, 2 at a time: 7.5 minutes
    assert expected_time(runs, 1.5) == (
        "expected time: about 7.5 min (10 runs to do, 2 at a time; from "
        "experiment.expected_minutes, measured on a 2-core machine)"
    )
    # a run on worker processes (Adasum's cost pair) takes both cores: it runs after the
    # simulated ones, alone; 3 simulated 2 at a time (the third once a slot frees: 2 x 1.5)
    # and 1 alone: 3 x 1.5 = 4.5 minutes
    on_workers = copy.deepcopy(runs[0][1])
    on_workers.trainer.engine = "processes"
    mixed = [*runs[:3], ("cost", on_workers)]
    assert expected_time(mixed, 1.5) == (
        "expected time: about 4.5 min (4 runs to do: 3 simulated, 2 at a time, then 1 on "
        "worker processes, one at a time; from experiment.expected_minutes, measured on a "
        "2-core machine)"
    )
    assert expected_time(runs[:1], 0.0) == (
        "expected time: not measured for this set (experiment.expected_minutes); "
        "1 run to do, 1 at a time"
    )
    assert expected_time([("cost", on_workers)] * 2, 1.5) == (
        "expected time: about 3.0 min (2 runs to do, on worker processes, one at a time; from "
        "experiment.expected_minutes, measured on a 2-core machine)"
    )
    assert at_once(mixed) == 2 and at_once(runs[:1]) == 1 and at_once([("c", on_workers)]) == 1


def test_a_bad_claims_file_stops_reproduce_before_any_run(tmp_path, monkeypatch):
    claims = tmp_path / "claims"
    claims.mkdir()
    text = (REPO / "reports" / "claims" / "adacomm.yaml").read_text()
    inverted = text.replace(
        "at_least: 0.267\n      at_most: 0.4\n", "at_least: 0.4\n      at_most: 0.267\n", 1
    )
    assert inverted != text
    (claims / "adacomm.yaml").write_text(inverted)
    monkeypatch.setattr("repro.report.build.default_claims_dir", lambda: claims)
    message = (
        f"{claims / 'adacomm.yaml'}: claim 'headline_time_to_sync_loss': band is "
        "inverted (at_least 0.4 > at_most 0.267); swap the bounds"
    )
    with pytest.raises(UserError) as err:
        main(["adacomm", "scale=tiny", f"runs_root={tmp_path}/runs", f"data.root={tmp_path}/d"])
    assert str(err.value) == message
    assert not (tmp_path / "runs").exists()


def test_side_by_side_slots_are_the_cores_this_process_may_use():
    """A SLURM job's cpuset, `taskset` or a container narrows the cores a process may run on
    below the node's: the set's runs go as many at a time as it has, not as the node has."""
    runs = run_set("adacomm", "tiny", [])
    allowed = os.sched_getaffinity(0)
    if len(allowed) < 2:
        pytest.skip("one core: narrowing the affinity would change nothing")
    with on_one_core():
        assert at_once(runs) == 1
        assert "(5 runs to do, 1 at a time;" in expected_time(runs, 1.5)
    assert at_once(runs) == min(len(allowed), 5)


def test_expected_time_of_runs_measured_here_packs_them_longest_first(monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    runs = run_set("adacomm", "tiny", [])[:3]  # sync, local_sgd_tau4, local_sgd_tau16
    measured = {"sync": 3.0, "local_sgd_tau4": 2.0, "local_sgd_tau16": 2.0}
    # sync in one slot, tau4 in the other, tau16 after tau4 (2 + 2): 4 minutes, not 7 / 2
    assert expected_time(runs, 1.5, measured) == (
        "expected time: about 4.0 min (3 runs to do, 2 at a time; from the same runs' "
        "earlier seeds here)"
    )
    # a label not measured takes the set's average: 3 in one slot, 2 + 1.5 in the other
    del measured["local_sgd_tau16"]
    assert expected_time(runs, 1.5, measured) == (
        "expected time: about 3.5 min (3 runs to do, 2 at a time; from the same runs' "
        "earlier seeds here and experiment.expected_minutes, measured on a 2-core machine)"
    )
    # an unmeasured set whose every run was measured here still has an expected time
    assert expected_time(runs[:1], 0.0, {"sync": 3.0}).startswith("expected time: about 3.0")
    assert expected_time(runs[:2], 0.0, {"sync": 3.0}).startswith("expected time: not measured")
