"""Sampler construction, search-space translation and objective extraction, with real Optuna
studies in memory (no training runs: those are in tests/integration/test_sweep.py)."""

from __future__ import annotations

import math
from dataclasses import replace

import optuna
import pytest

from repro.errors import UserError
from repro.sweep.space import suggest
from repro.sweep.spec import spec_from_dict
from repro.sweep.study import BY_POINT, make_sampler, open_study, sweep_search, tally
from repro.sweep.trial import TrialFailed, TrialRun, objective_values, sweep_trial_overrides
from repro.sweep.worker import run_one_trial

SPACE = [
    {"key": "method.cr", "type": "float", "low": 0.001, "high": 1.0, "log": True},
    {"key": "method.tau0", "type": "int", "low": 2, "high": 10, "step": 4},
    {"key": "method.collective", "type": "categorical", "choices": ["allgather", "ar_ring"]},
]
GRID_SPACE = [
    {"key": "method.cr", "type": "float", "low": 0.25, "high": 0.5, "step": 0.25},
    *SPACE[1:],
]


def make_spec(sampler: str, space=SPACE, n_trials: int = 6, objectives=None):
    return spec_from_dict(
        {
            "name": "s",
            "experiment": None,
            "space": space,
            "objectives": objectives
            or [
                {"metric": "test/acc", "direction": "maximize"},
                {"metric": "time/modeled_s", "direction": "minimize"},
            ],
            "sampler": {"name": sampler, "seed": 3},
            "n_trials": n_trials,
        }
    )


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("nsga2", optuna.samplers.NSGAIISampler),
        ("tpe", optuna.samplers.TPESampler),
        ("gp", optuna.samplers.GPSampler),
        ("random", optuna.samplers.RandomSampler),
        ("grid", optuna.samplers.GridSampler),
    ],
)
def test_every_sampler_draws_points_inside_the_space(name, cls):
    spec = make_spec(name, GRID_SPACE if name == "grid" else SPACE)
    sampler = make_sampler(spec)
    assert isinstance(sampler, cls)
    study = optuna.create_study(directions=spec.directions, sampler=sampler)

    def objective(trial):
        p = {s.key: suggest(trial, s) for s in spec.space}
        return p["method.cr"], p["method.tau0"] * (2 if p["method.collective"] == "ar_ring" else 1)

    study.optimize(objective, n_trials=6)
    for t in study.trials:
        assert 0.001 <= t.params["method.cr"] <= 1.0
        assert t.params["method.tau0"] in (2, 6, 10)
        assert t.params["method.collective"] in ("allgather", "ar_ring")
    if name == "grid":  # 2 x 3 x 2 points: six trials visit six distinct ones
        assert len({tuple(t.params.values()) for t in study.trials}) == 6


@pytest.mark.parametrize("name", ["random", "grid", "nsga2"])
def test_random_grid_and_first_generation_points_follow_the_trial_number_not_the_worker(name):
    """Two workers (their samplers seeded apart, as `run_worker` seeds them) taking trials in
    either order draw trial n's point alike, so a search's points do not hang on timing, and
    a grid visits distinct points. NSGA-II's six trials here are its first generation (a
    population of 50), which it draws at random."""
    spec = make_spec(name, GRID_SPACE if name == "grid" else SPACE)
    workers = [make_sampler(spec, 0), make_sampler(spec, 1_000_004)]

    def points(samplers, order):
        study = optuna.create_study(directions=spec.directions)
        for who in order:
            study.sampler = samplers[who]
            trial = study.ask()
            for s in spec.space:
                suggest(trial, s)
            study.tell(trial, [0.5, 1.0])
        return [t.params for t in study.trials]

    first = points(workers, [0, 1, 0, 1, 0, 1])
    assert points(workers, [1, 1, 0, 0, 1, 0]) == first
    assert len({tuple(p.values()) for p in first}) == 6
    other_seed = make_sampler(replace(spec, sampler=replace(spec.sampler, seed=4)))
    assert points([other_seed], [0] * 6) != first  # the spec's seed still chooses the points


