"""What evaluation and exact snapshots need: the worker-averaged model and RNG state.

Test metrics are computed on the model the method would deliver at that moment: parameters
and float buffers averaged over workers. Local-update methods hold different models between
averagings, so evaluating one worker's copy would flatter or punish them arbitrarily. The
averaging is an untracked reduction (instrumentation, not the method's traffic).
"""

from __future__ import annotations

import copy
import random

import numpy as np
import torch

from repro.dist.collectives import Collectives
from repro.strategies.flat import copy_into, flatten


def averaged_model(model: torch.nn.Module, comm: Collectives) -> torch.nn.Module:
    if comm.world_size == 1:
        return model
    avg = copy.deepcopy(model)
    tensors = [t for t in (*avg.parameters(), *avg.buffers()) if t.is_floating_point()]
    flat = flatten(tensors).double()
    comm.allreduce_untracked(flat)
    flat /= comm.world_size
    copy_into(tensors, flat)
    return avg


def seed_rank_rngs(seed: int, aug_gen: torch.Generator) -> None:
    """Per-rank randomness (augmentation, dropout) after the shared model initialisation."""
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)
    aug_gen.manual_seed(seed)


def rng_state(aug_gen: torch.Generator) -> dict:
    return {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
        "aug": aug_gen.get_state(),
    }


def set_rng_state(rng: dict, aug_gen: torch.Generator) -> None:
    torch.set_rng_state(rng["torch"])
    np.random.set_state(rng["numpy"])
    random.setstate(rng["python"])
    aug_gen.set_state(rng["aug"])
