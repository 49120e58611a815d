"""Fully synchronous SGD: average the gradients of all workers every step.

This is the baseline of all three papers (AdaComm's "fully synchronous SGD", the Top-k
paper's DenseSGD, Adasum's averaging allreduce). All gradients are flattened into one buffer
so that a step costs exactly one allreduce, whatever the number of parameter tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hydra.core.config_store import ConfigStore

from repro.dist.collectives import Collectives, CommRecord
from repro.strategies.base import MethodConfig, StepInfo, register


@dataclass
class SyncConfig(MethodConfig):
    name: str = "sync"


ConfigStore.instance().store(group="method", name="sync_schema", node=SyncConfig)


def flat_grads(params: list[torch.nn.Parameter]) -> torch.Tensor:
    return torch.cat(
        [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params]
    )


def write_grads(params: list[torch.nn.Parameter], flat: torch.Tensor) -> None:
    offset = 0
    for p in params:
        n = p.numel()
        if p.grad is None:
            p.grad = torch.empty_like(p)
        p.grad.copy_(flat[offset : offset + n].view_as(p))
        offset += n


@register("sync", SyncConfig)
class SyncStrategy:
    def __init__(self, cfg: SyncConfig, world_size: int):
        self.cfg, self.world_size = cfg, world_size

    def setup(self, model, optimizer, comm: Collectives) -> None:
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.comm = comm

    def after_backward(self, info: StepInfo) -> list[CommRecord]:
        flat = flat_grads(self.params)
        rec = self.comm.allreduce(flat, average=True)
        write_grads(self.params, flat)
        return [rec]

    def after_step(self, info: StepInfo) -> list[CommRecord]:
        return []

    def metrics(self) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass
