"""Fault injection into a local sweep's state: its journal, its result files, and a tuning
search's tuned-values file, each truncated, bit-flipped or deleted at seeded random points.

The next command either recovers (the sweep ends with exactly its budget complete and `repro
sweep show` works; the tuned values read back) or ends with one line naming the damaged file
(exit status 2). A traceback fails the test.
"""

from __future__ import annotations

import io
import logging
import random
import shutil
from pathlib import Path

import pytest
import yaml

from repro.errors import UserError
from repro.sweep import cli as sweep_cli
from repro.sweep.results import load_study, show_sweep
from repro.sweep.spec import load_spec
from repro.sweep.study import tally
from repro.sweep.tuned import load_tuned
from tests.helpers import REPO, repro_cli

pytestmark = pytest.mark.slow

KINDS = ("truncate", "flip", "delete")
SEEDS = range(3)


def damage(path: Path, kind: str, rng: random.Random) -> None:
    """Truncate `path` at a random byte, flip 1-3 random bits in it, or delete it."""
    if kind == "delete":
        path.unlink()
        return
    data = bytearray(path.read_bytes())
    if kind == "truncate":
        data = data[: rng.randrange(len(data))]
    else:
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished two-trial local sweep (the tiny spec, tracking off)."""
    root = tmp_path_factory.mktemp("finished")
    raw = yaml.safe_load((REPO / "sweeps" / "tiny.yaml").read_text())
    raw["overrides"] += ["tracking=disabled", f"data.root={root / 'data'}"]
    raw.update(out=str(root / "out"), n_trials=2)
    (root / "tiny.yaml").write_text(yaml.safe_dump(raw))
    # another process, as a real earlier sweep: its worker stamps name a process now gone
    done = repro_cli("sweep", str(root / "tiny.yaml"), cwd=root)
    assert done.returncode == 0, done.stderr
    return root


def _copy(finished: Path, to: Path) -> Path:
    shutil.copytree(finished / "out", to / "out")
    raw = yaml.safe_load((finished / "tiny.yaml").read_text())
    raw["out"] = str(to / "out")
    (to / "tiny.yaml").write_text(yaml.safe_dump(raw))
    return to / "tiny.yaml"


@pytest.fixture(autouse=True)
def _log_to_this_tests_stderr(monkeypatch, capsys) -> None:
    """The command and Optuna set up their log handlers once per process: each test's own
    captured stderr must get their lines, not an earlier test's closed one."""
    monkeypatch.setattr(logging.root, "handlers", [])
    monkeypatch.setattr(logging.getLogger("optuna"), "handlers", [logging.StreamHandler()])


def _one_line_naming(capsys, rc: int, name: str) -> None:
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and name in err[0], err


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", KINDS)
def test_a_damaged_journal_recovers_or_is_one_line(finished, tmp_path, capsys, kind, seed):
    spec_path = _copy(finished, tmp_path)
    spec = load_spec(spec_path)
    damage(spec.study_dir / "journal.log", kind, random.Random(f"{kind}{seed}"))
    capsys.readouterr()
    rc = sweep_cli.main([str(spec_path)])
    if rc != 0:
        _one_line_naming(capsys, rc, str(spec.study_dir / "journal.log"))
        return
    # recovered: the lost records' trials ran again (a finished run is read, not redone)
    assert tally(load_study(spec)) == (spec.n_trials, 0)
    shown = io.StringIO()
    show_sweep(spec, shown)
    assert f"{spec.n_trials} complete" in shown.getvalue()


@pytest.mark.parametrize("name", ["pareto.png", "pareto.html", "hypervolume.html"])
def test_damaged_result_files_are_written_again(finished, tmp_path, capsys, name):
    spec_path = _copy(finished, tmp_path)
    spec = load_spec(spec_path)
    assert sweep_cli.main(["show", str(spec_path)]) == 0
    whole = (spec.study_dir / name).read_bytes()
    damage(spec.study_dir / name, KINDS[len(name) % 3], random.Random(name))
    assert sweep_cli.main(["show", str(spec_path)]) == 0
    again = (spec.study_dir / name).read_bytes()
    assert again[:8] == whole[:8] and again.rstrip().endswith(whole.rstrip()[-7:])


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", KINDS)
def test_a_damaged_tuned_file_reads_whole_or_is_one_line(tmp_path, kind, seed):
    shutil.copy(REPO / "configs" / "tuned" / "adacomm_small.yaml", tmp_path)
    whole = load_tuned("adacomm", "small", tmp_path)
    path = tmp_path / "adacomm_small.yaml"
    damage(path, kind, random.Random(f"tuned{kind}{seed}"))
    try:
        data = load_tuned("adacomm", "small", tmp_path)
    except UserError as err:
        assert str(path) in str(err) and "\n" not in str(err)
        return
    # read without error: what a run set takes from it is still lists of overrides (a flipped
    # digit in a value reads as another value; only a checksum could tell)
    assert all(isinstance(v, list | None) for v in data["runs"].values())
    assert len(data["runs"]) == len(whole["runs"]) or kind == "truncate"
