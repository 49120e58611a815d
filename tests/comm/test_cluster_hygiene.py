"""What every worker of a node does at once: its rendezvous variables, its data, its start.

Three spawned workers, as a node's tasks under torchrun or SLURM: each sees LOCAL_RANK and
LOCAL_WORLD_SIZE, takes the data directory's lock one at a time (never two inside at
once), and prepares MNIST-1D at the same moment as the others, all reading the one copy
that was written, with no temporary file left behind. And a worker starts with the
compiled CPU loops already loaded, from a server that runs no other thread.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from repro.comm import adasum_kernels
from repro.comm.launch import free_port, spawn
from repro.compress import position_kernels, select_kernels
from repro.workload.data import mnist1d, node_lock
from tests.helpers import repro_cli

WORKERS = 3


def _node_task(rank: int, world: int, root: str) -> tuple[str, str, float]:
    log = Path(root) / "inside.log"
    with node_lock(root, "probe"):
        with log.open("a") as f:
            f.write(f"enter {rank}\n")
        time.sleep(0.2)  # long enough for the others to arrive and wait
        with log.open("a") as f:
            f.write(f"leave {rank}\n")
    arrays = mnist1d(root, num_samples=500, seed=3)
    return os.environ["LOCAL_RANK"], os.environ["LOCAL_WORLD_SIZE"], arrays.x_train.sum().item()


def test_node_tasks_share_one_data_copy_under_one_lock(tmp_path):
    root = tmp_path / "data"
    out = spawn(_node_task, WORKERS, str(root))
    assert [(r, n) for r, n, _ in out] == [(str(i), str(WORKERS)) for i in range(WORKERS)]
    lines = (root / "inside.log").read_text().split()
    pairs = [lines[i : i + 4] for i in range(0, len(lines), 4)]
    assert len(pairs) == WORKERS
    assert all(p[0] == "enter" and p[2] == "leave" and p[1] == p[3] for p in pairs), lines
    assert sorted(p[1] for p in pairs) == [str(i) for i in range(WORKERS)]
    assert len({s for _, _, s in out}) == 1
    assert out[0][2] == mnist1d(str(root), num_samples=500, seed=3).x_train.sum().item()
    assert not [p for p in root.iterdir() if p.name.endswith(".tmp")]
    assert "LOCAL_WORLD_SIZE" not in os.environ


LOOPS = (
    select_kernels._select,
    position_kernels._add_at,
    adasum_kernels._stats,
    adasum_kernels._scaled_add,
    adasum_kernels._tree,
)


def _at_start(rank: int, world: int) -> tuple[list[int], int]:
    """Before this worker calls anything: each compiled loop's loaded type signatures, and
    the threads of the server it was forked from."""
    status = Path(f"/proc/{os.getppid()}/status").read_text()
    threads = next(line for line in status.splitlines() if line.startswith("Threads:"))
    return [len(loop.signatures) for loop in LOOPS], int(threads.split()[1])


def test_workers_start_with_the_compiled_loops_from_a_single_threaded_server():
    for loaded, server_threads in spawn(_at_start, 2):
        assert loaded == [1] * len(LOOPS)
        assert server_threads == 1  # a fork of a threaded process could inherit a held lock


def test_a_run_under_torchrun_is_the_process_engines_run(tmp_path):
    """`torchrun --nproc-per-node=2 repro train trainer.world_size=2`: each rank holds one
    worker of the one run (never a whole simulated run each), rank 0 writes the summary and
    says the run is done, and its numbers are those of the same run launched by `repro` itself."""
    args = ["train", "trainer.world_size=2", "trainer.steps=20", "tracking=disabled"]
    args += ["trainer.progress=false", f"data.root={tmp_path}/data"]
    bin_dir = Path(sys.executable).parent
    launched = subprocess.run(
        [str(bin_dir / "torchrun"), "--nproc-per-node=2", f"--master-port={free_port()}"]
        + [str(bin_dir / "repro"), *args, f"run_dir={tmp_path}/torchrun"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert launched.returncode == 0, launched.stderr[-2000:]
    # one "done" line, rank 0's with the summary: rank 1 holds no summary to tell
    assert launched.stdout.count("done sync:") == 1, launched.stdout
    assert "done sync: step=20 " in launched.stdout and "None" not in launched.stdout
    assert "engine: processes" in (tmp_path / "torchrun" / "config.yaml").read_text()
    own = repro_cli(*args, "trainer.engine=processes", f"run_dir={tmp_path}/own")
    assert own.returncode == 0, own.stderr
    got, want = (
        json.loads((tmp_path / d / "summary.json").read_text()) for d in ("torchrun", "own")
    )
    for key in ("train/loss", "test/loss", "test/acc", "comm/bytes", "samples"):
        assert got[key] == want[key], key
    a, b = (torch.load(tmp_path / d / "final_model.pt") for d in ("torchrun", "own"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _rank_pid(run_dir: Path, rank: int) -> int:
    """The pid of the process of rank `rank` training into `run_dir`."""
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().decode()
            env = (proc / "environ").read_bytes().decode().split("\0")
        except (OSError, ValueError):
            continue
        if f"run_dir={run_dir}" in cmd and f"RANK={rank}" in env and "torchrun" not in cmd:
            return int(proc.name)
    raise AssertionError(f"no rank {rank} training into {run_dir}")


def test_a_peer_lost_under_torchrun_is_one_line_with_the_resume_step(tmp_path):
    """The surviving rank printed gloo's traceback twice and no resume hint."""
    run_dir = tmp_path / "run"
    args = ["train", "trainer.world_size=2", "trainer.steps=100000", "tracking=disabled"]
    args += ["trainer.checkpoint_every=20", "trainer.progress=false", f"data.root={tmp_path}/d"]
    bin_dir = Path(sys.executable).parent
    launched = subprocess.Popen(
        [str(bin_dir / "torchrun"), "--nproc-per-node=2", f"--master-port={free_port()}"]
        + [str(bin_dir / "repro"), *args, f"run_dir={run_dir}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    latest = run_dir / "checkpoints" / "latest.json"
    deadline = time.monotonic() + 240
    while not latest.exists():
        assert launched.poll() is None and time.monotonic() < deadline, launched.stderr.read()
        time.sleep(0.2)
    os.kill(_rank_pid(run_dir, 1), 9)
    _, err = launched.communicate(timeout=240)
    assert launched.returncode != 0
    ours = [
        line for line in err.splitlines() if line.startswith(("error:", "[rank0]", "terminated:"))
    ]
    assert len(ours) == 1, err[-3000:]
    if ours[0].startswith("terminated:"):
        # torchrun saw rank 1 die and sent rank 0 SIGTERM before gloo told rank 0 (a
        # loaded machine): stopped as any SIGTERM stops a run, with the same hint
        assert "run the same command again to resume" in ours[0], ours
        return
    assert ours[0].startswith("error: worker 0 of 2: a collective failed ("), ours
    assert (
        "as when another worker of the run stops; re-running the same command resumes " in ours[0]
    )
