"""One flat buffer per worker for many tensors: how every method sends a whole model (or
its gradients) in a single collective instead of one call per parameter tensor.

Tensors carry the leading worker axis, so the buffer is (workers, total): row i is worker
i's tensors end to end.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from repro.strategies.base import no_grad

if TYPE_CHECKING:
    import torch


def flatten(tensors: Sequence[torch.Tensor], extra: torch.Tensor | None = None) -> torch.Tensor:
    """Each worker's values of `tensors` end to end (a detached copy), then the columns of
    `extra` (workers, e) if given, in the tensors' dtype and device: a CPU scalar such as
    local SGD's loss rides with CUDA parameters on the GPU, where NCCL can carry it."""
    import torch  # here, not at the top: method discovery imports this module (`base`)

    n = tensors[0].shape[0]
    parts = [t.detach().reshape(n, -1) for t in tensors]
    if extra is not None:
        parts.append(extra.reshape(n, -1).to(dtype=parts[0].dtype, device=parts[0].device))
    return torch.cat(parts, dim=1)


@no_grad
def copy_into(tensors: Sequence[torch.Tensor], flat: torch.Tensor) -> None:
    """Write consecutive column slices of `flat` back into `tensors`, in place."""
    offset = 0
    for t in tensors:
        width = t[0].numel()
        t.copy_(flat[:, offset : offset + width].view_as(t))
        offset += width


def grads_from(params: Sequence[torch.Tensor], flat: torch.Tensor) -> None:
    """Each parameter's gradient a view of its columns of `flat` (rows, total), no copy: where
    `flat` is one row (a sum every worker applies, the parameters one shared row) that row
    expanded over the parameter's workers."""
    widths = [p[0].numel() for p in params]
    for p, part in zip(params, flat.split(widths, dim=1), strict=True):
        p.grad = part.reshape(part.shape[0], *p.shape[1:]).expand_as(p)
