"""The Strategy base: how a communication method plugs into the trainer.

The trainer knows no method by name. Each step it calls `after_backward` (gradient
communication, before the optimizer step) and `after_step` (model or delta communication,
after it), collects the returned `CommRecord`s for the modeled clock and the metrics, and
reads `metrics()` at log points. A strategy never reads the clock or the tracker: what it
needs to know about time, loss, learning rate and the network arrives in `StepInfo`.

Adding a method means one strategy module whose strategy class subclasses `Strategy` and
is decorated with `register(ItsConfig)`, one `configs/method/<name>.yaml` declaring the
variants it is tested in and the model copies it holds (`MethodConfig`), and tests of its
own: methods are discovered, and every shared guarantee runs the new one by itself.

Discovery imports every module of `repro.strategies` to compose a config, so those modules
import torch, `repro.comm` and `repro.compress` only in the methods that run (or under
TYPE_CHECKING for annotations): an unknown method or a bad value is reported without
loading torch (`tests/integration/test_startup.py` holds every strategy module to it).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Protocol

from hydra.core.config_store import ConfigStore

from repro.errors import UserError
from repro.netmodel.cost import Link

if TYPE_CHECKING:
    import torch

    from repro.comm.collectives import Collectives
    from repro.comm.record import CommRecord
    from repro.compress.memory import GradientTargets
    from repro.optim.config import OptimConfig
    from repro.optim.stacked import StackedOptimizer


@dataclass
class MethodConfig:
    """Fields every method shares; each method subclasses it beside its strategy and sets
    `name`'s default, the one place the method's name is written.

    Two declarations every `configs/method/<name>.yaml` makes, read by the conformance kit
    (`repro.conformance`) so that no test keeps its own list of methods: `test_variants`,
    the runs the method must pass every guarantee in, each a list of overrides applied
    after `method=<name>` (`[]`: its defaults): worker processes equal to the one-process
    worker axis at 2 and 4 workers, resume from a mid-run checkpoint, the torch-free config
    path and `make gpu-check`; the first is the method's representative, which the checks
    too costly for every variant (a SIGKILLed run, ResNet-18 on a GPU) take.
    `model_copies`, how many copies of the model's size the method holds per worker
    besides the parameters, their gradients and the optimizer's slots (flat send buffers,
    residuals, a start copy), at most over its settings, for the one-process memory
    estimate. Neither changes what a run computes, so neither is part of a run's identity.
    """

    name: str = "sync"
    test_variants: list[list[str]] = field(default_factory=list)
    model_copies: int | None = None
    # Fields inherited from a parent method's config that this method never reads and
    # refuses to have set; `--help` and the unknown-key hints do not list them as its own.
    # They stay fields so that a run's identity, and with it its run directory, checkpoints
    # and studies, is the one runs made before keep.
    unread: ClassVar[tuple[str, ...]] = ()

    def check_declared(self) -> None:
        """Refuse a method config that lacks either declaration, naming its file."""
        where = f"configs/method/{self.name}.yaml"
        if not self.test_variants:
            raise UserError(
                f"{where} declares no test_variants; add the overrides the method must be "
                "tested in, e.g. `test_variants: [[]]` for its defaults alone"
            )
        if self.model_copies is None or self.model_copies < 0:
            raise UserError(
                f"{where} declares model_copies={self.model_copies}; set it to the copies "
                "of the model the method holds per worker (0 or more), e.g. `model_copies: 1` "
                "for one flat send buffer"
            )

    def check_name(self) -> None:
        """`method=<name>` picks the config class and sets `name`; a `method.name` of another
        method would run this one's strategy under that name, or that one's on settings it
        does not have."""
        own = type(self).name
        if self.name != own:
            raise UserError(
                f"method.name={self.name} does not choose the method (method={own} did, and "
                f"names it); use method={self.name} instead"
            )

    def process_env(self) -> dict[str, str]:
        """Environment variables the worker sets before the process group starts (e.g. an
        NCCL algorithm); none by default."""
        return {}

    def validate_world_size(self, world_size: int) -> None:
        """Refuse, before any worker starts, a worker count the method cannot serve; every
        count is fine by default."""

    def validate_network(self, bytes_scale: float) -> None:
        """Refuse, at config time, settings at odds with the modeled network's
        (`network.bytes_scale`); any is fine by default."""

    def validate_optim(self, optim: OptimConfig) -> None:
        """Refuse, at config time, a method setting that the optimizer leaves nothing to act
        on (e.g. averaging momentum buffers that SGD without momentum never keeps); any is
        fine by default."""

    def validate_model(self, shapes: dict[str, tuple[int, ...]]) -> None:
        """Refuse, before the run directory is written, a model the method cannot serve
        (one worker's parameter shapes by name, e.g. a low-rank compressor's rank above a
        matrix's smaller side); every model is fine by default."""


@dataclass(frozen=True)
class StepInfo:
    """What the trainer tells a strategy about the current step.

    `losses` holds the mini-batch training loss of each worker this process holds (axis
    order, as `Collectives.ranks`); `modeled_s` the modeled time so far, identical for
    every worker; `link` the modeled network in force for this epoch. Under measured
    compute `modeled_s` stands at the last exchange of the workers' seconds (a step that
    communicated), so a strategy deciding by the time of a step that follows local steps
    calls `synced_s()`: the same clock with every worker's compute up to this step, which
    exchanges them where measured (every rank calls it at the same step); None: `modeled_s`.
    """

    step: int
    epoch: float
    losses: torch.Tensor
    lr: float
    modeled_s: float
    link: Link
    synced_s: Callable[[], float] | None = None


class Rehearsal(Protocol):
    """Trial steps from a snapshot, restored exactly afterwards (`repro.train.rehearsal`):
    `rehearse(n_steps, *runs)` runs, for each `per_step` of `runs` in turn, n_steps of
    batch, forward/backward, `per_step(i)` (which may exchange the gradients in `p.grad`)
    and the optimizer step, then puts model, optimizer, data position and every RNG back.
    Strategies that need none ignore it."""

    def rehearse(self, n_steps: int, *runs: Callable[[int], None]) -> None: ...


Metrics = dict[str, float | str]
"""What a strategy reports at a log point, under `method/...` names: numbers (tau, the
compression ratio, bytes, k), or a word where the method reports a choice it made (the
collective, the combiner)."""


class Strategy:
    """A communication method's hooks into the loop, each a no-op by default, so a method
    writes only what it does (sync: `setup` and `after_backward`; local SGD: `after_step`
    and its state).

    `setup` gets `model`, the stacked `repro.train.replicas.Replicas` of the held workers,
    their optimizer, the collectives and the trainer's `Rehearsal`, once before the first
    step. `after_backward` (gradient communication, before the optimizer step) and
    `after_step` (model or delta communication, after it) return the `CommRecord`s of
    what they sent. `state_dict` is everything a resumed run needs to continue exactly;
    the default keeps nothing, and the default `load_state_dict` refuses a non-empty
    state, so a method that saves state but forgets to load it fails on its first resume.
    """

    identical_workers = False
    """True when the method keeps every worker's parameters identical: all of them apply
    one common update each step (an averaged or combined gradient), so the trainer holds
    the workers' parameters as one shared row (`Replicas(shared=True)`), which the
    optimizer steps once for all (`repro.optim.stacked`). A method that
    writes parameters itself (local SGD's averaging, Adasum's delta flow) leaves it False:
    its workers' rows must be memory of their own."""

    def __init__(self, cfg: MethodConfig, world_size: int):
        self.cfg, self.world_size = cfg, world_size

    def setup(
        self, model, optimizer: StackedOptimizer, comm: Collectives, rehearsal: Rehearsal
    ) -> None:
        """Nothing to prepare by default."""

    def gradient_targets(self) -> GradientTargets | None:
        """Where the next backward may put gradients in place: per parameter name a
        (workers, numel) tensor the gradient is added to (error feedback's residual) or
        written to (the buffer the method sends from), which then becomes that
        parameter's `p.grad`. None (the default): fresh gradients."""
        return None

    def after_backward(self, info: StepInfo) -> list[CommRecord]:
        """No gradient communication by default."""
        return []

    def after_step(self, info: StepInfo) -> list[CommRecord]:
        """No model or delta communication by default."""
        return []

    def metrics(self) -> Metrics:
        """Nothing to report by default."""
        return {}

    def state_dict(self) -> dict:
        """No state by default."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        if state:
            raise ValueError(
                f"{type(self).__name__} keeps no state; the checkpoint holds {sorted(state)}"
            )


def no_grad(fn: Callable) -> Callable:
    """`@torch.no_grad()` for a strategy module's methods, importing torch when the method
    first runs rather than when the module is imported (discovery must not load torch)."""

    @functools.wraps(fn)
    def run_without_grad(*args, **kwargs):
        import torch

        with torch.no_grad():
            return fn(*args, **kwargs)

    return run_without_grad


_REGISTRY: dict[str, tuple[type[MethodConfig], type[Strategy]]] = {}


def register(config_cls: type[MethodConfig]):
    """Class decorator: make a strategy available as `method=<config_cls.name>` and its
    config dataclass the schema `<name>_schema` that `configs/method/<name>.yaml` extends."""
    name = config_cls.name

    def wrap(cls):
        _REGISTRY[name] = (config_cls, cls)
        ConfigStore.instance().store(group="method", name=f"{name}_schema", node=config_cls)
        return cls

    return wrap


def registered() -> dict[str, tuple[type[MethodConfig], type[Strategy]]]:
    """Every method, discovered by importing each module of `repro.strategies` (a module
    registers its strategy when imported; nothing lists them)."""
    import repro.strategies as package

    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{info.name}")
    return dict(_REGISTRY)


def build_strategy(cfg: MethodConfig, world_size: int) -> Strategy:
    methods = registered()
    if cfg.name not in methods:
        raise UserError(
            f"method.name={cfg.name!r} is not a known method; choose one of {sorted(methods)}"
        )
    _, cls = methods[cfg.name]
    return cls(cfg, world_size)
