"""What a run changes of the process it runs in, put back when it ends.

A run started from a notebook or a script that goes on afterwards shares the process with
its caller. The run sets what its arithmetic depends on (one torch thread, as every worker
process runs; the seeds of its data order and model; on a GPU, fixed-order kernels; the
rendezvous and a method's NCCL variables for a worker held in this process), and the
caller's code after it must not inherit those: torch single-threaded for the rest of a
session, a caller's random draws following from the run's seed, NCCL forced onto one
algorithm, the caller's own MASTER_ADDR gone. The run also must not inherit the caller's
settings that change its results or stop it: a float64 default dtype (the models are
float32, their inputs would not be) or a `torch.no_grad()` around the call.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import numpy as np
import torch

# what a run sets in the environment of the process it runs in (beside a method's own,
# `process_env`): the rendezvous of a worker held here, cuBLAS's fixed workspace
RUN_VARIABLES = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "CUBLAS_WORKSPACE_CONFIG",
)


@contextmanager
def caller_state_kept(variables: Iterable[str] = ()) -> Iterator[None]:
    """Run the body with float32 as the default dtype and gradients on, then put back the
    thread count, the environment variables the run sets (`RUN_VARIABLES` and
    `variables`; others, such as wandb's record of its service, are left for the next
    run), random generators (CUDA's where CUDA was in use before the run), kernel-order
    flags, default dtype and grad mode the caller had."""
    threads = torch.get_num_threads()
    environ = {k: os.environ.get(k) for k in (*RUN_VARIABLES, *variables)}
    generators = (random.getstate(), np.random.get_state(), torch.get_rng_state())
    cuda_generators = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    flags = _kernel_flags()
    dtype, grad = torch.get_default_dtype(), torch.is_grad_enabled()
    torch.set_default_dtype(torch.float32)
    torch.set_grad_enabled(True)
    try:
        yield
    finally:
        torch.set_default_dtype(dtype)
        torch.set_grad_enabled(grad)
        torch.set_num_threads(threads)
        for key, value in environ.items():
            if value is None:
                os.environ.pop(key, None)
            elif os.environ.get(key) != value:
                os.environ[key] = value
        random.setstate(generators[0])
        np.random.set_state(generators[1])
        torch.set_rng_state(generators[2])
        if cuda_generators is not None:
            torch.cuda.set_rng_state_all(cuda_generators)
        if flags != _kernel_flags():  # setting them imports torch._dynamo: 1.7 s of CPU
            torch.use_deterministic_algorithms(flags[0], warn_only=flags[1])
            torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = flags[2:]


def _kernel_flags() -> tuple[bool, bool, bool, bool]:
    """The process's kernel-order settings (`repro.comm.devices.fix_kernel_order`)."""
    return (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
    )
