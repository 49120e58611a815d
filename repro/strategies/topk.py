"""Flexible Top-k (Tyagi & Swany 2023): error-feedback Top-k over the cheapest collective.

Compressed SGD (`repro.strategies.compressed_sgd`) with these parts: the memory is error
feedback (G = grad + residual, what was not sent stays in the residual); the compressor is
Top-k over the whole flattened gradient, or layer-wise (`repro.compress.topk.TopK`); the
exchange is AG-Topk or AR-Topk (STAR or VAR leader) as the collective policy picks, or a
dense allreduce when c = 1 (`repro.compress.exchange_parts.PolicyExchange`); the ratio is
fixed (`cr_controller=fixed`) or chosen by the paper's multi-objective controller
(`cr_controller=moo`, Eq. 6), which probes candidate ratios through the trainer's
rehearsal.

NCCL: `process_env` forces NCCL's allreduce algorithm for a fixed `ar_ring`/`ar_tree` choice
(`repro.compress.policy.nccl_env`); the options' checks are `repro.strategies.topk_options`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from repro.compress.policy import nccl_env
from repro.compress.ratio import (
    DEFAULT_BOUNDS,
    DEFAULT_CANDIDATES,
    DEFAULT_REPROBE_CHANGE,
    DEFAULT_WEIGHTS,
    FixedRatio,
    MOORatioController,
)
from repro.errors import UserError
from repro.strategies.base import MethodConfig, register
from repro.strategies.compressed_sgd import CompressedSGD, Parts
from repro.strategies.topk_options import check_options


@dataclass
class TopKConfig(MethodConfig):
    """`method=topk`. `bytes_scale` mirrors network.bytes_scale (interpolated in the yaml) so
    the policy compares costs for the same message sizes the modeled clock charges.

    `var_norm`: what VAR-Topk ranks workers by: ||g||^2 ("grad", the paper's), ||G||^2 of
    the error-compensated G = g + residual ("grad_plus_residual"), or the authors' code's
    smoothed ||g|| ("ewma_grad": last `var_window` norms, weights (1 - `var_smoothing`)^j;
    `repro.compress.smoothed_norm`).

    `layer_split` (with `layerwise`): max(1, int(numel * cr)) entries per tensor
    ("per_tensor", the authors' and GRACE's) or the model's k shared by largest remainder
    ("exact_budget"; a small tensor's share may be 0).

    The MOO controller's settings (Eq. 6), each defaulting to the paper's value:
    `candidates` (ratios probed), `weights` (time, gain) of the Pareto pick,
    `ratio_bounds` (low, high) of the ratio searched, `reprobe_change` (the relative gain
    change that triggers a new probe).
    """

    name: str = "topk"
    cr: float = 0.01
    cr_controller: str = "fixed"
    collective: str = "auto"
    leader: str = "star"
    var_norm: str = "grad"
    var_window: int = 25
    var_smoothing: float = 0.001
    layerwise: bool = False
    layer_split: str = "per_tensor"
    candidates: list[float] = field(default_factory=lambda: list(DEFAULT_CANDIDATES))
    weights: list[float] = field(default_factory=lambda: list(DEFAULT_WEIGHTS))
    ratio_bounds: list[float] = field(default_factory=lambda: list(DEFAULT_BOUNDS))
    reprobe_change: float = DEFAULT_REPROBE_CHANGE
    probe_steps: int = 5
    gain_window: int = 50
    seed: int = 0
    bytes_scale: float = 1.0

    def __post_init__(self):
        check_options(self)

    def process_env(self) -> dict[str, str]:
        return nccl_env(self.collective)

    def validate_network(self, bytes_scale: float) -> None:
        """The copy set apart from the network's would size messages unlike the clock."""
        if self.bytes_scale != bytes_scale:
            raise UserError(
                f"method.bytes_scale={self.bytes_scale} mirrors network.bytes_scale="
                f"{bytes_scale}; set network.bytes_scale instead"
            )

    def parts(self) -> Parts:
        """Error feedback, Top-k, the policy's exchange and the ratio controller."""
        from repro.compress.exchange_parts import Leaders, PolicyExchange
        from repro.compress.memory import ErrorFeedback
        from repro.compress.topk import TopK

        moo = self.cr_controller == "moo"
        controller = (
            MOORatioController(
                self.candidates,
                self.weights,
                self.ratio_bounds,
                seed=self.seed,
                reprobe_change=self.reprobe_change,
            )
            if moo
            else FixedRatio(self.cr)
        )
        leaders = Leaders(self.leader, self.var_norm, self.var_window, self.var_smoothing)
        return Parts(
            compressor=TopK(self.layerwise, self.layer_split),
            memory=ErrorFeedback(),
            exchange=PolicyExchange(self.collective, leaders, self.bytes_scale),
            controller=controller,
            probe_steps=self.probe_steps if moo else 0,
            gain_window=self.gain_window,
            bytes_scale=self.bytes_scale,
        )


# Flexible Top-k is compressed SGD with the parts above.
TopKStrategy = register(TopKConfig)(CompressedSGD)
