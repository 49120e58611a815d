"""What the simulated engine and the process engine's workers cannot fit in memory,
refused before the run's model is copied to every worker.

The simulated engine must hold every worker's model, gradients, optimizer state and
activations at once, and each worker process of the process engine its own interpreter
and libraries besides; both are estimated from the model before anything is allocated.
What the simulated engine cannot do at all (a cluster, measured compute, injected delays)
is refused when the config is validated (`repro.config.check_simulated`).

This module imports torch only in the estimate, which runs once a model exists.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from repro.comm.capacity import PROCESS_BYTES, refuse_past_per_core
from repro.comm.devices import free_memory, require_free_memory
from repro.errors import UserError

if TYPE_CHECKING:
    import torch

    from repro.config import Config

_FIX = "or use trainer.engine=processes"
# Per parameter and worker: the value, its gradient, the optimizer's slots, and the
# method's own copies (a flat send buffer, Adasum's start and deltas, Top-k's residual),
# which each method's config declares (`method.model_copies`).
_OPTIMIZER_SLOTS = {"sgd": 1, "adam": 2, "lamb": 2}
# Activations are kept for the backward pass; their gradients and the kernels' work space
# take about as much again.
_ACTIVATION_FACTOR = 3
# A forward without gradients frees each output once the next layers have read it: its
# input, its output and a residual branch's are alive at once, about three of the largest.
_EVAL_LAYERS = 3


def _activation_numel(model: torch.nn.Module, sample: torch.Tensor) -> tuple[int, int]:
    """Elements of every module output for one sample of the batch `sample`, and of the
    largest one: one sample's forward on the CPU, in eval mode (BatchNorm then needs no
    batch statistics). (The meta device would give the shapes without computing, but its
    kernels import torch._dynamo, 1.7 s of CPU per run, where one sample's forward takes
    milliseconds.)"""
    import torch

    total = largest = 0

    def count(_module, _inputs, output):
        nonlocal total, largest
        if isinstance(output, torch.Tensor):
            total += output.numel()
            largest = max(largest, output.numel())

    model = model.to("cpu").eval()
    hooks = [m.register_forward_hook(count) for m in model.modules()]
    try:
        with torch.no_grad():
            model(sample[:1].to("cpu"))
    finally:
        for h in hooks:
            h.remove()
    return total, largest


def _footprint(
    cfg: Config, model: torch.nn.Module, sample: torch.Tensor, eval_samples: int
) -> tuple[int, int, int]:
    """Bytes of one worker's state (its model, gradients, optimizer slots and the method's
    copies), of its training activations for the batch `sample`, and of one evaluation
    batch of `eval_samples`: a forward without gradients, which holds a few layers' outputs
    at once (`_EVAL_LAYERS` of the largest), not every layer's as a backward needs."""
    params = sum(p.numel() for p in model.parameters())
    buffers = sum(b.numel() for b in model.buffers())
    per_param = 1 + 1 + _OPTIMIZER_SLOTS[cfg.optim.name] + cfg.method.model_copies
    per_sample, largest = _activation_numel(model, sample)
    train = per_sample * len(sample) * _ACTIVATION_FACTOR
    evaluation = min(per_sample, largest * _EVAL_LAYERS) * eval_samples
    return (params * per_param + buffers) * 4, train * 4, evaluation * 4


def estimate_bytes(
    cfg: Config, model: torch.nn.Module, sample: torch.Tensor, eval_samples: int = 0
) -> int:
    """Bytes the simulated engine needs for `trainer.world_size` workers of `model`, whose
    one-worker batch looks like `sample`, evaluated `eval_samples` at a time (the averaged
    model, once the workers' activations are freed; model and sample on any device; the
    model is consumed). An evaluation batch of a whole large test set (eval_batch_size
    10000) passed the estimate and ran out of memory at the first evaluation."""
    state, train, evaluation = _footprint(cfg, model, sample, eval_samples)
    world = cfg.trainer.world_size
    return world * state + max(world * train, evaluation)


def check_process_cores(cfg: Config) -> None:
    """Refuse more local worker processes than the usable cores hold (`refuse_past_per_core`):
    from the config alone, so before its data is generated or downloaded."""
    world = cfg.trainer.world_size
    refuse_past_per_core(
        f"trainer.world_size={world} worker processes",
        world,
        "lower trainer.world_size or use trainer.engine=simulated (every worker in one process)",
    )


def check_process_memory(
    cfg: Config, model: torch.nn.Module, sample: torch.Tensor, eval_samples: int
) -> None:
    """Refuse local worker processes that the machine's memory cannot hold: each one's
    interpreter and libraries (`PROCESS_BYTES`, but for a lone worker, which runs in this
    process) plus its model, gradients, optimizer state and the larger of its training
    activations and an evaluation batch of its slice of the test set (`eval_samples`)."""
    world = cfg.trainer.world_size
    state, train, evaluation = _footprint(cfg, model, sample, eval_samples)
    per_worker = PROCESS_BYTES * (world > 1) + state + max(train, evaluation)
    each = f" (about {per_worker / 2**30:.2f} GiB each)" if world > 1 else ""
    require_free_memory(
        f"trainer.world_size={world} worker processes need"
        if world > 1
        else "one worker (trainer.world_size=1) needs",
        per_worker * world,
        each,
        "lower trainer.batch_size or workload.eval_batch_size"
        + (", or trainer.world_size, or use trainer.engine=simulated" if world > 1 else ""),
    )


def check_memory(
    cfg: Config, model: torch.nn.Module, sample: torch.Tensor, eval_samples: int, device: str
) -> None:
    """Refuse a world size whose estimate exceeds the free memory, before allocating."""
    need = estimate_bytes(cfg, model, sample, eval_samples)
    have, where = free_memory(device)
    if need > have:
        gib = 2**30
        raise UserError(
            f"trainer.world_size={cfg.trainer.world_size} needs about {need / gib:.1f} GiB "
            f"under the simulated engine and {where} {have / gib:.1f} GiB free; lower "
            + ("trainer.world_size, " if cfg.trainer.world_size > 1 else "")
            + "trainer.batch_size or workload.eval_batch_size"
            + (f", {_FIX}" if cfg.trainer.world_size > 1 else "")
        )
