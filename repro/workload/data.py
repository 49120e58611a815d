"""Data sets as in-memory tensors, and deterministic per-rank sharding.

Every data set here fits in memory (MNIST-1D: 10k x 40 floats; CIFAR: 60k x 3x32x32 bytes),
so batches are index slices rather than a DataLoader: that keeps the data position a pair
of integers, which makes checkpoints exact and resumption bit-identical. A generated set
larger than the free memory is refused before it is made (`check_generated_memory`).

Under torchrun or a SLURM job every worker process prepares the data itself. Whatever is
written under `data.root` (MNIST-1D's cache, CIFAR's download) is written under a file
lock there (`node_lock`), so the processes of a node download or generate it once: the
first takes the lock and fetches, the others wait and then read what it left.
"""

from __future__ import annotations

import functools
import sys
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from repro.comm.devices import require_free_memory
from repro.errors import UserError
from repro.locks import take
from repro.storage import atomic_write, missing_folders

# CIFAR per-channel statistics of the training set (standard values used by the papers' code).
_CIFAR_STATS = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
}


# Peak memory while generating one sample of a generated data set, its test share included,
# measured here: MNIST-1D's 100,000 samples took 145 MB above the interpreter, synthetic
# images' 1,000,000 took 3.45 GB; the others hold a few floats a sample.
_GENERATED_BYTES = {
    "mnist1d": 1500,
    "synthetic": 200,
    "synthetic_images": 3700,
    "toy_quadratic": 50,
}
# MNIST-1D's generator, on one core here: 100,000 samples in 46 s. A generation expected to
# take longer than `_SAY_FROM_S` says so first.
_MNIST1D_S_PER_SAMPLE = 0.46e-3
_SAY_FROM_S = 20.0


def check_generated_memory(dataset: str, num_samples: int) -> None:
    """Refuse, before generating, a data set this machine's free memory cannot hold while it
    is made (`workload.num_samples=1000000000` of MNIST-1D generated silently for hours on
    its way to being killed for memory)."""
    per_sample = _GENERATED_BYTES[dataset]
    require_free_memory(
        f"workload.num_samples={num_samples} needs",
        per_sample * num_samples,
        f" to generate workload.dataset={dataset} (about {per_sample:,} bytes a sample)",
        "lower workload.num_samples",
    )


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
    atomic_write(path, lambda f: np.savez(f, **arrays), "data.root", *_temporary(path))


def _temporary(path: Path) -> tuple[str, str]:
    """(prefix, suffix) of the temporary files of the cache at `path`: its own, so that under
    its lock those a killed writer left are known as its and removed (`mnist1d`)."""
    return f".{path.stem}-", ".npz.tmp"


@contextmanager
def node_lock(root: str, name: str) -> Iterator[None]:
    """Hold the exclusive lock `<root>/.<name>.lock` (every process sharing `root` waits
    for it). A `root` this process cannot write is one it will not write data into
    either, so there it runs unlocked and the data's own error speaks."""
    try:
        lock = take(Path(root) / f".{name}.lock")
    except OSError:
        yield
        return
    with lock:
        yield


def mnist1d(root: str, num_samples: int, seed: int) -> Arrays:
    """MNIST-1D (Greydanus 2020) generated offline by its published procedure.

    Uses the `mnist1d` package's generator (`make_dataset`), never its download, and caches
    the result under `root` so that N spawned workers do not each regenerate it (~2 s).
    """
    path = Path(root) / f"mnist1d_n{num_samples}_s{seed}.npz"
    d = _read_cache(path, note=False)
    if d is None:
        check_generated_memory("mnist1d", num_samples)
        # Read again under the lock: another process may have made it meanwhile, and one
        # process only notes a damaged file, the one that replaces it.
        with node_lock(root, path.stem):
            d = _read_cache(path, note=True)
            if d is None:
                prefix, suffix = _temporary(path)
                for left in path.parent.glob(f"{prefix}*{suffix}"):  # a killed writer's
                    left.unlink(missing_ok=True)
                d = _generate_mnist1d(path, num_samples, seed)
    as_x = lambda a: torch.from_numpy(a.astype(np.float32)).unsqueeze(1)  # noqa: E731
    as_y = lambda a: torch.from_numpy(a.astype(np.int64))  # noqa: E731
    return Arrays(as_x(d["x"]), as_y(d["y"]), as_x(d["x_test"]), as_y(d["y_test"]), 10)


_CACHED = ("x", "y", "x_test", "y_test")


def _read_cache(path: Path, note: bool) -> dict[str, np.ndarray] | None:
    """The cached arrays, or None where there is no cache or it cannot be read whole. The
    cache is only ever written whole (`_save_atomic`), but a copy cut short, a bad sector
    or a stray file of that name is met at load; it is derived data, generated again from
    its seed, so such a file is replaced, with a note, rather than ending the run."""
    if path.is_dir():
        raise UserError(
            f"{path} is a folder where the MNIST-1D cache file belongs; move it away, or set "
            "data.root elsewhere"
        )
    try:
        with np.load(path, allow_pickle=False) as d:
            return {k: d[k] for k in _CACHED}
    except FileNotFoundError:
        return None
    except PermissionError:  # another's file, not a damaged one: not to be replaced
        raise UserError(
            f"{path}: permission denied reading the MNIST-1D cache; make it readable, or set "
            "data.root elsewhere"
        ) from None
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error) as e:
        if note:
            why = f"{type(e).__name__}: {str(e).split('. ')[0]}".rstrip(": ")
            print(f"note: {path} was damaged ({why}); generated again", file=sys.stderr)
        return None


