"""A run started from Python (a notebook, a script that goes on) leaves the process as it
found it, and runs whatever default dtype or grad mode its caller has set."""

import os
import random

import numpy as np
import pytest
import torch
from torch import distributed as dist

from repro.comm import launch
from repro.errors import UserError
from tests.helpers import train

ONE_PROCESS = ["trainer.engine=processes", "trainer.world_size=1", "compute.mode=sampled"]


def _draws() -> tuple:
    return random.random(), float(np.random.rand()), float(torch.rand(()))


@pytest.mark.parametrize(
    "engine",
    [["trainer.engine=simulated", "trainer.world_size=2", "compute.mode=sampled"], ONE_PROCESS],
)
def test_a_run_puts_back_what_it_set_and_ignores_the_callers_settings(
    tmp_path, monkeypatch, engine
):
    # the caller's own: two threads, a rendezvous address, seeded generators, float64, no grad
    monkeypatch.setenv("MASTER_ADDR", "10.9.9.9")
    monkeypatch.delenv("NCCL_ALGO", raising=False)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    random.seed(123), np.random.seed(123), torch.manual_seed(123)
    expected = _draws()
    random.seed(123), np.random.seed(123), torch.manual_seed(123)
    from repro.train.caller_state import RUN_VARIABLES

    keys = (*RUN_VARIABLES, "NCCL_ALGO")
    environ = {k: os.environ.get(k) for k in keys}
    torch.set_default_dtype(torch.float64)
    try:
        with torch.no_grad():
            # an AR-Topk method sets NCCL_ALGO for its worker process
            summary = train(tmp_path, "method=topk", "method.collective=ar_ring", *engine)
            assert not torch.is_grad_enabled()
        assert torch.get_default_dtype() == torch.float64
    finally:
        torch.set_default_dtype(torch.float32)
    assert summary["train/loss"] > 0
    assert torch.get_num_threads() == 2
    assert {k: os.environ.get(k) for k in keys} == environ
    assert environ["MASTER_ADDR"] == "10.9.9.9" and environ["NCCL_ALGO"] is None
    assert _draws() == expected
    torch.set_num_threads(threads)


def test_a_process_group_of_the_callers_is_refused_by_a_worker_run_here(tmp_path, monkeypatch):
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(launch.free_port()))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    launch.init_process_group("cpu")
    try:
        # as a launcher's task (RANK and WORLD_SIZE set), then as a caller's own group
        for launched in (True, False):
            if not launched:
                monkeypatch.delenv("RANK"), monkeypatch.delenv("WORLD_SIZE")
            with pytest.raises(UserError, match="destroy_process_group"):
                train(tmp_path, *ONE_PROCESS)
            assert dist.is_initialized()
    finally:
        launch.shutdown()
    assert not (tmp_path / "runs").exists()


def test_a_caller_composing_with_hydra_keeps_its_own(tmp_path):
    from hydra import compose, initialize_config_dir

    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "config.yaml").write_text("lr: 0.5\n")
    with initialize_config_dir(config_dir=str(tmp_path / "mine"), version_base=None):
        summary = train(tmp_path, "trainer.steps=5")
        assert compose("config").lr == 0.5  # the caller's Hydra, still initialized
    assert summary["train/loss"] > 0


_SCRIPT = """
from repro.config import compose
from repro.train.entry import run_training
{guard}run_training(compose([
{indent}"trainer.engine=processes", "trainer.world_size=2", "trainer.steps=3",
{indent}"workload=synthetic_mlp", "tracking=disabled", "run_dir={run}", "data.root={data}",
{indent}]))
"""


@pytest.mark.slow
def test_a_script_whose_workers_would_run_it_again_is_named_before_they_start(tmp_path):
    """Spawned workers import the main script again: a run at its top level ran again in
    each worker, which met the parent's run lock: a traceback from every worker."""
    import subprocess
    import sys

    for guarded in (False, True):
        script = tmp_path / f"script_{guarded}.py"
        run = tmp_path / f"run_{guarded}"
        script.write_text(
            _SCRIPT.format(
                guard='if __name__ == "__main__":\n    ' if guarded else "",
                indent="    " if guarded else "",
                run=run,
                data=tmp_path / "data",
            )
        )
        proc = subprocess.run([sys.executable, script], capture_output=True, text=True)
        if guarded:
            assert proc.returncode == 0, proc.stderr
            assert (run / "summary.json").exists()
        else:
            assert proc.returncode == 1
            assert proc.stderr.strip().splitlines()[-1] == (
                f"repro.errors.UserError: {script}, line 4: the processes engine's workers "
                "start by importing this script again, and would each run this line: put it "
                'under `if __name__ == "__main__":`'
            ), proc.stderr
            assert not run.exists()


_GUARDS = [
    ("run()\n", 1, False),
    ('if __name__ == "__main__":\n    run()\n', 2, True),
    ('if "__main__" == __name__:\n    run()\n', 2, True),
    ('if __name__ == "__main__" and fast:\n    run()\n', 2, True),
    ('if __name__ in ("__main__",):\n    run()\n', 2, True),
    ('try:\n    if __name__ == "__main__":\n        run()\nexcept OSError:\n    pass\n', 3, True),
    ('with ctx():\n    if __name__ == "__main__":\n        run()\n', 3, True),
    ('if __name__ == "__main__":\n    pass\nelse:\n    run()\n', 4, False),
    ('if __name__ == "__mp_main__":\n    run()\n', 2, False),
    ("def main():\n    run()\nmain()\n", 3, False),
]


@pytest.mark.parametrize("source,line,guarded", _GUARDS)
def test_the_main_guard_is_read_where_it_stands(source, line, guarded):
    from repro.comm.main_guard import under_main_guard

    assert under_main_guard(source, line) is guarded
