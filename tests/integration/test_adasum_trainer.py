"""method=adasum through the real trainer: one worker is the plain optimizer bit for bit,
Horovod's Average is synchronous training bit for bit, 2 and 4 workers train with
SGD-momentum, Adam and LAMB and move the bytes the VHDD allreduce (or, for a small model,
the one allgather) should, and bad settings end `repro train` with one line."""

from pathlib import Path

import pytest
import torch

from tests.helpers import repro_cli, train

OPTIMIZERS = {
    "sgd": ["optim.name=sgd", "optim.lr=0.1", "optim.momentum=0.9"],
    "adam": ["optim.name=adam", "optim.lr=0.01"],
    "lamb": ["optim.name=lamb", "optim.lr=0.02", "optim.weight_decay=0.01"],
}
# synthetic_mlp is a 16-32-4 MLP: four tensors, 16*32 + 32 + 32*4 + 4 = 676 float32 values.
N_PARAMS, N_TENSORS = 676, 4


def _final_model(summary: dict) -> dict[str, torch.Tensor]:
    return torch.load(Path(summary["run_dir"]) / "final_model.pt", weights_only=True)


@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
def test_one_worker_equals_the_plain_optimizer(tmp_path, opt):
    plain = train(tmp_path, "method=sync", *OPTIMIZERS[opt], "experiment.label=plain")
    reference = _final_model(plain)
    for combiner in ("adasum", "sum", "mean"):
        got = train(
            tmp_path,
            "method=adasum",
            f"method.combiner={combiner}",
            *OPTIMIZERS[opt],
            f"experiment.label={combiner}",
        )
        model = _final_model(got)
        assert model.keys() == reference.keys()
        assert all(torch.equal(model[k], reference[k]) for k in reference), (opt, combiner)
        assert got["train/loss"] == plain["train/loss"] and got["comm/bytes"] == 0


@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_average_trains_as_synchronous_sgd_does(tmp_path, opt):
    # Horovod's op=Average is one optimizer step on the mean gradient: synchronous training
    common = ["trainer.world_size=2", *OPTIMIZERS[opt]]
    sync = train(tmp_path, "method=sync", *common, "experiment.label=sync")
    average = train(
        tmp_path, "method=adasum", "method.combiner=mean", *common, "experiment.label=average"
    )
    reference, model = _final_model(sync), _final_model(average)
    assert model.keys() == reference.keys()
    assert all(torch.equal(model[k], reference[k]) for k in reference), opt
    assert average["train/loss"] == sync["train/loss"]
    assert average["comm/bytes"] == sync["comm/bytes"] == 40 * N_PARAMS * 4
    assert average["method/flow"] == "gradient"


def _adasum_bytes_per_step(world: int) -> tuple[int, int]:
    """(payload bytes, collectives) one rank records per step of the VHDD allreduce.

    The flat buffer is padded to a multiple of the world; level j sends half of the current
    slice (padded / 2^(j+1) values) and the gather phase sends the same sizes back; each
    level also sums (dot, |a|^2, |b|^2) per tensor as float64.
    """
    padded = -(-N_PARAMS // world) * world
    levels = world.bit_length() - 1
    halves = [padded // 2 ** (j + 1) * 4 for j in range(levels)]
    return 2 * sum(halves) + levels * 3 * N_TENSORS * 8, 3 * levels


@pytest.mark.slow
@pytest.mark.parametrize("world, opt", [(2, "sgd"), (2, "adam"), (2, "lamb"), (4, "lamb")])
def test_several_workers_train_and_move_vhdd_bytes(tmp_path, world, opt):
    steps = 40
    # 2.7 KB is below the default gather_below_kb: 0 forces the halving allreduce
    s = train(
        tmp_path,
        "method=adasum",
        "method.gather_below_kb=0",
        f"trainer.world_size={world}",
        *OPTIMIZERS[opt],
    )
    assert s["step"] == steps and s["test/acc"] >= 0.8  # 4 classes: chance is 0.25
    nbytes, collectives = _adasum_bytes_per_step(world)
    assert s["comm/bytes"] == steps * nbytes and s["comm/collectives"] == steps * collectives
    assert s["method/combiner"] == "adasum"


@pytest.mark.slow
def test_small_model_takes_one_allgather_per_step(tmp_path):
    s = train(tmp_path, "method=adasum", "trainer.world_size=4", *OPTIMIZERS["sgd"])
    assert s["step"] == 40 and s["test/acc"] >= 0.8
    # each rank contributes its unpadded 676 float32 deltas to one allgather per step
    assert s["comm/bytes"] == 40 * N_PARAMS * 4 and s["comm/collectives"] == 40


@pytest.mark.slow
def test_sum_combiner_is_one_flat_allreduce(tmp_path):
    s = train(
        tmp_path,
        "method=adasum",
        "method.combiner=sum",
        "trainer.world_size=2",
        *OPTIMIZERS["adam"],
    )
    assert s["comm/bytes"] == 40 * N_PARAMS * 4 and s["comm/collectives"] == 40


BAD = [
    (["method=adasum", "method.combiner=max"], "method.combiner"),
    (["optim.name=rmsprop"], "optim.name"),
    (["method=adasum", "trainer.world_size=3"], "power-of-two"),
    (["method=adasum", "method.gather_below_kb=-1"], "method.gather_below_kb"),
    (["method=adasum", "method.flow=gradient"], "method.flow=gradient"),
    (["method=adasum", "method.combiner=mean", "method.flow=both"], "method.flow"),
    (["method=adasum", "method.zero_norm_guard=tiny"], "method.zero_norm_guard"),
    (["trainer.target_acc=1.5"], "trainer.target_acc"),
    (["trainer.target_acc=-0.1"], "trainer.target_acc"),
]


@pytest.mark.slow
@pytest.mark.parametrize("overrides, needle", BAD, ids=[" ".join(b[0]) for b in BAD])
def test_bad_input_is_one_line(tmp_path, overrides, needle):
    proc = repro_cli(
        "train", *overrides, f"runs_root={tmp_path}/runs", "tracking=disabled", cwd=tmp_path
    )
    err = proc.stderr.strip()
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert len(err.splitlines()) == 1 and err.startswith("error:") and needle in err, err
    assert not (tmp_path / "runs").exists()
