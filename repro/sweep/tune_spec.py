"""Tuning specs: `sweeps/tune/<paper>_<scale>.yaml`, the equal-budget search of one run set.

AlgoPerf's rule: every compared arm of a claim gets its hyperparameters from
the same search, with the same space, the same number of trials, the same seeds and the same
sampler, so a verdict measures the method and not who was tuned harder. A spec names the
arms of one run set (`experiment.runs` of `configs/experiment/<paper>_<scale>.yaml`): each arm
trains one of its labels (`run`, by default the first) under the trial's sampled values, and
its best values go to every label it lists. `trials`, `seeds`, `sampler` and `objective` are
top-level, so they cannot differ between arms; the search spaces are named and shared
(`spaces`), and an arm may add a knob only it has (`extra`, e.g. AdaComm's tau0). Every label
of the run set is in one arm, or under `untuned` with the reason it keeps its configured values.

YAML shape::

    experiment: adacomm_small
    overrides: [tracking=disabled]       # every trial of every arm
    seeds: [1000]                        # every trial runs each seed; objective = their mean
    trials: 8                            # completed trials per arm, a power of 2
    sampler: {name: sobol, seed: 0}      # the design's points (`TuneSampler`)
    objective: {metric: train/loss, direction: minimize, diverged: 2.302585}
    spaces:
      lr: [{key: optim.lr, type: float, low: 0.005, high: 0.5, log: true}]
    arms:
      sync: {space: lr, labels: [sync]}
      adacomm: {space: lr, labels: [adacomm], extra: [{key: method.tau0, type: int, ...}]}
    untuned: {toy_mean: why it keeps its configured values}
    out: runs/tune                       # journal and trial runs: <out>/<experiment>/

`objective.metric` is a run-summary metric (`repro.sweep.metrics`), scored at the run's end,
or `steps_to_target`: the step at which test accuracy first reached `trainer.target_acc`,
and for a run that never does the step budget times 1 + (target - final accuracy) / target,
so that never reaching the target is worse than reaching it late and nearer misses rank
better. A seed that diverges scores `objective.diverged` (for `steps_to_target`: twice the
budget, the score of a run at zero accuracy).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repro.errors import UserError
from repro.spec_loader import FILE, KEY, load, read_yaml
from repro.sweep.metrics import OBJECTIVE_METRICS
from repro.sweep.space import ParamSpec, number

STEPS_TO_TARGET = "steps_to_target"


@dataclass(frozen=True)
class TuneObjective:
    """What a trial is scored by, its direction, and the score of a diverged seed."""

    metric: str
    direction: str
    diverged: float | None = None

    def __post_init__(self) -> None:
        if self.metric != STEPS_TO_TARGET and self.metric not in OBJECTIVE_METRICS:
            raise UserError(
                f"objective.metric={self.metric!r} is not logged; use {STEPS_TO_TARGET} or one "
                f"of {', '.join(OBJECTIVE_METRICS)}"
            )
        if self.metric == STEPS_TO_TARGET:
            if self.direction != "minimize":
                raise UserError(f"objective {STEPS_TO_TARGET}: direction must be minimize")
            if self.diverged is not None:
                raise UserError(
                    f"objective {STEPS_TO_TARGET} scores a diverged seed as twice the step "
                    "budget; drop objective.diverged"
                )
            return
        if self.direction not in ("minimize", "maximize"):
            raise UserError(f"objective.direction={self.direction!r} must be minimize or maximize")
        if self.diverged is None:
            raise UserError(
                f"objective {self.metric}: set objective.diverged, the score of a diverged seed "
                "(worse than any run that learned, e.g. the loss of a uniform guess)"
            )
        number(self.diverged, "objective.diverged")

    def describe(self) -> str:
        if self.metric == STEPS_TO_TARGET:
            return (
                "steps to the target test accuracy (minimize; a run that never reaches it: "
                "budget x (1 + shortfall / target))"
            )
        return f"final {self.metric} ({self.direction}; a diverged seed scores {self.diverged:g})"


@dataclass(frozen=True)
class TuneSampler:
    """Where the trials go: a scrambled Sobol design of `trials` points over the arm's space,
    fixed by `seed` and centred in its cells (`repro.sweep.space`). The points are data,
    not a response to results, so the search repeats exactly (after a kill too, and with
    trials side by side), and arms that share a space are tried at the very same values: the
    comparison of arms is paired, point by point. AlgoPerf's external-tuning rules draw their
    trials by quasi-random search too. (TPE was tried first: with 10 trials on one learning
    rate it spent 4 of its 6 guided trials at the ends of the range, two of them at nearly the
    same 0.0055.)"""

    name: str = "sobol"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.name != "sobol":
            raise UserError(f"sampler.name={self.name!r}: the tuning sampler is sobol")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise UserError(f"sampler.seed={self.seed!r} must be an integer >= 0")

    def describe(self) -> str:
        return (
            f"scrambled Sobol design (seed {self.seed}) centred in its cells: one point per equal "
            "slice of each range, the same points for arms sharing a space"
        )


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
        if not self.labels or not all(isinstance(label, str) for label in self.labels):
            raise UserError(f"arms.{self.name}.labels must list the run labels it tunes")
        if self.run and self.run not in self.labels:
            raise UserError(f"arms.{self.name}.run={self.run!r} must be one of its labels")
        for o in self.overrides:
            if not isinstance(o, str) or "=" not in o:
                raise UserError(f"arms.{self.name}.overrides: {o!r} must be a Hydra override")

    @property
    def trained(self) -> str:
        """The label whose run every trial of this arm trains."""
        return self.run or self.labels[0]


@dataclass(frozen=True)
class TuneSpec:
    experiment: str
    seeds: tuple[int, ...]
    trials: int
    objective: TuneObjective
    spaces: dict[str, tuple[ParamSpec, ...]]
    arms: dict[str, ArmSpec]
    sampler: TuneSampler = field(default_factory=TuneSampler)
    overrides: tuple[str, ...] = ()
    untuned: dict[str, str] = field(default_factory=dict)
    out: str = "runs/tune"
    # measured minutes of one trial's run here, where the arms train runs dearer than the
    # set's average (experiment.expected_minutes per run is the fallback); 0: not measured
    minutes_per_trial: float = 0.0
    source: str = field(default="", compare=False, metadata=FILE)

    def __post_init__(self) -> None:
        where = self.source or "tuning spec"
        if "_" not in self.experiment:
            raise UserError(f"{where}: experiment={self.experiment!r} must be <paper>_<scale>")
        if isinstance(self.trials, bool) or not isinstance(self.trials, int) or self.trials < 1:
            raise UserError(f"{where}: trials={self.trials!r} must be an integer >= 1 (per arm)")
        if not self.seeds or any(isinstance(s, bool) or not isinstance(s, int) for s in self.seeds):
            raise UserError(f"{where}: seeds={list(self.seeds)} must list integer seeds")
        if len(set(self.seeds)) != len(self.seeds):
            raise UserError(f"{where}: seeds={list(self.seeds)} has duplicates")
        if self.trials & (self.trials - 1):
            raise UserError(
                f"{where}: trials={self.trials} must be a power of 2 (a Sobol design is "
                "balanced at 2, 4, 8, 16, ... points)"
            )
        if not self.arms:
            raise UserError(f"{where}: arms is empty; list the compared arms")
        for name, entries in self.spaces.items():
            if not entries:
                raise UserError(
                    f"{where}: spaces.{name} is empty; list its {{key, type, ...}} entries"
                )
        m = self.minutes_per_trial
        if isinstance(m, bool) or not isinstance(m, int | float) or m < 0:
            raise UserError(f"{where}: minutes_per_trial={m!r} must be a number >= 0 (0: unknown)")
        self._check_arms(where)

    def _check_arms(self, where: str) -> None:
        seen: dict[str, str] = {}
        for arm in self.arms.values():
            if arm.space not in self.spaces:
                raise UserError(
                    f"{where}: arms.{arm.name}.space={arm.space!r} is not one of the spaces "
                    f"{sorted(self.spaces)}"
                )
            keys = [p.key for p in self.space_of(arm)]
            if len(set(keys)) != len(keys):
                raise UserError(f"{where}: arms.{arm.name}: a key appears twice in {keys}")
            for label in arm.labels:
                if label in seen or label in self.untuned:
                    other = seen.get(label, "untuned")
                    raise UserError(f"{where}: run {label} is in arms {other} and {arm.name}")
                seen[label] = arm.name

    @property
    def paper(self) -> str:
        return self.experiment.rsplit("_", 1)[0]

    @property
    def scale(self) -> str:
        return self.experiment.rsplit("_", 1)[1]

    @property
    def study_dir(self) -> Path:
        """Where the journal, the arm locks and the trials' runs live."""
        return Path(self.out) / self.experiment

    def space_of(self, arm: ArmSpec) -> tuple[ParamSpec, ...]:
        return (*self.spaces[arm.space], *arm.extra)

    def labels(self) -> dict[str, str]:
        """Every tuned label and its arm."""
        return {label: arm.name for arm in self.arms.values() for label in arm.labels}


def spec_from_dict(raw: Any, source: str = "") -> TuneSpec:
    """Build and validate a spec from parsed YAML; `source` names the file in messages."""
    return load(TuneSpec, raw, source)


def load_tune_spec(path: Path) -> TuneSpec:
    return spec_from_dict(read_yaml(path, "tuning spec"), str(path))
