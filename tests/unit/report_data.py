"""Synthetic runs and claims for the report tests: curves from closed-form formulas, so every
number a calculator returns can be computed by hand."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from pathlib import Path

from repro.claims.claims_file import ClaimsFile
from repro.track.runs import RunData
from repro.track.series import label_of, seed_of

STEPS = list(range(10, 101, 10))


def make_run(
    label: str,
    *,
    loss: Callable[[int], float] = lambda s: 100 / s,
    sec_per_step: float = 1.0,
    method: dict | None = None,
    extra: Callable[[int], dict] | None = None,
    config: dict | None = None,
    scale: str = "small",
    group: str | None = None,
    steps: list[int] = STEPS,
    exit_code: int | None = 0,
    run_id: str | None = None,
    seed: int = 0,
) -> RunData:
    """A run whose point at step s has train/loss = loss(s), test/acc = s / 100, modeled time
    = sec_per_step * s, wall time = 2 * modeled time, one collective of 1e6 bytes per step."""
    history = []
    for s in steps:
        row = {
            "step": s,
            "train/loss": loss(s),
            "test/acc": s / 100,
            "time/modeled_s": sec_per_step * s,
            "time/wall_s": 2 * sec_per_step * s,
            "comm/bytes": s * 1_000_000,
            "comm/collectives": s,
        }
        row.update(extra(s) if extra else {})
        history.append(row)
    cfg = {
        "experiment": {"name": f"adacomm_{scale}", "paper": "adacomm", "scale": scale},
        "workload": {"name": "mnist1d_cnn", "dataset": "mnist1d", "model": "cnn1d"},
        "method": method or {"name": label},
        "trainer": {"world_size": 4, "batch_size": 32, "steps": steps[-1]},
        "network": {"name": "eth1g", "latency_ms": 1.0, "bandwidth_gbps": 8.0, "bytes_scale": 1},
        "compute": {"mode": "sampled", "dist": "exponential", "mean_ms": 2.0},
        "optim": {"name": "sgd", "lr": 0.1},
        "seed": seed,
    }
    cfg["experiment"]["label"] = label
    for key, value in (config or {}).items():
        cfg[key] = {**cfg.get(key, {}), **value} if isinstance(value, dict) else value
    return RunData(
        run_id=run_id or (f"id-{label}" if seed == 0 else f"id-{label}-s{seed}"),
        name=label,
        group=group or f"adacomm_{scale}",
        job_type=label,
        tags=[],
        config=cfg,
        history=history,
        summary=dict(history[-1]),
        path=Path("/nonexistent") / label,
        exit_code=exit_code,
    )


def adacomm_set(scale: str = "small", seed: int = 0) -> list[RunData]:
    """A full AdaComm run set at one seed: sync, two fixed taus, AdaComm (tau 16 -> 2) and its
    lr-decay variant. Time per step falls with tau; AdaComm reaches sync's loss at step 90."""

    def tau_of(s: int) -> dict:
        return {"method/tau": 16 if s <= 30 else 8 if s <= 60 else 2}

    return [
        make_run("sync", scale=scale, seed=seed),
        make_run(
            "local_sgd_tau4",
            loss=lambda s: 120 / s,
            sec_per_step=0.5,
            method={"name": "local_sgd", "tau": 4},
            extra=lambda s: {"method/tau": 4},
            scale=scale,
            seed=seed,
        ),
        make_run(
            "local_sgd_tau16",
            loss=lambda s: 150 / s,
            sec_per_step=0.3,
            method={"name": "local_sgd", "tau": 16},
            extra=lambda s: {"method/tau": 16},
            scale=scale,
            seed=seed,
        ),
        make_run(
            "adacomm",
            loss=lambda s: 80 / s,
            sec_per_step=0.25,
            method={"name": "adacomm", "tau0": 16},
            extra=tau_of,
            scale=scale,
            seed=seed,
        ),
        make_run(
            "adacomm_lrdecay",
            loss=lambda s: 90 / s,
            sec_per_step=0.4,
            method={"name": "adacomm", "tau0": 16},
            extra=tau_of,
            scale=scale,
            seed=seed,
        ),
    ]


def seeded(runs: Iterable[RunData]) -> dict[str, dict[int, RunData]]:
    """Runs as the report holds them: label -> seed -> run."""
    out: dict[str, dict[int, RunData]] = {}
    for run in runs:
        out.setdefault(label_of(run), {})[seed_of(run)] = run
    return out


def by_label(runs):
    return {r.config["experiment"]["label"]: r for r in runs}


HEADLINE_BAND = {"at_least": 0.267, "at_most": 0.4, "reason": "published 1/3 +- 20%"}


def claim_dict(**over) -> dict:
    """AdaComm's headline claim as a claims file holds it; `over` replaces keys."""
    base = {
        "id": "headline",
        "kind": "outcome",
        "source": "Abstract",
        "statement": "3x less time",
        "metric": {
            "calculator": "time_to_target_ratio",
            "params": {"run": "adacomm", "reference": "sync"},
        },
        "published": 0.333,
        "unit": "x sync's time",
        "scales": ["small"],
        "band": HEADLINE_BAND,
    }
    return {**base, **over}


def claims_file(claims):
    return ClaimsFile(paper="adacomm", title="t", citation="c", seed_cap=10, claims=claims)


def in_directories(
    runs: Iterable[RunData], root: Path, drop: tuple[str, ...] = ()
) -> list[RunData]:
    """The runs, each with a directory of its own under `root/<group>/<label>-s<seed>` (as a
    report page links them), leaving out the labels in `drop`."""
    placed = []
    for run in runs:
        if run.name in drop:
            continue
        path = root / str(run.group) / f"{run.name}-s{seed_of(run)}"
        path.mkdir(parents=True)
        placed.append(dataclasses.replace(run, path=path))
    return placed


def as_set_runs(runs: Iterable[RunData]) -> list[RunData]:
    """`runs` as the run set's own: a run whose label its group's run set lists takes the
    settings `repro reproduce` gives that label (its seed kept), so a report reading it from
    disk judges the claims on it (`repro.claims.set_regime`); the history stays synthetic."""
    from repro.claims.set_regime import label_configs
    from repro.config import as_dict

    sets: dict[str, dict] = {}
    out = []
    for run in runs:
        configs = sets.setdefault(run.group, label_configs(run.group))
        if label_of(run) in configs:
            config = {**as_dict(configs[label_of(run)]), "seed": seed_of(run)}
            run = dataclasses.replace(run, config=config)
        out.append(run)
    return out


def write_offline_runs(root: Path, runs: Iterable[RunData]) -> None:
    """Log synthetic runs through the real tracker (wandb offline) under `root`, where a
    report reads them back from disk."""
    from repro.schemas.tracking import TrackingConfig
    from repro.track.wandb_run import Tracker

    for run in runs:
        cfg = TrackingConfig(mode="offline")
        with Tracker(cfg, root / run.name, run.name, run.group, run.job_type, run.config) as t:
            for row in run.history:
                t.log(row, step=row["step"])
