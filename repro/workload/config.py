"""What a run's workload and data are: the `workload` group's schema and the `data` settings.

The names a workload may choose (data sets, models, tasks) live here beside the schema that
checks them; `data.py`, `models.py` and `workload.py` build those choices with torch. The
split keeps torch off the config path: composing and validating a config, or refusing a
bad one, loads neither torch nor numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

from hydra.core.config_store import ConfigStore

from repro.errors import UserError, require_choice, require_path

# The models with their own all-workers forward (`forward_workers`, the simulated engine's
# `trainer.vectorize=stacked`).
STACKED_MODELS = ("cnn1d", "cnn1d_wide")
TASKS = ("classification", "regression")
# Data sets whose targets are real values, and the one model that fits each of them.
REGRESSION = {"toy_quadratic": "toy_quadratic"}
# The data sets and the models, by the kind of input each data set gives and each model
# takes: a model meets only data sets of its kind (an MLP fed MNIST-1D's (1, 40) signals, or
# a CNN fed images, failed in torch at the first step).
DATASET_INPUTS = {
    "mnist1d": "signal",
    "synthetic": "vector",
    "synthetic_images": "image",
    "toy_quadratic": "toy",
    "cifar10": "image",
    "cifar100": "image",
}
MODEL_INPUTS = {
    "cnn1d": "signal",
    "cnn1d_wide": "signal",
    "mlp": "vector",
    "resnet20": "image",
    "resnet18": "image",
    "resnet50": "image",
    "vgg16": "image",
    "toy_quadratic": "toy",
}
MODELS = tuple(MODEL_INPUTS)  # the models `models.build_model` builds
DATASETS = tuple(DATASET_INPUTS)


@dataclass
class DataConfig:
    """Where data sets live. `root` is also where users put CIFAR files for offline use."""

    root: str = "data"
    download: bool = True

    def __post_init__(self):
        require_path("data.root", self.root)


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
        """Training samples this workload yields (MNIST-1D makes num_samples // 10 signals
        of each of its 10 classes and keeps 80% of them for training)."""
        sizes = {
            "mnist1d": int(self.num_samples // 10 * 10 * 0.8),
            "synthetic": self.num_samples,
            "synthetic_images": self.num_samples,
            "toy_quadratic": self.num_samples,
        }
        return sizes.get(self.dataset, 50_000)

    def __post_init__(self):
        require_choice("workload.dataset", self.dataset, DATASETS)
        require_choice("workload.model", self.model, MODELS)
        if self.num_samples < 2:
            raise UserError(f"workload.num_samples={self.num_samples} must be at least 2")
        if self.dataset == "mnist1d" and self.num_samples < 10:
            raise UserError(
                f"workload.num_samples={self.num_samples} must be at least 10 for MNIST-1D, "
                "which makes num_samples // 10 signals of each of its 10 classes"
            )
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
        kind = MODEL_INPUTS[self.model]
        if DATASET_INPUTS[self.dataset] != kind:
            takes = [d for d, k in DATASET_INPUTS.items() if k == kind]
            fits = [m for m, k in MODEL_INPUTS.items() if k == DATASET_INPUTS[self.dataset]]
            raise UserError(
                f"workload.model={self.model} cannot take workload.dataset={self.dataset}; "
                f"use workload.dataset={'|'.join(takes)}, or workload.model={'|'.join(fits)}"
            )
        if not self.tolerance > 0:
            raise UserError(f"workload.tolerance={self.tolerance} must be positive")


ConfigStore.instance().store(group="workload", name="workload_schema", node=WorkloadConfig)
