"""A workload: data set, model, loss and evaluation, bundled for one worker.

`workload.task` picks the loss and what evaluation counts as correct: `classification`
(cross-entropy; correct = arg-max equals the label) or `regression` (mean squared error;
correct = the prediction lies within `workload.tolerance` of the target, so test/acc is the
share of test points fitted to that tolerance and stays comparable to a target accuracy).

`prepare` runs once in the launching process (it generates MNIST-1D or downloads CIFAR), so
that missing data fail before any worker starts and N workers never race on one download.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hydra.core.config_store import ConfigStore
from torch.nn import functional as F

from repro.errors import UserError
from repro.workload import data as data_mod
from repro.workload.models import MODELS, build_model

DATASETS = ("mnist1d", "synthetic", "toy_quadratic", "cifar10", "cifar100")
TASKS = ("classification", "regression")
# Data sets whose targets are real values, and the one model that fits each of them.
REGRESSION = {"toy_quadratic": "toy_quadratic"}


@dataclass
class WorkloadConfig:
    name: str = "mnist1d_cnn"
    dataset: str = "mnist1d"
    model: str = "cnn1d"
    num_samples: int = 10_000
    augment: bool = False
    eval_batch_size: int = 1000
    task: str = "classification"
    tolerance: float = 0.1

    def train_size(self) -> int:
        """Training samples this workload yields (MNIST-1D keeps 80% for training)."""
        sizes = {
            "mnist1d": int(self.num_samples * 0.8),
            "synthetic": self.num_samples,
            "toy_quadratic": self.num_samples,
        }
        return sizes.get(self.dataset, 50_000)

    def __post_init__(self):
        if self.dataset not in DATASETS:
            raise UserError(
                f"workload.dataset={self.dataset!r} is unknown; choose one of {list(DATASETS)}"
            )
        if self.model not in MODELS:
            raise UserError(
                f"workload.model={self.model!r} is unknown; choose one of {list(MODELS)}"
            )
        if self.num_samples < 2:
            raise UserError(f"workload.num_samples={self.num_samples} must be at least 2")
        if self.eval_batch_size < 1:
            raise UserError(f"workload.eval_batch_size={self.eval_batch_size} must be at least 1")
        if self.task not in TASKS:
            raise UserError(f"workload.task={self.task!r} must be one of {list(TASKS)}")
        wanted = "regression" if self.dataset in REGRESSION else "classification"
        if self.task != wanted:
            raise UserError(
                f"workload.task={self.task} does not fit workload.dataset={self.dataset}; "
                f"use {wanted}"
            )
        if (self.model == "toy_quadratic") != (self.dataset == "toy_quadratic"):
            raise UserError(
                f"workload.model={self.model} cannot fit workload.dataset={self.dataset}; "
                f"model toy_quadratic goes with data set toy_quadratic only"
            )
        if not self.tolerance > 0:
            raise UserError(f"workload.tolerance={self.tolerance} must be positive")


ConfigStore.instance().store(group="workload", name="workload_schema", node=WorkloadConfig)


def prepare(cfg: WorkloadConfig, data_cfg: data_mod.DataConfig, seed: int) -> data_mod.Arrays:
    return data_mod.load(cfg.dataset, data_cfg.root, data_cfg.download, cfg.num_samples, seed)


class Workload:
    """One worker's view: its data shard, the model, and loss/eval functions."""

    def __init__(self, cfg: WorkloadConfig, arrays: data_mod.Arrays, device: str):
        self.cfg, self.arrays, self.device = cfg, arrays, device
        in_dim = arrays.x_train.shape[-1]
        self.model_factory = lambda: build_model(cfg.model, arrays.num_classes, in_dim)
        if arrays.image_stats is not None:
            mean, std = arrays.image_stats
            self._mean = torch.tensor(mean).view(1, 3, 1, 1)
            self._std = torch.tensor(std).view(1, 3, 1, 1)

    def _inputs(self, x: torch.Tensor, gen: torch.Generator | None) -> torch.Tensor:
        """Model inputs; training batches are augmented (when configured) from `gen`, the
        worker's own augmentation generator."""
        if self.arrays.image_stats is None:
            return x
        x = x.float().div_(255.0)
        if gen is not None and self.cfg.augment:
            x = self._augment(x, gen)
        return (x - self._mean) / self._std

    def _augment(self, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """Random 32x32 crop of the 4-pixel zero-padded image and a random horizontal flip."""
        n = x.shape[0]
        padded = F.pad(x, (4, 4, 4, 4))
        dx = torch.randint(0, 9, (n,), generator=gen)
        dy = torch.randint(0, 9, (n,), generator=gen)
        flip = torch.rand(n, generator=gen) < 0.5
        out = torch.stack([padded[i, :, dy[i] : dy[i] + 32, dx[i] : dx[i] + 32] for i in range(n)])
        out[flip] = out[flip].flip(-1)
        return out

    def batch(
        self, indices: torch.Tensor, gen: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x = self._inputs(self.arrays.x_train[indices], gen)
        return x.to(self.device), self.arrays.y_train[indices].to(self.device)

    def loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Mean loss of a batch: cross-entropy, or squared error for regression."""
        if self.cfg.task == "regression":
            return F.mse_loss(out, y)
        return F.cross_entropy(out, y)

    def _sums(self, out: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
        """(loss sum, correct count) of one evaluation batch."""
        if self.cfg.task == "regression":
            loss = F.mse_loss(out, y, reduction="sum").item()
            return loss, ((out - y).abs() <= self.cfg.tolerance).sum().item()
        loss = F.cross_entropy(out, y, reduction="sum").item()
        return loss, (out.argmax(1) == y).sum().item()

    @torch.no_grad()
    def evaluate_shard(self, model: torch.nn.Module, rank: int, world: int) -> torch.Tensor:
        """Sums over this rank's slice of the test set: (loss sum, correct, count).

        Correct means the right class, or for regression within `tolerance` of the target.
        """
        model.eval()
        x_all, y_all = self.arrays.x_test[rank::world], self.arrays.y_test[rank::world]
        out = torch.zeros(3, dtype=torch.float64)
        for s in range(0, len(y_all), self.cfg.eval_batch_size):
            x = self._inputs(x_all[s : s + self.cfg.eval_batch_size], None).to(self.device)
            y = y_all[s : s + self.cfg.eval_batch_size].to(self.device)
            loss, correct = self._sums(model(x), y)
            out[0] += loss
            out[1] += correct
            out[2] += len(y)
        model.train()
        return out
