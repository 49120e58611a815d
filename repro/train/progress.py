"""The run's progress bar: steps, or modeled seconds when the run has a time budget.

Only the first process draws it, and only with `trainer.progress`. With a modeled-time
budget (AdaComm's equal-time comparisons) the bar counts modeled seconds, else steps; the
postfix shows the last logged point's loss and accuracy.
"""

from __future__ import annotations

from tqdm import tqdm


class Progress:
    def __init__(
        self, label: str, steps: int, budget_s: float, start: int, now_s: float, show: bool
    ):
        self.by_time = budget_s > 0
        self.budget_s = budget_s
        self.bar = tqdm(
            total=round(budget_s, 1) if self.by_time else steps,
            initial=round(min(now_s, budget_s), 1) if self.by_time else start,
            desc=label,
            unit="s" if self.by_time else "step",
            disable=not show,
            dynamic_ncols=True,
        )

    def advance(self, now_s: float) -> None:
        if self.by_time:
            self.bar.update(round(min(now_s, self.budget_s), 1) - self.bar.n)
        else:
            self.bar.update(1)

    def show_point(self, point: dict) -> None:
        self.bar.set_postfix(
            step=point["step"], loss=f"{point['train/loss']:.4f}", acc=f"{point['test/acc']:.3f}"
        )

    def close(self) -> None:
        self.bar.close()
