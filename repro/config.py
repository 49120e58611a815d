"""Root config dataclasses, their Hydra ConfigStore registration, and composition.

Every group (`workload/`, `method/`, `network/`, `tracking/`, `cluster/`) is backed by a typed
dataclass registered beside the code it configures; `configs/` holds the YAML presets that
extend those schemas. Composition is strict: an unknown key or a value of the wrong type
fails in OmegaConf, and value ranges fail in each dataclass's `__post_init__` when the
composed tree is turned into objects (`to_config`), before anything runs or is written.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException
from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from repro import hydra_overrides
from repro.cluster.config import ClusterConfig
from repro.errors import UserError, require_choice
from repro.netmodel.compute import ComputeConfig
from repro.netmodel.schedule import NetworkConfig
from repro.optim.config import OptimConfig
from repro.strategies.base import MethodConfig, registered
from repro.track.wandb_run import TrackingConfig
from repro.train.divergence import DivergenceConfig
from repro.train.engine_checks import ENGINES, VECTORIZE, check_simulated, simulated_by_default
from repro.workload.config import DataConfig, WorkloadConfig

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
GROUPS = ("workload", "method", "network", "tracking", "cluster", "experiment")
# Keys that do not change what a run computes: left out of the run's identity hash, so that
# a resumed run may change them (e.g. turn the progress bar off) without being refused.
NON_IDENTITY_KEYS = (
    "run_dir",
    "runs_root",
    "tracking",
    "cluster",
    "trainer.progress",
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
        if self.scale not in ("tiny", "small", "paper"):
            raise UserError(f"experiment.scale={self.scale!r} must be tiny, small or paper")
        if isinstance(self.seeds, bool) or not isinstance(self.seeds, int) or self.seeds < 1:
            raise UserError(
                f"experiment.seeds={self.seeds!r} must be an integer >= 1 "
                "(how many seeds each run of the set runs)"
            )
        if not self.expected_minutes >= 0:
            raise UserError(
                f"experiment.expected_minutes={self.expected_minutes} must be >= 0 "
                "(0: not measured)"
            )
        if not self.search_minutes >= 0:
            raise UserError(
                f"experiment.search_minutes={self.search_minutes} must be >= 0 (0: not measured)"
            )


@dataclass
class TrainerConfig:
    """`engine`: `processes` runs one OS process per worker (gloo or NCCL; torchrun, SLURM),
    `simulated` every worker in this process on a worker axis (`repro.train.replicas`);
    `auto` picks simulated at the tiny and small scales wherever it can run (a local launch,
    sampled compute, no injected delays), else processes. `vectorize`
    is how the simulated engine runs the workers' forward/backward: `stacked` (the model's
    own all-workers forward, fastest; the small workloads' CNN has one), `vmap` (any
    model), `auto` (stacked where the model has it, else vmap) or `loop` (a lone worker's
    exact kernels, bit for bit the process engine).
    `steps` bounds the run; `time_budget_s > 0` also stops it once the modeled clock
    passes the budget (runs compared at equal modeled time, as in AdaComm's figures);
    `target_acc > 0` stops it at the first evaluation whose test accuracy reaches the target
    (steps-to-target, as in Adasum's batch-scaling experiments)."""

    world_size: int = 1
    batch_size: int = 32
    engine: str = "auto"
    vectorize: str = "auto"
    steps: int = 1000
    eval_every: int = 100
    checkpoint_every: int = 200
    time_budget_s: float = 0.0
    target_acc: float = 0.0
    device: str = "auto"
    progress: bool = True
    collective_timeout_s: float = 60.0
    keep_checkpoints: int = 2
    divergence: DivergenceConfig = field(default_factory=DivergenceConfig)

    def __post_init__(self):
        if self.world_size < 1:
            raise UserError(f"trainer.world_size={self.world_size} must be at least 1")
        if self.batch_size < 1:
            raise UserError(f"trainer.batch_size={self.batch_size} must be at least 1")
        if self.steps < 1:
            raise UserError(f"trainer.steps={self.steps} must be at least 1")
        if self.time_budget_s < 0:
            raise UserError(f"trainer.time_budget_s={self.time_budget_s} must be >= 0 (0 = none)")
        if not 0 <= self.target_acc <= 1:
            raise UserError(f"trainer.target_acc={self.target_acc} must be in (0, 1] (0 = none)")
        if self.eval_every < 1 or self.checkpoint_every < 1:
            raise UserError("trainer.eval_every and trainer.checkpoint_every must be at least 1")
        if self.keep_checkpoints < 1:
            raise UserError(
                f"trainer.keep_checkpoints={self.keep_checkpoints} must be at least 1 (2 lets a "
                "run fall back to the one before a damaged checkpoint)"
            )
        if not self.collective_timeout_s > 0:
            raise UserError(f"trainer.collective_timeout_s={self.collective_timeout_s} must be > 0")
        require_choice(
            "trainer.engine",
            self.engine,
            ENGINES,
            "(auto: simulated where it can run at the tiny and small scales, else processes)",
        )
        require_choice("trainer.vectorize", self.vectorize, VECTORIZE)


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
        n_train = self.workload.train_size()
        if (n_train // self.trainer.world_size) // self.trainer.batch_size < 1:
            raise UserError(
                f"trainer.world_size={self.trainer.world_size} x trainer.batch_size="
                f"{self.trainer.batch_size} needs more than the {n_train} training samples of "
                f"workload={self.workload.name}; lower one of them"
            )
        self.method.check_declared()
        self.method.validate_world_size(self.trainer.world_size)
        if self.trainer.engine == "auto":
            self.trainer.engine = "simulated" if simulated_by_default(self) else "processes"
        if self.trainer.engine == "simulated":
            check_simulated(self)

    @property
    def label(self) -> str:
        return self.experiment.label or self.method.name


ConfigStore.instance().store(name="base_config", node=Config)


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
    extra = hydra_overrides.extra_keys(cfg, schema)
    if extra:
        known = hydra_overrides.known_keys(schema)
        raise UserError(
            hydra_overrides.unknown_key(extra[0], known, list(overrides), CONFIG_DIR)
            + " (an added key no config has would be ignored)"
        )
    return built


def _check_group_choices(overrides: list[str]) -> None:
    for ov in overrides:
        key, _, value = ov.lstrip("+~").partition("=")
        if key in GROUPS and value and value != "null":
            for choice in value.split(","):
                if not (CONFIG_DIR / key / f"{choice}.yaml").exists():
                    known = sorted(p.stem for p in (CONFIG_DIR / key).glob("*.yaml"))
                    raise UserError(f"{key}={choice} is not a known {key}; choose one of {known}")


def parse_overrides(overrides: list[str]) -> list[Override]:
    """Hydra's parse of each override; a syntax error (a key with no `=value`) is a one-line
    UserError. Registers the method schemas first: naming what a key expects composes."""
    registered()
    return hydra_overrides.parse(overrides, CONFIG_DIR)


def compose_dict(overrides: list[str]) -> DictConfig:
    """Compose configs/config.yaml with Hydra overrides; errors become one-line UserErrors."""
    parse_overrides(overrides)
    _check_group_choices(overrides)
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
            return hydra_compose(config_name="config", overrides=list(overrides))
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
