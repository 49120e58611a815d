"""Data sets as in-memory tensors, and deterministic per-rank sharding.

Every data set here fits in memory (MNIST-1D: 10k x 40 floats; CIFAR: 60k x 3x32x32 bytes),
so batches are index slices rather than a DataLoader: that keeps the data position a pair
of integers, which makes checkpoints exact and resumption bit-identical.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from repro.errors import UserError
from repro.storage import atomic_write

# CIFAR per-channel statistics of the training set (standard values used by the papers' code).
_CIFAR_STATS = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
}


@dataclass
class DataConfig:
    """Where data sets live. `root` is also where users put CIFAR files for offline use."""

    root: str = "data"
    download: bool = True


@dataclass
class Arrays:
    """A data set in memory. Images are uint8 NCHW; other inputs float32.

    `num_classes` is 0 for a regression data set, whose targets are float32 values.
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    image_stats: tuple | None = None

    @property
    def n_train(self) -> int:
        return len(self.y_train)


def _save_atomic(path: Path, **arrays: np.ndarray) -> None:
    """Cache `arrays` at `path` via a temporary file and a rename, so concurrent readers
    never see a torn file; a full or read-only `data.root` ends with one line and leaves
    no temporary file."""
    atomic_write(path, lambda f: np.savez(f, **arrays), "data.root", suffix=".npz.tmp")


def mnist1d(root: str, num_samples: int, seed: int) -> Arrays:
    """MNIST-1D (Greydanus 2020) generated offline by its published procedure.

    Uses the `mnist1d` package's generator (`make_dataset`), never its download, and caches
    the result under `root` so that N spawned workers do not each regenerate it (~2 s).
    """
    path = Path(root) / f"mnist1d_n{num_samples}_s{seed}.npz"
    if not path.exists():
        from mnist1d.data import get_dataset_args, make_dataset

        args = get_dataset_args()
        args.num_samples = num_samples
        args.seed = seed
        d = make_dataset(args)
        _save_atomic(path, x=d["x"], y=d["y"], x_test=d["x_test"], y_test=d["y_test"])
    d = np.load(path)
    as_x = lambda a: torch.from_numpy(a.astype(np.float32)).unsqueeze(1)  # noqa: E731
    as_y = lambda a: torch.from_numpy(a.astype(np.int64))  # noqa: E731
    return Arrays(as_x(d["x"]), as_y(d["y"]), as_x(d["x_test"]), as_y(d["y_test"]), 10)


def synthetic(num_samples: int, seed: int, dim: int = 16, num_classes: int = 4) -> Arrays:
    """Gaussian blobs: a tiny, instantly generated classification task for fast tests."""
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(num_classes, dim, generator=g) * 2.0
    n_test = max(num_samples // 5, num_classes)
    y = torch.randint(0, num_classes, (num_samples + n_test,), generator=g)
    x = centers[y] + torch.randn(num_samples + n_test, dim, generator=g)
    return Arrays(x[:num_samples], y[:num_samples], x[num_samples:], y[num_samples:], num_classes)


# Horovod's Adasum toy problem fits f(x) = x^2 - 20x + 50.
TOY_COEFFS = (1.0, -20.0, 50.0)


def toy_quadratic(num_samples: int, seed: int) -> Arrays:
    """Horovod's Adasum toy problem: samples (x, f(x)) of f(x) = x^2 - 20x + 50.

    x is uniform in [-1, 1]; the targets are exact (no noise), so the model that recovers
    the coefficients interpolates every sample. A fifth as many test points follow.
    """
    g = torch.Generator().manual_seed(seed)
    n_test = max(num_samples // 5, 1)
    x = torch.rand(num_samples + n_test, 1, generator=g) * 2 - 1
    a, b, c = TOY_COEFFS
    y = (a * x * x + b * x + c).squeeze(1)
    return Arrays(x[:num_samples], y[:num_samples], x[num_samples:], y[num_samples:], 0)


def cifar(name: str, root: str, download: bool) -> Arrays:
    """CIFAR-10/100 through torchvision's own download path, kept in memory as uint8."""
    from torchvision import datasets

    cls = {"cifar10": datasets.CIFAR10, "cifar100": datasets.CIFAR100}[name]
    try:
        train = cls(root=root, train=True, download=download)
        test = cls(root=root, train=False, download=download)
    except (OSError, RuntimeError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UserError(
            f"{name} is not under data.root={root} and could not be downloaded ({reason}); "
            f"put torchvision's {name} files in {root} or run where the network is reachable"
        ) from None
    as_x = lambda a: torch.from_numpy(a).permute(0, 3, 1, 2).contiguous()  # noqa: E731
    as_y = lambda a: torch.tensor(a, dtype=torch.int64)  # noqa: E731
    return Arrays(
        as_x(train.data),
        as_y(train.targets),
        as_x(test.data),
        as_y(test.targets),
        len(train.classes),
        _CIFAR_STATS[name],
    )


def load(dataset: str, root: str, download: bool, num_samples: int, seed: int) -> Arrays:
    if dataset == "mnist1d":
        return mnist1d(root, num_samples, seed)
    if dataset == "synthetic":
        return synthetic(num_samples, seed)
    if dataset == "toy_quadratic":
        return toy_quadratic(num_samples, seed)
    if dataset in _CIFAR_STATS:
        return cifar(dataset, root, download)
    raise UserError(
        f"workload.dataset={dataset!r} is unknown; use mnist1d, synthetic, toy_quadratic, "
        f"cifar10 or cifar100"
    )


class ShardSampler:
    """Deterministic per-rank batches, resumable from (epoch, position).

    Each epoch draws one permutation of the whole training set from (seed, epoch); rank r of
    N takes every N-th index starting at r. So the union of the N ranks' t-th batches of size
    B is exactly the t-th batch of size N*B a single process would draw: synchronous SGD on
    N workers and single-process SGD at N times the batch see the same samples per step.
    """

    def __init__(self, n: int, world: int, rank: int, batch: int, seed: int):
        self.n, self.world, self.rank, self.batch, self.seed = n, world, rank, batch, seed
        self.per_epoch = (n // world) // batch
        if self.per_epoch < 1:
            raise UserError(
                f"trainer.batch_size={batch} x trainer.world_size={world} exceeds the "
                f"{n} training samples; lower one of them"
            )
        self.epoch, self.position = 0, 0
        self._shard = self._make_shard()

    def _make_shard(self) -> torch.Tensor:
        g = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        perm = torch.randperm(self.n, generator=g)
        return perm[self.rank :: self.world][: self.per_epoch * self.batch]

    def next_indices(self) -> torch.Tensor:
        if self.position >= self.per_epoch:
            self.epoch, self.position = self.epoch + 1, 0
            self._shard = self._make_shard()
        start = self.position * self.batch
        self.position += 1
        return self._shard[start : start + self.batch]

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.position = state["epoch"], state["position"]
        self._shard = self._make_shard()
