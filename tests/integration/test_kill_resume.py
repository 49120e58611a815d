"""A run SIGKILLed mid-way and restarted ends exactly like an uninterrupted run.

Each registered method in the first variant its config declares (`repro.conformance`; the
one holding the most state: local SGD's block momentum, AdaComm's interval and tau, Top-k's
residuals, MOO ratio controller and probing, Adasum's local Adam state), from the command
line under the simulated engine, killed after the checkpoint at step 37 (a prime: inside
every period, interval and gain window the variants use). The same guarantee for every
declared variant under both engines, resumed in process from the checkpoint files, is
`tests/comm/test_method_resume.py`; the process engine's workers requeued mid-run under
SLURM, `tests/daemons/test_slurm_faults.py`.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from repro.conformance import firsts
from repro.track.runs import read_run

CHECKPOINT = 37
STEPS = 200
"""Over 160 steps after the kill: a second or more in which to kill the run, and many periods
of every variant's state resumed."""
ARGS = [
    "workload=synthetic_mlp",
    "trainer.world_size=2",
    "trainer.batch_size=16",
    f"trainer.steps={STEPS}",
    "trainer.eval_every=10",
    f"trainer.checkpoint_every={CHECKPOINT}",
    "trainer.progress=false",
    "optim.name=sgd",
    "optim.momentum=0.9",
    "compute.mode=sampled",
    "network=eth1g",
    "tracking=wandb_offline",
]


CASES = {v.id: v.overrides for v in firsts()}


def _cmd(tmp: Path, run_dir: Path, case: str) -> list[str]:
    exe = Path(sys.executable).parent / "repro"
    return [
        str(exe),
        "train",
        *ARGS,
        *CASES[case],
        "trainer.engine=simulated",
        f"run_dir={run_dir}",
        f"data.root={tmp}/data",
    ]


def _env() -> dict:
    env = {**os.environ, "WANDB_SILENT": "true"}
    env.pop("WANDB_API_KEY", None)
    return env


def _checkpointed_step(run_dir: Path) -> int:
    meta = run_dir / "checkpoints" / "latest.json"
    try:
        return json.loads(meta.read_text())["step"]
    except (OSError, ValueError):
        return 0


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_sigkill_and_resume_matches_uninterrupted(tmp_path, case):
    killed, clean = tmp_path / "killed", tmp_path / "clean"
    # the uninterrupted twin runs beside the one to be killed, on the other core
    straight = subprocess.Popen(
        _cmd(tmp_path, clean, case),
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    proc = subprocess.Popen(
        _cmd(tmp_path, killed, case),
        env=_env(),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 240
    while (
        _checkpointed_step(killed) < CHECKPOINT and proc.poll() is None and time.time() < deadline
    ):
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be killed; make it longer"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = _checkpointed_step(killed)
    assert CHECKPOINT <= killed_at < STEPS and not (killed / "summary.json").exists()

    cmd = _cmd(tmp_path, killed, case)
    resumed = subprocess.run(cmd, env=_env(), capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    straight_err = straight.communicate()[1]
    assert straight.returncode == 0, straight_err

    a = json.loads((killed / "summary.json").read_text())
    b = json.loads((clean / "summary.json").read_text())
    for key in (
        "step",
        "train/loss",
        "test/loss",
        "test/acc",
        "time/modeled_s",
        "comm/bytes",
        "comm/collectives",
    ):
        assert a[key] == b[key], key
    # the strategy's own metrics (sync reports none)
    method_keys = sorted(k for k in b if k.startswith("method/"))
    assert sorted(k for k in a if k.startswith("method/")) == method_keys
    assert all(a[k] == b[k] for k in method_keys)
    ma, mb = torch.load(killed / "final_model.pt"), torch.load(clean / "final_model.pt")
    assert all(torch.equal(ma[k], mb[k]) for k in mb)

    # the wandb history of the killed-and-resumed run is the uninterrupted one, point by point
    ha, hb = read_run(killed).history, read_run(clean).history
    assert [r["step"] for r in ha] == [r["step"] for r in hb] == list(range(10, STEPS + 1, 10))
    assert [r["train/loss"] for r in ha] == [r["train/loss"] for r in hb]
    assert read_run(killed).run_id == (killed / "run_id").read_text().strip()
