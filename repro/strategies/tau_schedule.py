"""AdaComm's communication-period schedule (Wang & Joshi 2018, Sec. 4), as a plain object.

Training is split into intervals of length T0 (modeled seconds, or steps). At the start of
interval l the period becomes

    loss rule:     tau_l = ceil( sqrt( F(x_l) / F(x_0) ) * tau_0 )
    loss-lr rule:  tau_l = ceil( sqrt( (lr_0 / lr_l) * F(x_l) / F(x_0) ) * tau_0 )

F is the training loss averaged over workers. A single mini-batch loss is too noisy to
steer by, so F(x_l) is the mean of the worker-averaged losses reported during interval l-1,
and F(x_0) the mean loss of the first averaging period (the closest estimate of the loss at
the start). lr_0 is the base rate, the largest seen so far: after a warm-up, the rate it
ramped up to. tau is kept >= 1 and, only when `tau_max` is given, <= tau_max. The published
rule has no upper bound, and the loss-lr rule is meant to rise above tau_0: a decay of the
learning rate by 10 multiplies tau by sqrt(10) at the same loss ratio (the smaller steps
drift apart more slowly, so the workers can average less often).

Optional tau_0 search: before the schedule starts, each candidate period runs for one
search window; the candidate whose loss fell fastest per unit of time becomes tau_0.
Training goes on during the search (nothing is rolled back), as a short warm-up would.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class TauSchedule:
    tau0: int
    interval: float
    rule: str = "loss"
    tau_max: int | None = None
    candidates: list[int] = field(default_factory=list)
    search_window: float = 0.0

    def __post_init__(self):
        self.tau = self.candidates[0] if self.candidates else self.tau0
        self.f0: float | None = None
        self.lr0: float | None = None
        self.interval_start = 0.0
        self.interval_losses: list[float] = []
        self.search_scores: list[float] = []
        self.search_start: tuple[float, float] | None = None
        self.searching = bool(self.candidates)

    def observe(self, now: float, loss: float, lr: float) -> int:
        """Feed one averaging: `now` on the schedule's clock, the worker-averaged loss of
        the period just ended, the current learning rate. Returns the next period's tau."""
        if self.f0 is None:
            self.f0 = loss
        # lr_0 is the base rate: a warm-up's first, smaller rates would read as a rise of the
        # rate and shrink tau at an unchanged loss, so the largest rate seen stands for it
        self.lr0 = lr if self.lr0 is None else max(self.lr0, lr)
        if self.searching:
            return self._search(now, loss)
        self.interval_losses.append(loss)
        if now - self.interval_start >= self.interval:
            f_l = sum(self.interval_losses) / len(self.interval_losses)
            self.tau = self.next_tau(f_l, lr)
            self.interval_start, self.interval_losses = now, []
        return self.tau

    def next_tau(self, f_l: float, lr: float) -> int:
        ratio = f_l / self.f0 if self.f0 and self.f0 > 0 else 1.0
        if self.rule == "loss_lr":
            ratio *= self.lr0 / lr
        tau = max(1, math.ceil(math.sqrt(max(ratio, 0.0)) * self.tau0))
        return tau if self.tau_max is None else min(tau, self.tau_max)

    def _search(self, now: float, loss: float) -> int:
        if self.search_start is None:
            self.search_start = (now, loss)
            return self.tau
        t_start, loss_start = self.search_start
        if now - t_start < self.search_window:
            return self.tau
        self.search_scores.append((loss_start - loss) / max(now - t_start, 1e-12))
        self.search_start = (now, loss)
        if len(self.search_scores) < len(self.candidates):
            self.tau = self.candidates[len(self.search_scores)]
            return self.tau
        best = max(range(len(self.candidates)), key=self.search_scores.__getitem__)
        self.tau0 = self.tau = self.candidates[best]
        self.searching = False
        self.f0 = loss
        self.interval_start, self.interval_losses = now, []
        return self.tau

    def state_dict(self) -> dict:
        return {k: v for k, v in vars(self).items()}

    def load_state_dict(self, state: dict) -> None:
        vars(self).update(state)
