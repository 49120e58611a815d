"""The Strategy protocol: how a communication method plugs into the trainer.

The trainer knows no method by name. Each step it calls `after_backward` (gradient
communication, before the optimizer step) and `after_step` (model or delta communication,
after it), collects the returned `CommRecord`s for the modeled clock and the metrics, and
reads `metrics()` at log points. A strategy never reads the clock or the tracker: what it
needs to know about time, loss, learning rate and the network arrives in `StepInfo`.

Adding a method means one strategy module whose strategy class is decorated with
`register(ItsConfig)`, one `configs/method/<name>.yaml`, and tests: methods are discovered.

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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from hydra.core.config_store import ConfigStore

from repro.errors import UserError
from repro.netmodel.cost import Link

if TYPE_CHECKING:
    import torch

    from repro.comm.collectives import Collectives, CommRecord
    from repro.train.stacked_optim import StackedOptimizer


@dataclass
class MethodConfig:
    """Fields every method shares; each method subclasses it beside its strategy and sets
    `name`'s default, the one place the method's name is written."""

    name: str = "sync"

    def process_env(self) -> dict[str, str]:
        """Environment variables the worker sets before the process group starts (e.g. an
        NCCL algorithm); none by default."""
        return {}

    def validate_world_size(self, world_size: int) -> None:
        """Refuse, before any worker starts, a worker count the method cannot serve; every
        count is fine by default."""


@dataclass(frozen=True)
class StepInfo:
    """What the trainer tells a strategy about the current step.

    `losses` holds the mini-batch training loss of each worker this process holds (axis
    order, as `Collectives.ranks`); `modeled_s` the modeled time so far, identical for
    every worker; `link` the modeled network in force for this epoch.
    """

    step: int
    epoch: float
    losses: torch.Tensor
    lr: float
    modeled_s: float
    link: Link


class Rehearsal(Protocol):
    """Trial steps from a snapshot, restored exactly afterwards (`repro.train.rehearsal`):
    `rehearse(n_steps, per_step)` runs n_steps of batch, forward/backward, `per_step(i)`
    (which may exchange the gradients in `p.grad`) and the optimizer step, then puts model,
    optimizer, data position and every RNG back. Strategies that need none ignore it."""

    def rehearse(self, n_steps: int, per_step: Callable[[int], None]) -> None: ...


class Strategy(Protocol):
    """`model` is the stacked `repro.train.replicas.Replicas` of the held workers."""

    def setup(
        self, model, optimizer: StackedOptimizer, comm: Collectives, rehearsal: Rehearsal
    ) -> None: ...

    def after_backward(self, info: StepInfo) -> list[CommRecord]: ...

    def after_step(self, info: StepInfo) -> list[CommRecord]: ...

    def metrics(self) -> dict[str, float]: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


def no_grad(fn: Callable) -> Callable:
    """`@torch.no_grad()` for a strategy module's methods, importing torch when the method
    first runs rather than when the module is imported (discovery must not load torch)."""

    @functools.wraps(fn)
    def run_without_grad(*args, **kwargs):
        import torch

        with torch.no_grad():
            return fn(*args, **kwargs)

    return run_without_grad


_REGISTRY: dict[str, tuple[type[MethodConfig], type]] = {}


def register(config_cls: type[MethodConfig]):
    """Class decorator: make a strategy available as `method=<config_cls.name>` and its
    config dataclass the schema `<name>_schema` that `configs/method/<name>.yaml` extends."""
    name = config_cls.name

    def wrap(cls):
        _REGISTRY[name] = (config_cls, cls)
        ConfigStore.instance().store(group="method", name=f"{name}_schema", node=config_cls)
        return cls

    return wrap


def registered() -> dict[str, tuple[type[MethodConfig], type]]:
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
