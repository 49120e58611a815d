"""The Strategy protocol: how a communication method plugs into the trainer.

The trainer knows no method by name. Each step it calls `after_backward` (gradient
communication, before the optimizer step) and `after_step` (model or delta communication,
after it), collects the returned `CommRecord`s for the modeled clock and the metrics, and
reads `metrics()` at log points. A strategy never reads the clock or the tracker: what it
needs to know about time, loss, learning rate and the network arrives in `StepInfo`.

Adding a method means one strategy module that calls `register` with its config dataclass,
one `configs/method/<name>.yaml`, and tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from repro.dist.collectives import Collectives, CommRecord
from repro.errors import UserError
from repro.netmodel.cost import Link


@dataclass
class MethodConfig:
    """Fields every method shares; each method subclasses it beside its strategy."""

    name: str = "sync"

    def process_env(self) -> dict[str, str]:
        """Environment variables the worker sets before the process group starts (e.g. an
        NCCL algorithm); none by default."""
        return {}


@dataclass(frozen=True)
class StepInfo:
    """What the trainer tells a strategy about the current step.

    `loss` is this worker's mini-batch training loss; `modeled_s` the worker's modeled
    time so far; `link` the modeled network in force for this epoch.
    """

    step: int
    epoch: float
    loss: float
    lr: float
    modeled_s: float
    link: Link


class Strategy(Protocol):
    def setup(
        self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, comm: Collectives
    ) -> None: ...

    def after_backward(self, info: StepInfo) -> list[CommRecord]: ...

    def after_step(self, info: StepInfo) -> list[CommRecord]: ...

    def metrics(self) -> dict[str, float]: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


_REGISTRY: dict[str, tuple[type[MethodConfig], type]] = {}


def register(name: str, config_cls: type[MethodConfig]):
    """Class decorator: make a strategy available as `method=<name>`."""

    def wrap(cls):
        _REGISTRY[name] = (config_cls, cls)
        return cls

    return wrap


def registered() -> dict[str, tuple[type[MethodConfig], type]]:
    import repro.strategies  # noqa: F401  (importing the package registers every method)

    return dict(_REGISTRY)


def build_strategy(cfg: MethodConfig, world_size: int) -> Strategy:
    methods = registered()
    if cfg.name not in methods:
        raise UserError(
            f"method.name={cfg.name!r} is not a known method; choose one of {sorted(methods)}"
        )
    _, cls = methods[cfg.name]
    return cls(cfg, world_size)
