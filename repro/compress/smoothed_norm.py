"""VAR-Topk's leader statistic as the authors' code computes it (`method.var_norm=ewma_grad`).

The paper (Sec. III, Algorithm 1) ranks workers by the step's ||g||^2. The authors' code
ranks them by a smoothed ||g|| instead: each worker keeps its last `window` gradient norms
(the L2 norm of its own gradient, not squared, no residual; window 25 by default) and, once
the window is full, takes their weighted mean with weight (1 - smoothing)^j on the value j
steps back counted from 1 for the newest (smoothing 0.001 by default, so nearly a plain
mean of the window). The window maps to no EWMA coefficient: it is a finite window with
geometric weights, renewed every step. Until a worker has seen `window` norms its
statistic is 0, so for the first window - 1 steps every worker ties and the lowest rank,
rank 0, leads.

One row per held worker, as everywhere in the exchanges; the window is part of the
strategy's checkpointed state, so a resumed run ranks exactly as an uninterrupted one.
"""

from __future__ import annotations

import torch


class WindowedNorm:
    """The last `window` gradient norms of each held worker and their weighted mean."""

    def __init__(self, window: int, smoothing: float):
        if window < 1 or not 0 <= smoothing < 1:
            raise ValueError(f"window={window} must be >= 1 and smoothing={smoothing} in [0, 1)")
        self.window = window
        self.smoothing = smoothing
        self.history: torch.Tensor | None = None  # (rows, up to window - 1), oldest first

    def update(self, sq_norms: torch.Tensor) -> torch.Tensor:
        """Add this step's squared norms (one per held worker); return each worker's
        statistic, (rows,) float64: 0 until its window is full."""
        norms = sq_norms.detach().to(torch.float64).sqrt().view(-1, 1)
        past = self.history if self.history is not None else norms[:, :0]
        seen = torch.cat([past.to(norms.device), norms], dim=1)
        if seen.shape[1] < self.window:
            self.history = seen
            return torch.zeros(seen.shape[0], dtype=torch.float64, device=seen.device)
        back = torch.arange(self.window, 0, -1, dtype=torch.float64, device=seen.device)
        weights = (1.0 - self.smoothing) ** back  # oldest j = window ... newest j = 1
        self.history = seen[:, 1:]
        return (seen * weights).sum(1) / weights.sum()

    def state_dict(self) -> dict:
        history = None if self.history is None else self.history.clone()
        return {"history": history}

    def load_state_dict(self, state: dict) -> None:
        history = state["history"]
        self.history = None if history is None else history.clone()
