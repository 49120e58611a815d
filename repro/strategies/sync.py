"""Fully synchronous SGD: average the gradients of all workers every step.

This is the baseline of all three papers (AdaComm's "fully synchronous SGD", the Top-k
paper's DenseSGD, Adasum's averaging allreduce). All gradients are flattened into one buffer
so that a step costs exactly one allreduce, whatever the number of parameter tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from repro.strategies.base import MethodConfig, StepInfo, Strategy, register
from repro.strategies.flat import flatten, grads_from

if TYPE_CHECKING:
    from repro.comm.collectives import Collectives
    from repro.comm.record import CommRecord


def allreduce_gradients(params: list, comm: Collectives, average: bool) -> CommRecord:
    """Replace every worker's gradients by their sum (or mean) over the workers, in one
    allreduce of one flat buffer; the optimizer then takes one step on the result.

    For methods whose workers apply one update (`identical_workers`): the sum is formed in
    the first row and every worker's gradient is a view of it: the optimizer of shared
    parameters reads one row, and a process holding n workers need not write n copies of the
    sum."""
    flat = flatten([p.grad for p in params])
    rec = comm.allreduce_first(flat)
    grads_from(params, flat[:1].div_(comm.group_size) if average else flat[:1])
    return rec


@dataclass
class SyncConfig(MethodConfig):
    name: str = "sync"


@register(SyncConfig)
class SyncStrategy(Strategy):
    cfg: SyncConfig
    identical_workers = True

    def setup(self, model, optimizer, comm: Collectives, rehearsal) -> None:
        self.params = list(model.parameters())
        self.comm = comm

    def after_backward(self, info: StepInfo) -> list[CommRecord]:
        return [allreduce_gradients(self.params, self.comm, average=True)]
