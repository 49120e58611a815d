"""Sweep specs: the schema of `sweeps/*.yaml`, validated before any trial exists.

A spec names one Optuna study: the base experiment and fixed overrides every trial shares, the
search space (one config key per entry), the objectives (a metric of the run summary and a
direction), the sampler, the trial budget and the storage. Everything that can be checked
without running a trial is checked here, so a bad spec is refused with one line naming the
setting (issue 7, "Bad input"): structure and distributions in `__post_init__`, config keys
against the composed Hydra config in `check_config_keys`.

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

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from repro.errors import UserError
from repro.sweep.metrics import OBJECTIVE_METRICS
from repro.sweep.storage import expand_storage_url, mask_url

SAMPLERS = ("nsga2", "tpe", "gp", "random", "grid")
DIRECTIONS = ("maximize", "minimize")
PARAM_TYPES = ("float", "int", "categorical")
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise UserError(f"{what}={value!r} must be a finite number")
    return value


@dataclass(frozen=True)
class ParamSpec:
    """One search-space entry: an Optuna distribution bound to a config key."""

    key: str
    type: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    choices: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        where = f"space[{self.key}]"
        if not isinstance(self.key, str) or not self.key:
            raise UserError(f"space entry key={self.key!r} must be a config key such as method.cr")
        if self.type not in PARAM_TYPES:
            raise UserError(f"{where}.type={self.type!r} must be one of {', '.join(PARAM_TYPES)}")
        if self.type == "categorical":
            self._check_categorical(where)
        else:
            self._check_numeric(where)

    def _check_categorical(self, where: str) -> None:
        if self.low is not None or self.high is not None or self.log or self.step is not None:
            raise UserError(f"{where}: a categorical entry takes choices, not low/high/log/step")
        if not self.choices:
            raise UserError(f"{where}.choices is empty: list at least one value")
        for c in self.choices:
            if c is not None and not isinstance(c, bool | int | float | str):
                raise UserError(f"{where}.choices: {c!r} is not a scalar (str, number, bool)")
        if len(set(map(repr, self.choices))) != len(self.choices):
            raise UserError(f"{where}.choices={list(self.choices)} has duplicates")

    def _check_numeric(self, where: str) -> None:
        if self.choices:
            raise UserError(f"{where}: a {self.type} entry takes low/high, not choices")
        if self.low is None or self.high is None:
            raise UserError(f"{where}: a {self.type} entry needs both low and high")
        low, high = _number(self.low, f"{where}.low"), _number(self.high, f"{where}.high")
        if self.type == "int":
            for name, v in (("low", low), ("high", high), ("step", self.step)):
                if v is not None and not isinstance(v, int):
                    raise UserError(f"{where}.{name}={v!r} must be an integer for type int")
        if low >= high:
            raise UserError(f"{where}: low={low} must be below high={high}")
        if self.log and low <= 0:
            raise UserError(f"{where}: log scale needs low > 0, got low={low}")
        if self.step is not None:
            step = _number(self.step, f"{where}.step")
            if step <= 0:
                raise UserError(f"{where}.step={step} must be positive")
            if self.log:
                raise UserError(f"{where}: log and step cannot be combined (Optuna refuses it)")

    def probe_values(self) -> list[Any]:
        """Values that exercise the config schema: every choice, or both ends of the range."""
        return list(self.choices) if self.type == "categorical" else [self.low, self.high]

    def grid_values(self) -> list[Any]:
        """The points a grid sampler visits; a float without a step has none."""
        if self.type == "categorical":
            return list(self.choices)
        if self.type == "float" and self.step is None:
            raise UserError(f"sampler grid needs space[{self.key}].step (or make it categorical)")
        step = self.step if self.step is not None else 1
        n = int(math.floor((self.high - self.low) / step + 1e-9)) + 1
        return [self.low + i * step for i in range(n)]


def grid_size(space: tuple[ParamSpec, ...]) -> int:
    """Number of points a grid sampler visits: the product of each entry's grid."""
    return math.prod(len(p.grid_values()) for p in space)


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
    space: tuple[ParamSpec, ...]
    objectives: tuple[ObjectiveSpec, ...]
    sampler: SamplerSpec
    n_trials: int
    overrides: tuple[str, ...] = ()
    timeout_s: float | None = None
    storage: str | None = None
    out: str = "runs/sweeps"
    heartbeat_s: int = 30
    grace_s: int = 120
    group_by: str | None = None
    source: str = field(default="", compare=False)

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
        if self.timeout_s is not None and _number(self.timeout_s, "timeout_s") <= 0:
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


