"""A study journal with a torn last record is repaired before Optuna appends to it; one
damaged in the middle is one line naming the file and the line."""

from __future__ import annotations

import optuna
import pytest

from repro.errors import UserError
from repro.sweep.journal import open_journal_file


def _journal_with_trials(path, n: int) -> bytes:
    study = optuna.create_study(study_name="s", storage=open_journal_file(path))
    for v in range(n):
        study.add_trial(optuna.trial.create_trial(value=float(v)))
    return path.read_bytes()


def test_a_torn_last_record_is_cut_off_and_the_study_goes_on(tmp_path, caplog):
    path = tmp_path / "journal.log"
    whole = _journal_with_trials(path, 3)
    last = whole.rstrip(b"\n").rfind(b"\n") + 1  # where the last record starts
    path.write_bytes(whole[: last + 7])  # a worker killed in the middle of that append

    study = optuna.load_study(study_name="s", storage=open_journal_file(path))
    assert path.read_bytes() == whole[:last]
    assert "cut off its last 7 bytes" in caplog.text
    study.add_trial(optuna.trial.create_trial(value=9.0))  # the next append lands on a line
    reread = optuna.load_study(study_name="s", storage=open_journal_file(path))
    assert [t.value for t in reread.get_trials()][-1] == 9.0
    assert len(reread.get_trials()) == len(study.get_trials())


@pytest.mark.parametrize("damage", [b"{", b"\xff\xfe", b"[1, 2]"])
def test_a_record_damaged_in_the_middle_is_one_line_naming_file_and_line(tmp_path, damage):
    path = tmp_path / "journal.log"
    lines = _journal_with_trials(path, 3).splitlines(keepends=True)
    lines[2] = damage + b"\n"
    path.write_bytes(b"".join(lines))
    with pytest.raises(UserError) as err:
        open_journal_file(path)
    msg = str(err.value)
    assert f"the study journal {path} is damaged (line 3 is not a record)" in msg
    assert "\n" not in msg and f"move {tmp_path} away" in msg


@pytest.mark.parametrize("last", [b'{"op_code": 0, "worker_id": "5b', b"hello", b"[1, 2]"])
def test_a_whole_last_line_that_is_no_record_is_named_before_anything_is_appended(tmp_path, last):
    """Optuna's reader passes over such a line as if it were torn; appending after it would
    make it a line in the middle, and the study unreadable."""
    path = tmp_path / "journal.log"
    whole = _journal_with_trials(path, 2)
    damaged = whole + last + b"\n"
    path.write_bytes(damaged)
    with pytest.raises(UserError) as err:
        open_journal_file(path)
    msg = str(err.value)
    line = whole.count(b"\n") + 1
    assert f"the study journal {path} is damaged (line {line} is not a record)" in msg, msg
    assert path.read_bytes() == damaged


def test_a_journal_of_one_line_that_is_no_record_is_named(tmp_path):
    path = tmp_path / "journal.log"
    path.write_bytes(b"hello\n")
    with pytest.raises(UserError, match=r"is damaged \(line 1 is not a record\)"):
        open_journal_file(path)
