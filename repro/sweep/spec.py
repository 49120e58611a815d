"""Search specs: the schema of `sweeps/*.yaml` and `sweeps/tune/*.yaml`, checked before any
trial exists, so a bad spec is refused with one line naming the setting: keys and types as
the file is read (`repro.spec_loader`), structure in `__post_init__`, config keys against the
composed Hydra config before a launch (`repro.sweep.launch.check_config_keys`).

A sweep (`repro sweep SPEC`) is one Optuna study whose sampler picks the points::

    name: topk_cr_pareto      # default: the file's name
    experiment: topk_small    # configs/experiment/<name>.yaml, or null for the root config
    overrides: [trainer.steps=300]
    space: [{key: method.cr, type: float, low: 0.001, high: 1.0, log: true}]
    objectives: [{metric: test/acc, direction: maximize}]
    sampler: nsga2            # nsga2, tpe, gp, random, grid; or {name: nsga2, seed: 0, ...}
    n_trials: 40
    timeout_s: 3600           # a worker starts no trial after this long (its first runs)
    storage: null             # journal file <out>/<name>/journal.log, or a database URL
    out: runs/sweeps
    group_by: null            # a categorical key: `show` prints one front per value
    heartbeat_s: 30           # database storage: heartbeat period, and the silence after
    grace_s: 120              # which a running trial counts as stale

A tuning search (`repro tune PAPER`) has `arms` instead of a `space`: AlgoPerf's rule, every
compared arm of a claim is tuned by one search with the same space, trials, seeds and
sampler, so a verdict measures the method and not who was tuned harder. Each arm is its own
study training one label of the run set `experiment.runs` (`run`, by default the first) on a
fixed Sobol design of `n_trials` points (a power of 2) over its named space (`spaces`) plus
the knobs only it has (`extra`, e.g. AdaComm's tau0). A trial runs each of `seeds` and scores
their mean; a diverged seed scores `diverged`. `export` writes each arm's best values for its
labels to `configs/tuned/<experiment>.yaml`; every other label of the run set is `untuned`,
with the reason it keeps its configured values::

    experiment: adacomm_small            # also the name: its trials live in runs/tune/<name>/
    seeds: [1000]
    n_trials: 8
    sampler: {name: sobol, seed: 0}
    objectives: [{metric: train/loss, direction: minimize, diverged: 2.302585}]
    spaces: {lr: [{key: optim.lr, type: float, low: 0.005, high: 0.5, log: true}]}
    arms:
      sync: {space: lr, labels: [sync]}
      adacomm: {space: lr, labels: [adacomm], extra: [{key: method.tau0, type: int, ...}]}
    export: {untuned: {toy_mean: why it keeps its configured values}}

An arm's objective may be `steps_to_target`: the step at which test accuracy first reached
`trainer.target_acc`, and for a run that never does the step budget times 1 + (target - final
accuracy) / target (a diverged seed: twice the budget).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repro.errors import UserError, override_key, require_path
from repro.spec_loader import FILE, KEY, load, read_yaml
from repro.sweep.space import ParamSpec, grid_size, number
from repro.sweep.storage import expand_storage_url, mask_url

SOURCE_TREE = Path(__file__).resolve().parents[2]

SAMPLERS = ("nsga2", "tpe", "gp", "random", "grid", "sobol")
DIRECTIONS = ("maximize", "minimize")
STEPS_TO_TARGET = "steps_to_target"
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")

# The run metrics an objective may name: numeric metrics on every logged point of a run
# (`repro.train.metrics`), hence in the summary a trial reads. A method's (`method/...`) exist
# for some methods only (`method/collective` is a string): every trial would fail on one.
OBJECTIVE_METRICS = (
    *("step", "epoch", "samples", "train/loss", "test/loss", "test/acc", "comm/bytes", "lr"),
    *("comm/collectives", "comm/measured_s", "time/wall_s", "time/modeled_s"),
    *("throughput/samples_per_s", "throughput/modeled_samples_per_s"),
    "throughput/run_modeled_samples_per_s",
)


def _overrides(overrides: tuple[str, ...], where: str) -> None:
    for o in overrides:
        if "=" not in o:
            raise UserError(f"{where}: {o!r} must be a Hydra override such as key=value")
        if override_key(o) == "experiment":  # it would override the spec's key
            raise UserError(
                f"{where}: {o!r} chooses the run set; set the spec's experiment key instead"
            )


@dataclass(frozen=True)
class ObjectiveSpec:
    """A run-summary metric (or an arm's `steps_to_target`), its direction, and the score of
    a diverged seed in a search with arms."""

    metric: str
    direction: str
    diverged: float | None = None

    def __post_init__(self) -> None:
        if self.metric != STEPS_TO_TARGET and self.metric not in OBJECTIVE_METRICS:
            raise UserError(
                f"objective metric {self.metric!r} is not logged by the trainer; use one of "
                f"{', '.join(OBJECTIVE_METRICS)} (or {STEPS_TO_TARGET} for a search with arms)"
            )
        if self.direction not in DIRECTIONS:
            raise UserError(
                f"objective {self.metric}: direction={self.direction!r} "
                "must be maximize or minimize"
            )
        if self.metric == STEPS_TO_TARGET:
            if self.direction != "minimize":
                raise UserError(f"objective {STEPS_TO_TARGET}: direction must be minimize")
            if self.diverged is not None:
                raise UserError(
                    f"objective {STEPS_TO_TARGET} scores a diverged seed as twice the step "
                    "budget; drop diverged"
                )
        elif self.diverged is not None:
            number(self.diverged, "diverged")


@dataclass(frozen=True)
class SamplerSpec:
    """Where the trials go. NSGA-II is a sweep's default for two or more objectives (Optuna's
    own, TPE, is the single-objective workhorse); `population_size` is NSGA-II's generation
    size. `sobol`, a search with arms': a Sobol design fixed by `seed` (`repro.sweep.space`),
    data rather than a response to results, so the search repeats exactly (after a kill too)
    and arms sharing a space are tried at the same values, compared point by point, as in
    AlgoPerf's quasi-random search. (TPE, tried first, spent 4 of its 6 guided trials on one
    learning rate at the ends of the range.)"""

    name: str
    seed: int = 0
    population_size: int | None = None

    def __post_init__(self) -> None:
        if self.name not in SAMPLERS:
            raise UserError(f"sampler={self.name!r} is unknown; use one of {', '.join(SAMPLERS)}")
        if not 0 <= self.seed < 2**31:  # numpy seeds below 2**32, with room for worker offsets
            raise UserError(f"sampler.seed={self.seed!r} must be an integer from 0 to 2**31 - 1")
        if self.population_size is not None:
            if self.name != "nsga2":
                raise UserError(f"sampler.population_size applies to nsga2 only, not {self.name}")
            if self.population_size < 2:
                raise UserError(f"sampler.population_size={self.population_size!r} must be >= 2")


@dataclass(frozen=True)
class ArmSpec:
    """One compared arm: the run it trains (`run`), the labels its values go to, its space."""

    name: str = field(metadata=KEY)
    space: str
    labels: tuple[str, ...]
    run: str = ""
    overrides: tuple[str, ...] = ()
    extra: tuple[ParamSpec, ...] = ()

    def __post_init__(self) -> None:
        if not self.labels:
            raise UserError(f"arms.{self.name}.labels must list the run labels it tunes")
        if self.run and self.run not in self.labels:
            raise UserError(f"arms.{self.name}.run={self.run!r} must be one of its labels")
        _overrides(self.overrides, f"arms.{self.name}.overrides")

    @property
    def trained(self) -> str:
        """The label whose run every trial of this arm trains."""
        return self.run or self.labels[0]


@dataclass(frozen=True)
class ExportSpec:
    """The tuned file's labels that keep their configured values, each with the reason."""

    untuned: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SweepSpec:
    """A whole search. `storage=None` means the journal file `<out>/<name>/journal.log`."""

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
    seeds: tuple[int, ...] = ()
    spaces: dict[str, tuple[ParamSpec, ...]] = field(default_factory=dict)
    arms: dict[str, ArmSpec] = field(default_factory=dict)
    export: ExportSpec | None = None
    # measured minutes of one trial's run here, where the arms train runs dearer than the
    # set's average (experiment.expected_minutes per run is the fallback); 0: not measured
    minutes_per_trial: float = 0.0
    source: str = field(default="", compare=False, metadata=FILE)

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise UserError(f"name={self.name!r} must be letters, digits, '_', '-' or '.'")
        if self.experiment is not None and not _NAME.fullmatch(self.experiment):
            raise UserError(
                f"experiment={self.experiment!r} must name a configs/experiment/ file "
                "(e.g. topk_small) or be null"
            )
        if not self.objectives:
            raise UserError(f"sweep {self.name}: list at least one objective")
        metrics = [o.metric for o in self.objectives]
        if len(set(metrics)) != len(metrics):
            raise UserError(f"sweep {self.name}: an objective metric appears twice in {metrics}")
        if self.n_trials < 1:
            raise UserError(f"n_trials={self.n_trials} must be at least 1")
        if self.timeout_s is not None and number(self.timeout_s, "timeout_s") <= 0:
            raise UserError(f"timeout_s={self.timeout_s} must be positive (or null for none)")
        for name in ("heartbeat_s", "grace_s"):
            v = getattr(self, name)
            if v < 1:
                raise UserError(f"{name}={v!r} must be a positive integer (seconds)")
        if self.grace_s <= self.heartbeat_s:
            raise UserError(f"grace_s={self.grace_s} must exceed heartbeat_s={self.heartbeat_s}")
        m = self.minutes_per_trial
        if number(m, "minutes_per_trial") < 0:
            raise UserError(f"minutes_per_trial={m!r} must be a number >= 0 (0: unknown)")
        _overrides(self.overrides, "overrides")
        require_path("out", self.out)
        if self.storage is not None:
            expand_storage_url(self.storage)
        if self.arms:
            self._check_arms()
        else:
            self._check_sweep()

    def _check_sweep(self) -> None:
        """A single study: its sampler picks points of `space`."""
        alone = [k for k in ("seeds", "spaces", "export") if getattr(self, k)]
        if alone or self.sampler.name == "sobol":
            what = ", ".join(alone) or "sampler sobol"
            raise UserError(f"{what} belong(s) to a search with arms; add arms or drop it")
        if not self.space:
            raise UserError(f"sweep {self.name}: the search space is empty; add a space entry")
        keys = [p.key for p in self.space]
        if len(set(keys)) != len(keys):
            raise UserError(f"sweep {self.name}: a space key appears twice in {keys}")
        for i, o in enumerate(self.objectives):
            if o.metric == STEPS_TO_TARGET or o.diverged is not None:
                raise UserError(
                    f"objectives[{i}]: {STEPS_TO_TARGET} and diverged belong to a search with "
                    "arms (a sweep fails a diverged trial); drop it"
                )
        if self.group_by is not None and self.group_by not in {
            p.key for p in self.space if p.type == "categorical"
        }:
            raise UserError(f"group_by={self.group_by!r} must be a categorical space key")
        if self.sampler.name == "grid":
            size = grid_size(self.space)
            if self.n_trials > size:
                raise UserError(f"n_trials={self.n_trials} exceeds the grid's {size} points")

    def _check_arms(self) -> None:
        """One study per arm on the same fixed design, seeds and objective."""
        if self.sampler.name != "sobol":
            raise UserError(
                f"sampler={self.sampler.name!r}: a search with arms tries a fixed design; "
                "use sampler sobol"
            )
        for key in ("space", "storage", "timeout_s", "group_by"):
            if getattr(self, key):
                raise UserError(f"{key} is a sweep's; a search with arms has spaces and a journal")
        if self.experiment is None or (self.export is not None and "_" not in self.experiment):
            raise UserError(f"experiment={self.experiment!r} must be <paper>_<scale>")
        if self.n_trials & (self.n_trials - 1):
            raise UserError(
                f"n_trials={self.n_trials} must be a power of 2 (a Sobol design is balanced "
                "at 2, 4, 8, 16, ... points)"
            )
        if not self.seeds:
            raise UserError("seeds=[] must list at least one seed")
        if len(set(self.seeds)) != len(self.seeds):
            raise UserError(f"seeds={list(self.seeds)} has duplicates")
        if len(self.objectives) != 1:
            raise UserError("objectives: a search with arms has one objective; list one")
        if self.objective.metric != STEPS_TO_TARGET and self.objective.diverged is None:
            raise UserError(
                f"objectives[0] {self.objective.metric}: set objectives[0].diverged, the score of "
                "a diverged seed (worse than any run that learned, e.g. the loss of a uniform "
                "guess)"
            )
        for name, entries in self.spaces.items():
            if not entries:
                raise UserError(f"spaces.{name} is empty; list its {{key, type, ...}} entries")
        seen: dict[str, str] = {}
        for arm in self.arms.values():
            if arm.space not in self.spaces:
                raise UserError(
                    f"arms.{arm.name}.space={arm.space!r} is not one of the spaces "
                    f"{sorted(self.spaces)}"
                )
            keys = [p.key for p in self.space_of(arm)]
            if len(set(keys)) != len(keys):
                raise UserError(f"arms.{arm.name}: a key appears twice in {keys}")
            for label in arm.labels:
                if label in seen or label in self.untuned:
                    other = seen.get(label, "untuned")
                    raise UserError(f"run {label} is in arms {other} and {arm.name}")
                seen[label] = arm.name

    @property
    def objective(self) -> ObjectiveSpec:
        """A search with arms' one objective."""
        return self.objectives[0]

    @property
    def directions(self) -> list[str]:
        return [o.direction for o in self.objectives]

    @property
    def metric_names(self) -> list[str]:
        return [o.metric for o in self.objectives]

    @property
    def untuned(self) -> dict[str, str]:
        return {} if self.export is None else self.export.untuned

    @property
    def paper(self) -> str:
        return str(self.experiment).rsplit("_", 1)[0]

    @property
    def scale(self) -> str:
        return str(self.experiment).rsplit("_", 1)[1]

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

    def space_of(self, arm: ArmSpec) -> tuple[ParamSpec, ...]:
        return (*self.spaces[arm.space], *arm.extra)

    def labels(self) -> dict[str, str]:
        """Every tuned label and its arm."""
        return {label: arm.name for arm in self.arms.values() for label in arm.labels}


