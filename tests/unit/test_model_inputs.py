"""A model and a data set go together exactly when the workload's config lets them: every
pair it accepts trains a step (forward, loss, backward), and every pair it refuses by the
shape of its inputs would have failed in torch at the first step, past start-up and data
generation (an MLP fed MNIST-1D's signals, a 1-D CNN fed images). The toy model and its
data set go only with each other, whatever the shapes: the one is the other's regression."""

import pytest
import torch

from repro.errors import UserError
from repro.workload import data
from repro.workload.config import MODELS, WorkloadConfig
from repro.workload.models import build_model
from repro.workload.workload import Workload

# CIFAR's images are synthetic_images' shape; the tests make no downloads
GENERATED = ("mnist1d", "synthetic", "synthetic_images", "toy_quadratic")


@pytest.mark.parametrize("dataset", GENERATED)
@pytest.mark.parametrize("model", MODELS)
def test_a_model_takes_the_data_sets_its_config_accepts_and_no_other(tmp_path, model, dataset):
    task = "regression" if dataset == "toy_quadratic" else "classification"
    arrays = data.load(dataset, str(tmp_path), False, 20, seed=0)
    torch.manual_seed(0)
    try:
        cfg = WorkloadConfig(name="t", dataset=dataset, model=model, num_samples=20, task=task)
    except UserError as refused:
        assert str(refused).startswith(
            f"workload.model={model} cannot take workload.dataset={dataset}; use "
        )
        if "toy_quadratic" in (model, dataset):
            return
        net = build_model(model, arrays.num_classes, arrays.x_train.shape[-1]).eval()
        x = arrays.x_train[:2].float()
        with pytest.raises(RuntimeError):
            out = net(x)  # a shape torch refuses, here or in the loss
            loss = torch.nn.functional.cross_entropy(out, arrays.y_train[:2].long())
            loss.backward()
        return
    workload = Workload(cfg, arrays, "cpu")
    net = workload.model_factory()
    x, y = workload.batch(torch.arange(2), None)
    loss = workload.loss(net(x), y)
    loss.backward()
    assert torch.isfinite(loss)
