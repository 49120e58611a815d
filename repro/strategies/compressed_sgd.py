"""Compressed SGD: a compressor, an error-feedback memory and an exchange, joined in one step.

GRACE's decomposition (Xu et al., ICDCS 2021) in this suite's terms. After backward, each
step:
    G = memory.compensate_flat(grads)              # g + residual, one flat row per worker
    c = compressor.for_exchange(ratio)             # e.g. Top-k at the controller's ratio
    result = exchange.run(comm, c, G ...)          # payload over a collective, combined
    p.grad = result.average; memory.update(G, result)    # keep what did not go out
The parts live in `repro.compress` (compressor.py, memory.py, exchange_parts.py, ratio.py);
a method's config builds them (`parts()`), so a method is its config, its yaml and, when
it compresses in a new way, one compressor module. Flexible Top-k, signSGD and PowerSGD
are configs of this one strategy (strategies/topk.py, signsgd.py, powersgd.py).

A ratio controller is optional. With the multi-objective one (Flexible Top-k, Eq. 6),
probing uses the trainer's `Rehearsal`, handed over in `setup`: for each candidate in turn
it runs probe steps from one snapshot of model, optimizer, data position and RNGs, calling
that candidate's `per_step(i)` after each backward (which exchanges the gradients in
`p.grad` and writes the combined ones back), then restores the snapshot. All workers
probe at the same step (per_step communicates). The strategy itself restores its
residuals and its parts' state at each candidate's first step and after the probe, and the
live step's `p.grad` after it, so after probing the training trajectory differs only by
the chosen ratio. The probes' communication records are returned with the step's records
(the modeled clock pays for probing, as the method does), and the rehearsal charges the
probe steps' compute.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from repro.netmodel.cost import Link
from repro.strategies.base import Metrics, StepInfo, Strategy
from repro.strategies.flat import grads_from

if TYPE_CHECKING:
    from collections.abc import Callable

    from repro.comm.collectives import Collectives
    from repro.comm.record import CommRecord
    from repro.compress.compressor import Compressor
    from repro.compress.exchange import ExchangeResult
    from repro.compress.exchange_parts import Exchange
    from repro.compress.memory import ErrorFeedback, GradientTargets
    from repro.compress.ratio import FixedRatio, MOORatioController
    from repro.optim.stacked import StackedOptimizer


@dataclass
class Parts:
    """What a compressed-SGD method is made of. `probe_steps` > 0 makes the controller
    probe (MOO); `gain_window` steps of compression gain are averaged before it is asked
    whether to probe again; `bytes_scale` sizes messages as the modeled clock does."""

    compressor: Compressor
    memory: ErrorFeedback
    exchange: Exchange
    controller: FixedRatio | MOORatioController | None = None
    probe_steps: int = 0
    gain_window: int = 1
    bytes_scale: float = 1.0


class Composed(Protocol):
    """A method config that builds compressed SGD's parts."""

    def parts(self) -> Parts: ...


