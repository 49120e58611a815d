"""The tiny sweep on a real PostgreSQL server: two worker processes sharing the study, a
wrong password refused without being printed, and a SIGKILLed sweep resumed, the killed
trials found by their heartbeat."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time

import pytest
import yaml

from tests.helpers import REPO
from tests.sweep_runs import kill_and_resume, repro, run_tiny_sweep_and_show, write_spec

pytestmark = pytest.mark.slow


def test_tiny_sweep_on_postgresql(tmp_path, pg_url):
    spec_path = write_spec(tmp_path, storage=pg_url)
    run_tiny_sweep_and_show(spec_path)
    assert not (tmp_path / "out" / "tiny" / "journal.log").exists()


def test_wrong_database_password_is_refused_and_never_printed(tmp_path, pg_url):
    secret = "Wr0ngPassw0rd"
    user_part, host_part = pg_url.split("://", 1)[1].rsplit("@", 1)
    bad = f"postgresql://{user_part.split(':')[0]}:{secret}@{host_part}"
    ran = repro("sweep", str(write_spec(tmp_path, storage=bad)))
    assert ran.returncode == 2
    assert "cannot connect" in ran.stderr and "password authentication failed" in ran.stderr
    assert secret not in ran.stderr + ran.stdout
    assert ":***@" in ran.stderr


def test_resume_after_sigkill_loses_no_trial_and_leaves_none_running(tmp_path, pg_url):
    # 1 s heartbeats, stale after 10 s (a shorter grace can fail live trials whose heartbeat
    # thread waits for a loaded CPU)
    kill_and_resume(tmp_path, storage=pg_url, heartbeat_s=1, grace_s=10)


def test_a_database_gone_during_a_sweep_is_one_line(tmp_path, pg_url):
    """The study's database ends every connection and is gone while a trial runs (dropped
    here, as a stopped server would be): the sweep said so in 24 chained tracebacks, printed
    twice, that blamed "invalid data in the commit"."""
    import sqlalchemy

    overrides = [*yaml.safe_load((REPO / "sweeps" / "tiny.yaml").read_text())["overrides"]]
    overrides = [o for o in overrides if not o.startswith("trainer.steps=")]
    spec_path = write_spec(
        tmp_path,
        wandb=False,
        storage=pg_url,
        overrides=[*overrides, "trainer.steps=200000"],  # a trial far longer than the test
        heartbeat_s=1,
        grace_s=10,
    )
    sweep = subprocess.Popen(
        [sys.executable, "-m", "repro", "sweep", str(spec_path), "--workers", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    server, name = pg_url.rsplit("/", 1)
    admin = sqlalchemy.create_engine(
        f"{server.replace('postgresql://', 'postgresql+psycopg2://', 1)}/repro",
        isolation_level="AUTOCOMMIT",
    )
    running = sqlalchemy.text("SELECT count(*) FROM trials WHERE state = 'RUNNING'")
    study_db = sqlalchemy.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg2://"))
    deadline = time.monotonic() + 120
    while True:  # until its first trial runs
        assert sweep.poll() is None and time.monotonic() < deadline, sweep.communicate()
        with contextlib.suppress(sqlalchemy.exc.ProgrammingError), study_db.connect() as conn:
            if conn.execute(running).scalar():
                break
        time.sleep(0.5)
    study_db.dispose()
    with admin.connect() as conn:
        conn.execute(sqlalchemy.text(f"DROP DATABASE {name} WITH (FORCE)"))
    admin.dispose()
    out, err = sweep.communicate(timeout=180)
    assert sweep.returncode == 2, err
    said = err.strip().splitlines()
    assert said[0].startswith("sweep tiny on postgresql://") and len(said) == 2, err
    assert said[1].startswith("error: the study's database stopped answering ("), err
    assert said[1].endswith(
        "the same command continues once it answers again (a trial cut off is run again)"
    )
