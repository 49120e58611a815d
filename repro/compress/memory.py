"""The Memory part: error feedback, and the compression gain that measures what is kept.

Error feedback (the residual memory of Flexible Top-k, Algorithm 1; of EF-signSGD,
Karimireddy et al. 2019; of PowerSGD, Vogels et al. 2019): what a worker did not send this
step is added to its next gradient, G = grad + residual, so that no gradient mass is lost,
only delayed. Residuals are keyed by parameter name, so a checkpoint stays readable
whatever order the parameters are flattened in.

A training step uses the flat form: `compensate_flat` writes every G end to end into one
(workers, total) buffer, the vector Top-k compresses, and `keep` zeroes the sent entries of
that very buffer, which becomes the residual (the per-name residuals are its column views).
Two buffers alternate across steps, so a step allocates and copies nothing of the model's
size for error feedback: one fused pass forms G, one scatter forms the residual. A
compressor that sends a dense stand-in for G instead (a scaled sign, a low-rank product)
leaves G - stand-in, subtracted in the same buffer (`update`). An exchange that sent all of
G (the dense average) leaves no residual at all rather than a buffer of zeros: the next G
is the gradient itself, and the buffer is free for the exchange to sum in place.
`NoMemory` forms the same flat G = grad and keeps nothing after any exchange (signSGD with
majority vote, PowerSGD without feedback).

Where the backward can put a weight's gradient in place itself (`gradient_targets`: the
workers' linear layers of a stacked forward, `Replicas`), error feedback has it added into the
residual, so G forms in the residuals' own buffer: each layer's product is added into its
residual in place (the same bits as g + residual), and no flat buffer is filled beside it;
with no residual (`NoMemory`, or after a dense exchange) it is written into the buffer G
is sent from, with nothing copied.

Compression gain (GraVAC, used by Flexible Top-k as its statistical-efficiency measure):
||g_c||^2 / ||g_e||^2, the squared norm of the part sent over that of the error-compensated
gradient it was taken from. It is 1 when nothing is dropped and falls as compression loses
more of the gradient.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

import torch

from repro.compress.select import zero_selected

if TYPE_CHECKING:
    from repro.compress.exchange import ExchangeResult


class GradientTargets(NamedTuple):
    """Where the next backward may put each gradient (`Strategy.gradient_targets`):
    parameter name -> a (workers, numel) tensor, and whether the gradient is added to what
    the tensor holds (True: G = g + residual formed in the residual) or written over it
    (False: G = g in the buffer it is sent from). The trainer's layers take them
    (`repro.workload.worker_layers.weight_grads_into`); the memory, which owns the
    buffers, offers them. `sq_norms`: for an exchange that ranks by ||g||^2 (VAR-Topk),
    a (workers,) tensor per name that the backward fills with each worker's squared norm of
    the gradient it puts in place, which an added gradient no longer shows apart from G."""

    tensors: dict[str, torch.Tensor]
    add: bool
    sq_norms: dict[str, torch.Tensor] | None = None

    def measured(self, grads: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The squared norms the backward measured, by name: of the gradients in `grads`
        that it put in place (each is then its target itself), and of those alone."""
        norms = self.sq_norms or {}
        return {n: v for n, v in norms.items() if _same_memory(grads[n], self.tensors[n])}