class CompressedSGD(Strategy):
    """Memory, compressor, exchange and an optional ratio controller, joined (module doc).
    Every exchange hands all workers the same combined update."""

    identical_workers = True

    def __init__(self, cfg: Composed, world_size: int):
        super().__init__(cfg, world_size)
        parts = cfg.parts()
        self.compressor, self.memory = parts.compressor, parts.memory
        self.exchange, self.controller = parts.exchange, parts.controller
        self.probe_steps, self.gain_window = parts.probe_steps, parts.gain_window
        self.bytes_scale = parts.bytes_scale
        self._link: Link | None = None
        self._window: list[float] = []
        self._probe_due = parts.probe_steps > 0
        self._probes = 0
        self._metrics: dict = {}
        self._offered: GradientTargets | None = None

    def setup(self, model, optimizer: StackedOptimizer, comm: Collectives, rehearsal) -> None:
        self.comm, self.rehearsal = comm, rehearsal
        self.params = model.named_parameters()
        self.compressor.bind([tuple(p.shape[1:]) for _, p in self.params])
        element = self.params[0][1].element_size()
        self.nbytes = sum(p[0].numel() for _, p in self.params) * element * self.bytes_scale

    def gradient_targets(self) -> GradientTargets | None:
        """Where G forms (`ErrorFeedback.gradient_targets`), so the backward puts the
        gradients there itself; not when this step probes (the probes start from the
        residuals as they are). An exchange that ranks by ||g||^2 (VAR's) has the backward
        measure each gradient it puts: a VAR-Topk step of cnn1d_wide at 8 workers took
        0.9 ms less than with its gradients left apart from G and added afterwards."""
        targets = None if self._probe_due else self.memory.gradient_targets()
        if targets is not None and self.exchange.reads_gradients:
            rows = next(iter(targets.tensors.values()))
            norms = {n: rows.new_empty(rows.shape[0]) for n in targets.tensors}
            targets = targets._replace(sq_norms=norms)
        self._offered = targets
        return targets

    def after_backward(self, info: StepInfo) -> list[CommRecord]:
        records: list[CommRecord] = []
        link_changed = self._link is not None and info.link != self._link
        self._link = info.link
        controller = self.controller
        if self._probe_due:
            records += self._probe_and_solve(info)
        elif controller is not None and controller.needs_solve(link_changed):
            controller.solve(
                {c: (g, self._sync_seconds(c, info.link)) for c, g in controller.gains.items()}
            )
            # the reference gain is the first block's at the new ratio, not one that mixes
            # gains of the old ratio in (a 20% step in gain then read as a change of 10%)
            self._window.clear()
        ratio = None if controller is None else controller.cr
        result = self._exchange(info.step, ratio, info.link)
        records += result.records
        self._metrics = {**self.exchange.metrics(), **self.compressor.metrics(ratio)}
        if result.gain is not None:
            self._metrics["method/gain"] = result.gain
        if controller is not None:
            self._metrics.update({"method/cr": ratio, "method/probes": self._probes})
            self._watch_gain(result.gain)
        return records

    def metrics(self) -> Metrics:
        return dict(self._metrics)

    def _exchange(self, step: int, ratio: float | None, link: Link) -> ExchangeResult:
        """One exchange of the compensated gradients in `p.grad`; the update written back."""
        from repro.compress.exchange_parts import ExchangeInput

        grads = {name: p.grad.reshape(p.shape[0], -1) for name, p in self.params}
        put = {} if self._offered is None else self._offered.measured(grads)
        flat = self.memory.compensate_flat(grads)
        compressor = self.compressor.for_exchange(ratio)
        x = ExchangeInput(flat, grads, step, link, self.nbytes, ratio, put)
        result = self.exchange.run(self.comm, compressor, x)
        # taken, not copied: the update is usually one row expanded over the workers, of
        # which the optimizer reads one (the parameters are one shared row); copying wrote
        # every row
        grads_from([p for _, p in self.params], result.average)
        self.memory.update(flat, result)  # flat becomes the residual: read last
        return result

    def _sync_seconds(self, cr: float, link: Link) -> float:
        return self.exchange.seconds(link, self.nbytes, cr, self.comm.world_size)

    def _probe_and_solve(self, info: StepInfo) -> list[CommRecord]:
        """Probe every candidate ratio from the same snapshot, then solve Eq. 6."""
        live_grads = [p.grad.clone() for _, p in self.params]
        saved = self._parts_state()
        records: list[CommRecord] = []
        gains: dict[float, list[float]] = {c: [] for c in self.controller.candidates}

        def trial(c: float) -> Callable[[int], None]:
            def per_step(i: int) -> None:
                if i == 0:  # every candidate from the same residuals and exchange state
                    self._load_parts_state(saved)
                result = self._exchange(info.step + i, c, info.link)
                gains[c].append(result.gain)
                records.extend(result.records)

            return per_step

        self.rehearsal.rehearse(self.probe_steps, *(trial(c) for c in gains))
        probes = {c: (sum(g) / len(g), self._sync_seconds(c, info.link)) for c, g in gains.items()}
        self._load_parts_state(saved)
        for (_, p), grad in zip(self.params, live_grads, strict=True):
            p.grad = grad
        self.controller.solve(probes)
        self._probes += 1
        self._probe_due = False
        self._window.clear()
        return records

    def _parts_state(self) -> dict:
        return {
            "residuals": self.memory.state_dict(),
            "exchange": self.exchange.state_dict(),
            "compressor": self.compressor.state_dict(),
        }

    def _load_parts_state(self, state: dict) -> None:
        self.memory.load_state_dict(state["residuals"])
        self.exchange.load_state_dict(state["exchange"])
        self.compressor.load_state_dict(state["compressor"])

    def _watch_gain(self, gain: float) -> None:
        """Average the gain over blocks of `gain_window` steps and ask whether to re-probe.

        One step's gain is noisy (it moves by more than 10% from batch to batch on small
        models), so the 10% re-probe rule compares block means, not single steps.
        """
        self._window.append(gain)
        if len(self._window) == self.gain_window:
            self._probe_due = self.controller.needs_probe(sum(self._window) / len(self._window))
            self._window.clear()

    def state_dict(self) -> dict:
        link = None if self._link is None else (self._link.latency_s, self._link.bandwidth_Bps)
        controller = None if self.controller is None else self.controller.state_dict()
        return {
            **self._parts_state(),
            "controller": controller,
            "window": list(self._window),
            "probe_due": self._probe_due,
            "probes": self._probes,
            "link": link,
        }

    def load_state_dict(self, state: dict) -> None:
        self._load_parts_state(state)
        if self.controller is not None:
            self.controller.load_state_dict(state["controller"])
        self._window = list(state["window"])
        self._probe_due = state["probe_due"]
        self._probes = state["probes"]
        self._link = None if state["link"] is None else Link(*state["link"])
