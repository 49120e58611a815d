"""`cluster=submitit_local`: the submission path without a scheduler (issue 8).

The job runs detached through submitit's LocalExecutor, two task processes whose ranks and
rendezvous come from submitit's job environment, exactly as on SLURM; `repro train` returns
at once and `repro jobs --watch` follows the job by its process and result file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from tests.helpers import TINY, repro_cli, train

pytestmark = pytest.mark.slow
TWO_WORKERS = [*TINY, "trainer.world_size=2", "compute.mode=sampled", "network=eth1g"]


@pytest.mark.timeout(300)
def test_two_task_local_job_equals_the_spawned_run(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    submitted = repro_cli(
        "train",
        *TWO_WORKERS,
        "cluster=submitit_local",
        "tracking=disabled",
        f"runs_root={root}",
        f"data.root={tmp_path / 'data'}",
        cwd=tmp_path,
    )
    assert submitted.returncode == 0, submitted.stderr
    found = re.search(r"submitted sync: job (\d+) run_dir=(\S+)", submitted.stdout)
    assert found is not None, submitted.stdout
    job_id, run_dir = found.group(1), Path(found.group(2))

    watched = repro_cli("jobs", "--root", str(root), "--watch", "--interval", "1", timeout=240)
    assert watched.returncode == 0, watched.stdout + watched.stderr
    log = root / "slurm" / f"{job_id}_0_log.out"
    assert re.search(rf"^{job_id}\s+run\s+sync\s+COMPLETED\s+{log}$", watched.stdout, re.M)
    assert f"run {run_dir}: 2 workers, from step 0" in log.read_text()

    local = train(tmp_path / "local", *TWO_WORKERS)
    a = json.loads((run_dir / "summary.json").read_text())
    for key in ("step", "train/loss", "test/loss", "test/acc", "comm/bytes", "time/modeled_s"):
        assert a[key] == local[key], key
    ma = torch.load(run_dir / "final_model.pt")
    mb = torch.load(Path(local["run_dir"]) / "final_model.pt")
    assert all(torch.equal(ma[k], mb[k]) for k in mb)
