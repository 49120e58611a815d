"""The divergence guard on real training losses and on exact hand-made sequences."""

from __future__ import annotations

import io
import math
import pickle

import pytest
import torch
import torch.nn.functional as F

from repro.errors import UserError
from repro.schemas.trainer import DivergenceConfig
from repro.train.divergence import Diverged, DivergenceGuard
from repro.workload.data import synthetic
from repro.workload.models import build_model


def _train(opt_name: str, lr: float, steps: int, guard: DivergenceGuard) -> list[float]:
    """Train the synthetic-blobs MLP, feeding the guard each step's loss as the trainer does."""
    data = synthetic(1024, seed=0)
    torch.manual_seed(0)
    model = build_model("mlp", data.num_classes, in_dim=data.x_train.shape[1])
    if opt_name == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=lr)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(0)
    losses = []
    for step in range(1, steps + 1):
        idx = torch.randint(0, data.n_train, (32,), generator=g)
        loss = F.cross_entropy(model(data.x_train[idx]), data.y_train[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        guard.check_loss(step, [losses[-1]])
    return losses


def test_adam_at_lr_1e6_is_stopped_within_a_few_steps():
    guard = DivergenceGuard(DivergenceConfig())
    with pytest.raises(Diverged) as err:
        _train("adam", 1e6, 100, guard)
    e = err.value
    assert e.reason == "loss_multiple"
    assert 2 <= e.step <= 5
    (initial,) = guard.initial
    assert 1.0 < initial < 3.0  # the untrained model's loss (4 classes)
    assert f"is over 10x the initial {initial:.4g}" in str(e)
    assert f"training diverged at step {e.step}: the mean loss of the last" in str(e)
    assert "(trainer.divergence.loss_multiple=10); lower optim.lr" in str(e)


def test_a_healthy_run_is_never_stopped():
    guard = DivergenceGuard(DivergenceConfig())
    losses = _train("sgd", 0.1, 300, guard)
    assert losses[-1] < 0.05 < losses[0]
    guard.check_point(step=300, epoch=9.4, test_acc=1.0, test_loss=1.0, num_classes=4)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_nonfinite_loss_stops_at_once(bad):
    guard = DivergenceGuard(DivergenceConfig())
    guard.check_loss(1, [2.3, 2.3])
    with pytest.raises(Diverged) as err:
        guard.check_loss(2, [2.1, bad])
    assert err.value.reason == "nonfinite" and err.value.step == 2
    assert str(err.value) == f"training diverged at step 2: the loss is {bad}; lower optim.lr"


def test_a_nan_test_loss_stops_at_any_evaluation():
    # the last step's update is judged by nothing else: its training loss came before it
    guard = DivergenceGuard(DivergenceConfig())
    with pytest.raises(Diverged) as err:
        guard.check_point(step=1, epoch=0.01, test_acc=0.1, test_loss=math.nan, num_classes=10)
    assert err.value.reason == "nonfinite" and err.value.step == 1
    assert str(err.value) == (
        "training diverged at step 1: the evaluated model's test loss is nan; lower optim.lr"
    )
    # a huge finite loss overflows a float32 batch sum at some batch sizes and not others
    guard.check_point(step=1, epoch=0.01, test_acc=0.1, test_loss=math.inf, num_classes=0)


def _feed(guard: DivergenceGuard, losses: list, first_step: int = 1) -> int | None:
    """The step at which the guard trips, or None. `losses`: one float (a lone worker) or
    one list of the held workers' losses per step."""
    for i, loss in enumerate(losses):
        try:
            guard.check_loss(first_step + i, loss if isinstance(loss, list) else [loss])
        except Diverged as e:
            return e.step
    return None


# Initial 2.3, nine steps at 2.0, then the loss jumps to 30 and stays there. The 10-step
# mean after j such steps is 2.0 + 2.8 j, first over 10 x 2.3 = 23 at j = 8: step 18.
SPIKE = [2.3] + [2.0] * 9 + [30.0] * 20


def test_one_bad_batch_passes_but_a_sustained_blowup_does_not():
    assert _feed(DivergenceGuard(DivergenceConfig()), [2.3] + [2.0] * 9 + [30.0, 2.0]) is None
    assert _feed(DivergenceGuard(DivergenceConfig()), SPIKE) == 18
    # without the window a single step over 23 trips at once
    assert _feed(DivergenceGuard(DivergenceConfig(loss_window=1)), SPIKE) == 11
    assert _feed(DivergenceGuard(DivergenceConfig(loss_multiple=0)), SPIKE) is None


def test_each_worker_is_judged_on_its_own_losses():
    # Worker 1 starts at 0.5 and levels at 6, worker 0 stays at 2.3. Worker 1's mean
    # (of fewer than 10 steps yet) first passes 10 x 0.5 after five steps at 6:
    # (0.5 + 5 x 6) / 6 = 5.08, at step 6.
    workers = [[2.3, 0.5]] + [[2.3, 6.0]] * 12
    assert _feed(DivergenceGuard(DivergenceConfig()), workers) == 6
    # the same worker alone, as under the process engine, trips at the same step
    assert _feed(DivergenceGuard(DivergenceConfig()), [w[1] for w in workers]) == 6
    # averaging the two would have hidden it
    assert _feed(DivergenceGuard(DivergenceConfig()), [sum(w) / 2 for w in workers]) is None


def test_state_survives_a_checkpoint_and_resume():
    first = DivergenceGuard(DivergenceConfig())
    assert _feed(first, SPIKE[:14]) is None
    buf = io.BytesIO()
    torch.save({"divergence": first.state_dict()}, buf)  # as it travels in a checkpoint
    buf.seek(0)
    resumed = DivergenceGuard(DivergenceConfig())
    resumed.load_state_dict(torch.load(buf, weights_only=True)["divergence"])
    assert resumed.initial == [2.3]
    assert _feed(resumed, SPIKE[14:], first_step=15) == 18
    # a fresh guard would take 30 as its initial loss and never trip
    assert _feed(DivergenceGuard(DivergenceConfig()), SPIKE[14:], first_step=15) is None


def test_zero_initial_loss_has_no_multiple():
    assert _feed(DivergenceGuard(DivergenceConfig()), [0.0, 5.0, 50.0]) is None


def test_still_at_chance_past_the_point():
    guard = DivergenceGuard(DivergenceConfig())  # 3 epochs and 200 steps
    # 10 classes: chance 0.1, at chance up to 0.12
    with pytest.raises(Diverged) as err:
        guard.check_point(step=800, epoch=3.2, test_acc=0.089, test_loss=1.0, num_classes=10)
    assert err.value.reason == "chance" and err.value.step == 800
    assert str(err.value) == (
        "training diverged at step 800: test accuracy 0.089 is still at chance "
        "(1/10 = 0.100) after 3.2 epochs (trainer.divergence.chance_after_epochs=3, "
        "chance_after_steps=200); change optim.lr, or raise those if this run learns late"
    )
    guard.check_point(step=800, epoch=3.2, test_acc=0.121, test_loss=1.0, num_classes=10)
    # before 3 epochs, before 200 steps, a regression
    guard.check_point(step=700, epoch=2.8, test_acc=0.1, test_loss=1.0, num_classes=10)
    guard.check_point(step=150, epoch=19.0, test_acc=0.1, test_loss=1.0, num_classes=10)
    guard.check_point(step=800, epoch=3.2, test_acc=0.0, test_loss=1.0, num_classes=0)
    off = DivergenceGuard(DivergenceConfig(chance_after_epochs=0))
    off.check_point(step=10_000, epoch=100.0, test_acc=0.1, test_loss=1.0, num_classes=10)
    with pytest.raises(Diverged):  # 2 classes: at chance up to 0.52
        guard.check_point(step=800, epoch=3.2, test_acc=0.515, test_loss=1.0, num_classes=2)


def test_diverged_keeps_its_reason_through_pickle():
    # workers send it to the launcher pickled
    e = pickle.loads(pickle.dumps(Diverged("training diverged at step 7: x", "chance", 7)))
    assert isinstance(e, Diverged) and isinstance(e, UserError)
    assert (str(e), e.reason, e.step) == ("training diverged at step 7: x", "chance", 7)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("loss_multiple", 1.0, "trainer.divergence.loss_multiple=1.0 must be > 1 (0 = off)"),
        ("loss_multiple", -3.0, "trainer.divergence.loss_multiple=-3.0 must be > 1 (0 = off)"),
        ("loss_window", 0, "trainer.divergence.loss_window=0 must be at least 1"),
        (
            "chance_after_epochs",
            -1.0,
            "trainer.divergence.chance_after_epochs=-1.0 must be >= 0 (0 = off)",
        ),
        ("chance_after_steps", -5, "trainer.divergence.chance_after_steps=-5 must be >= 0"),
    ],
)
def test_bad_settings_are_refused_with_one_line(field, value, message):
    with pytest.raises(UserError) as err:
        DivergenceConfig(**{field: value})
    assert str(err.value) == message
