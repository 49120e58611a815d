"""Flexible Top-k (Tyagi & Swany 2023): error-feedback Top-k over the cheapest collective.

Each step, after backward: all gradients are flattened into one vector, the error-feedback
residual is added (G = grad + residual), and G is exchanged at ratio c by AG-Topk or AR-Topk
(STAR or VAR leader) as the collective policy picks, or by a dense allreduce when c = 1. The
averaged gradient goes back into `p.grad`; what this worker did not send stays in its
residual. The ratio is fixed (`cr_controller=fixed`) or chosen by the paper's
multi-objective controller (`cr_controller=moo`, Eq. 6).

Probing (moo only) uses the trainer's `Rehearsal`, handed over in `setup`: it runs
n_steps trial steps from a snapshot of model, optimizer, data position and RNGs, calling
`per_step(i)` after each backward (which exchanges the gradients in `p.grad` and writes
the averaged ones back), then restores the snapshot. All workers probe at the same step
(per_step communicates). The strategy itself saves and restores its residuals and the
live step's `p.grad` around the probe, so after probing the training trajectory differs
only by the chosen ratio. The probes' communication records are returned with the step's
records (the modeled clock pays for probing, as the method does), and the rehearsal
charges the probe steps' compute.

NCCL: `process_env` forces NCCL's allreduce algorithm for a fixed `ar_ring`/`ar_tree` choice
(`repro.compress.policy.nccl_env`); the options' checks are `repro.compress.topk_options`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from repro.compress.policy import CollectivePolicy, nccl_env
from repro.compress.ratio import (
    DEFAULT_BOUNDS,
    DEFAULT_CANDIDATES,
    DEFAULT_REPROBE_CHANGE,
    DEFAULT_WEIGHTS,
    FixedRatio,
    MOORatioController,
)
from repro.compress.topk_options import check_options
from repro.netmodel import cost
from repro.netmodel.cost import Link
from repro.strategies.base import MethodConfig, StepInfo, register

if TYPE_CHECKING:
    from repro.comm.collectives import Collectives, CommRecord
    from repro.compress.exchange import ExchangeResult
    from repro.train.stacked_optim import StackedOptimizer

_NORM_BYTES = 4  # VAR-Topk's allgather carries one float32 per worker


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


@register(TopKConfig)
class TopKStrategy:
    """Error-feedback Top-k with a collective policy and a ratio controller (module doc)."""

    def __init__(self, cfg: TopKConfig, world_size: int):
        # torch and the tensor code are imported in the methods that run: discovery
        # imports this module to compose a config (`repro.strategies.base`).
        from repro.compress.memory import ErrorFeedback
        from repro.compress.smoothed_norm import WindowedNorm

        self.cfg = cfg
        self.world_size = world_size
        self.memory = ErrorFeedback()
        self.var_norms = WindowedNorm(cfg.var_window, cfg.var_smoothing)  # used by ewma_grad
        self.policy = CollectivePolicy(cfg.collective)
        self.controller: FixedRatio | MOORatioController = (
            FixedRatio(cfg.cr)
            if cfg.cr_controller == "fixed"
            else MOORatioController(
                cfg.candidates,
                cfg.weights,
                cfg.ratio_bounds,
                seed=cfg.seed,
                reprobe_change=cfg.reprobe_change,
            )
        )
        self._link: Link | None = None
        self._window: list[float] = []
        self._probe_due = cfg.cr_controller == "moo"
        self._probes = 0
        self._leader = -1
        self._metrics: dict = {}

    def setup(self, model, optimizer: StackedOptimizer, comm: Collectives, rehearsal) -> None:
        self.comm, self.rehearsal = comm, rehearsal
        self.params = model.named_parameters()
        self.sizes = [p[0].numel() for _, p in self.params]
        self.numel = sum(self.sizes)
        element = self.params[0][1].element_size()
        self.nbytes = self.numel * element * self.cfg.bytes_scale

    def after_backward(self, info: StepInfo) -> list[CommRecord]:
        records: list[CommRecord] = []
        link_changed = self._link is not None and info.link != self._link
        self._link = info.link
        if self._probe_due:
            records += self._probe_and_solve(info)
        elif self.controller.needs_solve(link_changed):
            gains = self.controller.gains
            self.controller.solve(
                {c: (g, self._sync_seconds(c, info.link)) for c, g in gains.items()}
            )
        cr = self.controller.cr
        result, step_records = self._exchange(info.step, cr, info.link)
        records += step_records
        self._metrics = {
            "method/cr": cr,
            "method/collective": self.policy.last,
            "method/gain": result.gain,
            "method/k": self._ks(cr)[0],
            "method/leader": self._leader,
            "method/probes": self._probes,
        }
        self._watch_gain(result.gain)
        return records

    def after_step(self, info: StepInfo) -> list[CommRecord]:
        return []

    def metrics(self) -> dict:
        return dict(self._metrics)

    def _ks(self, cr: float) -> tuple[int, list[int] | None]:
        """Entries kept per worker at ratio `cr`, and per tensor when layer-wise."""
        from repro.compress.topk import k_for, layer_shares

        if cr == 1:
            return self.numel, None
        if not self.cfg.layerwise:
            return k_for(self.numel, cr), None
        shares = layer_shares(self.sizes, cr, self.cfg.layer_split)
        return sum(shares), shares

    def _exchange(
        self, step: int, cr: float, link: Link
    ) -> tuple[ExchangeResult, list[CommRecord]]:
        """One exchange of the compensated gradients in `p.grad`; averages written back."""
        from repro.compress.exchange import (
            ag_topk_exchange,
            ar_topk_exchange,
            dense_exchange,
            star_leader,
            var_leader,
            var_sq_norms,
        )

        grads = {name: p.grad.reshape(p.shape[0], -1) for name, p in self.params}
        flat = self.memory.compensate_flat(grads)
        collective = self.policy.choose(link, self.nbytes, cr, self.comm.world_size)
        algo = "tree" if collective == "ar_tree" else "ring"
        k, shares = self._ks(cr)
        layers = self.sizes if shares is not None else None
        records: list[CommRecord] = []
        self._leader = -1  # no leader: a dense or allgather exchange
        if cr == 1:
            result = dense_exchange(self.comm, flat, algo)
        elif collective == "allgather":
            result = ag_topk_exchange(self.comm, flat, k, layers, shares)
        else:
            if self.cfg.leader == "var":
                ranks_by = var_sq_norms(self.cfg.var_norm, grads, flat)
                if self.cfg.var_norm == "ewma_grad":
                    ranks_by = self.var_norms.update(ranks_by)
                leader, record = var_leader(self.comm, ranks_by)
                records.append(record)
            else:
                leader = star_leader(step, self.comm.world_size)
            self._leader = leader
            result = ar_topk_exchange(self.comm, flat, k, leader, algo, layers, shares)
        records += result.records
        for (_, p), avg in zip(self.params, result.average.split(self.sizes, dim=1), strict=True):
            p.grad.copy_(avg.reshape(p.shape))
        self.memory.keep(flat, result.sent)  # flat becomes the residual: read last
        return result, records

    def _sync_seconds(self, cr: float, link: Link) -> float:
        """Modeled seconds of one exchange at ratio `cr` on `link` (the time objective)."""
        n = self.comm.world_size
        choice = self.policy.decide(link, self.nbytes, cr, n)
        seconds = self.policy.seconds(choice, link, self.nbytes, cr, n)
        if self.cfg.leader == "var" and choice != "allgather":
            seconds += cost.allgather(link, _NORM_BYTES * self.cfg.bytes_scale, n)
        return seconds

    def _probe_and_solve(self, info: StepInfo) -> list[CommRecord]:
        """Probe every candidate ratio from the same snapshot, then solve Eq. 6."""
        live_grads = [p.grad.clone() for _, p in self.params]
        residuals, norms = self.memory.state_dict(), self.var_norms.state_dict()
        records: list[CommRecord] = []
        probes: dict[float, tuple[float, float]] = {}
        for c in self.controller.candidates:
            self.memory.load_state_dict(residuals)
            self.var_norms.load_state_dict(norms)
            gains: list[float] = []

            def per_step(i: int, c: float = c, gains: list[float] = gains) -> None:
                result, step_records = self._exchange(info.step + i, c, info.link)
                gains.append(result.gain)
                records.extend(step_records)

            self.rehearsal.rehearse(self.cfg.probe_steps, per_step)
            probes[c] = (sum(gains) / len(gains), self._sync_seconds(c, info.link))
        self.memory.load_state_dict(residuals)
        self.var_norms.load_state_dict(norms)
        for (_, p), grad in zip(self.params, live_grads, strict=True):
            p.grad.copy_(grad)
        self.controller.solve(probes)
        self._probes += 1
        self._probe_due = False
        self._window.clear()
        return records

    def _watch_gain(self, gain: float) -> None:
        """Average the gain over blocks of `gain_window` steps and ask whether to re-probe.

        One step's gain is noisy (it moves by more than 10% from batch to batch on small
        models), so the 10% re-probe rule compares block means, not single steps.
        """
        self._window.append(gain)
        if len(self._window) == self.cfg.gain_window:
            self._probe_due = self.controller.needs_probe(sum(self._window) / len(self._window))
            self._window.clear()

    def state_dict(self) -> dict:
        link = None if self._link is None else (self._link.latency_s, self._link.bandwidth_Bps)
        return {
            "residuals": self.memory.state_dict(),
            "controller": self.controller.state_dict(),
            "window": list(self._window),
            "probe_due": self._probe_due,
            "probes": self._probes,
            "link": link,
            "var_norms": self.var_norms.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.memory.load_state_dict(state["residuals"])
        self.controller.load_state_dict(state["controller"])
        self._window = list(state["window"])
        self._probe_due = state["probe_due"]
        self._probes = state["probes"]
        self._link = None if state["link"] is None else Link(*state["link"])
        self.var_norms.load_state_dict(state["var_norms"])