@pytest.mark.parametrize("name", ["random", "nsga2"])
def test_a_stopped_trials_point_run_again_does_not_move_the_rest_of_the_design(name):
    """Trial 1 stopped and its point queued again (`mark_stopped`, as Ctrl-C or a kill does):
    the search still tries the uninterrupted search's points, each once. Keyed on the trial
    number, the re-run used up a number and point 2 was never drawn."""
    import signal

    from repro.sweep.stops import Stopped, mark_stopped

    spec = make_spec(name)

    def points(stop_at: int | None, made_before: bool = False):
        study = optuna.create_study(directions=spec.directions, sampler=make_sampler(spec))
        if not made_before:  # as `open_study` marks a study it makes
            study.set_user_attr(*BY_POINT)
        storage = study._storage
        while sum(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials) < 4:
            trial = study.ask()
            for s in spec.space:
                suggest(trial, s)
            if trial.number == stop_at:
                mark_stopped(study, storage, trial.number, Stopped(signal.SIGINT), requeue=True)
            else:
                study.tell(trial, [0.5, 1.0])
        done = optuna.trial.TrialState.COMPLETE
        return [tuple(t.params.values()) for t in study.trials if t.state == done]

    assert points(stop_at=1) == points(stop_at=None)
    # a study made before the mark keeps its trials' numbers: no point drawn twice after it
    earlier = points(stop_at=1, made_before=True)
    assert len(set(earlier)) == len(earlier) and earlier[0] == points(stop_at=None)[0]


def test_trial_overrides_name_the_run_dir_and_tags(tmp_path):
    spec = spec_from_dict(
        {
            "name": "cr_front",
            "experiment": "topk_small",
            "overrides": ["trainer.steps=50"],
            "space": SPACE,
            "objectives": [{"metric": "test/acc", "direction": "maximize"}],
            "n_trials": 2,
            "out": str(tmp_path),
        }
    )
    params = {"method.cr": 0.01, "method.tau0": 6, "method.collective": "ar_ring"}
    assert sweep_trial_overrides(spec, 7, params) == [
        "experiment=topk_small",
        "trainer.steps=50",
        "method.cr=0.01",
        "method.tau0=6",
        "method.collective=ar_ring",
        f"run_dir={tmp_path / 'cr_front' / 'trial_7'}",
        "tracking.group=cr_front",
        "tracking.tags=['sweep','study:cr_front','trial:7']",
    ]


def test_a_trials_run_dir_under_any_out_folder_composes(tmp_path):
    """`out: "/x/sw Ü"` (or a `(`, `[`, `=`, `'`) failed every trial to Hydra's parser."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    out = tmp_path / "sw Übung (1) [x] it's"
    spec = spec_from_dict(
        {
            "name": "cr_front",
            "experiment": "topk_small",
            "space": SPACE,
            "objectives": [{"metric": "test/acc", "direction": "maximize"}],
            "n_trials": 2,
            "out": str(out),
        }
    )
    params = {"method.cr": 0.01, "method.tau0": 6, "method.collective": "ar_ring"}
    parsed = OverridesParser.create().parse_overrides(sweep_trial_overrides(spec, 7, params))
    assert {o.key_or_group: o.value() for o in parsed}["run_dir"] == str(
        out / "cr_front" / "trial_7"
    )


def test_objective_values_follow_the_spec_order_and_refuse_nan():
    spec = make_spec("nsga2")
    summary = {"test/acc": 0.9, "time/modeled_s": 12.5, "train/loss": 0.3}
    assert objective_values(spec, summary) == [0.9, 12.5]
    with pytest.raises(TrialFailed, match="diverged: train/loss is nan"):
        objective_values(spec, {**summary, "train/loss": math.nan})
    with pytest.raises(TrialFailed, match="diverged: time/modeled_s is inf"):
        objective_values(spec, {**summary, "time/modeled_s": math.inf})
    with pytest.raises(TrialFailed, match="no numeric test/acc"):
        objective_values(spec, {"time/modeled_s": 1.0, "train/loss": 0.3})


def test_tally_counts_outcomes_not_lost_trials():
    study = optuna.create_study()
    study.add_trial(optuna.trial.create_trial(value=1.0))
    study.add_trial(
        optuna.trial.create_trial(
            state=optuna.trial.TrialState.FAIL, user_attrs={"fail_reason": "diverged: x"}
        )
    )
    study.add_trial(
        optuna.trial.create_trial(
            state=optuna.trial.TrialState.FAIL, user_attrs={"stale": "worker h:1 died"}
        )
    )
    study.ask()
    assert tally(study) == (2, 1)


def _fail_as_stale(storage, study, number):
    """What another worker's stale check does to a trial whose heartbeat came too late."""
    study_id = storage.get_study_id_from_name(study.study_name)
    trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, number)
    storage.set_trial_state_values(trial_id, optuna.trial.TrialState.FAIL)


