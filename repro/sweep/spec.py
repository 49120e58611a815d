"""Sweep specs: the schema of `sweeps/*.yaml`, validated before any trial exists.

A spec names one Optuna study: the base experiment and fixed overrides every trial shares, the
search space (one config key per entry), the objectives (a metric of the run summary and a
direction), the sampler, the trial budget and the storage. Everything that can be checked
without running a trial is checked here, so a bad spec is refused with one line naming the
setting: keys and types as the file is read (`repro.spec_loader`), structure and distributions
in `__post_init__`, config keys against the composed Hydra config in `check_config_keys`.

YAML shape::

    name: topk_cr_pareto
    experiment: topk_small    # configs/experiment/<name>.yaml, or null for the root config
    overrides: [trainer.steps=300]
    space:
      - {key: method.cr, type: float, low: 0.001, high: 1.0, log: true}
      - {key: method.collective, type: categorical, choices: [allgather, ar_topk]}
    objectives:
      - {metric: test/acc, direction: maximize}
    sampler: nsga2            # or {name: nsga2, seed: 0, population_size: 8}
    n_trials: 40
    timeout_s: 3600           # stop starting trials after this long (per invocation)
    storage: null             # journal file <out>/<name>/journal.log, or a database URL
    out: runs/sweeps
    group_by: null            # a categorical key: `show` prints one front per value
    heartbeat_s: 30           # database storage only: heartbeat period and the silence
    grace_s: 120              # after which a running trial counts as stale
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repro.errors import UserError
from repro.spec_loader import FILE, load, read_yaml
from repro.sweep.metrics import OBJECTIVE_METRICS
from repro.sweep.space import ParamSpec, format_override, grid_size, number
from repro.sweep.storage import expand_storage_url, mask_url

SOURCE_TREE = Path(__file__).resolve().parents[2]

SAMPLERS = ("nsga2", "tpe", "gp", "random", "grid")
DIRECTIONS = ("maximize", "minimize")
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


@dataclass(frozen=True)
class ObjectiveSpec:
    """A run-summary metric and whether the sweep maximises or minimises it."""

    metric: str
    direction: str

    def __post_init__(self) -> None:
        if self.metric not in OBJECTIVE_METRICS:
            raise UserError(
                f"objective metric {self.metric!r} is not logged by the trainer; "
                f"use one of {', '.join(OBJECTIVE_METRICS)}"
            )
        if self.direction not in DIRECTIONS:
            raise UserError(
                f"objective {self.metric}: direction={self.direction!r} "
                "must be maximize or minimize"
            )


@dataclass(frozen=True)
class SamplerSpec:
    """Sampler choice. NSGA-II is the default for two or more objectives because Optuna 5's
    own default (TPE) is the single-objective workhorse; `population_size` is NSGA-II's
    generation size, worth lowering for small budgets."""

    name: str
    seed: int = 0
    population_size: int | None = None

    def __post_init__(self) -> None:
        if self.name not in SAMPLERS:
            raise UserError(f"sampler={self.name!r} is unknown; use one of {', '.join(SAMPLERS)}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise UserError(f"sampler.seed={self.seed!r} must be an integer")
        if self.population_size is not None:
            if self.name != "nsga2":
                raise UserError(f"sampler.population_size applies to nsga2 only, not {self.name}")
            if not isinstance(self.population_size, int) or self.population_size < 2:
                raise UserError(f"sampler.population_size={self.population_size!r} must be >= 2")


@dataclass(frozen=True)
class SweepSpec:
    """A whole sweep. `storage=None` means the journal file `<out>/<name>/journal.log`."""

    name: str
    experiment: str | None
    objectives: tuple[ObjectiveSpec, ...]
    sampler: SamplerSpec
    n_trials: int
    space: tuple[ParamSpec, ...] = ()  # empty: refused below, saying to add an entry
    overrides: tuple[str, ...] = ()
    timeout_s: float | None = None
    storage: str | None = None
    out: str = "runs/sweeps"
    heartbeat_s: int = 30
    grace_s: int = 120
    group_by: str | None = None
    source: str = field(default="", compare=False, metadata=FILE)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise UserError(f"name={self.name!r} must be letters, digits, '_', '-' or '.'")
        if self.experiment is not None and (
            not isinstance(self.experiment, str) or not _NAME.fullmatch(self.experiment)
        ):
            raise UserError(
                f"experiment={self.experiment!r} must name a configs/experiment/ file "
                "(e.g. topk_small) or be null"
            )
        if not self.space:
            raise UserError(f"sweep {self.name}: the search space is empty; add a space entry")
        keys = [p.key for p in self.space]
        if len(set(keys)) != len(keys):
            raise UserError(f"sweep {self.name}: a space key appears twice in {keys}")
        if not self.objectives:
            raise UserError(f"sweep {self.name}: list at least one objective")
        metrics = [o.metric for o in self.objectives]
        if len(set(metrics)) != len(metrics):
            raise UserError(f"sweep {self.name}: an objective metric appears twice in {metrics}")
        if isinstance(self.n_trials, bool) or not isinstance(self.n_trials, int):
            raise UserError(f"n_trials={self.n_trials!r} must be an integer")
        if self.n_trials < 1:
            raise UserError(f"n_trials={self.n_trials} must be at least 1")
        if self.timeout_s is not None and number(self.timeout_s, "timeout_s") <= 0:
            raise UserError(f"timeout_s={self.timeout_s} must be positive (or null for none)")
        for name in ("heartbeat_s", "grace_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise UserError(f"{name}={v!r} must be a positive integer (seconds)")
        if self.grace_s <= self.heartbeat_s:
            raise UserError(f"grace_s={self.grace_s} must exceed heartbeat_s={self.heartbeat_s}")
        if self.group_by is not None and self.group_by not in {
            p.key for p in self.space if p.type == "categorical"
        }:
            raise UserError(f"group_by={self.group_by!r} must be a categorical space key")
        for o in self.overrides:
            if not isinstance(o, str) or "=" not in o:
                raise UserError(f"overrides: {o!r} must be a Hydra override such as key=value")
        if self.storage is not None:
            expand_storage_url(self.storage)
        if self.sampler.name == "grid":
            size = grid_size(self.space)
            if self.n_trials > size:
                raise UserError(f"n_trials={self.n_trials} exceeds the grid's {size} points")

    @property
    def directions(self) -> list[str]:
        return [o.direction for o in self.objectives]

    @property
    def metric_names(self) -> list[str]:
        return [o.metric for o in self.objectives]

    @property
    def study_dir(self) -> Path:
        """Where the journal, locks, plots and the trials' run directories live."""
        return Path(self.out) / self.name

    @property
    def storage_label(self) -> str:
        """The storage as it may appear in logs and reports: never with a password."""
        if self.storage is None:
            return str(self.study_dir / "journal.log")
        return mask_url(self.storage)


