"""Sampled compute times and the modeled clock's barrier semantics."""

import math
import time

import numpy as np
import pytest

from repro.comm.axis_collectives import AxisCollectives
from repro.comm.record import CommRecord
from repro.errors import UserError
from repro.netmodel.clock import ModeledClock
from repro.netmodel.compute import ComputeConfig, ComputeModel
from repro.netmodel.cost import Link, ring_allreduce
from repro.netmodel.timekeeper import TimeKeeper

LINK = Link(latency_s=1e-3, bandwidth_Bps=1e9)
ALLREDUCE = CommRecord("allreduce", 10**6, 0.0, 4, "ring")  # 7.5 ms on LINK


def sampled(**kw) -> ComputeConfig:
    return ComputeConfig(mode="sampled", **kw)


def test_draws_are_deterministic_and_independent_of_call_order():
    cfg = sampled(dist="exponential", mean_ms=10.0, straggler_prob=0.2, straggler_factor=4.0)
    forward = ComputeModel(cfg, 4, seed=7)
    first = [forward.times(s) for s in range(20)]
    backward = ComputeModel(cfg, 4, seed=7)
    second = {s: backward.times(s) for s in reversed(range(20))}
    for s in range(20):
        np.testing.assert_array_equal(first[s], second[s])
    assert not np.array_equal(first[0], first[1])
    assert not np.array_equal(first[3], ComputeModel(cfg, 4, seed=8).times(3))
    offset = ComputeModel(sampled(dist="exponential", mean_ms=10.0, seed_offset=1), 4, seed=7)
    assert not np.array_equal(ComputeModel(sampled(), 4, seed=7).times(3), offset.times(3))


@pytest.mark.parametrize(
    "cfg",
    [
        sampled(dist="exponential", mean_ms=10.0),
        sampled(dist="shifted_exponential", mean_ms=10.0, shift_ms=6.0),
        sampled(dist="constant", mean_ms=10.0, straggler_prob=0.25, straggler_factor=3.0),
        sampled(dist="exponential", mean_ms=5.0, straggler_prob=0.1, straggler_factor=5.0),
    ],
)
def test_sample_mean_matches_model_mean(cfg):
    model = ComputeModel(cfg, 4, seed=0)
    draws = np.stack([model.times(s) for s in range(2000)])
    assert draws.shape == (2000, 4)
    assert draws.mean() == pytest.approx(model.mean(), rel=0.05)
    if cfg.dist == "shifted_exponential":
        assert draws.min() >= cfg.shift_ms / 1000


def test_model_mean_counts_stragglers():
    cfg = sampled(dist="constant", mean_ms=10.0, straggler_prob=0.25, straggler_factor=3.0)
    assert ComputeModel(cfg, 4, 0).mean() == pytest.approx(0.010 * 1.5)


def test_expected_max_closed_forms():
    harmonic4 = 1 + 1 / 2 + 1 / 3 + 1 / 4
    exp = ComputeModel(sampled(dist="exponential", mean_ms=10.0), 4, 0)
    assert exp.expected_max(4) == pytest.approx(0.010 * harmonic4)
    assert exp.expected_max(1) == pytest.approx(0.010)
    shifted = ComputeModel(sampled(dist="shifted_exponential", mean_ms=10.0, shift_ms=4.0), 4, 0)
    assert shifted.expected_max(4) == pytest.approx(0.004 + 0.006 * harmonic4)
    const = sampled(dist="constant", mean_ms=10.0, straggler_prob=0.5, straggler_factor=2.0)
    # Slow unless all 4 are fast: 10 ms * (1 + (1 - 0.5^4)).
    assert ComputeModel(const, 4, 0).expected_max(4) == pytest.approx(0.010 * (2 - 1 / 16))


@pytest.mark.parametrize(
    "cfg",
    [
        sampled(dist="exponential", mean_ms=10.0, straggler_prob=0.1, straggler_factor=4.0),
        sampled(
            dist="shifted_exponential",
            mean_ms=10.0,
            shift_ms=5.0,
            straggler_prob=0.2,
            straggler_factor=3.0,
        ),
    ],
)
def test_expected_max_with_stragglers_matches_monte_carlo(cfg):
    model = ComputeModel(cfg, 8, seed=3)
    maxima = np.array([model.times(s).max() for s in range(20000)])
    assert model.expected_max(8) == pytest.approx(maxima.mean(), rel=0.02)


def test_measured_mode_draws_nothing():
    with pytest.raises(ValueError, match="measured"):
        ComputeModel(ComputeConfig(), 4, 0).times(0)


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"mode": "guessed"}, "compute.mode"),
        ({"dist": "pareto"}, "compute.dist"),
        ({"mean_ms": 0.0}, "compute.mean_ms"),
        ({"dist": "shifted_exponential", "mean_ms": 5.0, "shift_ms": 5.0}, "compute.shift_ms"),
        ({"straggler_prob": 1.5}, "compute.straggler_prob"),
        ({"straggler_factor": 0.5}, "compute.straggler_factor"),
        ({"seed_offset": -1}, "compute.seed_offset"),
    ],
)
def test_compute_config_validation_names_the_field(kw, field):
    with pytest.raises(UserError, match=field):
        ComputeConfig(**kw)


