"""Root config dataclasses, their Hydra ConfigStore registration, and composition.

Every group (`workload/`, `method/`, `network/`, `tracking/`, `cluster/`) is backed by a
typed dataclass registered beside the code it configures, except where that code reads the
whole composed config (the trainer, the cluster launcher, the tracker's run names): those
schemas are in `repro.schemas`, so that no package both feeds this root and imports it.
`configs/` holds the YAML presets that extend the schemas. Composition is strict: an
unknown key or a value of the wrong type fails in OmegaConf, and value ranges fail in each
dataclass's `__post_init__` when the composed tree is turned into objects (`to_config`),
before anything runs or is written.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException
from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from repro import config_keys, hydra_overrides
from repro.errors import UserError, override_key, require_folder_name, require_path, require_seed
from repro.netmodel.compute import ComputeConfig
from repro.netmodel.schedule import NetworkConfig
from repro.optim.config import OptimConfig, check_schedule
from repro.schemas.cluster import ClusterConfig, device_request, env_rank_world
from repro.schemas.tracking import TrackingConfig
from repro.schemas.trainer import TrainerConfig
from repro.strategies.base import MethodConfig, registered
from repro.workload.config import STACKED_MODELS, DataConfig, WorkloadConfig

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
GROUPS = ("workload", "method", "network", "tracking", "cluster", "experiment")
SCALES = ("tiny", "small", "paper")
# Keys that do not change what a run computes: left out of the run's identity hash, so that
# a resumed run may change them (e.g. turn the progress bar off) without being refused.
# `trainer.deterministic` changes nothing on the CPU and only the rounding on a GPU. Where
# the data is kept is not what it is (MNIST-1D is generated from its seed, CIFAR is
# torchvision's): the same run, sweep or set's search on another mount is the same one.
NON_IDENTITY_KEYS = (
    "run_dir",
    "runs_root",
    "data.root",
    "data.download",
    "tracking",
    "cluster",
    "trainer.progress",
    "trainer.deterministic",
    "trainer.collective_timeout_s",
    "trainer.keep_checkpoints",
    "trainer.divergence",
    "method.test_variants",
    "method.model_copies",
    "experiment.runs",
    "experiment.seeds",
    "experiment.expected_minutes",
    "experiment.tuned",
    "experiment.search",
    "experiment.search_minutes",
    "environment",  # not a setting: what made the run (`repro.track.provenance`)
)


@dataclass
class ExperimentConfig:
    """Which reproduction a run belongs to. `label` names the run inside its run set.

    `runs` is the reproduction's run set: label -> the overrides that make that run (e.g.
    "local_sgd_tau20": ["method=local_sgd", "method.tau=20"]); `repro reproduce` runs them,
    each for `seeds` seeds (seed, seed + 1, ...; `repro reproduce ... seeds=N` overrides it).
    `expected_minutes` is what one seed of the whole set took, its runs one after another,
    measured on a 2-core machine (0: not measured); `repro reproduce` prints the expected
    time of a set from it before starting. `tuned` says the set's runs take the values
    `repro tune PAPER` chose (configs/tuned/<paper>_<scale>.yaml, `repro.sweep.tuned`).
    `search` names a sweep spec (sweeps/*.yaml) that `repro reproduce` runs once beside the
    set, into the set's runs directory (the Top-k set's Pareto search over the compression
    ratio); `search_minutes` is what it took on a 2-core machine, its trials one after another.
    None of these changes what a run computes (tuned values arrive as the run's overrides).
    """

    name: str = "default"
    paper: str = "none"
    scale: str = "small"
    label: str = ""
    group: str = ""
    runs: dict[str, list[str]] = field(default_factory=dict)
    seeds: int = 1
    expected_minutes: float = 0.0
    tuned: bool = False
    search: str = ""
    search_minutes: float = 0.0

    def __post_init__(self):
        if self.scale not in SCALES:
            raise UserError(f"experiment.scale={self.scale!r} must be tiny, small or paper")
        if isinstance(self.seeds, bool) or not isinstance(self.seeds, int) or self.seeds < 1:
            raise UserError(
                f"experiment.seeds={self.seeds!r} must be an integer >= 1 "
                "(how many seeds each run of the set runs)"
            )
        for key in ("expected_minutes", "search_minutes"):
            if not getattr(self, key) >= 0:
                raise UserError(
                    f"experiment.{key}={getattr(self, key)} must be >= 0 (0: not measured)"
                )
        require_folder_name("experiment.name", self.name)
        require_folder_name("experiment.label", self.label)


@dataclass
class Config:
    workload: WorkloadConfig = MISSING
    method: MethodConfig = MISSING
    network: NetworkConfig = MISSING
    tracking: TrackingConfig = MISSING
    cluster: ClusterConfig = MISSING
    compute: ComputeConfig = field(default_factory=ComputeConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    data: DataConfig = field(default_factory=DataConfig)
    experiment: ExperimentConfig = field(default_factory=ExperimentConfig)
    seed: int = 0
    run_dir: str = ""
    runs_root: str = "runs"

    def __post_init__(self):
        require_seed("seed", self.seed)
        require_path("run_dir", self.run_dir, empty="the default")
        require_path("runs_root", self.runs_root)
        n_train = self.workload.train_size()
        if (n_train // self.trainer.world_size) // self.trainer.batch_size < 1:
            raise UserError(
                f"trainer.world_size={self.trainer.world_size} x trainer.batch_size="
                f"{self.trainer.batch_size} needs more than the {n_train} training samples of "
                f"workload={self.workload.name}; lower one of them"
            )
        per_step = self.trainer.world_size * self.trainer.batch_size
        check_schedule(
            self.optim,
            n_train / per_step,
            f"trainer.world_size x trainer.batch_size = {per_step} of {n_train} samples",
        )
        device_request(self.trainer.device, self.cluster.gpus_per_node, self.cluster.backend)
        self.method.check_name()
        self.method.check_declared()
        self.method.validate_network(self.network.bytes_scale)
        self.method.validate_optim(self.optim)
        self.method.validate_world_size(self.trainer.world_size)
        if self.trainer.engine == "auto":
            self.trainer.engine = "simulated" if simulated_by_default(self) else "processes"
        if self.trainer.engine == "simulated":
            check_simulated(self)

    @property
    def label(self) -> str:
        return self.experiment.label or self.method.name


ConfigStore.instance().store(name="base_config", node=Config)


def papers() -> list[str]:
    """The papers with a run set (configs/experiment/<paper>_<scale>.yaml)."""
    return sorted({p.stem.rsplit("_", 1)[0] for p in (CONFIG_DIR / "experiment").glob("*_*.yaml")})


def set_scales(paper: str) -> list[str]:
    """The scales `paper` has a run set at, tiny to paper."""
    return [s for s in SCALES if (CONFIG_DIR / "experiment" / f"{paper}_{s}.yaml").is_file()]


def simulated_by_default(cfg: Config) -> bool:
    """`trainer.engine=auto`: the tiny and small scales run simulated wherever it can (a
    local launch, not one process of an external launcher's; sampled compute; no injected
    delays)."""
    return (
        cfg.experiment.scale != "paper"
        and cfg.cluster.kind == "local"
        and env_rank_world() is None
        and cfg.compute.mode == "sampled"
        and not cfg.network.inject
    )


def check_simulated(cfg: Config) -> None:
    """Refuse a config the simulated engine cannot run, naming the reason and the fix: it
    holds every worker in one local process, so it cannot be spread over a cluster, time a
    worker's step on its own (measured compute) or sleep a worker to the modeled network
    (`network.inject`). The memory it needs is checked once a model exists
    (`repro.train.engine_checks`)."""
    if cfg.cluster.kind != "local":
        raise UserError(
            f"trainer.engine=simulated runs every worker in one local process and cannot be "
            f"launched on cluster={cfg.cluster.kind}; use trainer.engine=processes"
        )
    external = env_rank_world()
    if external is not None:
        raise UserError(
            f"trainer.engine=simulated runs every worker in one process, and RANK={external[0]} "
            f"WORLD_SIZE={external[1]} say a launcher (torchrun, srun) started this one among "
            "others, each of which would run the whole run; use trainer.engine=processes, or "
            "unset RANK and WORLD_SIZE"
        )
    if cfg.compute.mode == "measured":
        raise UserError(
            "compute.mode=measured times each worker's own step, which the simulated engine "
            "never runs alone; use compute.mode=sampled or use trainer.engine=processes"
        )
    if cfg.trainer.vectorize == "stacked" and cfg.workload.model not in STACKED_MODELS:
        raise UserError(
            f"trainer.vectorize=stacked needs a model with its own all-workers forward "
            f"({', '.join(STACKED_MODELS)}) and workload.model={cfg.workload.model} has none; "
            "use trainer.vectorize=vmap"
        )
    if cfg.network.inject:
        raise UserError(
            "network.inject sleeps each worker process to the modeled network, and the "
            "simulated engine has one process for all workers; drop network.inject or use "
            "trainer.engine=processes"
        )


def to_config(cfg: DictConfig, overrides: Sequence[str] = ()) -> Config:
    """Turn a composed DictConfig into validated dataclasses (runs every __post_init__).

    A key added with `+key=` that no dataclass has would be dropped here without a word, so
    it is refused, like a misspelt key without the `+`."""
    try:
        built = OmegaConf.to_object(cfg)
    except OmegaConfBaseException as e:
        cause = e.__cause__ if isinstance(e.__cause__, UserError) else None
        if cause is not None:
            raise cause from None
        raise UserError(hydra_overrides.explain(e, list(overrides), CONFIG_DIR)) from None
    schema = as_dict(built)
    for key, value in _floats(schema):
        if not math.isfinite(value):  # nan passes every range check (its comparisons fail)
            raise UserError(f"{key}={value} must be a finite number")
    extra = config_keys.extra_keys(cfg, schema)
    if extra:
        known = config_keys.known_keys(schema, config_keys.unread_keys(cfg))
        raise UserError(
            hydra_overrides.unknown_key(extra[0], known, list(overrides), CONFIG_DIR)
            + " (an added key no config has would be ignored)"
        )
    return built


def _floats(node: object, key: str = "") -> Iterator[tuple[str, float]]:
    """(dotted key, value) of every float in a config's nested dicts and lists."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _floats(v, f"{key}.{k}" if key else k)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _floats(v, f"{key}[{i}]")
    elif isinstance(node, float):
        yield key, node


def parse_overrides(overrides: list[str]) -> list[Override]:
    """Hydra's parse of each override; a syntax error (a key with no `=value`) is a one-line
    UserError. Registers the method schemas first: naming what a key expects composes."""
    registered()
    return hydra_overrides.parse(overrides, CONFIG_DIR)


def compose_dict(overrides: list[str]) -> DictConfig:
    """Compose configs/config.yaml with Hydra overrides; errors become one-line UserErrors."""
    _check_set_label(overrides)
    return _compose_dict(overrides)


def _check_set_label(overrides: list[str]) -> None:
    """Refuse a label of the chosen run set without the overrides the set makes it with:
    `experiment=X experiment.label=L` alone ran the set's default method under L's name and
    directory. `repro reproduce` makes the set's runs (its tuned values too); a label of
    one's own runs beside them."""
    chosen = [o for o in overrides if override_key(o) == "experiment"]
    named = [o for o in overrides if override_key(o) == "experiment.label"]
    if not chosen or not named:
        return
    label = named[-1].partition("=")[2].strip("'\"")
    runs, paper, scale, tuned = _set_runs(chosen[-1])
    missing = [o for o in runs.get(label, ()) if o not in overrides]
    if missing:
        values = f" and configs/tuned/{paper}_{scale}.yaml's values" if tuned else ""
        raise UserError(
            f"experiment.label={label} is a run of the {paper}_{scale} set, made with "
            f"{' '.join(missing)}{values}: `repro reproduce {paper} scale={scale}` makes it; "
            "add them to train it here, or name a label of your own"
        )


def _set_runs(chosen: str) -> tuple[dict[str, tuple[str, ...]], str, str, bool]:
    """Each label's overrides in the run set `chosen` (an `experiment=X` override), with the
    set's paper, scale and whether it is tuned; its composition is kept
    (`config_keys.compose_at`) while its files are unchanged, so an edited set is read."""
    experiment = OmegaConf.select(_compose_dict([chosen]), "experiment", default=None) or {}
    runs = {k: tuple(str(o) for o in v or ()) for k, v in (experiment.get("runs") or {}).items()}
    paper, scale = str(experiment.get("paper", "")), str(experiment.get("scale", ""))
    return runs, paper, scale, bool(experiment.get("tuned", False))


def _compose_dict(overrides: list[str]) -> DictConfig:
    parsed = parse_overrides(overrides)
    config_keys.check_group_choices(parsed, GROUPS, CONFIG_DIR)
    try:
        cfg = config_keys.compose_at(CONFIG_DIR, list(overrides))
        config_keys.check_bool_values(parsed, cfg)
        return cfg
    except UserError:
        raise
    except (HydraException, OmegaConfBaseException, ValueError) as e:
        cause = e.__cause__
        while cause is not None and not isinstance(cause, UserError):
            cause = cause.__cause__
        if isinstance(cause, UserError):
            raise cause from None
        raise UserError(hydra_overrides.explain(e, list(overrides), CONFIG_DIR)) from None


def compose(overrides: list[str]) -> Config:
    return to_config(compose_dict(overrides), overrides)


def as_dict(cfg: Config) -> dict:
    """The config as plain nested dicts and lists. `to_config` has resolved every
    interpolation, so `dataclasses.asdict` gives exactly OmegaConf's container, about 100x
    faster (50 ms a call otherwise, and a run's start-up hashes its config several times)."""
    return dataclasses.asdict(cfg)


def identity(cfg: Config) -> dict:
    """The config minus keys that do not affect what is computed (see NON_IDENTITY_KEYS)."""
    d = as_dict(cfg)
    for key in NON_IDENTITY_KEYS:
        parent, _, leaf = key.rpartition(".")
        node = d
        for part in parent.split(".") if parent else []:
            node = node[part]
        node.pop(leaf, None)
    return d


def flat(d: dict, prefix: str = "") -> dict:
    """Nested settings as one mapping of dotted keys (`{"optim.lr": 0.1, ...}`)."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def config_hash(cfg: Config) -> str:
    return hash_of(identity(cfg))


def hash_of(identity_dict: dict) -> str:
    """The run identity's hash, from `identity(cfg)` or a run directory's config.yaml."""
    blob = json.dumps(identity_dict, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:10]


def run_dir_of(cfg: Config) -> Path:
    """`run_dir` if set, else runs/<experiment>/<label>-<config hash>: the same command
    resumes the same run, and a changed config gets a new directory."""
    if cfg.run_dir:
        return Path(cfg.run_dir)
    return Path(cfg.runs_root) / cfg.experiment.name / f"{cfg.label}-{config_hash(cfg)}"
