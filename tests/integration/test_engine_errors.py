"""The engine's bad input: one line naming the setting and trainer.engine=processes, exit 2,
nothing written."""

import pytest

from repro.config import compose
from repro.strategies.base import registered
from repro.train.engine_checks import estimate_bytes
from repro.workload.models import build_model
from tests.helpers import repro_cli

CASES = [
    (["trainer.engine=threads"], ("trainer.engine='threads'", "processes", "simulated")),
    (["trainer.vectorize=jit"], ("trainer.vectorize='jit'", "stacked", "vmap", "loop")),
    (
        # the MLP has no all-workers forward of its own
        [
            "trainer.engine=simulated",
            "compute.mode=sampled",
            "workload=synthetic_mlp",
            "trainer.vectorize=stacked",
        ],
        ("trainer.vectorize=stacked", "workload.model=mlp", "trainer.vectorize=vmap"),
    ),
    (
        ["trainer.engine=simulated", "cluster=slurm"],
        ("trainer.engine=simulated", "cluster=slurm", "trainer.engine=processes"),
    ),
    (
        ["trainer.engine=simulated", "compute.mode=measured"],
        ("compute.mode=measured", "compute.mode=sampled", "trainer.engine=processes"),
    ),
    (
        ["trainer.engine=simulated", "compute.mode=sampled", "network.inject=true"],
        ("network.inject", "trainer.engine=processes"),
    ),
    (
        # 2 million MLP workers: about 40 GiB by the estimate, more than the machine has
        [
            "trainer.engine=simulated",
            "compute.mode=sampled",
            "workload=synthetic_mlp",
            "workload.num_samples=2000000",
            "trainer.world_size=2000000",
            "trainer.batch_size=1",
        ],
        ("trainer.world_size=2000000", "GiB", "trainer.engine=processes"),
    ),
    (
        # 1024 ResNet-18 workers, about 240 GiB by the estimate, which runs the model on the
        # images as it takes them (stored as uint8, normalized to float per batch)
        [
            "trainer.engine=simulated",
            "compute.mode=sampled",
            "workload=cifar100_resnet18",
            "workload.dataset=synthetic_images",
            "workload.num_samples=1024",
            "trainer.world_size=1024",
            "trainer.batch_size=1",
        ],
        ("trainer.world_size=1024", "GiB", "trainer.engine=processes"),
    ),
    (
        # one worker on the process engine, as a plain `repro train` runs: it was never
        # checked, and ran out of memory in its first forward
        [
            "trainer.engine=processes",
            "workload=cifar100_resnet18",
            "workload.dataset=synthetic_images",
            "workload.num_samples=5000",
            "trainer.batch_size=4096",
        ],
        ("one worker (trainer.world_size=1) needs about", "lower trainer.batch_size or"),
    ),
    (
        # an evaluation batch of the whole test set: the estimate counted the training batch
        [
            "trainer.engine=simulated",
            "compute.mode=sampled",
            "workload=cifar10_resnet50",
            "workload.dataset=synthetic_images",
            "workload.num_samples=50000",
            "workload.eval_batch_size=50000",
            "trainer.batch_size=2",
        ],
        ("trainer.world_size=1 needs about", "workload.eval_batch_size"),
    ),
]


@pytest.mark.parametrize("overrides,words", CASES)
def test_engine_bad_input_is_one_line(tmp_path, overrides, words):
    run_dir = tmp_path / "run"
    proc = repro_cli(
        "train", *overrides, f"run_dir={run_dir}", f"data.root={tmp_path}/data", cwd=tmp_path
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert all(w in lines[0] for w in words), lines[0]
    assert not run_dir.exists()


def test_auto_engine_by_scale_and_launch():
    sampled = ["compute.mode=sampled"]
    assert compose(sampled).trainer.engine == "simulated"
    assert compose(["experiment=adacomm_small"]).trainer.engine == "simulated"
    assert compose(["experiment=adacomm_paper"]).trainer.engine == "processes"
    assert compose([*sampled, "cluster=slurm"]).trainer.engine == "processes"
    assert compose(["compute.mode=measured"]).trainer.engine == "processes"


def test_auto_engine_under_an_external_launcher_is_processes(monkeypatch):
    """torchrun or srun started this process as one rank among others: each rank holds one
    worker, so a run every rank would simulate whole is never picked for it."""
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert compose(["compute.mode=sampled"]).trainer.engine == "processes"


LAUNCHED = [
    # (the launcher's variables, overrides, words of the one line)
    ({"RANK": "1", "WORLD_SIZE": "2"}, [], ("started 2 processes", "trainer.world_size=1")),
    ({"RANK": "abc", "WORLD_SIZE": "2"}, [], ("RANK='abc' WORLD_SIZE='2'", "unset them")),
    (
        {"RANK": "1", "WORLD_SIZE": "2"},
        ["trainer.world_size=2"],
        ("MASTER_ADDR and MASTER_PORT are not", "unset RANK and WORLD_SIZE"),
    ),
    (
        {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"},
        ["trainer.world_size=2", "trainer.engine=simulated", "compute.mode=sampled"],
        ("trainer.engine=simulated", "RANK=0 WORLD_SIZE=2", "trainer.engine=processes"),
    ),
]


@pytest.mark.parametrize("env,overrides,words", LAUNCHED)
def test_a_rank_that_cannot_join_its_launch_is_one_line_before_anything_is_written(
    tmp_path, monkeypatch, env, overrides, words
):
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    run_dir = tmp_path / "run"
    proc = repro_cli(
        "train", *overrides, f"run_dir={run_dir}", f"data.root={tmp_path}/data", cwd=tmp_path
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert all(w in lines[0] for w in words), lines[0]
    assert not run_dir.exists()


@pytest.mark.parametrize("method", sorted(registered()))
def test_memory_estimate_counts_parameters_slots_copies_and_activations(method):
    """Every registered method's estimate counts the model copies its config declares."""
    cfg = compose(
        ["workload=synthetic_mlp", "optim.name=adam", "trainer.world_size=8", f"method={method}"]
    )
    copies = cfg.method.model_copies
    assert isinstance(copies, int) and copies >= 0
    model = build_model("mlp", 4, in_dim=16)
    params = 16 * 32 + 32 + 32 * 4 + 4
    import torch

    # outputs for a batch of 5: Linear 32, ReLU 32, Linear 4, the Sequential 4, the MLP 4
    activations = 5 * (32 + 32 + 4 + 4 + 4)
    want = 8 * 4 * (params * (1 + 1 + 2 + copies) + activations * 3)
    assert estimate_bytes(cfg, model, torch.zeros(5, 16)) == want
    # evaluated 1000 at a time: one forward of the averaged model, once training's are freed,
    # holding three of its largest outputs (32) at once, or every output (76) if fewer
    evaluation = 4 * 1000 * min(3 * 32, activations // 5)
    want = 8 * 4 * params * (1 + 1 + 2 + copies) + max(8 * 4 * activations * 3, evaluation)
    assert estimate_bytes(cfg, model, torch.zeros(5, 16), eval_samples=1000) == want
