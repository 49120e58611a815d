"""What a run's start reads of its wandb log before it resumes.

Before a cut-short run resumes, its start asks which wandb run its log belongs to
(`logged_to`: a run resumed untracked, or under another project, is refused), three times
per start (the run set's check, the run's, and again under the run's lock). That read built
every logged point of every segment and threw them away: 5.8 s of a 20,000-point run's
start, per ask. The run record answers it; the points are passed over, while every record is
still read, so a damaged or cut-short file reads as before.
"""

from pathlib import Path

import pytest

from repro.track import runs
from repro.track.wandb_file import DamagedLog
from tests.helpers import train

POINTS = 300


@pytest.fixture(scope="module")
def logged(tmp_path_factory) -> tuple[Path, Path]:
    """A finished offline-tracked run of POINTS points: its directory and its one log file."""
    tmp = tmp_path_factory.mktemp("logged")
    summary = train(
        tmp, f"trainer.steps={POINTS}", "trainer.eval_every=1", tracking="wandb_offline"
    )
    run_dir = Path(summary["run_dir"])
    (log,) = {p.resolve() for p in run_dir.glob("wandb/*/run-*.wandb")}
    return run_dir, log


def _identity(seg: runs._Segment) -> tuple:
    return seg.run_id, seg.name, seg.project, seg.group, seg.start, seg.exit_code


def test_which_wandb_run_a_run_logs_to_is_read_without_its_points(logged, monkeypatch):
    run_dir, log = logged
    whole = runs._read_segment(log)
    head = runs._read_segment(log, history=False)
    assert len(whole.rows) == POINTS and whole.exit_code == 0
    assert head.rows == {} and head.summary == {}
    assert _identity(head) == _identity(whole)

    read = []
    plain = runs._read_segment

    def reading(file: Path, *args, **kwargs):
        read.append(plain(file, *args, **kwargs))
        return read[-1]

    monkeypatch.setattr(runs, "_read_segment", reading)
    assert runs.logged_to(run_dir) == (whole.run_id, "repro", whole.group)
    assert read and all(seg.rows == {} for seg in read)  # the run record, not the points


def test_a_cut_short_or_damaged_log_reads_as_before_without_its_points(logged, tmp_path):
    _, log = logged
    data = log.read_bytes()
    cut = tmp_path / "cut.wandb"
    cut.write_bytes(data[: len(data) * 2 // 3])  # a kill: no exit record
    assert runs._read_segment(cut, history=False).exit_code is None
    assert runs._read_segment(cut).exit_code is None
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF  # in the points' records, far past the run record
    bad = tmp_path / "bad.wandb"
    bad.write_bytes(bytes(flipped))
    for history in (True, False):
        with pytest.raises(DamagedLog):
            runs._read_segment(bad, history)
