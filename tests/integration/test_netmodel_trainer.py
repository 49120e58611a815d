"""The modeled network inside the real trainer: barriers, loopback, delay injection,
calibration end to end, and bad network input on the command line."""

import math
import os

import numpy as np
import pytest
import yaml

from repro.config import CONFIG_DIR, compose
from repro.netmodel.compute import ComputeConfig, ComputeModel
from repro.netmodel.schedule import NetworkSchedule
from repro.track.runs import read_run
from tests.helpers import repro_cli, train

# synthetic_mlp is a 16-32-4 MLP: its gradient message, counted by hand.
MLP_BYTES = 4 * (16 * 32 + 32 + 32 * 4 + 4)


def _max_of_n_moments(mean_s: float, p: float, f: float, n: int) -> tuple[float, float]:
    """E[max] and Var[max] of n i.i.d. step times, each Exp(mean) slowed f-fold with prob. p,
    by direct numerical integration of the tail: E[X] = int 1 - G^n, E[X^2] = int 2y (1 - G^n)."""
    y = np.linspace(0.0, 80 * mean_s * f, 400_001)
    cdf = (1 - p) * -np.expm1(-y / mean_s) + p * -np.expm1(-y / (f * mean_s))
    tail = 1 - cdf**n
    first = np.trapezoid(tail, y)
    second = np.trapezoid(2 * y * tail, y)
    return first, second - first**2


@pytest.mark.slow
@pytest.mark.parametrize("prob,factor", [(0.0, 1.0), (0.1, 4.0)], ids=["exponential", "stragglers"])
def test_sync_step_waits_for_the_slowest_of_four(tmp_path, prob, factor):
    """AdaComm's runtime model: a synchronous step costs E[max of 4 compute times] + D."""
    steps, mean_ms, world = 200, 20.0, 4
    compute = [
        "compute.mode=sampled",
        "compute.dist=exponential",
        f"compute.mean_ms={mean_ms}",
        f"compute.straggler_prob={prob}",
        f"compute.straggler_factor={factor}",
    ]
    summary = train(
        tmp_path,
        f"trainer.world_size={world}",
        f"trainer.steps={steps}",
        f"trainer.eval_every={steps}",
        "trainer.checkpoint_every=100000",
        "network=eth1g",
        *compute,
    )
    assert summary["step"] == steps
    assert summary["comm/collectives"] == steps
    assert summary["comm/bytes"] == steps * MLP_BYTES
    # eth1g: 0.1 ms, 1 Gbit/s; ring allreduce 2(n-1) a + 2(n-1)/n M b by hand.
    d = 2 * 3 * 0.1e-3 + 2 * 3 / 4 * MLP_BYTES * 8 / 1e9

    # Exact: every step ends at the slowest worker's draw plus D.
    draws = ComputeModel(ComputeConfig(**_compute_kwargs(mean_ms, prob, factor)), world, seed=0)
    exact = math.fsum(draws.times(k).max() + d for k in range(1, steps + 1))
    assert summary["time/modeled_s"] == pytest.approx(exact, rel=1e-9)

    # Statistical: the per-step mean is E[max] + D within 4 standard errors.
    e_max, var_max = _max_of_n_moments(mean_ms / 1000, prob, factor, world)
    if prob == 0:
        assert e_max == pytest.approx(mean_ms / 1000 * (1 + 1 / 2 + 1 / 3 + 1 / 4), rel=1e-6)
    per_step = summary["time/modeled_s"] / steps
    assert abs(per_step - (e_max + d)) < 4 * math.sqrt(var_max / steps)
    # ... and clearly above the mean step time: the barrier waits for the straggler.
    assert per_step > 1.5 * draws.mean() + d


def _compute_kwargs(mean_ms: float, prob: float, factor: float) -> dict:
    return dict(
        mode="sampled",
        dist="exponential",
        mean_ms=mean_ms,
        straggler_prob=prob,
        straggler_factor=factor,
    )


