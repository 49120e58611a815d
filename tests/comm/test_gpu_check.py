"""`make gpu-check`'s code on the CPU: the same engine check it runs on a GPU, with gloo.

No test needs a GPU: on this machine the check's entry point must say there is none and
exit 0, and `check(device="cpu")` runs every method under both engines and compares them
exactly as the GPU run does.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from repro.bench.gpu_check import (
    SYNTHETIC,
    _attempt,
    _config,
    check,
    workloads,
)
from repro.comm.axis_collectives import AxisCollectives
from repro.conformance import firsts
from repro.strategies.base import registered
from repro.train.trainer import Trainer
from tests.helpers import REPO


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_a_gpu_gpu_check_says_so_and_exits_0():
    proc = subprocess.run(
        [sys.executable, "-m", "repro.bench.gpu_check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("gpu-check: no GPU here (")
    assert "nothing run" in proc.stdout


@pytest.mark.slow
def test_every_method_under_both_engines_on_the_cpu(tmp_path):
    """Each registered method in its first variant (the GPU run compares every variant;
    the CPU suite compares them all in tests/comm/test_engine_equivalence.py)."""
    lines: list[str] = []
    ok = check(
        "cpu",
        2,
        tmp_path / "data",
        lines.append,
        names=("mnist1d_cnn",),
        scale_workers=2,
        steps=2,
        compared=firsts(),
    )
    print("\n".join(lines))
    assert ok
    ids = [v.id for v in firsts()]
    assert sorted(v.method for v in firsts()) == sorted(registered())
    rows = [line.split() for line in lines if line.startswith("  mnist1d_cnn")]
    assert [(r[1], r[2]) for r in rows] == [(i, "ok") for i in ids]
    scale = lines[lines.index(next(x for x in lines if x.startswith("simulated engine"))) + 1 :]
    assert [s.split()[0] for s in scale] == ids
    assert all("ms/step" in s and s.endswith("(stacked)") for s in scale)


def test_paper_size_resnet18_without_cifar_runs_on_images_of_its_shape(tmp_path):
    """ResNet-18 (BatchNorm) as gpu-check runs it where CIFAR-100 cannot be downloaded:
    two simulated workers, vectorized, one step at a small batch."""
    overrides = workloads(tmp_path / "data", ("resnet18",))["resnet18"]
    assert f"workload.dataset={SYNTHETIC}" in overrides
    sync = next(v for v in firsts() if v.method == "sync")
    cfg = _config(tmp_path, [*overrides, "trainer.batch_size=2"], sync, 2, "simulated", "vmap")
    trainer = Trainer(cfg, AxisCollectives(2), "cpu", "vmap")
    assert trainer.workload.arrays.x_train.shape[1:] == (3, 32, 32)
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in trainer.replicas.template.modules())
    before = [b.clone() for b in trainer.replicas.buffers]
    trainer.train_step(1)
    # each worker's running statistics moved: BatchNorm ran in training mode per worker
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.replicas.buffers, strict=True))


def test_a_failing_method_becomes_its_one_line_error():
    def broken():
        raise RuntimeError("CUDA error: an illegal memory access\nmore detail")

    assert _attempt(broken) == "RuntimeError: CUDA error: an illegal memory access"
