"""The run's progress: a bar on a terminal, a plain line every so often elsewhere.

Only the first process shows it, and only with `trainer.progress`. With a modeled-time
budget (AdaComm's equal-time comparisons) it counts modeled seconds, else steps; the last
logged point's loss and accuracy go beside it.

A bar redraws itself with carriage returns, which is right on a terminal and wrong in a
file: a SLURM job's log would fill with thousands of frames. So when stderr is not a
terminal (a batch job, a pipe, a CI log), a line such as
`run: step 1200/5000 (24%), 31.0 steps/s, loss 0.4120 acc 0.861` is printed every
`LOG_EVERY_S` wall seconds instead, and one when the run stops. A run restored from its
checkpoint says first where it goes on from, on a terminal or not: without it a resumed
run's bar starting part-way was the only sign that the steps before were not run again.
"""

from __future__ import annotations

import math
import sys
import time
from typing import TextIO

from tqdm import tqdm

# Seconds between two progress lines when stderr is not a terminal.
LOG_EVERY_S = 30.0


def _decimals(budget_s: float) -> int:
    """Decimals that show a modeled-time budget's leading digit and one more: tenths for
    budgets of a second or more, four for 0.001 s (one fixed tenth read `modeled 0.0/0.001 s`
    for the whole run)."""
    return max(1, 1 - math.floor(math.log10(budget_s))) if budget_s > 0 else 1


class Progress:
    def __init__(
        self,
        label: str,
        steps: int,
        budget_s: float,
        start: int,
        now_s: float,
        show: bool,
        stream: TextIO | None = None,
        every_s: float = LOG_EVERY_S,
    ):
        self.label, self.steps, self.budget_s = label, steps, budget_s
        self.by_time = budget_s > 0
        self.stream = stream if stream is not None else sys.stderr
        self.every_s = every_s
        self.step, self.now_s, self.point = start, now_s, ""
        self.places = _decimals(budget_s)
        self.bar: tqdm | None = None
        self.lines = show and not self.stream.isatty()
        if show and start > 0:  # restored from a checkpoint: said once, before any bar
            at = f"step {start}/{steps}"
            if self.by_time:
                at += f", modeled {now_s:.{self.places}f}/{budget_s:g} s"
            print(f"{label}: resuming from its checkpoint at {at}", file=self.stream, flush=True)
        if show and not self.lines:
            self.bar = tqdm(
                total=round(budget_s, self.places) if self.by_time else steps,
                initial=round(min(now_s, budget_s), self.places) if self.by_time else start,
                desc=label,
                unit="s" if self.by_time else "step",
                dynamic_ncols=True,
                file=self.stream,
            )
        self.since = (time.monotonic(), start)
        self.last_line = self.since[0]

    def advance(self, now_s: float) -> None:
        self.step += 1
        self.now_s = now_s
        if self.bar is not None:
            if self.by_time:
                self.bar.update(round(min(now_s, self.budget_s), self.places) - self.bar.n)
            else:
                self.bar.update(1)
        elif self.lines and time.monotonic() - self.last_line >= self.every_s:
            self._line()

    def show_point(self, point: dict) -> None:
        loss, acc = f"{point['train/loss']:.4f}", f"{point['test/acc']:.3f}"
        if self.bar is not None:
            self.bar.set_postfix(step=point["step"], loss=loss, acc=acc)
        self.point = f", loss {loss} acc {acc}"

    def _line(self) -> None:
        now = time.monotonic()
        began, first = self.since
        rate = (self.step - first) / max(now - began, 1e-9)
        if self.by_time:
            done = f"modeled {self.now_s:.{self.places}f}/{self.budget_s:g} s"
            share = min(self.now_s / self.budget_s, 1.0)
        else:
            done, share = f"step {self.step}/{self.steps}", self.step / self.steps
        print(
            f"{self.label}: {done} ({share:.0%}), {rate:.1f} steps/s{self.point}",
            file=self.stream,
            flush=True,
        )
        self.last_line = now

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.lines:
            self._line()
