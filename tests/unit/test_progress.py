"""Progress: a bar on a terminal, plain lines elsewhere (a SLURM log is not a terminal)."""

from __future__ import annotations

import fcntl
import io
import os
import struct
import termios

from repro.train.progress import Progress

POINT = {"step": 2, "train/loss": 0.51234, "test/acc": 0.8}


def test_off_a_terminal_plain_lines_without_carriage_returns():
    out = io.StringIO()
    bar = Progress("run", steps=4, budget_s=0, start=0, now_s=0, show=True, stream=out, every_s=0)
    bar.advance(0.1)
    bar.advance(0.2)
    bar.show_point(POINT)
    bar.advance(0.3)
    bar.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert [line.split(" (")[0] for line in lines] == [
        "run: step 1/4",
        "run: step 2/4",
        "run: step 3/4",
        "run: step 3/4",  # the closing line
    ]
    assert lines[2].endswith("steps/s, loss 0.5123 acc 0.800")
    assert lines[0].startswith("run: step 1/4 (25%), ")


def test_off_a_terminal_lines_are_spaced_by_wall_time():
    out = io.StringIO()
    bar = Progress("run", steps=100, budget_s=0, start=10, now_s=0, show=True, stream=out)
    for _ in range(50):
        bar.advance(0.0)
    bar.close()
    # 50 steps in far less than LOG_EVERY_S: only the closing line, after the resume's
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and lines[0] == "run: resuming from its checkpoint at step 10/100"
    assert lines[1].startswith("run: step 60/100 (60%)")


def test_modeled_time_budget_is_counted_in_modeled_seconds():
    out = io.StringIO()
    bar = Progress("run", steps=99, budget_s=8, start=0, now_s=0, show=True, stream=out)
    bar.advance(2.0)
    bar.close()
    assert out.getvalue().startswith("run: modeled 2.0/8 s (25%)")


def test_a_budget_under_a_second_shows_its_digits():
    out = io.StringIO()
    bar = Progress("run", steps=99, budget_s=0.001, start=0, now_s=0, show=True, stream=out)
    bar.advance(0.00025)
    bar.close()
    assert out.getvalue().startswith("run: modeled 0.0003/0.001 s (25%)")


def test_hidden_progress_writes_nothing():
    out = io.StringIO()
    bar = Progress("run", steps=4, budget_s=0, start=0, now_s=0, show=False, stream=out, every_s=0)
    bar.advance(0.1)
    bar.close()
    assert out.getvalue() == ""


def test_on_a_terminal_a_bar():
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    with os.fdopen(follower, "w") as tty:
        bar = Progress("run", steps=4, budget_s=0, start=0, now_s=0, show=True, stream=tty)
        bar.advance(0.1)
        bar.close()
    # the pty hands the writes over asynchronously: read until the closed follower's EIO
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    drawn = b"".join(chunks).decode()
    os.close(leader)
    assert "\r" in drawn and "1/4" in drawn


def test_a_resumed_run_under_a_modeled_budget_says_where_it_goes_on_from():
    out = io.StringIO()
    bar = Progress("run", steps=99, budget_s=8, start=5, now_s=2.5, show=True, stream=out)
    bar.close()
    lines = out.getvalue().splitlines()
    assert lines[0] == "run: resuming from its checkpoint at step 5/99, modeled 2.5/8 s"
    quiet = io.StringIO()
    Progress("run", steps=99, budget_s=8, start=5, now_s=2.5, show=False, stream=quiet).close()
    assert quiet.getvalue() == ""
