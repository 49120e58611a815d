"""Horovod's Adasum toy problem as a workload: data, model, regression loss and accuracy."""

import pytest
import torch

from repro.config import compose
from repro.errors import UserError
from repro.workload.data import toy_quadratic
from repro.workload.workload import Workload, WorkloadConfig


def _workload(tolerance: float = 0.1) -> Workload:
    cfg = WorkloadConfig(
        name="toy",
        dataset="toy_quadratic",
        model="toy_quadratic",
        num_samples=50,
        task="regression",
        tolerance=tolerance,
    )
    return Workload(cfg, toy_quadratic(50, seed=3), "cpu")


def test_data_are_exact_samples_of_the_quadratic():
    d = toy_quadratic(50, seed=3)
    assert d.x_train.shape == (50, 1) and d.x_test.shape == (10, 1) and d.num_classes == 0
    for x, y in ((d.x_train, d.y_train), (d.x_test, d.y_test)):
        assert x.abs().max() <= 1
        xs = x.squeeze(1).double()
        torch.testing.assert_close(y.double(), xs**2 - 20 * xs + 50, rtol=0, atol=1e-5)
    again = toy_quadratic(50, seed=3)
    assert torch.equal(again.x_train, d.x_train)


def test_model_starts_at_one_minus_one_and_fits_at_the_optimum():
    w = _workload()
    model = w.model_factory()
    assert model.param.tolist() == [1.0, -1.0]
    x = torch.tensor([[0.5], [-1.0]])
    assert model(x).tolist() == [0.25 + 0.5 - 1, 1 - 1 - 1]
    with torch.no_grad():
        model.param.copy_(torch.tensor([-20.0, 50.0]))
    assert w.loss(model(w.arrays.x_train), w.arrays.y_train).item() < 1e-8


def test_regression_eval_counts_points_within_tolerance():
    """The start model predicts x^2 + x - 1; its errors are computed here point by point."""
    w = _workload(tolerance=40.0)
    model = w.model_factory()
    x, y = w.arrays.x_test.squeeze(1), w.arrays.y_test
    err = (x * x + x - 1) - y
    sums = w.evaluate_shard(model, rank=0, world=1)
    assert sums[2].item() == 10
    assert sums[1].item() == (err.abs() <= 40.0).sum().item()
    assert 0 < sums[1].item() < 10  # the tolerance splits the test points
    torch.testing.assert_close(sums[0].item(), (err.double() ** 2).sum().item(), rtol=1e-5, atol=0)
    halves = [w.evaluate_shard(model, r, 2) for r in (0, 1)]
    torch.testing.assert_close(halves[0] + halves[1], sums, rtol=1e-6, atol=1e-6)


def test_workload_composes_and_refuses_mismatched_settings():
    cfg = compose(["workload=toy_quadratic", "trainer.batch_size=1", "trainer.world_size=4"])
    assert cfg.workload.task == "regression" and cfg.workload.train_size() == 4096
    bad = [
        ("workload.task=classification", "workload.task"),
        ("workload.model=cnn1d", "workload.model"),
        ("workload.tolerance=0", "workload.tolerance"),
    ]
    for override, needle in bad:
        with pytest.raises(UserError, match=needle):
            compose(["workload=toy_quadratic", override])
    with pytest.raises(UserError, match="workload.task"):
        compose(["workload.task=regression"])