@pytest.mark.parametrize("when", ["before_return", "before_attr"])
def test_a_trial_failed_as_stale_under_a_live_worker_does_not_end_the_worker(when):
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage)
    run = TrialRun()

    def objective(trial):
        run.number = trial.number
        _fail_as_stale(storage, study, trial.number)  # while the training runs
        run.ended = True
        if when == "before_attr":
            trial.set_user_attr("summary", {})  # refused: the trial is finished
        return 1.0  # refused when the result is told

    assert run_one_trial(study, storage, objective, run) == 0
    assert run_one_trial(study, storage, lambda t: 2.0, TrialRun()) is None
    assert [t.state for t in study.trials] == [
        optuna.trial.TrialState.FAIL,
        optuna.trial.TrialState.COMPLETE,
    ]


def test_other_errors_still_end_the_worker():
    study = optuna.create_study()
    run = TrialRun()

    def objective(trial):
        run.number = trial.number
        raise ValueError("a bug in the objective")

    with pytest.raises(ValueError, match="a bug"):
        run_one_trial(study, study._storage, objective, run)


def test_a_study_made_by_another_space_or_overrides_is_refused_not_mixed():
    """The same command continues a sweep; a spec whose trials would not compare with the
    study's (another space, objectives, experiment or overrides) is refused, naming what
    changed, while the budget and the sampler may change between runs."""
    storage = optuna.storages.InMemoryStorage()
    spec = replace(make_spec("tpe"), overrides=("trainer.steps=300",))
    open_study(spec, storage)
    again = open_study(
        replace(spec, n_trials=9, sampler=replace(spec.sampler, name="random")), storage
    )
    assert again.user_attrs["search"] == sweep_search(spec)
    assert dict([BY_POINT]).items() <= again.user_attrs.items()  # made here: keyed by point
    # true and 1 are not one choice, though Python's == says so
    flags = {"key": "method.layerwise", "type": "categorical", "choices": [True, False]}
    fresh = optuna.storages.InMemoryStorage()
    open_study(make_spec("tpe", space=[*SPACE, flags]), fresh)
    with pytest.raises(UserError, match="differs from this spec in its space, so"):
        open_study(make_spec("tpe", space=[*SPACE, {**flags, "choices": [1, 0]}]), fresh)
    # a whole bound written as 1 rather than 1.0 is the same space: the same study
    assert SPACE[0]["high"] == 1.0 and sweep_search(spec).count('"high": 1.0') == 1
    whole = [{**SPACE[0], "high": 1}, *SPACE[1:]]
    open_study(replace(make_spec("tpe", space=whole), overrides=spec.overrides), storage)
    narrower = [{**SPACE[0], "low": 0.01}, *SPACE[1:]]
    for other, changed in (
        (replace(make_spec("tpe", space=narrower), overrides=spec.overrides), "space"),
        (make_spec("tpe", space=narrower), "settings (experiment and overrides) and space"),
        (replace(spec, overrides=("trainer.steps=600",)), "settings (experiment and overrides)"),
    ):
        with pytest.raises(UserError) as err:
            open_study(other, storage)
        assert f"made by a sweep that differs from this spec in its {changed}, so" in str(err.value)
        assert str(err.value).endswith(
            "give the spec another name, or remove runs/sweeps/s to start afresh"
        )
