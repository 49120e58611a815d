"""Error feedback for Top-k, and the compression gain that measures what Top-k keeps.

Error feedback (the residual memory of Flexible Top-k, Algorithm 1): what a worker did not
send this step is added to its next gradient, G = grad + residual, so that no gradient mass
is lost, only delayed. Residuals are keyed by parameter name, so a checkpoint stays readable
whatever order the parameters are flattened in.

Compression gain (GraVAC, used by Flexible Top-k as its statistical-efficiency measure):
||g_c||^2 / ||g_e||^2, the squared norm of the part sent over that of the error-compensated
gradient it was taken from. It is 1 when nothing is dropped and falls as compression loses
more of the gradient.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch


class ErrorFeedback:
    """Per-parameter residuals: compensate before compressing, update after sending."""

    def __init__(self) -> None:
        self.residuals: dict[str, torch.Tensor] = {}

    def compensate(self, name_grads: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """G = grad + residual for every named gradient (a parameter with no residual yet has 0)."""
        out = {}
        for name, grad in name_grads.items():
            residual = self.residuals.get(name)
            out[name] = grad.clone() if residual is None else grad + residual
        return out

    def update(self, name_residuals: Mapping[str, torch.Tensor]) -> None:
        """Keep what was not sent this step, replacing the previous residuals of those names."""
        for name, residual in name_residuals.items():
            self.residuals[name] = residual.detach().clone()

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {name: r.clone() for name, r in self.residuals.items()}

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        self.residuals = {name: r.clone() for name, r in state.items()}


def gain_from_norms(compressed_sq: float, compensated_sq: float) -> float:
    """||g_c||^2 / ||g_e||^2 from the two squared norms; 1 for an all-zero gradient (nothing lost).

    Given sums over workers, this is the ratio of the means, the E||g_c||^2 / E||g_e||^2 of
    the paper.
    """
    if compensated_sq <= 0:
        return 1.0
    return compressed_sq / compensated_sq


def compression_gain(compressed: torch.Tensor, compensated: torch.Tensor) -> float:
    """||g_c||^2 / ||g_e||^2 of one worker's sent part (dense or just its values) and its G."""
    sq = compressed.double().pow(2).sum().item()
    return gain_from_norms(sq, compensated.double().pow(2).sum().item())