class ErrorFeedback:
    """Per-parameter residuals: compensate before compressing, keep what was not sent."""

    def __init__(self) -> None:
        self.residuals: dict[str, torch.Tensor] = {}
        self._kept: torch.Tensor | None = None  # the flat buffer the residuals are views of
        self._spare: torch.Tensor | None = None  # the previous one, free for the next G
        self._widths: list[tuple[str, int]] = []

    def compensate_flat(self, name_grads: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """G = grad + residual for every named gradient, (workers, width) each (a parameter
        with no residual yet has 0), end to end in one (workers, total) buffer."""
        grads = list(name_grads.values())
        first = grads[0]
        shape = (first.shape[0], sum(g.shape[1] for g in grads))
        if any(_same_memory(g, self.residuals.get(n)) for n, g in name_grads.items()):
            out = self._kept  # the backward added gradients into their residuals: G is there
        else:
            out = self._spare
            if (
                out is None
                or out.shape != shape
                or (out.dtype, out.device) != (first.dtype, first.device)
            ):
                out = torch.empty(shape, dtype=first.dtype, device=first.device)
            self._spare = None
        self._widths = [(name, g.shape[1]) for name, g in name_grads.items()]
        offset = 0
        for name, grad in name_grads.items():
            part = out[:, offset : offset + grad.shape[1]]
            offset += grad.shape[1]
            if _same_memory(grad, part):  # formed there by the backward (`gradient_targets`)
                continue
            residual = self.residuals.get(name)
            if residual is None:
                part.copy_(grad)
            else:  # in place where `out` is the residuals' own buffer
                torch.add(grad, residual, out=part)
        return out

    def gradient_targets(self) -> GradientTargets | None:
        """The residuals, as where the next backward may add its gradients
        (`Strategy.gradient_targets`): views of one flat buffer, so that G = g + residual
        forms in it, in place, and `compensate_flat` adds only what the backward did not.
        With no residual (after a dense exchange), the free buffer, where the backward
        writes G = g. None before the first step and after a load of residuals (they are
        then tensors of their own)."""
        if self._kept is not None:
            return GradientTargets(dict(self.residuals), add=True)
        if self.residuals or self._spare is None:
            return None
        return GradientTargets(self._named_views(self._spare), add=False)

    def update(self, compensated: torch.Tensor, result: ExchangeResult) -> None:
        """The residual after an exchange: G less the dense part that went out
        (`result.taken`), G with the positions sent zeroed (`keep`), or G as the exchange
        left it, those positions zeroed already (`result.zeroed`)."""
        if result.zeroed:
            self._store(compensated)
        elif result.taken is None:
            self.keep(compensated, result.sent)
        else:
            compensated.sub_(result.taken)
            self._store(compensated)

    def keep(self, compensated: torch.Tensor, sent: torch.Tensor | None) -> None:
        """The residual after each row's entries at `sent` went out: `compensated` from
        `compensate_flat` with those entries zeroed, in place. Zeroing rather than
        subtracting makes residual + sent part equal G bit for bit. The buffer becomes the
        residual store; read nothing else from it afterwards. `sent` None: all of G went,
        no residual stays (the next G is the gradient as it is) and the buffer is free."""
        if sent is None:
            self._forget(compensated)
            return
        zero_selected(compensated, sent)
        self._store(compensated)

    def _forget(self, compensated: torch.Tensor) -> None:
        """No residual; `compensated` is free for the next G."""
        self.residuals, self._kept, self._spare = {}, None, compensated

    def _store(self, compensated: torch.Tensor) -> None:
        if compensated is not self._kept:  # else G was formed in the residuals' own buffer
            self._spare, self._kept = self._kept, compensated
        self.residuals = self._named_views(compensated)

    def _named_views(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        """Each parameter's columns of a flat (workers, total) buffer, by name."""
        views, offset = {}, 0
        for name, width in self._widths:
            views[name] = flat[:, offset : offset + width]
            offset += width
        return views

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {name: r.clone() for name, r in self.residuals.items()}

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        self.residuals = {name: r.clone() for name, r in state.items()}
        # the residuals are no longer views of the flat buffer: it is free for the next G
        if self._spare is None:
            self._spare = self._kept
        self._kept = None


class NoMemory(ErrorFeedback):
    """The flat G = grad, no residual: nothing left out is ever sent later."""

    def update(self, compensated: torch.Tensor, result: ExchangeResult) -> None:
        self._forget(compensated)


def _same_memory(a: torch.Tensor, b: torch.Tensor | None) -> bool:
    return b is not None and a.data_ptr() == b.data_ptr() and a.shape == b.shape


def sq_norms(rows: torch.Tensor) -> torch.Tensor:
    """Each row's squared Euclidean norm, ||row||^2, the gain's numerator and denominator.

    Taken by torch's norm kernel and squared: one pass over the rows with no temporary,
    where `rows.pow(2).sum(1)` writes a squared copy first (over 8 workers' rows of a
    271K-parameter model, 0.4 ms against 1.6 ms here). Each row's value is the same whether
    it is reduced alone or beside other rows, so a worker's value does not depend on how
    many workers one process holds.
    """
    return torch.linalg.vector_norm(rows, dim=1).square()


def gain_from_norms(compressed_sq: float, compensated_sq: float) -> float:
    """||g_c||^2 / ||g_e||^2 from the two squared norms; 1 for an all-zero gradient (nothing lost).

    Given sums over workers, this is the ratio of the means, the E||g_c||^2 / E||g_e||^2 of
    the paper.
    """
    if compensated_sq <= 0:
        return 1.0
    return compressed_sq / compensated_sq
