"""A run SIGKILLed mid-way and restarted ends exactly like an uninterrupted run.

Under both engines, for every method that keeps state of its own: local SGD's period
position, AdaComm's interval and tau (the checkpoint falls mid-interval: 40 is no multiple
of the 7-step interval), Top-k's residuals, ratio controller and probing (a probe round
every 10-step gain window) and VAR's smoothed-norm window, Adasum's local Adam state.
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

from repro.track.runs import read_run

ARGS = [
    "workload=synthetic_mlp",
    "trainer.world_size=2",
    "trainer.batch_size=16",
    "trainer.steps=400",
    "trainer.eval_every=10",
    "trainer.checkpoint_every=40",
    "trainer.progress=false",
    "optim.name=sgd",
    "optim.momentum=0.9",
    "compute.mode=sampled",
    "network=eth1g",
    "tracking=wandb_offline",
]


CASES = {
    "local_sgd": ["method=local_sgd", "method.tau=3"],
    "adacomm": ["method=adacomm", "method.tau0=8", "method.interval_steps=7"],
    "topk_moo": [
        "method=topk",
        "method.cr_controller=moo",
        "method.candidates=[0.3,0.1]",
        "method.probe_steps=2",
        "method.gain_window=10",
    ],
    "adasum_adam": ["method=adasum", "optim.name=adam", "optim.lr=0.01"],
    "topk_var_ewma": [  # the checkpoint at step 40 holds 24 norms of the 25-step window
        "method=topk",
        "method.cr=0.1",
        "method.collective=ar_tree",
        "method.leader=var",
        "method.var_norm=ewma_grad",
    ],
}
# The process engine's cases cost a spawn per segment; local SGD and Top-k cover it.
ENGINE_CASES = [
    ("processes", "local_sgd"),
    ("processes", "topk_moo"),
    ("simulated", "local_sgd"),
    ("simulated", "adacomm"),
    ("simulated", "topk_moo"),
    ("simulated", "topk_var_ewma"),
    ("simulated", "adasum_adam"),
]


def _cmd(tmp: Path, run_dir: Path, engine: str, case: str) -> list[str]:
    exe = Path(sys.executable).parent / "repro"
    return [
        str(exe),
        "train",
        *ARGS,
        *CASES[case],
        f"trainer.engine={engine}",
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
@pytest.mark.parametrize("engine,case", ENGINE_CASES)
def test_sigkill_and_resume_matches_uninterrupted(tmp_path, engine, case):
    killed, clean = tmp_path / "killed", tmp_path / "clean"
    proc = subprocess.Popen(
        _cmd(tmp_path, killed, engine, case),
        env=_env(),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 240
    while _checkpointed_step(killed) < 40 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be killed; make it longer"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = _checkpointed_step(killed)
    assert 40 <= killed_at < 400 and not (killed / "summary.json").exists()

    cmd = _cmd(tmp_path, killed, engine, case)
    resumed = subprocess.run(cmd, env=_env(), capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    cmd = _cmd(tmp_path, clean, engine, case)
    straight = subprocess.run(cmd, env=_env(), capture_output=True, text=True)
    assert straight.returncode == 0, straight.stderr

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
    method_keys = [k for k in b if k.startswith("method/")]
    assert method_keys and all(a[k] == b[k] for k in method_keys)
    ma, mb = torch.load(killed / "final_model.pt"), torch.load(clean / "final_model.pt")
    assert all(torch.equal(ma[k], mb[k]) for k in mb)

    # the wandb history of the killed-and-resumed run is the uninterrupted one, point by point
    ha, hb = read_run(killed).history, read_run(clean).history
    assert [r["step"] for r in ha] == [r["step"] for r in hb] == list(range(10, 401, 10))
    assert [r["train/loss"] for r in ha] == [r["train/loss"] for r in hb]
    assert read_run(killed).run_id == (killed / "run_id").read_text().strip()
