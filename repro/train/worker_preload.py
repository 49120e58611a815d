"""What the worker server loads once, before it forks any worker (`repro.comm.forked`).

A run's worker processes, a run set's side-by-side workers and a sweep's local workers are
forked from multiprocessing's forkserver, which imports this module first, so every worker
starts with all of it in memory:

* torch, torch.distributed and the trainer: a freshly spawned worker imports them again,
  about 1.7 s of CPU each, where a forked one starts in milliseconds;
* numba's compiled CPU loops of Top-k's selection and of its writes at the selected
  positions (`repro.compress.select_kernels`, `repro.compress.position_kernels`) and of
  Adasum's statistics and weighted sums (`repro.comm.adasum_kernels`), loaded from their
  cache on disk (compiled first where there is none). A worker without them pays about
  1.3 s of CPU for them (numba's import, then LLVM's start and the cached code) inside its
  first exchange, on the run's clock: 40 steps of Top-k on 4 workers (2 cores) took 3.8 s
  of wall time with that inside and 0.8 s without it. A run whose method uses neither pays
  the 1.3 s once, here.

The server holds no process group, CUDA context or other thread (these loops run on the
calling thread: no parallel target), so a fork of it starts as clean as a new process.
"""

from __future__ import annotations

import torch
import torch.distributed  # noqa: F401  (loaded for the workers, not used here)

import repro.train.entry  # noqa: F401
from repro.comm import adasum_kernels
from repro.compress.select import topk_indices


def load_kernels() -> None:
    """Call each compiled loop once with the array types a run passes it: float32 (the
    models' parameters), contiguous rows and vectors."""
    topk_indices(torch.ones(2, 8), [1], [8])
    a, b = torch.ones(8), torch.ones(8)
    adasum_kernels.dot_stats(a, b)
    adasum_kernels.scaled_add_(a, b, 1.0, 1.0)
    adasum_kernels.tree_reduce_rows_(torch.ones(2, 8), [0, 8], 0.0)


load_kernels()