@pytest.mark.slow
def test_loopback_modeled_time_follows_measured_time(tmp_path):
    """On loopback communication is modeled as free and compute is measured, so the modeled
    clock holds the workers' real compute time and wall time adds only the loop's overhead
    (batching, the real gloo calls, evaluation). Close means within 25% of the wall time, or
    5 ms per step. Compared over the last log interval, from the throughputs the trainer logs
    per interval, so worker start-up skew (the first collective waits for the last worker to
    start) is left out. Batches of 4000 make compute the bulk of a step, as in real training;
    with tiny steps a loaded machine's scheduling delay in every collective would dominate."""
    steps, every, batch, world = 12, 6, 4000, 2
    summary = train(
        tmp_path,
        "workload=mnist1d_cnn",
        f"trainer.batch_size={batch}",
        f"trainer.world_size={world}",
        f"trainer.steps={steps}",
        f"trainer.eval_every={every}",
        "network=loopback",
        "compute.mode=measured",
    )
    samples = every * batch * world
    wall = samples / summary["throughput/samples_per_s"]
    modeled = samples / summary["throughput/modeled_samples_per_s"]
    assert modeled > 0
    assert abs(wall - modeled) <= max(0.25 * wall, 0.005 * every), (wall, modeled)


@pytest.mark.slow
def test_inject_makes_wall_time_follow_a_slow_modeled_network(tmp_path):
    """network.inject=true: each step sleeps until wall time reaches the modeled time.
    The free run's loop is compared over its last log interval, from the throughputs the
    trainer logs, so its start-up (the first collective waits for the last worker to start,
    a second or more on a loaded machine) does not count as loop time."""
    steps, every, batch = 30, 15, 100
    slow = [
        "trainer.world_size=2",
        f"trainer.steps={steps}",
        f"trainer.eval_every={every}",
        f"trainer.batch_size={batch}",
        "network=eth1g",
        "network.latency_ms=50",
    ]
    # 2 workers: ring allreduce costs 2 latencies per step, 100 ms, however fast the real loop.
    per_step = 2 * 50e-3 + MLP_BYTES * 8 / 1e9
    free = train(tmp_path / "free", *slow)
    injected = train(tmp_path / "inject", *slow, "network.inject=true")
    for s in (free, injected):
        assert s["time/modeled_s"] >= steps * per_step
    samples = every * batch * 2
    free_wall = samples / free["throughput/samples_per_s"]
    free_modeled = samples / free["throughput/modeled_samples_per_s"]
    assert free_modeled >= every * per_step
    assert free_wall < 0.5 * free_modeled, (free_wall, free_modeled)
    assert injected["time/modeled_s"] <= injected["time/wall_s"]
    assert injected["time/wall_s"] <= 1.1 * injected["time/modeled_s"] + 0.5


@pytest.mark.slow
def test_calibrate_writes_a_preset_that_composes(tmp_path):
    name = f"calibrated_test_{os.getpid()}"
    out = CONFIG_DIR / "network" / f"{name}.yaml"
    try:
        proc = repro_cli(
            "calibrate",
            "--ranks",
            "2",
            "--sizes",
            "1K,1M,16M",
            "--repeats",
            "3",
            "--warmup",
            "1",
            "--out",
            str(out),
            cwd=tmp_path,
        )
        assert proc.returncode == 0, proc.stderr
        rows = [ln.split() for ln in proc.stdout.splitlines()]
        table = [row for row in rows if len(row) == 8 and row[1] == "2"]
        assert sorted((row[0], int(row[2])) for row in table) == sorted(
            (op, size)
            for op in ("allreduce", "allgather", "broadcast")
            for size in (1024, 1 << 20, 16 << 20)
        )
        assert proc.stdout.rstrip().endswith(f" fit; use it as network={name}")
        written = yaml.safe_load(out.read_text())
        cfg = compose([f"network={name}"])
    finally:
        out.unlink(missing_ok=True)
    assert cfg.network.name == name
    assert cfg.network.latency_ms == written["latency_ms"] >= 0
    assert cfg.network.bandwidth_gbps == written["bandwidth_gbps"] > 0
    # the preset's link is the allreduce fit at the largest rank count, as printed
    fit_line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("allreduce, 2 ranks:"))
    link = NetworkSchedule.from_config(cfg.network).link_at(0.0)
    assert f"latency {link.latency_s * 1e3:.4f} ms" in fit_line
    assert f"bandwidth {link.bandwidth_Bps * 8 / 1e9:.3f} Gbit/s" in fit_line


