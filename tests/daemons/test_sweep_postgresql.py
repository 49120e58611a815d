"""The tiny sweep on a real PostgreSQL server: two worker processes sharing the study, a
wrong password refused without being printed, and a SIGKILLed sweep resumed, the killed
trials found by their heartbeat."""

from __future__ import annotations

import pytest

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