def spec_from_dict(raw: Any, source: str = "") -> SweepSpec:
    """Build and validate a spec from parsed YAML; `source` names the file in messages. A
    search with arms is named by its experiment (its journal and tuned file are the run set's)
    and lives under runs/tune unless `out` says; `sampler` may be a bare name, or null for the
    default that `SamplerSpec` describes (chosen here: it depends on the arms and objectives)."""
    if isinstance(raw, dict):
        arms = bool(raw.get("arms"))
        name = raw.get("experiment") if arms else (Path(source).stem if source else "")
        raw = {"name": name, **({"out": "runs/tune"} if arms else {}), **raw}
        sampler = raw.get("sampler")
        if sampler is None or isinstance(sampler, str):
            objectives = raw.get("objectives")
            many = isinstance(objectives, list) and len(objectives) >= 2
            default = "sobol" if arms else ("nsga2" if many else "tpe")
            raw["sampler"] = {"name": sampler or default}
    return load(SweepSpec, raw, source)


def load_spec(path: str | Path) -> SweepSpec:
    path = Path(path)
    return spec_from_dict(read_yaml(path, "search spec"), source=str(path))


def spec_path(name: str) -> Path:
    """A spec path as a config writes it (`experiment.search`): as given when it exists,
    else from the source tree (a reproduction started in another directory still finds the
    shipped sweeps/)."""
    path = Path(name)
    return path if path.is_absolute() or path.exists() else SOURCE_TREE / path


def base_overrides(spec: SweepSpec) -> list[str]:
    experiment = [] if spec.experiment is None else [f"experiment={spec.experiment}"]
    return [*experiment, *spec.overrides]


def identity_name(spec: SweepSpec) -> str:
    """The spec's name and the identity hash of its trials' base config, as a run's directory
    is named by its config: a study of other settings gets another name, one of the same
    settings elsewhere (another runs_root) the same."""
    from repro.config import compose, config_hash  # hydra loads only when a name is asked

    return f"{spec.name}-{config_hash(compose(base_overrides(spec)))}"
