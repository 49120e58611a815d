"""Tracker -> real offline wandb files -> run reader and `repro runs`, with no server.

Every test that starts a wandb run uses wandb 0.31 offline for real (its service process
included); the first run of the session pays the service start, later ones take ~50 ms.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from repro.errors import UserError
from repro.locks import RUN_LOCK, take
from repro.schemas.tracking import TrackingConfig
from repro.track import runs_cli
from repro.track.runs import find_runs, read_run
from repro.track.wandb_file import BLOCK, has_exit_record
from repro.track.wandb_run import Tracker

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
OFFLINE = TrackingConfig(mode="offline", tags=["unit", "roundtrip"])
RUN_CONFIG = {"optim": {"name": "sgd", "lr": 0.05}, "trainer": {"world_size": 4}, "seed": 7}


def point(step: int, shift: float = 0.0) -> dict:
    """Known values for one logged step; test metrics only every 5th step, as the trainer's
    evaluation points would."""
    row = {
        "train/loss": 2.0 / (step + 1) + shift,
        "time/wall_s": 0.25 * step,
        "time/modeled_s": 0.125 * step + shift,
        "comm/bytes": 4096 * step,
        "method/collective": "ring" if step % 3 else "tree",
    }
    if step % 5 == 4:
        row["test/acc"] = 0.5 + step / 100
    return row


def log_steps(tracker: Tracker, steps: range, shift: float = 0.0) -> None:
    for step in steps:
        tracker.log(point(step, shift), step=step)


@pytest.fixture(scope="module")
def logged(tmp_path_factory) -> tuple[Path, str]:
    """One finished offline run of 30 points plus an explicit final summary."""
    run_dir = tmp_path_factory.mktemp("runs") / "exp" / "sync-abc123"
    tracker = Tracker(OFFLINE, run_dir, "sync", "exp-group", "sync", RUN_CONFIG, None)
    log_steps(tracker, range(30))
    tracker.set_summary({"test/acc": 0.93, "target/reached": 1.0, "run_dir": str(run_dir)})
    tracker.finish()
    return run_dir, tracker.run_id


def test_history_config_and_summary_round_trip(logged):
    run_dir, run_id = logged
    run = read_run(run_dir)
    assert run.run_id == run_id and len(run_id) >= 8
    assert (run.name, run.group, run.job_type) == ("sync", "exp-group", "sync")
    assert run.tags == ["unit", "roundtrip"]
    assert run.config == RUN_CONFIG
    assert run.history == [point(s) | {"step": s} for s in range(30)]
    assert run.exit_code == 0
    assert run.path == run_dir
    # an explicit summary sets what was not logged; a metric wandb aggregates keeps its
    # aggregates over the logged points (test/acc rises to 0.79, train/loss falls to 2/30)
    assert run.summary["target/reached"] == 1.0
    assert run.summary["test/acc"] == {"max": 0.79, "last": 0.79}
    assert run.summary["train/loss"] == {"min": 2.0 / 30, "last": 2.0 / 30}
    assert run.summary["method/collective"] == "ring"  # step 29
    assert run.summary["step"] == 29
    assert read_run(next((run_dir / "wandb").glob("offline-run-*"))).history == run.history


def test_resumed_run_replaces_overlapping_steps(tmp_path):
    run_dir = tmp_path / "run"
    first = Tracker(OFFLINE, run_dir, "r", "g", "adacomm", RUN_CONFIG, None)
    log_steps(first, range(20))
    first.finish()
    again = Tracker(OFFLINE, run_dir, "r", "g", "adacomm", RUN_CONFIG, first.run_id)
    assert again.run_id == first.run_id
    log_steps(again, range(15, 30), shift=100.0)
    again.finish()

    assert len(list((run_dir / "wandb").glob("offline-run-*"))) == 2
    run = read_run(run_dir)
    expected = [point(s) | {"step": s} for s in range(15)]
    expected += [point(s, 100.0) | {"step": s} for s in range(15, 30)]
    assert run.history == expected
    assert run.summary["train/loss"]["last"] == 2.0 / 30 + 100.0
    assert [r.run_id for r in find_runs(tmp_path)] == [first.run_id]


def test_multi_block_log_and_torn_tails(tmp_path):
    """400 points span several 32 KiB blocks, so records cross block boundaries. A kill
    leaves the file cut anywhere: every cut reads as a prefix of the full history."""
    tracker = Tracker(OFFLINE, tmp_path / "long", "long", None, None, RUN_CONFIG, None)
    log_steps(tracker, range(400))
    tracker.finish()
    src = next((tmp_path / "long").glob("wandb/offline-run-*/run-*.wandb"))
    data = src.read_bytes()
    assert len(data) > 3 * BLOCK
    full = read_run(src)
    assert full.history == [point(s) | {"step": s} for s in range(400)]
    assert has_exit_record(src)

    cut = tmp_path / "cut" / src.name
    cut.parent.mkdir()
    lengths = []
    for size in range(len(data) // 40, len(data) - 50, len(data) // 40 + 7):
        cut.write_bytes(data[:size])
        run = read_run(cut)
        assert run.history == full.history[: len(run.history)]
        assert run.exit_code is None and not has_exit_record(cut)
        lengths.append(len(run.history))
    assert lengths == sorted(lengths) and 0 < lengths[0] < lengths[-1] < 400


def test_disabled_tracker_writes_nothing(tmp_path):
    run_dir = tmp_path / "off"
    with Tracker(TrackingConfig(mode="disabled"), run_dir, "n", None, None, {}, None) as t:
        t.log({"train/loss": 1.0}, step=0)
        t.set_summary({"x": 1})
        assert t.run_id is None
    assert not run_dir.exists()
    assert list(tmp_path.iterdir()) == []


def test_failed_run_and_out_of_order_steps(tmp_path):
    with pytest.raises(RuntimeError), Tracker(OFFLINE, tmp_path, "f", None, None, {}, None) as t:
        t.log({"train/loss": 1.0}, step=3)
        with pytest.raises(ValueError, match="step 3 after step 3"):
            t.log({"train/loss": 2.0}, step=3)
        raise RuntimeError("training crashed")
    run = read_run(tmp_path)
    assert run.exit_code == 1
    assert run.history == [{"train/loss": 1.0, "step": 3}]
    assert (run.group, run.job_type) == (None, None)


def test_online_without_key_is_a_user_error(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc, no stored login
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    with pytest.raises(UserError, match="tracking.mode=online"):
        Tracker(TrackingConfig(mode="online"), tmp_path / "on", "n", None, None, {}, None)


def test_auto_mode_and_validation():
    cfg = TrackingConfig()
    assert cfg.resolved_mode({}) == "offline"
    assert cfg.resolved_mode({"WANDB_API_KEY": "k" * 40}) == "online"
    assert TrackingConfig(mode="disabled").resolved_mode({"WANDB_API_KEY": "k"}) == "disabled"
    with pytest.raises(UserError, match="tracking.mode='web'"):
        TrackingConfig(mode="web")
    with pytest.raises(UserError, match="tracking.project"):
        TrackingConfig(project="a/b")
    with pytest.raises(UserError, match="tracking.tags"):
        TrackingConfig(tags=["x" * 65])
    with pytest.raises(UserError, match="tracking.group='xxx.*' must be at most 128 characters"):
        TrackingConfig(group="x" * 129)


@pytest.mark.parametrize(
    "name,mode",
    [
        ("wandb", "auto"),
        ("wandb_offline", "offline"),
        ("wandb_online", "online"),
        ("disabled", "disabled"),
    ],
)
def test_tracking_presets_compose(name, mode):
    with initialize_config_dir(config_dir=str(CONFIGS), version_base=None):
        cfg = OmegaConf.to_object(compose(config_name=f"tracking/{name}").tracking)
        assert isinstance(cfg, TrackingConfig) and cfg.mode == mode
        with pytest.raises(UserError, match="tracking.mode"):
            bad = compose(config_name=f"tracking/{name}", overrides=["tracking.mode=cloud"])
            OmegaConf.to_object(bad.tracking)


def test_runs_ls_and_show(logged, capsys):
    run_dir, run_id = logged
    root = run_dir.parent.parent
    assert runs_cli.main(["ls", str(root), "--group", "exp-group"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith(run_id)).split()
    # run id, name, group, job type, state, last step, final train/loss (2/30), test/acc, path
    assert line == [run_id, "sync", "exp-group", "sync", "finished", "29", "0.06667", "0.79"] + [
        str(run_dir)
    ]
    assert runs_cli.main(["ls", str(root), "--group", "other"]) == 0
    assert "no runs" in capsys.readouterr().out

    assert runs_cli.main(["show", run_id, "--root", str(root), "--last", "2"]) == 0
    lines = [ln.split() for ln in capsys.readouterr().out.splitlines() if ln.strip()]
    assert ["optim.lr", "0.05"] in lines and ["trainer.world_size", "4"] in lines
    assert ["test/acc.max", "0.79"] in lines  # the summary section
    rows = {ln[0]: ln[1:] for ln in lines}  # the history table comes last
    assert rows["step"] == ["28", "29"]
    assert rows["train/loss"] == [f"{2 / 29:.4g}", f"{2 / 30:.4g}"]
    assert rows["time/modeled_s"] == ["3.5", "3.625"]

    assert runs_cli.main(["show", str(run_dir), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["history"] == [point(s) | {"step": s} for s in range(30)]
    assert data["path"] == str(run_dir)

    with pytest.raises(UserError, match="no run 'zzz'"):
        runs_cli.main(["show", "zzz", "--root", str(root)])
    # the runs folder itself given where one run is asked for; a root that is no folder
    with pytest.raises(UserError) as err:
        runs_cli.main(["show", str(root)])
    assert str(err.value) == (
        f"{root} is not one run's directory but holds runs further down; "
        f"`repro runs ls {root}` lists them"
    )
    with pytest.raises(UserError, match=r"zzz is not a path, and --root /nonexistent is not"):
        runs_cli.main(["show", "zzz", "--root", "/nonexistent"])


def test_runs_ls_tells_running_from_incomplete_by_the_run_lock(tmp_path, capsys):
    """A run with no exit record is running while a process holds its run directory's lock
    (the trainer's, `repro.train.run_lock`) and incomplete once none does."""
    run_dir = tmp_path / "exp" / "sync-abc123"
    tracker = Tracker(OFFLINE, run_dir, "sync", "g", "sync", RUN_CONFIG, None)
    log_steps(tracker, range(3))
    tracker.finish()
    src = next(run_dir.glob("wandb/offline-run-*/run-*.wandb"))

    def state() -> str:
        assert runs_cli.main(["ls", str(tmp_path)]) == 0
        return capsys.readouterr().out.splitlines()[1].split()[4]

    assert state() == "finished"
    src.write_bytes(src.read_bytes()[: src.stat().st_size // 2])  # as a run cut off mid-way
    assert not has_exit_record(src)
    assert state() == "incomplete"
    with take(run_dir / RUN_LOCK, 0):
        assert state() == "running"
    assert state() == "incomplete"


def test_reader_errors(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        read_run(tmp_path / "missing")
    with pytest.raises(UserError, match="no wandb run records"):
        read_run(tmp_path)
    bogus = tmp_path / "run-x.wandb"
    shutil.copyfile(__file__, bogus)
    with pytest.raises(UserError, match="not a wandb transaction log") as err:
        read_run(bogus)
    # a loose file: the fix names the file, never the folder it lies in
    assert str(err.value).endswith(
        f"; remove {bogus}, then run its training run again to log it anew"
    )
    with pytest.raises(UserError, match=r"test_tracking.py is not a wandb run file \(run-<id>"):
        read_run(__file__)
    with pytest.raises(UserError, match="not a directory"):
        find_runs(tmp_path / "missing")


def test_a_copied_run_directory_is_a_run_of_its_own(logged, tmp_path, capsys):
    """A run directory copied under another name holds the same run id. Merged with the
    original, a copy taken while the run was going (its log cut where it was copied, sorting
    after the original) replaced the finished run's 30 points with its own and its exit."""
    run_dir, run_id = logged
    root = tmp_path / "runs"
    shutil.copytree(run_dir, root / "exp" / run_dir.name)
    snap = root / "exp" / f"{run_dir.name}_snap"  # '_' sorts after '/': read after the run
    shutil.copytree(run_dir, snap)
    cut = next(snap.glob("wandb/offline-run-*/run-*.wandb"))
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
    shutil.copytree(run_dir, root / "exp" / f"{run_dir.name}.bak")  # sorts before it

    found = {r.path.name: r for r in find_runs(root)}
    assert sorted(found) == [run_dir.name, f"{run_dir.name}.bak", f"{run_dir.name}_snap"]
    assert {r.run_id for r in found.values()} == {run_id}
    for name in (run_dir.name, f"{run_dir.name}.bak"):
        assert found[name].exit_code == 0
        assert found[name].history == [point(s) | {"step": s} for s in range(30)]
    assert found[f"{run_dir.name}_snap"].exit_code is None
    assert 0 < len(found[f"{run_dir.name}_snap"].history) < 30

    assert runs_cli.main(["ls", str(root)]) == 0
    states = sorted(ln.split()[4] for ln in capsys.readouterr().out.splitlines()[1:])
    assert states == ["finished", "finished", "incomplete"]
    with pytest.raises(UserError) as err:
        runs_cli.main(["show", run_id, "--root", str(root)])
    assert str(err.value).startswith(
        f"repro runs show: run {run_id} lies in 3 run directories under {root} ("
    )
    assert runs_cli.main(["show", str(root / "exp" / run_dir.name), "--last", "1"]) == 0
    assert "finished" in capsys.readouterr().out


_FORKED_RUN = """
import multiprocessing, os, sys
from repro.schemas.tracking import TrackingConfig

def tracked(run_dir):
    from repro.track.wandb_run import Tracker
    tracker = Tracker(TrackingConfig(mode="offline"), run_dir, "forked", None, None, {})
    tracker.log({"train/loss": 1.0}, step=1)
    tracker.finish()
    return sorted(os.listdir(os.environ["TMPDIR"]))

with multiprocessing.get_context("fork").Pool(1) as pool:  # its worker ends by os._exit
    during = pool.apply(tracked, (sys.argv[1],))
    pool.close()
    pool.join()
print(" ".join(during))
print(" ".join(sorted(os.listdir(os.environ["TMPDIR"]))))
"""


def test_a_forked_worker_that_tracked_leaves_no_wandb_folders_in_tmp(tmp_path):
    # importing wandb makes two temporary folders that only a normal interpreter exit removed
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp)}
    proc = subprocess.run(
        [sys.executable, "-c", _FORKED_RUN, str(tmp_path / "run")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    during, after = proc.stdout.splitlines()
    made = [n for n in during.split() if n.endswith(("wandb-media", "wandb-artifacts"))]
    assert len(made) == 2  # the worker did make them
    assert not set(made) & set(after.split()), after
