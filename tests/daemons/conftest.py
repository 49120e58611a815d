"""Every test here runs on the one pytest-xdist worker that holds the daemons (see
tests/conftest.py); what it submitted to the local SLURM cluster ends with it."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from repro.cluster.jobs import read_records


@pytest.fixture(autouse=True)
def cancel_leftovers(tmp_path: Path) -> Iterator[None]:
    """A test that fails half-way must not leave its jobs running on the shared cluster."""
    yield
    if (tmp_path / "runs" / "jobs.jsonl").exists():
        ids = [r.job_id for r in read_records(tmp_path / "runs")]
        subprocess.run(["scancel", *ids], check=False, timeout=60)
