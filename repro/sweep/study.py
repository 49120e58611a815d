"""The Optuna studies of a search and how a worker gets its next trial from one.

A sweep is one study whose sampler picks each point (`make_sampler`); a search with arms
has one study per arm (`open_arm_study`), stamped with what makes its trials comparable,
each trial the enqueued design point of its `design_index` (`ask_point`).

Budget. A sweep's `n_trials` counts trials that ran to an end (`tally`): COMPLETE, or FAIL
with a `fail_reason` recorded by the objective. A trial lost to a killed worker is not an
outcome: it is failed as stale (worker locks on a journal, Optuna's heartbeat on a database;
see `repro.sweep.storage`) and its point is queued again. An arm is finished when every
design index has a completed trial (`done_indices`), so every arm gets exactly `n_trials`.

Resume is free: the studies live in their storage, so running the same command again loads
them and works on what is left.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from repro.errors import UserError
from repro.locks import take
from repro.sweep.spec import ArmSpec, SweepSpec, base_overrides
from repro.sweep.storage import fail_stale, open_storage
from repro.sweep.trial import arm_base


def make_sampler(spec: SweepSpec, seed_offset: int = 0) -> Any:
    """The spec's sampler. `seed_offset` sets apart the workers' adaptive samplers (equal
    seeds would propose equal points). Random draws are made by trial number (`_numbered`):
    the random sampler's, and NSGA-II's first generation and mutations; the grid gives trial
    n the n-th point of an order its seed shuffles. Those take the spec's seed alone, or
    workers seeded apart would draw trial n differently (the same sweep on two workers found
    other first generations each time it ran) and the grid would visit some points twice and
    others never."""
    import optuna

    samplers, name, seed = optuna.samplers, spec.sampler.name, spec.sampler.seed
    if name == "random":
        return _numbered(samplers.RandomSampler, seed, seed=seed)
    if name == "grid":
        return samplers.GridSampler({p.key: p.grid_values() for p in spec.space}, seed=seed)
    plain = {"tpe": samplers.TPESampler, "gp": samplers.GPSampler}
    if name in plain:
        return plain[name](seed=seed + seed_offset)
    size = spec.sampler.population_size or 50  # nsga2, the one left (sobol is for arms)
    # crossover and selection keep the worker's own seed: workers seeded alike would breed
    # the same children from the same parents
    return _numbered(samplers.NSGAIISampler, seed, population_size=size, seed=seed + seed_offset)


# A study made since its draws are keyed on the point's number carries this mark; one made
# before keeps the trial's number, so that its later draws repeat none of its earlier ones.
BY_POINT = ("draws", "by point")


def _numbered(sampler_class: type, draws: int, **kwargs: Any) -> Any:
    """`sampler_class(**kwargs)` whose independent draws are random and fixed by (`draws`,
    point number, key) alone.

    Optuna's own draws come from one generator per sampler, so which worker asked for
    which trial, and in what order, decided the points: two runs of the same search (the
    Top-k set's Pareto search, 2 workers) sampled different ratios and found different
    knees. Drawn from the point's number instead, the n-th point is the same whichever
    worker draws it, and every report of the search is the same. A point's number is its
    trial's less the trials before it that run a stopped or lost trial's point again
    (`failed_trial`): keyed on the trial's own, every interruption moved the rest of the
    design along, and an interrupted search tried other points than an uninterrupted one.
    A re-run draws only what its lost trial had not recorded, by a key of its own.
    """
    import zlib

    import numpy as np
    from optuna.samplers import RandomSampler

    class Numbered(sampler_class):
        def sample_independent(self, study, trial, param_name, param_distribution):
            points = self.__dict__.setdefault("points", {})  # one look at the study a trial
            if (study.study_name, trial.number) not in points:
                points[study.study_name, trial.number] = _point(study, trial)
            key = [draws, points[study.study_name, trial.number], zlib.crc32(param_name.encode())]
            seed = int(np.random.SeedSequence(key).generate_state(1)[0])
            drawn = RandomSampler(seed=seed)
            return drawn.sample_independent(study, trial, param_name, param_distribution)

    return Numbered(**kwargs)


def _point(study: Any, trial: Any) -> int:
    """The number `_numbered` keys a trial's draws on (a re-run's: past every point's)."""
    if "failed_trial" in trial.system_attrs:
        return 2**40 + trial.number
    if study.user_attrs.get(BY_POINT[0]) != BY_POINT[1]:
        return trial.number
    earlier = study.get_trials(deepcopy=False)
    return trial.number - sum(
        "failed_trial" in t.system_attrs for t in earlier if t.number < trial.number
    )


def tally(study: Any) -> tuple[int, int]:
    """(trials that count towards the budget, trials running now)."""
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False)
    running = sum(t.state == TrialState.RUNNING for t in trials)
    failed = sum(t.state == TrialState.FAIL and "fail_reason" in t.user_attrs for t in trials)
    return sum(t.state == TrialState.COMPLETE for t in trials) + failed, running


def finished_words(done: int, n_trials: int) -> str:
    """How many trials the study holds finished, against the spec's `n_trials`: a study run
    before with a larger `n_trials` holds more than the spec now asks for ("6 of 2" read as
    a slip)."""
    if done > n_trials:
        return f"{done} trials finished, more than n_trials={n_trials}"
    return f"{done} of {n_trials} trials finished"


