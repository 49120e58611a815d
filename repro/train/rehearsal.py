"""Trial steps from a snapshot, restored exactly afterwards: how a method probes.

Flexible Top-k's ratio controller (Tyagi & Swany 2023, Sec. IV-C) measures each candidate
ratio's compression gain over a few iterations from the same starting point before it
solves Eq. 6. A `Rehearsal` runs such steps for every held worker (batch, forward/backward,
the method's `per_step(i)` exchange, the optimizer step), one run per candidate, and after
each run restores the stacked models, the optimizer, the data position and every RNG, so
probing costs time but never changes the training trajectory. The steps it ran and their
measured seconds are taken by the trainer with `take()`, so the modeled clock charges them
as compute.

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

    def rehearse(self, n_steps: int, *runs: Callable[[int], None]) -> None:
        """For each of `runs` in turn, `n_steps` trial steps from the same snapshot, calling
        `per_step(i)` after each backward; everything restored after each run.

        Every run's first trial step is the same batch on the same parameters, so its
        forward/backward is taken once and replayed to the later runs (`_FirstStep`): the
        same gradients, buffers, data position and RNGs, bit for bit. Each run is still
        charged the step's seconds, as a method that probes candidate by candidate runs it
        (Flexible Top-k's five candidates: 4 of 25 forward/backward passes saved).
        """
        snapshot = (
            self.replicas.state_dict(),
            copy.deepcopy(self.optimizer.state_dict()),
            self.data.state_dict(),
        )
        watch, first = Stopwatch(self.replicas.params[0].device), None
        for run, per_step in enumerate(runs):
            for i in range(n_steps):
                if i == 0 and first is not None:
                    seconds = first.replay(self.replicas, self.data, last=run + 1 == len(runs))
                else:
                    x, y = self.data.next_batch()
                    seconds = watch.time(self.replicas.forward_backward, x, y, self.loss_fn)[1]
                    if i == 0 and run + 1 < len(runs):
                        first = _FirstStep(self.replicas, self.data, seconds)
                per_step(i)
                self._seconds += seconds + watch.time(self.optimizer.step)[1]
                self._steps += 1
            self.replicas.load_state_dict(snapshot[0])
            self.optimizer.load_state_dict(snapshot[1])
            self.data.load_state_dict(snapshot[2])

    def take(self) -> tuple[float, int]:
        """Compute seconds and steps rehearsed since the last call."""
        out = (self._seconds, self._steps)
        self._seconds, self._steps = 0.0, 0
        return out


class _FirstStep:
    """What a trial step's forward/backward leaves: the gradients (copied before a run's
    exchange may write into them), the buffers, the data position and RNGs after it."""

    def __init__(self, replicas: Replicas, data: WorkerData, seconds: float):
        self.grads = [p.grad.clone() for p in replicas.params]
        self.buffers = [b.clone() for b in replicas.buffers]
        self.data, self.seconds = data.state_dict(), seconds

    @torch.no_grad()
    def replay(self, replicas: Replicas, data: WorkerData, last: bool) -> float:
        """Put the step's results back (the saved gradients themselves to the `last` run,
        which no later run needs them from); its measured seconds, to be charged again."""
        for p, grad in zip(replicas.params, self.grads, strict=True):
            p.grad = grad if last else grad.clone()
        for b, saved in zip(replicas.buffers, self.buffers, strict=True):
            b.copy_(saved)
        data.load_state_dict(self.data)
        return self.seconds
