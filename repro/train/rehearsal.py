"""Trial steps from a snapshot, restored exactly afterwards: how a method probes.

Flexible Top-k's ratio controller (Tyagi & Swany 2023, Sec. IV-C) measures each candidate
ratio's compression gain over a few iterations from the same starting point before it
solves Eq. 6. A `Rehearsal` runs such steps for every held worker (batch, forward/backward,
the method's `per_step(i)` exchange, the optimizer step) and then restores the stacked
models, the optimizer, the data position and every RNG, so probing costs time but never
changes the training trajectory. The steps it ran and their measured seconds are taken by
the trainer with `take()`, so the modeled clock charges them as compute.

Every strategy receives one in `setup`; strategies that need none ignore it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch

from repro.comm.stopwatch import Stopwatch
from repro.optim.stacked import StackedOptimizer
from repro.train.replicas import Replicas
from repro.train.worker_data import WorkerData

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class Rehearsal:
    def __init__(
        self,
        replicas: Replicas,
        optimizer: StackedOptimizer,
        data: WorkerData,
        loss_fn: LossFn,
    ):
        self.replicas, self.optimizer, self.data, self.loss_fn = replicas, optimizer, data, loss_fn
        self._seconds, self._steps = 0.0, 0

    def rehearse(self, n_steps: int, per_step: Callable[[int], None]) -> None:
        """Run `n_steps` trial steps, calling `per_step(i)` after each backward; restore."""
        snapshot = (
            self.replicas.state_dict(),
            copy.deepcopy(self.optimizer.state_dict()),
            self.data.state_dict(),
        )
        watch, loss = Stopwatch(self.replicas.params[0].device), self.loss_fn
        for i in range(n_steps):
            x, y = self.data.next_batch()
            self._seconds += watch.time(self.replicas.forward_backward, x, y, loss)[1]
            per_step(i)
            self._seconds += watch.time(self.optimizer.step)[1]
            self._steps += 1
        self.replicas.load_state_dict(snapshot[0])
        self.optimizer.load_state_dict(snapshot[1])
        self.data.load_state_dict(snapshot[2])

    def take(self) -> tuple[float, int]:
        """Compute seconds and steps rehearsed since the last call."""
        out = (self._seconds, self._steps)
        self._seconds, self._steps = 0.0, 0
        return out