def open_study(spec: SweepSpec, storage: Any) -> Any:
    """The sweep's study, created on first use. Optuna's own lines about studies and trials
    are silenced, as in `open_journal`: the study's would come once per worker, and each
    trial prints its own line (`repro.sweep.worker`)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        study_name=spec.name,
        storage=storage,
        directions=spec.directions,
        sampler=make_sampler(spec),
        load_if_exists=True,
    )
    check_study(spec, study)
    if study.user_attrs.get("search") is None:
        study.set_user_attr("search", sweep_search(spec))
        if not study.get_trials(deepcopy=False):
            study.set_user_attr(*BY_POINT)
    return study


def check_study(spec: SweepSpec, study: Any) -> None:
    """Refuse a study made by another sweep (its directions, or its stamped base config,
    space and objectives): running it would mix trials that do not compare, and showing it
    would label its values with this spec's objectives. Only reads: a study shown from a
    read-only disk is checked too."""
    have = [d.name.lower() for d in study.directions]
    if have != spec.directions:
        raise UserError(
            f"study {spec.name} in {spec.storage_label} has directions {have}, the spec "
            f"{spec.directions}; rename the study or remove the old one"
        )
    made_by, this = study.user_attrs.get("search"), json.loads(sweep_search(spec))
    # compared as values: `high: 1` and `high: 1.0` are one space, though not one text
    old = json.loads(made_by) if made_by is not None else this
    changed = [k for k, v in this.items() if not _same(old.get(k), v)]
    if changed:
        which = " and ".join([", ".join(changed[:-1]), changed[-1]] if changed[1:] else changed)
        remove = f"remove {spec.study_dir}" if spec.storage is None else "delete the old study"
        raise UserError(
            f"study {spec.name} in {spec.storage_label} was made by a sweep that differs from "
            f"this spec in its {which}, so their trials would not compare; give the spec "
            f"another name, or {remove} to start afresh"
        )


def _same(a: Any, b: Any) -> bool:
    """Equal as a spec means them: 1 and 1.0 alike, true and 1 not (Python's == says so)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(_same, a, b))
    return isinstance(a, bool) == isinstance(b, bool) and a == b


def sweep_search(spec: SweepSpec) -> str:
    """What makes a sweep's trials comparable, stamped on its study and checked on every load:
    its base config's identity (the hash that names a run's directory, so a setting of where
    or how a run goes, such as tracking, may change), its space and its objectives. The
    budget, the sampler and the timeout may change between runs of the same command."""
    from repro.config import compose, config_hash

    return json.dumps(
        {
            "settings (experiment and overrides)": config_hash(compose(base_overrides(spec))),
            "space": [asdict(p) for p in spec.space],
            "objectives": [asdict(o) for o in spec.objectives],
        },
        sort_keys=True,
        default=list,
    )


def open_journal(spec: SweepSpec) -> Any:
    """A search with arms' journal; Optuna's own lines about studies and trials are silenced
    (each trial prints its own line)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return open_storage(spec)


def search_of(spec: SweepSpec, arm: ArmSpec, runs: dict[str, list[str]]) -> str:
    """What makes an arm's trials comparable: stamped on its study, checked on every load.
    Its settings are the identity hash of the arm's run as the run set `runs` composes it
    (at the first seed, before any sampled value): a run set changed since (its compute
    model, its horizon) makes the old trials another search's."""
    from repro.config import compose, config_hash

    base = [*arm_base(spec, arm, runs), f"seed={spec.seeds[0]}"]
    return json.dumps(
        {
            "settings": config_hash(compose(base)),
            "space": [asdict(p) for p in spec.space_of(arm)],
            "seeds": list(spec.seeds),
            "objective": asdict(spec.objective),
            "design": {
                "trials": spec.n_trials,
                "name": spec.sampler.name,
                "seed": spec.sampler.seed,
            },
            "trained": arm.trained,
            "overrides": [*spec.overrides, *arm.overrides],
        },
        sort_keys=True,
        default=list,
    )


def open_arm_study(spec: SweepSpec, arm: ArmSpec, runs: dict[str, list[str]], storage: Any) -> Any:
    """The arm's study (created on first use), refused when a different search made it. A
    stamp written before its settings were part of it is checked on what it holds."""
    import optuna

    study = optuna.create_study(
        study_name=arm.name,
        storage=storage,
        direction=spec.objective.direction,
        load_if_exists=True,
    )
    made_by, this = study.user_attrs.get("search"), search_of(spec, arm, runs)
    if made_by is None:
        study.set_user_attr("search", this)
        return study
    old, new = json.loads(made_by), json.loads(this)
    changed = [key for key in old if old[key] != new.get(key)]
    if changed:
        what = "the run set's settings" if changed == ["settings"] else ", ".join(changed)
        raise UserError(
            f"the study of arm {arm.name} in {spec.study_dir / 'journal.log'} was made by a "
            f"different search ({what}); remove {spec.study_dir} to start this one afresh"
        )
    return study


def completed(study: Any) -> list[Any]:
    from optuna.trial import TrialState

    return study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))


def done_indices(study: Any) -> set[int]:
    return {t.user_attrs["design_index"] for t in completed(study)}


def ask_point(spec: SweepSpec, study: Any, storage: Any, index: int, point: dict, me: str) -> Any:
    """The trial of design point `index`, enqueued and asked back under the search's ask lock
    (so the trial popped is this point). Left-overs of dead workers are failed as stale first:
    a RUNNING trial of this index (the caller holds the index's lock, so its worker is gone)
    and any WAITING trial (enqueued by a worker that died before asking it back)."""
    from optuna.trial import TrialState

    with take(spec.study_dir / "ask.lock"):
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING)):
            if t.state == TrialState.WAITING or t.user_attrs.get("design_index") == index:
                fail_stale(study, storage, t)
        study.enqueue_trial(point, user_attrs={"design_index": index, "worker": me})
        return study.ask()