def spec_from_dict(raw: Any, source: str = "") -> SweepSpec:
    """Build and validate a spec from parsed YAML; `source` names the file in messages. The
    name defaults to the file's stem, and `sampler` may be a name, or null for NSGA-II with
    two or more objectives and TPE with one."""
    if isinstance(raw, dict):
        raw = {"name": Path(source).stem if source else "", **raw}
        sampler = raw.get("sampler")
        if sampler is None or isinstance(sampler, str):
            objectives = raw.get("objectives")
            many = isinstance(objectives, list) and len(objectives) >= 2
            raw["sampler"] = {"name": sampler or ("nsga2" if many else "tpe")}
    return load(SweepSpec, raw, source)


def load_spec(path: str | Path) -> SweepSpec:
    path = Path(path)
    return spec_from_dict(read_yaml(path, "sweep spec"), source=str(path))


def spec_path(name: str) -> Path:
    """A spec path as a config writes it (`experiment.search`): as given when it exists,
    else from the source tree (a reproduction started in another directory still finds the
    shipped sweeps/)."""
    path = Path(name)
    return path if path.is_absolute() or path.exists() else SOURCE_TREE / path


def base_overrides(spec: SweepSpec) -> list[str]:
    experiment = [] if spec.experiment is None else [f"experiment={spec.experiment}"]
    return [*experiment, *spec.overrides]


def check_config_keys(spec: SweepSpec) -> None:
    """Compose the base config, then base + each probe value of each search key, so an unknown
    key or a value the config schema rejects is refused before a trial is created."""
    from repro.config import compose

    base = base_overrides(spec)
    try:
        compose(base)
    except UserError as err:
        raise UserError(f"sweep {spec.name}: base config does not compose: {err}") from None
    for p in spec.space:
        for value in p.probe_values():
            override = format_override(p.key, value)
            try:
                compose([*base, override])
            except UserError as err:
                raise UserError(
                    f"sweep {spec.name}: space key {p.key} ({override}) is not a valid config "
                    f"setting: {err}"
                ) from None
