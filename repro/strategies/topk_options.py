"""The values Flexible Top-k's method options may take, and the checks `TopKConfig` runs.

Kept apart from the strategy so the rules of `method=topk` read in one place and can be
tested without torch or a process group: which ratio controller (`fixed`, or the paper's
multi-objective `moo`, Eq. 6), which collective (`repro.compress.policy.COLLECTIVES`), which
AR-Topk leader (STAR round robin or VAR largest norm, Algorithm 1; `none` only where no
allreduce can run: each worker's own indices sum to nothing meaningful without a leader's),
which norm VAR ranks by (and the authors' smoothing window), and how layer-wise Top-k
sizes each tensor's k.
The MOO controller's own settings are checked by `repro.compress.ratio`'s `check_*`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from repro.compress.policy import COLLECTIVES
from repro.compress.ratio import (
    check_bounds,
    check_candidates,
    check_cr,
    check_reprobe_change,
    check_weights,
)
from repro.errors import UserError, require_choice, require_seed

if TYPE_CHECKING:
    from repro.strategies.topk import TopKConfig

CONTROLLERS = ("fixed", "moo")
LEADERS = ("star", "var", "none")
VAR_NORMS = ("grad", "grad_plus_residual", "ewma_grad")
LAYER_SPLITS = ("per_tensor", "exact_budget")


def check_options(cfg: TopKConfig) -> None:
    """Raise `UserError` naming the first `method.*` option of `cfg` that is out of range."""
    check_cr(cfg.cr)
    require_choice("method.cr_controller", cfg.cr_controller, CONTROLLERS)
    require_choice("method.collective", cfg.collective, COLLECTIVES)
    require_choice("method.leader", cfg.leader, LEADERS)
    require_seed("method.seed", cfg.seed)
    if cfg.leader == "none" and cfg.collective != "allgather":
        raise UserError(
            f"method.collective={cfg.collective} with method.leader=none: an allreduce cannot "
            "sum Top-k's per-worker indices without a leader's; use method.leader=star or "
            "var, or method.collective=allgather"
        )
    require_choice("method.var_norm", cfg.var_norm, VAR_NORMS)
    if cfg.var_window < 1:
        raise UserError(f"method.var_window={cfg.var_window} must be at least 1 (the authors' 25)")
    if not 0 <= cfg.var_smoothing < 1:
        raise UserError(
            f"method.var_smoothing={cfg.var_smoothing} must be in [0, 1) (the authors' 0.001)"
        )
    require_choice("method.layer_split", cfg.layer_split, LAYER_SPLITS)
    if cfg.layer_split != LAYER_SPLITS[0] and not cfg.layerwise:
        raise UserError(
            f"method.layer_split={cfg.layer_split} splits a layer-wise selection; whole-model "
            "Top-k has one budget: set method.layerwise=true as well"
        )
    if cfg.cr == 1 and cfg.cr_controller == "fixed" and cfg.collective == "allgather":
        raise UserError(
            "method.collective=allgather needs method.cr < 1 (cr=1 is a dense allreduce)"
        )
    check_candidates(cfg.candidates)
    if cfg.cr_controller == "moo" and cfg.collective == "allgather" and 1 in cfg.candidates:
        # a probe at c = 1 would be a dense exchange, which allgather cannot carry
        raise UserError(
            "method.collective=allgather needs method.candidates < 1 (cr=1 is a dense allreduce)"
        )
    check_weights(cfg.weights)
    check_bounds(cfg.ratio_bounds)
    check_reprobe_change(cfg.reprobe_change)
    if cfg.probe_steps < 1:
        raise UserError(f"method.probe_steps={cfg.probe_steps} must be at least 1")
    if cfg.gain_window < 1:
        raise UserError(f"method.gain_window={cfg.gain_window} must be at least 1")
    if not cfg.bytes_scale > 0:
        raise UserError(
            f"method.bytes_scale={cfg.bytes_scale} must be > 0: it mirrors "
            "network.bytes_scale; set network.bytes_scale (> 0), not method.bytes_scale"
        )
