"""Same config and seed give the same curve, under either engine (2 gloo processes, or both
workers on one axis in this process); the default workload learns MNIST-1D."""

import pytest

from repro.track.runs import read_run
from tests.helpers import train

CURVE = ("train/loss", "test/loss", "test/acc", "time/modeled_s", "comm/bytes", "method/tau")


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["processes", "simulated"])
def test_same_seed_same_curve_different_seed_different_curve(tmp_path, engine):
    common = [
        f"trainer.engine={engine}",
        "trainer.world_size=2",
        "method=adacomm",
        "method.tau0=4",
        "method.interval_steps=10",
        "compute.mode=sampled",
        "network=eth1g",
        "trainer.eval_every=5",
    ]
    runs = [
        train(
            tmp_path,
            *common,
            f"run_dir={tmp_path}/{name}",
            f"seed={seed}",
            tracking="wandb_offline",
        )
        for name, seed in (("a", 0), ("b", 0), ("c", 1))
    ]
    a, b, c = (read_run(r["run_dir"]).history for r in runs)
    assert len(a) == len(b) == 8
    for key in CURVE:
        assert [row[key] for row in a] == [row[key] for row in b], key
    assert [row["train/loss"] for row in a] != [row["train/loss"] for row in c]


@pytest.mark.slow
def test_mnist1d_cnn_reaches_90_percent_single_process(tmp_path):
    summary = train(
        tmp_path,
        "workload=mnist1d_cnn",
        "trainer.batch_size=100",
        "trainer.steps=1000",
        "trainer.eval_every=250",
        "optim.name=adam",
        "optim.lr=0.01",
    )
    assert summary["test/acc"] >= 0.90
    assert summary["time/wall_s"] < 120