def test_collective_is_a_barrier_at_the_slowest_worker():
    clock = ModeledClock(4)
    clock.advance_compute([1.0, 2.0, 3.0, 4.0])
    assert [clock.worker(i) for i in range(4)] == [1.0, 2.0, 3.0, 4.0]
    assert clock.now() == 4.0
    charged = clock.charge([ALLREDUCE], LINK)
    assert charged == pytest.approx(7.5e-3)
    for i in range(4):
        assert clock.worker(i) == pytest.approx(4.0 + 7.5e-3)
    assert clock.comm_seconds == pytest.approx(7.5e-3)


def test_records_in_one_step_add_up_after_one_wait():
    clock = ModeledClock(4, link_fn=lambda: LINK, bytes_scale=10.0)
    clock.advance_compute([0.5, 0.1, 0.2, 0.3])
    small = CommRecord("allreduce", 10**5, 0.0, 4, "ring")  # x10 bytes = 7.5 ms
    bcast = CommRecord("broadcast", 10**5, 0.0, 4)  # x10 bytes = 4 ms
    clock.charge([small, bcast])
    assert clock.now() == pytest.approx(0.5 + 7.5e-3 + 4e-3)
    assert clock.worker(1) == clock.worker(0)
    assert clock.comm_seconds == pytest.approx(11.5e-3)


def test_clock_is_the_array_recurrence_bit_for_bit():
    """Each worker's time is the sum of its compute times, and every record sets every
    worker to the slowest one's time plus the record's cost: the same floats as that
    recurrence written over a numpy array, step after step."""
    rng = np.random.default_rng(5)
    model = ComputeModel(sampled(dist="exponential", mean_ms=10.0), 8, seed=5)
    clock = ModeledClock(8, link_fn=lambda: LINK)
    reference = np.zeros(8)
    for step in range(300):
        times = model.times(step)
        clock.advance_compute(times)
        reference += times
        for _ in range(rng.integers(0, 3)):
            record = CommRecord("allreduce", int(rng.integers(1, 10**6)), 0.0, 8, "ring")
            clock.charge([record])
            reference[:] = reference.max() + ring_allreduce(LINK, record.nbytes, 8)
        assert [clock.worker(i) for i in range(8)] == reference.tolist()
        assert clock.now() == reference.max()
    with pytest.raises(ValueError, match="8 compute times"):
        clock.advance_compute([0.1] * 7)
    with pytest.raises(ValueError, match=">= 0"):
        clock.advance_compute([0.1] * 7 + [-1e-9])


def test_charge_needs_a_link():
    with pytest.raises(ValueError, match="link"):
        ModeledClock(2).charge([ALLREDUCE])


def test_sync_sgd_with_exponential_stragglers_costs_expected_max_plus_d():
    """AdaComm's runtime model: a synchronous step takes E[Y_{4:4}] + D."""
    cfg = sampled(dist="exponential", mean_ms=20.0)
    model = ComputeModel(cfg, 4, seed=11)
    clock = ModeledClock(4, link_fn=lambda: LINK)
    steps = 2000
    for s in range(steps):
        clock.advance_compute(model.times(s))
        clock.charge([ALLREDUCE])
    per_step = clock.now() / steps
    d = ring_allreduce(LINK, 10**6, 4)
    assert per_step == pytest.approx(model.expected_max(4) + d, rel=0.05)
    assert model.expected_max(4) == pytest.approx(0.020 * (25 / 12))
    # Waiting for the slowest is what makes it costlier than the mean step plus D.
    assert per_step > model.mean() + d
    assert clock.comm_seconds == pytest.approx(steps * d)


def test_state_dict_round_trip():
    clock = ModeledClock(3, link_fn=lambda: LINK)
    clock.advance_compute(np.array([0.1, 0.4, 0.2]))
    clock.charge([CommRecord("allgather", 1000, 0.0, 3)])
    clock.advance_compute([0.0, 0.1, 0.0])
    restored = ModeledClock(3)
    restored.load_state_dict(clock.state_dict())
    assert [restored.worker(i) for i in range(3)] == [clock.worker(i) for i in range(3)]
    assert restored.comm_seconds == clock.comm_seconds
    assert not math.isclose(restored.worker(0), restored.worker(1))
    with pytest.raises(ValueError, match="workers"):
        ModeledClock(4).load_state_dict(clock.state_dict())


def test_advance_compute_checks_shape_and_sign():
    clock = ModeledClock(2)
    with pytest.raises(ValueError, match="2 compute times"):
        clock.advance_compute([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match=">= 0"):
        clock.advance_compute([1.0, -2.0])


def test_the_measured_clock_starts_at_the_first_step_and_goes_on_from_earlier_segments():
    """What comes before a run's first step (the tracker's start, seconds for a process's
    first run) is not the run's; a resumed run adds to its earlier segments' seconds."""
    keeper = TimeKeeper(ComputeConfig(), AxisCollectives(1), seed=0, bytes_scale=1.0)
    time.sleep(0.2)
    keeper.start_wall()
    assert keeper.wall_s() < 0.1
    resumed = TimeKeeper(ComputeConfig(), AxisCollectives(1), seed=0, bytes_scale=1.0)
    resumed.load_state_dict({**keeper.state_dict(), "wall_s": 30.0})
    time.sleep(0.2)
    resumed.start_wall()
    assert 30.0 <= resumed.wall_s() < 30.1
