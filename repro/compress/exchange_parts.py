"""The Exchange part: which collective carries a compressor's payload, step by step.

- `AllgatherExchange`: every worker's own payload by one allgather (Top-k's own indices,
  sign bits); any `Gatherable` compressor.
- `AllreduceExchange`: a `Summable` compressor's rounds, each summed by one allreduce
  (PowerSGD's P and Q; the dense average).
- `PolicyExchange`: Flexible Top-k's switch (Sec. IV): per step, an allgather of every
  worker's own Top-k, or AR-Topk on a leader's positions (`Leaders`: STAR round robin, VAR
  largest norm) over a ring or tree allreduce, the cheapest by the cost model (`auto`) or
  the one fixed by `method.collective`; at c = 1 the dense allreduce. It also prices an
  exchange for the ratio controller's time objective (`seconds`).

Which compressor an exchange can carry is a config-time rule (`repro.compress.pairing`);
here the shapes meet (`repro.compress.compressor`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Protocol

import torch

from repro.comm.collectives import Collectives
from repro.compress.compressor import Gatherable, Sparsifier, Summable
from repro.compress.exchange import (
    ExchangeResult,
    allgather_exchange,
    allreduce_exchange,
    leader_exchange,
    star_leader,
    var_leader,
    var_sq_norms,
)
from repro.compress.policy import CollectivePolicy
from repro.compress.smoothed_norm import WindowedNorm
from repro.netmodel import cost
from repro.netmodel.cost import Link

_NORM_BYTES = 4  # VAR-Topk's allgather carries one float32 per worker


@dataclass
class ExchangeInput:
    """One exchange's G (`compensated`, (workers, numel)) and what an exchange may decide
    by: the raw gradients (VAR's ||g||^2), the step (STAR's round robin), the modeled link,
    the dense gradient's modeled bytes and the compressor's ratio (the cost model's M, c).
    `grad_sq_norms`: each held worker's ||g||^2 of the gradients the backward added into
    their residuals, by name (their rows in `grads` are G then)."""

    compensated: torch.Tensor
    grads: dict[str, torch.Tensor]
    step: int
    link: Link
    nbytes: float
    ratio: float | None
    grad_sq_norms: dict[str, torch.Tensor] = field(default_factory=dict)


class Exchange(Protocol):
    """The part's interface. An exchange that also prices itself (`seconds`, as
    `PolicyExchange` does) can serve a ratio controller that probes. `reads_gradients`:
    it decides by the raw gradients' squared norms as well as by G, so a backward that puts
    a gradient into G measures it first (`GradientTargets.sq_norms`)."""

    reads_gradients: bool

    def run(self, comm: Collectives, compressor, x: ExchangeInput) -> ExchangeResult: ...

    def metrics(self) -> dict: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


class AllgatherExchange:
    reads_gradients = False

    def __init__(self, with_gain: bool = False):
        self.with_gain = with_gain

    def run(self, comm: Collectives, compressor: Gatherable, x: ExchangeInput) -> ExchangeResult:
        return allgather_exchange(comm, compressor, x.compensated, self.with_gain)

    def metrics(self) -> dict[str, str]:
        return {"method/collective": "allgather"}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        """An allgather decides nothing that lasts."""


class AllreduceExchange:
    reads_gradients = False

    def __init__(self, algo: str = "ring"):
        self.algo = algo

    def run(self, comm: Collectives, compressor: Summable, x: ExchangeInput) -> ExchangeResult:
        return allreduce_exchange(comm, compressor, x.compensated, self.algo)

    def metrics(self) -> dict[str, str]:
        return {"method/collective": f"ar_{self.algo}"}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        """An allreduce decides nothing that lasts."""


class Leaders:
    """AR-Topk's leader (Algorithm 1): STAR round robin, or VAR's largest norm statistic
    (`var_norm`: the paper's ||g||^2, ||G||^2, or the authors' windowed ||g||)."""

    def __init__(self, rule: str, var_norm: str, window: int, smoothing: float):
        self.rule, self.var_norm = rule, var_norm
        self.norms = WindowedNorm(window, smoothing)  # ewma_grad's window
        self.reads_gradients = rule == "var" and var_norm != "grad_plus_residual"

    def choose(self, comm: Collectives, x: ExchangeInput) -> tuple[int, list]:
        if self.rule != "var":
            return star_leader(x.step, comm.world_size), []
        ranks_by = var_sq_norms(self.var_norm, x.grads, x.compensated, x.grad_sq_norms)
        if self.var_norm == "ewma_grad":
            ranks_by = self.norms.update(ranks_by)
        leader, record = var_leader(comm, ranks_by)
        return leader, [record]


class PolicyExchange:
    """Flexible Top-k's exchange: allgather, AR-Topk (ring or tree), or dense (module doc)."""

    def __init__(self, collective: str, leaders: Leaders, bytes_scale: float = 1.0):
        self.policy = CollectivePolicy(collective)
        self.leaders = leaders
        self.bytes_scale = bytes_scale
        self.leader = -1

    def run(
        self, comm: Collectives, compressor: Sparsifier | Summable, x: ExchangeInput
    ) -> ExchangeResult:
        collective = self.policy.choose(x.link, x.nbytes, x.ratio, comm.world_size)
        algo = "tree" if collective == "ar_tree" else "ring"
        self.leader = -1  # no leader: a dense or allgather exchange
        if isinstance(compressor, Summable):
            return allreduce_exchange(comm, compressor, x.compensated, algo)
        if collective == "allgather":
            return allgather_exchange(comm, compressor, x.compensated, with_gain=True)
        self.leader, records = self.leaders.choose(comm, x)
        result = leader_exchange(comm, compressor, x.compensated, self.leader, algo)
        return replace(result, records=records + result.records)

    @property
    def reads_gradients(self) -> bool:
        return self.leaders.reads_gradients

    def seconds(self, link: Link, nbytes: float, cr: float, n: int) -> float:
        """Modeled seconds of one exchange at ratio `cr` on `link` (the time objective)."""
        choice = self.policy.decide(link, nbytes, cr, n)
        seconds = self.policy.seconds(choice, link, nbytes, cr, n)
        if self.leaders.rule == "var" and choice != "allgather":
            seconds += cost.allgather(link, _NORM_BYTES * self.bytes_scale, n)
        return seconds

    def metrics(self) -> dict:
        return {"method/collective": self.policy.last, "method/leader": self.leader}

    def state_dict(self) -> dict:
        return {"var_norms": self.leaders.norms.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.leaders.norms.load_state_dict(state["var_norms"])
