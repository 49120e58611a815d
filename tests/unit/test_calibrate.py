"""The calibration fit: each op's alpha-beta coefficients and the least-squares solution."""

import os

import numpy as np
import pytest
import yaml

from repro.errors import UserError
from repro.netmodel.calibrate import (
    DEFAULT_SIZES,
    _args,
    _parse_size,
    _parser,
    preset_text,
    repeats_for,
)
from repro.netmodel.calibrate_fit import (
    JOINT,
    FitKey,
    Sample,
    coefficients,
    fit,
    fit_all,
    median_error,
    own_key,
    pooled_key,
    predict,
)
from tests.helpers import on_one_core

A, BW = 50e-6, 1.25e9  # 50 us, 10 Gbit/s


def _hand_cost(op: str, m: float, n: int, a: float = A, bw: float = BW) -> float:
    """Table I of the Flexible Top-k paper, written out for this test."""
    b = 1 / bw
    if op == "allreduce":  # ring
        return 2 * (n - 1) * a + 2 * (n - 1) / n * m * b
    if op == "allgather":
        return np.log2(n) * a + (n - 1) * m * b
    return np.log2(n) * a + np.log2(n) * m * b  # broadcast


@pytest.mark.parametrize(
    "op,expected", [("allreduce", (6, 1500)), ("allgather", (2, 3000)), ("broadcast", (2, 2000))]
)
def test_coefficients_are_the_ops_formula(op, expected):
    # n = 4 workers, M = 1000 bytes: cost = x_a a + x_b b
    assert coefficients(op, 1000, 4) == pytest.approx(expected)


def _exact_samples(ops=("allreduce", "allgather", "broadcast")) -> list[Sample]:
    return [
        Sample(op, n, m, _hand_cost(op, m, n))
        for op in ops
        for n in (2, 4)
        for m in (1024, 65536, 4 << 20)
    ]


def test_fit_recovers_the_link_that_made_the_times():
    links = fit_all(_exact_samples())
    # every op and JOINT, at 2 ranks, 4 ranks and over both
    assert len(links) == 4 * 3
    for link in links.values():
        assert link.latency_s == pytest.approx(A, rel=1e-9)
        assert link.bandwidth_Bps == pytest.approx(BW, rel=1e-9)


# An oversubscribed host: at 4 ranks each hop costs twice the latency, at 70% bandwidth.
PER_WORLD = {2: (A, BW), 4: (2 * A, 0.7 * BW)}


def _oversubscribed_samples() -> list[Sample]:
    return [
        Sample("allreduce", n, m, _hand_cost("allreduce", m, n, *PER_WORLD[n]))
        for n in (2, 4)
        for m in (1024, 65536, 4 << 20)
    ]


def test_each_rank_count_gets_its_own_link():
    samples = _oversubscribed_samples()
    links = fit_all(samples)
    for s in samples:
        a, bw = PER_WORLD[s.world]
        assert links[own_key(s)].latency_s == pytest.approx(a, rel=1e-9)
        assert links[own_key(s)].bandwidth_Bps == pytest.approx(bw, rel=1e-9)
    assert median_error(links, samples) == pytest.approx(0, abs=1e-9)
    # one link over both rank counts cannot make both sets of times
    pooled = links[FitKey("allreduce")]
    assert pooled == links[FitKey(JOINT)]
    assert not any(pooled.latency_s == pytest.approx(a, rel=0.05) for a, _ in PER_WORLD.values())
    pooled_errors = [abs(predict(pooled, s) / s.seconds - 1) for s in samples]
    assert median_error(links, samples, key_of=pooled_key) == pytest.approx(
        float(np.median(pooled_errors))
    )
    assert median_error(links, samples, key_of=pooled_key) > 0.01


def test_repeats_grow_for_small_messages_only():
    assert [repeats_for(n, 3) for n in (1024, 128 << 10, 256 << 10, 1 << 20, 64 << 20)] == [
        24,
        24,
        12,
        3,
        3,
    ]


