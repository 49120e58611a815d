"""The data side of the workers one process holds: their shards and augmentation RNGs.

Worker r draws its batches from `ShardSampler(rank=r)` and augments them with its own
generator seeded from (seed, r), whichever engine holds it, so a worker sees the same
samples in the same order under both engines. Batches stack on the worker axis:
x is (workers, batch, ...), y is (workers, batch).
"""

from __future__ import annotations

import random

import numpy as np
import torch

from repro.workload.data import ShardSampler
from repro.workload.workload import Workload


def worker_seed(seed: int, rank: int) -> int:
    """The seed of worker `rank`'s own randomness (augmentation), after the shared init."""
    return seed * 1009 + rank + 1


class WorkerData:
    def __init__(self, workload: Workload, ranks: list[int], world: int, batch: int, seed: int):
        self.workload = workload
        n = workload.arrays.n_train
        self.samplers = [ShardSampler(n, world, r, batch, seed) for r in ranks]
        self.gens = [torch.Generator().manual_seed(worker_seed(seed, r)) for r in ranks]
        # The process-wide RNGs serve nothing a method or a built-in model computes; they are
        # seeded per process (its first worker's seed) and checkpointed so a resumed run
        # repeats them too. A model's own random layers (dropout) draw from them: all of the
        # simulated engine's workers from one, each worker process from its own, so the two
        # engines draw other masks (the same in distribution, not bit for bit).
        first = worker_seed(seed, ranks[0])
        torch.manual_seed(first)
        np.random.seed(first % 2**32)
        random.seed(first)

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        indices = [s.next_indices() for s in self.samplers]
        if not self.workload.augments:
            # Nothing is drawn per worker, so one gather of the stacked indices gives every
            # worker's rows at once: the same values without a gather and a copy per worker
            # (half the batching time of 4 MNIST-1D workers here, about 50 us a step).
            return self.workload.batch(torch.stack(indices), None)
        pairs = [self.workload.batch(i, g) for i, g in zip(indices, self.gens, strict=True)]
        return torch.stack([x for x, _ in pairs]), torch.stack([y for _, y in pairs])

    def state_dict(self) -> dict:
        return {
            "samplers": [s.state_dict() for s in self.samplers],
            "gens": [g.get_state() for g in self.gens],
            "torch": torch.get_rng_state(),
            # dropout and other device-side draws on a GPU come from the CUDA generators
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "numpy": np.random.get_state(),
            "python": random.getstate(),
        }

    def load_state_dict(self, state: dict) -> None:
        for s, saved in zip(self.samplers, state["samplers"], strict=True):
            s.load_state_dict(saved)
        for g, saved in zip(self.gens, state["gens"], strict=True):
            g.set_state(saved)
        torch.set_rng_state(state["torch"])
        if state.get("cuda"):
            torch.cuda.set_rng_state_all(state["cuda"])
        np.random.set_state(state["numpy"])
        random.setstate(state["python"])
