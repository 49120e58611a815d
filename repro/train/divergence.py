"""Stopping a run that diverged, with the reason, instead of finishing it "successfully".

A NaN loss is the obvious case, but a run can also blow up to finite numbers (default Adam
at optim.lr=1e6 ends with a loss of 6.5e5 at chance accuracy) or sit at chance without any
blow-up (SGD at lr 0.5 with momentum 0.9 on MNIST-1D: loss flat at 2.27, accuracy 0.09).
`DivergenceGuard` catches all three and raises `Diverged`: the CLI prints its one line and
exits non-zero, a sweep fails the trial with it, a reproduction records the run as
diverged, and the trainer's tracker finishes the wandb run as failed.

It is a pure object: the trainer feeds it every step's losses and every evaluation, and
keeps its `state_dict` in the checkpoint, so a resumed run compares against the same
initial losses. Losses come one per worker this process holds (1 under the process engine,
all of them under the simulated one), and each worker is judged on its own losses: the
run diverges at the first step at which any worker does, under either engine.

Defaults, from runs of the MNIST-1D CNN (batch 32, 400-500 steps, seed 0; and the
synthetic-blobs MLP):
- `loss_multiple=10`: healthy runs (SGD lr 0.01 to 1.0, Adam lr 1e-3 to 0.03) never had
  a 10-step mean loss above 1.1x the first step's loss (a single step at most 1.8x);
  Adam at lr 0.3 reached 75x and at lr 1e6 6e27x. Ten times sits well inside that gap; for
  cross-entropy over 10 classes it means a mean loss of 23 nats, far worse than guessing.
- `loss_window=10`: the mean over 10 steps lets one bad batch pass (a single step at 30x
  a loss of 2 moves the mean by 2.8) while a real blow-up trips within a few steps.
- chance after both 3 epochs and 200 steps: the slowest healthy run (SGD lr 0.01) was above
  chance by step 100 (0.4 epochs). Both bounds hold because large batches make epochs
  few steps (adasum at 4x256: 8 steps per epoch) and small data sets make steps few epochs.
- "at chance" is a test accuracy within `CHANCE_MARGIN` of 1/classes.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

from repro.errors import UserError
from repro.schemas.trainer import DivergenceConfig

# Two standard errors of random guessing on 1,000 test samples of 10 classes
# (sqrt(0.1 * 0.9 / 1000) = 0.0095): a model whose accuracy stays under 1/classes plus
# this has learned nothing measurable.
CHANCE_MARGIN = 0.02


class Diverged(UserError):
    """The run diverged. `reason` is `nonfinite`, `loss_multiple` or `chance`; `step` is
    the step at which it was detected. The message is the whole explanation, one line."""

    def __init__(self, message: str, reason: str, step: int):
        super().__init__(message)
        self.reason, self.step = reason, step

    def __reduce__(self):
        # Workers send exceptions to the launcher pickled; keep reason and step.
        return (type(self), (str(self), self.reason, self.step))


class DivergenceGuard:
    """Raises `Diverged` from `check_loss` (every step) or `check_point` (every evaluation)."""

    def __init__(self, cfg: DivergenceConfig):
        self.cfg = cfg
        self.initial: list[float] | None = None  # each held worker's first-step loss
        self.recent: list[deque[float]] = []  # each held worker's last `loss_window` losses

    def check_loss(self, step: int, losses: Sequence[float]) -> None:
        """`losses`: this step's training loss of each held worker, always in the same
        order. The first call fixes the initial losses."""
        losses = [float(v) for v in losses]
        bad = [v for v in losses if not math.isfinite(v)]
        if bad:
            raise Diverged(
                f"training diverged at step {step}: the loss is {bad[0]}; lower optim.lr",
                "nonfinite",
                step,
            )
        if self.initial is None:
            self.initial = losses
            self.recent = [deque(maxlen=self.cfg.loss_window) for _ in losses]
        for window, loss in zip(self.recent, losses, strict=True):
            window.append(loss)
        m = self.cfg.loss_multiple
        if m == 0:
            return
        for initial, window in zip(self.initial, self.recent, strict=True):
            mean = sum(window) / len(window)
            # A multiple of a zero or negative initial loss bounds nothing.
            if initial > 0 and mean > m * initial:
                raise Diverged(
                    f"training diverged at step {step}: the mean loss of the last "
                    f"{len(window)} steps, {mean:.4g}, is over {m:g}x the initial "
                    f"{initial:.4g} (trainer.divergence.loss_multiple={m:g}); lower optim.lr",
                    "loss_multiple",
                    step,
                )

    def check_point(
        self, step: int, epoch: float, test_acc: float, test_loss: float, num_classes: int
    ) -> None:
        """`test_acc` and `test_loss` of the evaluated (worker-averaged) model after `epoch`
        epochs; `num_classes` 0 (regression) has no chance level and is never checked for it.

        A step's training loss is taken before its update, so an update that blows the model
        up shows first in the next step's loss, and the last step's only here: a NaN
        test loss stops the run as a non-finite training loss does. NaN only: a huge finite
        loss summed in float32 batches may overflow to inf on one engine and not the other."""
        if math.isnan(test_loss):
            raise Diverged(
                f"training diverged at step {step}: the evaluated model's test loss is "
                f"{test_loss}; lower optim.lr",
                "nonfinite",
                step,
            )
        c = self.cfg
        if num_classes < 2 or c.chance_after_epochs == 0:
            return
        if epoch < c.chance_after_epochs or step < c.chance_after_steps:
            return
        chance = 1 / num_classes
        if test_acc <= chance + CHANCE_MARGIN:
            raise Diverged(
                f"training diverged at step {step}: test accuracy {test_acc:.3f} is still at "
                f"chance (1/{num_classes} = {chance:.3f}) after {epoch:.1f} epochs "
                f"(trainer.divergence.chance_after_epochs={c.chance_after_epochs:g}, "
                f"chance_after_steps={c.chance_after_steps}); change optim.lr, or raise "
                f"those if this run learns late",
                "chance",
                step,
            )

    def state_dict(self) -> dict:
        return {"initial": self.initial, "recent": [list(w) for w in self.recent]}

    def load_state_dict(self, state: dict) -> None:
        self.initial = state["initial"]
        self.recent = [deque(w, maxlen=self.cfg.loss_window) for w in state["recent"]]
