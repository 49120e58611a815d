"""LAMB: layer-wise adaptive moments for large batches (You et al., ICLR 2020, Algorithm 2).

Per parameter tensor x with gradient g at step t:
    m = b1 m + (1 - b1) g,   v = b2 v + (1 - b2) g^2
    m_hat = m / (1 - b1^t),  v_hat = v / (1 - b2^t)            (bias correction)
    u = m_hat / (sqrt(v_hat) + eps) + wd * x                     (Adam direction + decay)
    x = x - lr * phi(|x|) / |u| * u                              (layer-wise trust ratio)
phi is the identity, or with `clamp=(lo, hi)` the paper's bounded scaling
phi(z) = min(max(z, lo), hi). The trust ratio is 1 when |x| or |u| is zero (a freshly
zeroed bias, or no update), where the ratio is undefined. torch ships no LAMB; the Adasum
paper pairs it with Adasum for its largest batches.

With `worker_axis=True` every parameter is a stack of workers' copies on its first
dimension (`repro.train.replicas`), and the norms, hence the trust ratio, are taken per
worker: each worker steps exactly as its own LAMB would.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from repro.errors import UserError
from repro.optim.stacked import StackedOptimizer


class Lamb(StackedOptimizer):
    """LAMB with torch's optimizer interface; param groups may override every
    hyperparameter."""

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        clamp: tuple[float, float] | None = None,
        bias_correction: bool = True,
        worker_axis: bool = False,
    ):
        if lr < 0:
            raise UserError(f"lamb lr={lr} must be >= 0")
        if not all(0.0 <= b < 1.0 for b in betas):
            raise UserError(f"lamb betas={tuple(betas)} must each be in [0, 1)")
        if eps <= 0:
            raise UserError(f"lamb eps={eps} must be > 0")
        if weight_decay < 0:
            raise UserError(f"lamb weight_decay={weight_decay} must be >= 0")
        if clamp is not None and not 0 <= clamp[0] <= clamp[1]:
            raise UserError(f"lamb clamp={tuple(clamp)} must satisfy 0 <= lo <= hi")
        defaults = dict(
            lr=lr,
            betas=tuple(betas),
            eps=eps,
            weight_decay=weight_decay,
            clamp=None if clamp is None else tuple(clamp),
            bias_correction=bias_correction,
        )
        super().__init__(params, defaults)
        self.worker_axis = worker_axis

    @staticmethod
    def trust_ratio(
        w_norm: torch.Tensor, u_norm: torch.Tensor, clamp: tuple[float, float] | None
    ) -> torch.Tensor:
        """phi(|x|) / |u|, or 1 where either norm is zero."""
        scaled = w_norm if clamp is None else w_norm.clamp(clamp[0], clamp[1])
        defined = (w_norm > 0) & (u_norm > 0)
        return torch.where(defined, scaled / u_norm, torch.ones_like(w_norm))

    def _update(self, p: torch.Tensor, g: torch.Tensor, group: dict, state: dict) -> None:
        if g.is_sparse:
            raise RuntimeError("Lamb does not support sparse gradients")
        b1, b2 = group["betas"]
        if not state:
            state["step"] = 0
            state["exp_avg"] = torch.zeros_like(p)
            state["exp_avg_sq"] = torch.zeros_like(p)
        state["step"] += 1
        t = state["step"]
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m.mul_(b1).add_(g, alpha=1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        if group["bias_correction"]:
            m_hat, v_hat = m / (1 - b1**t), v / (1 - b2**t)
        else:
            m_hat, v_hat = m, v
        update = m_hat / (v_hat.sqrt() + group["eps"])
        if group["weight_decay"]:
            update.add_(p, alpha=group["weight_decay"])
        ratio = self.trust_ratio(self._norm(p), self._norm(update), group["clamp"])
        p.sub_(update.mul_(ratio * group["lr"]))

    def _norm(self, t: torch.Tensor) -> torch.Tensor:
        """|t|, or per worker (shaped to broadcast over each worker's copy)."""
        if not self.worker_axis:
            return t.norm()
        return t.reshape(t.shape[0], -1).norm(dim=1).view(-1, *[1] * (t.dim() - 1))
