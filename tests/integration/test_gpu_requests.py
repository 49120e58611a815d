"""GPU requests on a machine without usable CUDA, from the command line: one line naming
the setting, the cause and the fix, exit 2, nothing written."""

import pytest
import torch

from tests.helpers import repro_cli

CASES = [
    (["cluster.gpus_per_node=1"], ("cluster.gpus_per_node=1", "asks for CUDA", "make install")),
    (["trainer.device=cuda:3"], ("trainer.device=cuda:3", "asks for CUDA")),
    (["cluster.backend=nccl"], ("cluster.backend=nccl", "asks for CUDA")),
    (["trainer.device=gpu"], ("trainer.device=gpu", "cuda:N")),
    (["cluster.backend=mpi"], ("cluster.backend='mpi'", "nccl")),
]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
@pytest.mark.parametrize("overrides,words", CASES)
def test_gpu_request_without_cuda_is_one_line(tmp_path, overrides, words):
    run_dir = tmp_path / "run"
    proc = repro_cli(
        "train",
        "trainer.engine=processes",
        "trainer.steps=2",
        *overrides,
        f"run_dir={run_dir}",
        f"data.root={tmp_path}/data",
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert all(w in lines[0] for w in words), lines[0]
    assert not run_dir.exists()
