"""A workload: data set, model, loss and evaluation, bundled for one worker.

`workload.task` picks the loss and what evaluation counts as correct: `classification`
(cross-entropy; correct = arg-max equals the label) or `regression` (mean squared error;
correct = the prediction lies within `workload.tolerance` of the target, so test/acc is the
share of test points fitted to that tolerance and stays comparable to a target accuracy).

`prepare` runs in the launching process (it generates MNIST-1D or downloads CIFAR), so that
missing data fail before any worker starts; under torchrun or SLURM, where every worker is
a launching process, the data layer's file lock lets one process of a node fetch and the
others wait (`data.node_lock`). Evaluation sums are CPU float64 tensors wherever the model
runs: they are metrics, summed over workers on the CPU backend, never on NCCL.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from repro.workload import data as data_mod
from repro.workload.config import DataConfig, WorkloadConfig
from repro.workload.models import build_model


def prepare(cfg: WorkloadConfig, data_cfg: DataConfig, seed: int) -> data_mod.Arrays:
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

    def sample(self, n: int) -> torch.Tensor:
        """The first `n` training rows as the model takes them (images scaled to [0, 1] and
        normalized, never augmented), on the CPU: the batch a memory estimate runs forward.
        The stored rows themselves are uint8 for images, which no convolution accepts."""
        return self._inputs(self.arrays.x_train[:n], None)

    @property
    def augments(self) -> bool:
        """Whether a training batch draws from its worker's augmentation generator."""
        return self.arrays.image_stats is not None and self.cfg.augment

    def batch(
        self, indices: torch.Tensor, gen: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x = self._inputs(_rows(self.arrays.x_train, indices), gen)
        return x.to(self.device), _rows(self.arrays.y_train, indices).to(self.device)

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


def _rows(t: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """t[indices]: the rows of t at `indices`, in their shape, by `index_select`, which
    copies whole rows. Inside a training step, the data set's rows evicted from cache by
    the forward and backward, the indexing operator's gather of 32 x 128 MNIST-1D rows took
    0.86 ms and `index_select` 0.19 ms (4 x 32 rows: 0.066 and 0.043 ms)."""
    return t.index_select(0, indices.reshape(-1)).view(*indices.shape, *t.shape[1:])
