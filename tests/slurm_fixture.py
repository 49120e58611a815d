"""Session fixture `slurm_cluster`: a real one-node SLURM cluster from scripts/slurm-local.

Hook it in with `pytest_plugins = ["tests.slurm_fixture"]` in tests/conftest.py. The
fixture reuses a cluster that is already up (e.g. after `make slurm-up`) and leaves it
running; otherwise it starts one and stops it at the end of the session. Off CI it skips
when the cluster cannot be built here (not root, or packages missing with no apt-get); on
CI (`CI` set) those are failures, because the cluster tests must run there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from repro.cluster.executor import read_env_file

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "slurm-local"
DEFAULT_STATE = "/tmp/repro-slurm"
_DAEMONS = ("slurmctld", "slurmd", "slurmdbd", "munged", "mariadbd")


def _cannot_run_reason() -> str | None:
    if os.geteuid() != 0:
        return "the local SLURM cluster needs root (slurmd, munged as user munge)"
    installed = all(shutil.which(d, path="/usr/sbin:/usr/bin") for d in _DAEMONS)
    if not installed and shutil.which("apt-get") is None:
        return "SLURM, munge and MariaDB are not installed and apt-get is not available"
    return None


def _script(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # The first `up` on a fresh machine installs packages: give it minutes, not seconds.
    return subprocess.run(
        [str(SCRIPT), command], env=env, capture_output=True, text=True, timeout=900
    )


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[dict[str, str]]:
    """Yields the cluster's client environment (SLURM_CONF, ...), also set in os.environ."""
    reason = _cannot_run_reason()
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"SLURM cluster tests must run on CI: {reason}")
        pytest.skip(reason)
    state = os.environ.get("REPRO_SLURM_STATE", DEFAULT_STATE)
    script_env = {**os.environ, "REPRO_SLURM_STATE": state}
    already_up = _script("status", script_env).returncode == 0
    if not already_up:
        up = _script("up", script_env)
        if up.returncode != 0:
            _script("down", script_env)
            pytest.fail(f"scripts/slurm-local up failed:\n{up.stdout}\n{up.stderr}")
    cluster_env = read_env_file(Path(state) / "env")
    try:
        with pytest.MonkeyPatch.context() as patch:
            for key, value in cluster_env.items():
                patch.setenv(key, value)
            yield cluster_env
    finally:
        if not already_up:
            _script("down", script_env)