def _generate_mnist1d(path: Path, num_samples: int, seed: int) -> dict[str, np.ndarray]:
    from mnist1d.data import get_dataset_args, make_dataset

    seconds = num_samples * _MNIST1D_S_PER_SAMPLE
    if seconds > _SAY_FROM_S:
        about = f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
        print(
            f"generating MNIST-1D: {num_samples:,} samples of seed {seed}, about {about} on "
            f"one core; once, then read from {path}",
            file=sys.stderr,
            flush=True,
        )
    args = get_dataset_args()
    args.num_samples = num_samples
    args.seed = seed
    made = make_dataset(args)
    d = {k: made[k] for k in _CACHED}
    _save_atomic(path, **d)
    return d


def synthetic(num_samples: int, seed: int, dim: int = 16, num_classes: int = 4) -> Arrays:
    """Gaussian blobs: a tiny, instantly generated classification task for fast tests."""
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(num_classes, dim, generator=g) * 2.0
    n_test = max(num_samples // 5, num_classes)
    y = torch.randint(0, num_classes, (num_samples + n_test,), generator=g)
    x = centers[y] + torch.randn(num_samples + n_test, dim, generator=g)
    return Arrays(x[:num_samples], y[:num_samples], x[num_samples:], y[num_samples:], num_classes)


def synthetic_images(num_samples: int, seed: int, num_classes: int = 100) -> Arrays:
    """Random uint8 images shaped like CIFAR's (3x32x32) with CIFAR-100's class count and
    statistics: a paper-size image model's exact inputs without CIFAR's files, for
    `make gpu-check` on a machine that cannot download them. Nothing to learn: labels are
    random (a check of speed and engines, never of accuracy). A fifth as many test images."""
    g = torch.Generator().manual_seed(seed)
    n_test = max(num_samples // 5, 1)
    x = torch.randint(0, 256, (num_samples + n_test, 3, 32, 32), generator=g, dtype=torch.uint8)
    y = torch.randint(0, num_classes, (num_samples + n_test,), generator=g)
    return Arrays(
        x[:num_samples],
        y[:num_samples],
        x[num_samples:],
        y[num_samples:],
        num_classes,
        _CIFAR_STATS["cifar100"],
    )


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
    missing = missing_folders(Path(root))
    try:
        # With download, one process of the node fetches; the others find the files verified.
        with node_lock(root, name) if download else nullcontext():
            try:
                train = cls(root=root, train=True, download=download)
                test = cls(root=root, train=False, download=download)
            except (OSError, RuntimeError):
                _take_back(missing, [f".{name}.lock", cls.filename])
                raise
    except (OSError, RuntimeError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        if not download:
            raise UserError(
                f"{name} is not under data.root={root} ({reason}) and data.download=false; "
                f"put torchvision's {name} files in {root}, or set data.download=true"
            ) from None
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


def _take_back(made: list[Path], own: list[str]) -> None:
    """After a failed fetch into a `data.root` this attempt made (`made`, the root first,
    then each missing parent), remove this attempt's own files there (its lock, the
    download's partial archive), then each of those folders left empty: a run refused
    before any extraction leaves none, and none takes what another run wrote there
    meanwhile (an MNIST-1D cache, a live run's directory), as a removal of the whole
    outermost folder did."""
    if not made:
        return
    for name in own:
        (made[0] / name).unlink(missing_ok=True)
    for folder in made:
        try:
            folder.rmdir()
        except OSError:  # another's files: it and the folders above it stay
            return


def check_root(root: str) -> None:
    """Refuse a `data.root` that is (or lies under) something other than a directory,
    which the writers would otherwise report as a disk fault ("file exists")."""
    missing = missing_folders(Path(root))
    at = missing[-1].parent if missing else Path(root)
    if at.exists() and not at.is_dir():
        what = "is" if at == Path(root) else f"lies under {at}, which is"
        raise UserError(
            f"data.root={root} {what} a regular file, not a directory; set data.root to a "
            "directory (it is created if missing)"
        )


def load(dataset: str, root: str, download: bool, num_samples: int, seed: int) -> Arrays:
    if dataset == "mnist1d" or dataset in _CIFAR_STATS:
        check_root(root)
    if dataset == "mnist1d":
        return mnist1d(root, num_samples, seed)
    if dataset in _GENERATED_BYTES:  # made at every load (MNIST-1D, above, where not cached)
        check_generated_memory(dataset, num_samples)
    if dataset == "synthetic":
        return synthetic(num_samples, seed)
    if dataset == "synthetic_images":
        return synthetic_images(num_samples, seed)
    if dataset == "toy_quadratic":
        return toy_quadratic(num_samples, seed)
    if dataset in _CIFAR_STATS:
        return cifar(dataset, root, download)
    raise UserError(
        f"workload.dataset={dataset!r} is unknown; use mnist1d, synthetic, synthetic_images, "
        f"toy_quadratic, cifar10 or cifar100"
    )


@functools.lru_cache(maxsize=2)
def _epoch_permutation(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The epoch's permutation of the training set, drawn once for every sampler of a
    process that asks for it (read, never written): 32 simulated workers at 7 steps an epoch
    drew the same 32,000 entries 32 times, about 0.8 ms a step on average."""
    g = torch.Generator().manual_seed(seed * 100_003 + epoch)
    return torch.randperm(n, generator=g)


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
        perm = _epoch_permutation(self.n, self.seed, self.epoch)
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
