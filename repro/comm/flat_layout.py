"""A worker's tensors laid out in one flat row, zero-padded to a multiple of the world size.

Adasum's vector-halving allreduce (`repro.comm.adasum_allreduce`) halves a flat vector
log2(n) times, so the row is padded to a multiple of n and every halving is exact; its
gather path (`repro.comm.adasum_gather`) and the Adasum strategy, which writes each step's
deltas straight into such rows, share the layout.
"""

from __future__ import annotations

import bisect
import itertools

import torch


class FlatLayout:
    """Where each tensor lives in a worker's flat row, zero-padded to a multiple of the world.

    Built once from one worker's tensors (or anything with `.shape` and `.numel()`); a
    caller that combines the same shapes every step keeps one layout and one buffer of
    rows, one per held worker (`new_buffer`), and calls `adasum_allreduce_` on it in place.
    """

    def __init__(self, tensors: list[torch.Tensor], world_size: int):
        self.shapes = [t.shape for t in tensors]
        self.sizes = [t.numel() for t in tensors]
        self.offsets = [0, *itertools.accumulate(self.sizes)]
        self.total = self.offsets[-1]
        self.padded = -(-self.total // world_size) * world_size
        self._scratch: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}

    def segments(self, lo: int, hi: int) -> list[tuple[int, int, int]]:
        """(tensor index, start, end) of every non-empty piece of a tensor inside [lo, hi)."""
        first = bisect.bisect_right(self.offsets, lo) - 1
        pieces = []
        for t in range(first, len(self.sizes)):
            start, end = max(self.offsets[t], lo), min(self.offsets[t + 1], hi)
            if start >= hi:
                break
            if start < end:
                pieces.append((t, start, end))
        return pieces

    def new_buffer(self, rows: int, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
        """An uninitialised (rows, padded) buffer whose padding is zero."""
        buf = torch.empty(rows, self.padded, dtype=dtype, device=device)
        buf[:, self.total :].zero_()
        return buf

    def receive_buffer(self, like: torch.Tensor) -> torch.Tensor:
        """Half a buffer's worth of `like`'s rows, dtype and device, kept for every later
        call (flat, so each level's (rows, size) receive view is contiguous).

        Each halving level receives into it. A fresh tens-of-megabytes allocation per call
        would be returned to the OS and faulted in (zeroed page by page) again every step:
        measured at 64 MB over 4 ranks, a fifth of the whole allreduce's CPU time.
        """
        key = (like.shape[0], like.dtype, like.device)
        if key not in self._scratch:
            size = like.shape[0] * (self.padded // 2)
            self._scratch[key] = torch.empty(size, dtype=like.dtype, device=like.device)
        return self._scratch[key]

    def flatten(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        """Axis tensors (rows, *shape) into a new (rows, padded) buffer."""
        rows = tensors[0].shape[0]
        buf = self.new_buffer(rows, tensors[0].dtype, tensors[0].device)
        buf[:, : self.total] = torch.cat([t.detach().reshape(rows, -1) for t in tensors], dim=1)
        return buf

    def unflatten(self, buf: torch.Tensor) -> list[torch.Tensor]:
        """Views (rows, *shape) into `buf`, which the caller hands over (no copy)."""
        parts = buf[:, : self.total].split(self.sizes, dim=1)
        rows = buf.shape[0]
        return [p.view(rows, *shape) for p, shape in zip(parts, self.shapes, strict=True)]
