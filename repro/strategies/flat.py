"""One flat buffer for many tensors: how every method sends a whole model (or its
gradients) in a single collective instead of one call per parameter tensor."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def flatten(tensors: Sequence[torch.Tensor], extra: Sequence[float] = ()) -> torch.Tensor:
    """The tensors' values end to end (detached copy), followed by `extra` scalars."""
    parts = [t.detach().reshape(-1) for t in tensors]
    if extra:
        dtype = parts[0].dtype if parts else torch.float32
        parts.append(torch.tensor(list(extra), dtype=dtype))
    return torch.cat(parts)


@torch.no_grad()
def copy_into(tensors: Sequence[torch.Tensor], flat: torch.Tensor) -> None:
    """Write consecutive slices of `flat` back into `tensors`, in place."""
    offset = 0
    for t in tensors:
        t.copy_(flat[offset : offset + t.numel()].view_as(t))
        offset += t.numel()
