"""A memory limit on the process's control group (a SLURM job's `--mem`, a container's) is
free memory the refusals count: a run that fits the machine but not its group's limit is
refused in one line before anything is written, where counting the machine alone let it
start and the kernel kill it at the limit. A real group, made here (as root)."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from tests.helpers import repro_cli

LIMIT = 2**30
# (mount, limit file): cgroup v1's memory controller, else v2's unified hierarchy
HIERARCHIES = (
    (Path("/sys/fs/cgroup/memory"), "memory.limit_in_bytes"),
    (Path("/sys/fs/cgroup"), "memory.max"),
)


@pytest.fixture
def limited_group():
    """A new memory control group limited to LIMIT bytes; removed afterwards."""
    for mount, limit_file in HIERARCHIES:
        group = mount / f"repro-test-{os.getpid()}"
        try:
            group.mkdir()
        except OSError:
            continue
        try:
            (group / limit_file).write_text(str(LIMIT))
        except OSError:
            group.rmdir()
            continue
        break
    else:
        pytest.skip("no memory control group can be made here (needs root and cgroupfs)")
    yield group
    for _ in range(50):  # the refused process may take a moment to leave it
        try:
            group.rmdir()
            return
        except OSError:
            time.sleep(0.1)


def _machine_free_gib() -> float:
    text = Path("/proc/meminfo").read_text()
    return int(re.search(r"MemAvailable:\s+(\d+)", text).group(1)) / 2**20


def test_a_run_past_its_groups_memory_limit_is_refused_before_anything_is_written(
    limited_group, tmp_path
):
    args = [
        "train",
        "workload=synthetic_mlp",
        "workload.num_samples=2000000",
        "trainer.engine=simulated",
        "compute.mode=sampled",
        "trainer.world_size=128",
        "trainer.batch_size=8192",
        "trainer.steps=1",
        "tracking=disabled",
        f"runs_root={tmp_path / 'runs'}",
        f"data.root={tmp_path / 'data'}",
    ]
    join = ("sh", "-c", f'echo $$ > {limited_group / "cgroup.procs"}; exec "$@"', "sh")
    ran = repro_cli(*args, cwd=tmp_path, under=join)
    err = ran.stderr.strip()
    assert ran.returncode == 2 and len(err.splitlines()) == 1, err
    need, have = re.search(
        r"needs about ([\d.]+) GiB .* and this process's memory group \(a job's --mem, a "
        r"container's limit\) leaves ([\d.]+) GiB free; lower ",
        err,
    ).groups()
    assert float(have) < LIMIT / 2**30  # the group's room, not the machine's
    assert float(have) < float(need) < _machine_free_gib()  # the machine's would have passed
    assert list(tmp_path.iterdir()) == []
