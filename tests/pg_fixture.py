"""A real PostgreSQL server for tests, started by `scripts/pg-local`.

Hook: tests/conftest.py registers this module with `pytest_plugins = ("tests.pg_fixture",)`;
a test then takes the `pg_url` fixture. One server serves the whole session; each test gets a
fresh database (`pg_url` names it), so studies from different tests never meet. The server is
installed with apt when missing; the fixture skips only when `pg-local` says it cannot install
(exit status 3: not root and no sudo) and fails on any other error.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "pg-local"


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """URL of the session's server (database `repro`)."""
    # Directly under /tmp: the server runs as user postgres, which cannot enter pytest's
    # private (mode 700) tmp_path parents.
    state = tempfile.mkdtemp(prefix="repro-pg-")
    env = {**os.environ, "REPRO_PG_STATE": state}
    up = subprocess.run([str(SCRIPT), "up"], env=env, capture_output=True, text=True)
    if up.returncode == 3:
        shutil.rmtree(state, ignore_errors=True)
        pytest.skip(f"PostgreSQL unavailable: {up.stderr.strip()}")
    if up.returncode != 0:
        shutil.rmtree(state, ignore_errors=True)
        pytest.fail(f"scripts/pg-local up failed: {up.stderr.strip()}")
    try:
        yield up.stdout.strip().splitlines()[-1]
    finally:
        subprocess.run([str(SCRIPT), "down"], env=env, capture_output=True, check=False)


@pytest.fixture
def pg_url(pg_server: str) -> str:
    """A URL to a new, empty database owned by the test role on the session's server."""
    import sqlalchemy

    name = f"t_{uuid.uuid4().hex[:12]}"
    driver_url = pg_server.replace("postgresql://", "postgresql+psycopg2://", 1)
    engine = sqlalchemy.create_engine(driver_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sqlalchemy.text(f"CREATE DATABASE {name}"))
    engine.dispose()
    return pg_server.rsplit("/", 1)[0] + "/" + name
