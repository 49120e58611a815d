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

    def _update(self, params, grads, group, states) -> None:
        if any(g.is_sparse for g in grads):
            raise RuntimeError("Lamb does not support sparse gradients")
        b1, b2 = group["betas"]
        ms, vs, steps = self._moments(params, states)
        torch._foreach_mul_(ms, b1)
        torch._foreach_add_(ms, grads, alpha=1 - b1)
        torch._foreach_mul_(vs, b2)
        torch._foreach_addcmul_(vs, grads, grads, value=1 - b2)
        if group["bias_correction"]:
            m_hats = torch._foreach_div(ms, [1 - b1**t for t in steps])
            v_hats = torch._foreach_div(vs, [1 - b2**t for t in steps])
        else:
            m_hats, v_hats = ms, vs
        denoms = torch._foreach_sqrt(v_hats)
        torch._foreach_add_(denoms, group["eps"])
        updates = torch._foreach_div(m_hats, denoms)
        if group["weight_decay"]:
            torch._foreach_add_(updates, params, alpha=group["weight_decay"])
        # every tensor's (or worker's) trust ratio in one pass over their norms, end to end
        w_norms, u_norms = self._norms(params), self._norms(updates)
        ratios = self.trust_ratio(w_norms, u_norms, group["clamp"]) * group["lr"]
        rows = [p.shape[0] if self.worker_axis else 1 for p in params]
        for p, u, r in zip(params, updates, ratios.split(rows), strict=True):
            p.sub_(u.mul_(r.view(-1, *[1] * (u.dim() - 1)) if self.worker_axis else r[0]))

    def _norms(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        """Every tensor's |t| end to end, or with `worker_axis` each worker's |t| in turn."""
        if not self.worker_axis:
            return torch.stack([t.norm() for t in tensors])
        return torch.cat([t.reshape(t.shape[0], -1).norm(dim=1) for t in tensors])