def test_fit_minimises_relative_squared_error():
    rng = np.random.default_rng(0)
    noisy = [
        Sample(s.op, s.world, s.nbytes, s.seconds * rng.uniform(0.7, 1.3))
        for s in _exact_samples(("allreduce",))
    ]
    link = fit(noisy)
    # Reference: ordinary least squares on rows divided by the measured time.
    x = np.array([[2 * (s.world - 1), 2 * (s.world - 1) / s.world * s.nbytes] for s in noisy])
    t = np.array([s.seconds for s in noisy])
    (a, b), *_ = np.linalg.lstsq(x / t[:, None], np.ones(len(t)), rcond=None)
    assert link.latency_s == pytest.approx(a, rel=1e-9)
    assert link.bandwidth_Bps == pytest.approx(1 / b, rel=1e-9)


def test_fit_needs_two_sizes():
    with pytest.raises(UserError, match="two message sizes"):
        fit([Sample("allreduce", 2, 1024, 1e-4), Sample("allreduce", 2, 1024, 2e-4)])


def test_flat_times_fit_no_bandwidth_and_make_no_preset():
    flat = [Sample("allreduce", 2, m, 2e-4) for m in (1024, 4096, 16384)]
    link = fit(flat)
    # a ring allreduce over 2 ranks pays 2 latencies: a = 0.2 ms / 2
    assert link.latency_s == pytest.approx(1e-4) and link.bandwidth_Bps == float("inf")
    with pytest.raises(UserError, match="do not grow with message size"):
        preset_text("flat", fit_all(flat), flat, FitKey("allreduce", 2))


def test_sizes_parse_with_binary_suffixes():
    assert [_parse_size(s) for s in ("512", "1K", "64M", "2kb")] == [512, 1024, 64 << 20, 2048]
    # float32 values: a size that is not a multiple of 4 is refused before anything runs,
    # not measured as a smaller one
    for bad in ("2", "5", "1.001K"):
        with pytest.raises(UserError, match=f"'{bad}' must be a whole number of float32 values"):
            _parse_size(bad)
    with pytest.raises(UserError, match="not a size"):
        _parse_size("lots")


@pytest.mark.parametrize("world", [2, 4])
def test_preset_holds_the_chosen_rank_counts_fit(world):
    samples = _oversubscribed_samples()
    text = preset_text("here", fit_all(samples), samples, FitKey("allreduce", world))
    values = yaml.safe_load(text)
    a, bw = PER_WORLD[world]
    assert values["name"] == "here"
    assert values["latency_ms"] == pytest.approx(a * 1e3, rel=1e-9)
    assert values["bandwidth_gbps"] == pytest.approx(bw * 8 / 1e9, rel=1e-9)
    assert values["defaults"] == ["network_schema", "_self_"]


def test_link_ranks_defaults_to_the_largest_rank_count():
    assert _args(["--ranks", "4,2"])[3].link_ranks == 4
    assert _args(["--ranks", "2,4", "--link-ranks", "2"])[3].link_ranks == 2


def test_default_sizes_span_1k_to_64m():
    default = _parser().parse_args([]).sizes
    assert tuple(_parse_size(s) for s in default.split(",")) == DEFAULT_SIZES
    assert (DEFAULT_SIZES[0], DEFAULT_SIZES[-1]) == (1024, 64 << 20)


def test_more_ranks_than_the_cores_can_take_turns_for_are_refused_before_measuring():
    """Past four ranks per core, as the process engine refuses, gloo's times are mostly each
    rank waiting for its turn on a core: no link could be fitted to them."""
    cores = len(os.sched_getaffinity(0))
    assert _args(["--ranks", f"2,{4 * cores}"])[0] == [2, 4 * cores]
    with pytest.raises(UserError, match=rf"--ranks=2,{4 * cores + 1} \({4 * cores + 1} ranks\)"):
        _args(["--ranks", f"2,{4 * cores + 1}"])
    # counted on the cores this process may use, which a SLURM job's cpuset or `taskset` narrows
    with on_one_core(), pytest.raises(UserError, match=r"2,5 \(5 ranks\) on the 1 core this"):
        _args(["--ranks", "2,5"])
