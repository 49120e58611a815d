"""The per-step shortcuts of the training loop give what the long way gives, value for value:
every worker's batch from one gather, sampled step times without the straggler draw when no
step straggles, and the modeled clock's kept maximum."""

import numpy as np
import pytest
import torch

from repro.comm.record import CommRecord
from repro.netmodel.clock import ModeledClock
from repro.netmodel.compute import ComputeConfig, ComputeModel
from repro.netmodel.cost import Link
from repro.train.worker_data import WorkerData, worker_seed
from repro.workload.config import WorkloadConfig
from repro.workload.data import ShardSampler, synthetic, synthetic_images
from repro.workload.workload import Workload

WORLD, BATCH, SEED, STEPS = 3, 5, 4, 12  # 64 samples: 4 batches an epoch, so epochs wrap


def worker_by_worker(workload: Workload):
    """Batches the long way: each worker gathers (and augments) its own, then they stack."""
    n = workload.arrays.n_train
    samplers = [ShardSampler(n, WORLD, r, BATCH, SEED) for r in range(WORLD)]
    gens = [torch.Generator().manual_seed(worker_seed(SEED, r)) for r in range(WORLD)]
    for _ in range(STEPS):
        pairs = [workload.batch(s.next_indices(), g) for s, g in zip(samplers, gens, strict=True)]
        yield torch.stack([x for x, _ in pairs]), torch.stack([y for _, y in pairs])


@pytest.mark.parametrize(
    ("dataset", "model", "augment"),
    [
        ("synthetic", "mlp", False),  # plain inputs: one gather
        ("synthetic_images", "resnet18", False),  # normalized images: one gather
        ("synthetic_images", "resnet18", True),  # augmented: worker by worker
    ],
)
def test_batches_equal_those_built_worker_by_worker(dataset, model, augment):
    cfg = WorkloadConfig(name="t", dataset=dataset, model=model, num_samples=64, augment=augment)
    arrays = synthetic(64, 0) if dataset == "synthetic" else synthetic_images(64, 0)
    workload = Workload(cfg, arrays, "cpu")
    assert workload.augments == augment
    data = WorkerData(workload, list(range(WORLD)), WORLD, BATCH, SEED)
    for want_x, want_y in worker_by_worker(workload):
        x, y = data.next_batch()
        assert x.shape == want_x.shape and x.is_contiguous()
        assert torch.equal(x, want_x) and torch.equal(y, want_y)


@pytest.mark.parametrize("dataset", ["synthetic", "synthetic_images"])
def test_a_batch_is_the_arrays_rows_at_its_indices(dataset):
    """One worker's indices or every worker's stacked: the batch holds the data set's rows
    at them, in their shape (images then normalized as the workload's inputs)."""
    model = "mlp" if dataset == "synthetic" else "resnet18"
    cfg = WorkloadConfig(name="t", dataset=dataset, model=model, num_samples=64)
    arrays = synthetic(64, 0) if dataset == "synthetic" else synthetic_images(64, 0)
    workload = Workload(cfg, arrays, "cpu")
    g = torch.Generator().manual_seed(0)
    for shape in [(BATCH,), (WORLD, BATCH)]:
        indices = torch.randint(0, arrays.n_train, shape, generator=g)
        x, y = workload.batch(indices, None)
        assert torch.equal(x, workload._inputs(arrays.x_train[indices], None))
        assert torch.equal(y, arrays.y_train[indices])


def test_times_without_stragglers_are_the_shifted_exponential_draw():
    """Each step's own generator's draw, whichever block of steps was drawn before (the
    blocks' edges, back to an earlier block), read-only: no caller's write reaches a later
    call."""
    cfg = ComputeConfig(mode="sampled", dist="shifted_exponential", mean_ms=20.0, shift_ms=5.0)
    model = ComputeModel(cfg, 4, seed=9)
    for step in (1, 2, 255, 256, 500, 3, 511, 512, 768):
        rng = np.random.default_rng([9, 0, step])
        want = 0.005 + rng.exponential(0.015, 4)
        got = model.times(step)
        np.testing.assert_array_equal(got, want)
        with pytest.raises(ValueError, match="read-only"):
            got[:] = -1.0
        np.testing.assert_array_equal(model.times(step), want)


def test_constant_times_without_stragglers_are_the_mean():
    cfg = ComputeConfig(mode="sampled", dist="constant", mean_ms=10.0)
    model = ComputeModel(cfg, 3, seed=0)
    for step in (0, 7, 300):
        np.testing.assert_array_equal(model.times(step), np.full(3, 0.010))


def test_clock_now_is_the_slowest_worker_after_every_change():
    link = Link(latency_s=1e-3, bandwidth_Bps=1e9)
    clock = ModeledClock(3)
    assert clock.now() == 0.0
    clock.advance_compute([0.1, 0.4, 0.2])
    assert clock.now() == 0.4
    clock.charge([CommRecord("allreduce", 10**6, 0.0, 3, "ring")], link)
    assert clock.now() == max(clock.worker(i) for i in range(3)) > 0.4
    clock.advance_compute([0.0, 0.0, 0.3])
    assert clock.now() == clock.worker(2)
    restored = ModeledClock(3)
    restored.load_state_dict(clock.state_dict())
    assert restored.now() == clock.now()