_TOP_KEYS = {f for f in SweepSpec.__dataclass_fields__ if f != "source"}


def _param(entry: Any, i: int) -> ParamSpec:
    if not isinstance(entry, dict):
        raise UserError(f"space[{i}] must be a mapping with key and type")
    unknown = set(entry) - set(ParamSpec.__dataclass_fields__)
    if unknown:
        raise UserError(f"space[{i}]: unknown field(s) {sorted(unknown)}")
    args = dict(entry)
    args["choices"] = tuple(args.get("choices") or ())
    return ParamSpec(**args)


def _sampler(raw: Any, n_objectives: int) -> SamplerSpec:
    if raw is None:
        return SamplerSpec("nsga2" if n_objectives >= 2 else "tpe")
    if isinstance(raw, str):
        return SamplerSpec(raw)
    if isinstance(raw, dict) and "name" in raw:
        unknown = set(raw) - set(SamplerSpec.__dataclass_fields__)
        if unknown:
            raise UserError(f"sampler: unknown field(s) {sorted(unknown)}")
        return SamplerSpec(**raw)
    raise UserError(f"sampler={raw!r} must be a name or a mapping with a name")


def spec_from_dict(raw: dict[str, Any], source: str = "") -> SweepSpec:
    """Build and validate a spec from parsed YAML; `source` is only used in messages."""
    if not isinstance(raw, dict):
        raise UserError(f"{source or 'sweep spec'}: top level must be a mapping")
    unknown = set(raw) - _TOP_KEYS
    if unknown:
        raise UserError(f"{source}: unknown key(s) {sorted(unknown)}; known: {sorted(_TOP_KEYS)}")
    for required in ("experiment", "objectives", "n_trials"):
        if required not in raw:
            raise UserError(f"{source}: missing required key {required!r}")
    objectives = raw["objectives"]
    if not isinstance(objectives, list) or not all(isinstance(o, dict) for o in objectives):
        raise UserError(f"{source}: objectives must be a list of {{metric, direction}}")
    space = raw.get("space") or []
    if not isinstance(space, list):
        raise UserError(f"{source}: space must be a list of entries")
    args = dict(raw)
    args.setdefault("name", Path(source).stem if source else "")
    args["objectives"] = tuple(ObjectiveSpec(**o) for o in objectives)
    args["space"] = tuple(_param(e, i) for i, e in enumerate(space))
    args["sampler"] = _sampler(raw.get("sampler"), len(objectives))
    args["overrides"] = tuple(raw.get("overrides") or ())
    return SweepSpec(**args, source=source)


def load_spec(path: str | Path) -> SweepSpec:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"sweep spec {path} does not exist")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise UserError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
    return spec_from_dict(raw, source=str(path))


def format_override(key: str, value: Any) -> str:
    """A Hydra override for one sampled value; strings outside plain identifiers are quoted."""
    if value is None:
        return f"{key}=null"
    if isinstance(value, bool):
        return f"{key}={str(value).lower()}"
    if isinstance(value, str) and not re.fullmatch(r"[A-Za-z0-9_./-]+", value):
        return f"{key}='{value}'"
    return f"{key}={value!r}" if isinstance(value, float) else f"{key}={value}"


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