@pytest.mark.slow
def test_a_preset_written_elsewhere_says_where_it_must_go_to_be_used(tmp_path):
    out = tmp_path / "mine.yaml"
    # the sizes and repeats whose times grow with size on a loaded machine (as above)
    args = ["--ranks", "2", "--sizes", "1K,1M,16M", "--repeats", "3", "--out", str(out)]
    proc = repro_cli("calibrate", *args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert out.is_file()
    last = proc.stdout.rstrip().splitlines()[-1]
    assert last.endswith(f"use it as network=mine once copied into {CONFIG_DIR / 'network'}")


BAD = [
    (["cost", "--params", "1000", "--bandwidth-gbps", "0"], "--bandwidth-gbps"),
    (["cost", "--params", "1000", "--bandwidth-gbps", "-5"], "--bandwidth-gbps"),
    (["cost", "--params", "1000", "--latency-ms", "-1"], "--latency-ms"),
    (["cost", "--params", "1000", "--cr", "0"], "--cr"),
    (["cost", "--params", "1000", "--cr", "1.5"], "--cr"),
    (["cost", "--params", "1000", "--workers", "0"], "--workers"),
    (["train", "network=nope"], "network=nope"),
    (["train", "network.bandwidth_gbps=-1"], "network.bandwidth_gbps"),
    (["train", "network.latency_ms=-0.5"], "network.latency_ms"),
    (["train", "network=flex_c1", "network.schedule.2.from_epoch=5"], "from_epoch"),
    (["calibrate", "--ranks", "1"], "--ranks"),
    (["calibrate", "--sizes", "64K"], "--sizes"),
    (["calibrate", "--ranks", "2,4", "--link-ranks", "8"], "--link-ranks"),
    # buffers no machine here holds: torch's allocator failed inside each rank, a traceback each
    (["calibrate", "--sizes", "1K,100G"], "--sizes=1K,100G at 4 ranks needs about 2002.0 GiB"),
]


@pytest.mark.slow
@pytest.mark.parametrize("args,needle", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_network_input_is_one_line(tmp_path, args, needle):
    extra = [f"runs_root={tmp_path}/runs", "tracking=disabled"] if args[0] == "train" else []
    proc = repro_cli(*args, *extra, cwd=tmp_path)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    err = proc.stderr.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error:") and needle in err, err
    assert not (tmp_path / "runs").exists()


def test_a_runs_throughput_spans_every_phase_of_its_network_schedule(tmp_path):
    """The last interval's throughput is the last phase's alone; the run's, which a search
    compares, is every sample over the whole modeled time. Recomputed here from the
    intervals' own throughputs: each interval's modeled time is its samples over its rate."""
    summary = train(
        tmp_path,
        "trainer.world_size=2",
        "compute.mode=sampled",
        "network=eth1g",
        # from half an epoch on (step 33 of 40), every allreduce waits 200 ms more
        "network.latency_ms=0.1",
        "network.bandwidth_gbps=1.0",
        "network.schedule=[{from_epoch: 0, latency_ms: 0.1, bandwidth_gbps: 1.0},"
        "{from_epoch: 0.5, latency_ms: 200.0, bandwidth_gbps: 1.0}]",
        tracking="wandb_offline",
    )
    points = [p for p in read_run(summary["run_dir"]).history if "samples" in p]
    before = [0, *(p["samples"] for p in points[:-1])]
    seconds = sum(
        (p["samples"] - at) / p["throughput/modeled_samples_per_s"]
        for at, p in zip(before, points, strict=True)
    )
    whole = points[-1]["samples"] / seconds
    assert math.isclose(summary["throughput/run_modeled_samples_per_s"], whole, rel_tol=1e-9)
    assert summary["throughput/modeled_samples_per_s"] < 0.5 * whole  # the slow phase alone
