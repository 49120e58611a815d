"""Damaged run state: every file a run or a run set keeps, truncated, flipped or deleted at
seeded random points, then the next command, as a user would run it.

Each trial must end one of two ways: the command recovers and its result is exactly the
uninterrupted run's (summary, final model, logged history), or it ends with exit code 2
and one line naming the damaged file (or its checkpoint directory); then the fix that line
names makes the next command give the uninterrupted result. The run is tiny (40 steps,
checkpoints every 10, the last two kept) and runs in this process, so the whole file
takes seconds.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import shutil
from pathlib import Path

import pytest
import torch

from repro.cli import main as repro
from repro.cluster.jobs import JOBS_FILE, JobRecord, append_records
from repro.track.runs import find_runs
from repro.train.checkpoint import read_checked_json

ARGS = [
    "train",
    "workload=synthetic_mlp",
    "trainer.batch_size=16",
    "trainer.steps=40",
    "trainer.eval_every=10",
    "trainer.checkpoint_every=10",
    "trainer.progress=false",
    "optim.name=sgd",
    "compute.mode=sampled",
]
# what differs between two runs of one config: the wall clock and the run's place and name
VOLATILE = {"time/wall_s", "throughput/samples_per_s", "comm/measured_s", "run_id", "run_dir"}
KINDS = ("truncate", "flip", "delete")
POINTS = 2  # seeded random points per truncation and per flip


def cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = repro(list(args))
    return code, out.getvalue(), err.getvalue()


def train(run_dir: Path, data: Path, tracking: str = "disabled") -> tuple[int, str, str]:
    return cli(*ARGS, f"run_dir={run_dir}", f"data.root={data}", f"tracking={tracking}")


def damage(path: Path, kind: str, rng: random.Random) -> None:
    data = bytearray(path.read_bytes())
    if kind == "delete":
        path.unlink()
    elif kind == "truncate":
        path.write_bytes(data[: rng.randrange(len(data))])
    else:
        data[rng.randrange(len(data))] ^= rng.randrange(1, 256)
        path.write_bytes(bytes(data))


def trials() -> list[tuple[str, int]]:
    return [(k, seed) for k in KINDS for seed in range(1 if k == "delete" else POINTS)]


def metrics(d: dict) -> dict:
    return {k: v for k, v in d.items() if k not in VOLATILE}


def same_run(run_dir: Path, base: Path) -> None:
    got, want = (
        read_checked_json(run_dir / "summary.json"),
        read_checked_json(base / "summary.json"),
    )
    assert metrics(got) == metrics(want)
    assert (run_dir / "config.yaml").read_text() == (base / "config.yaml").read_text()
    a, b = torch.load(run_dir / "final_model.pt"), torch.load(base / "final_model.pt")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in b)


def one_error_line(err: str, names: Path) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(names) in lines[0], err


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """The uninterrupted run (tracked, wandb offline), the data it read, and another run
    (seed 1) to stand beside a damaged one."""
    os.environ["WANDB_SILENT"] = "true"
    root = tmp_path_factory.mktemp("base")
    code, _, err = train(root / "run", root / "data", "wandb_offline")
    assert code == 0, err
    other = [f"run_dir={root / 'other'}", f"data.root={root / 'data'}", "seed=1"]
    code, _, err = cli(*ARGS, *other, "tracking=wandb_offline")
    assert code == 0, err
    return root


def _copy(base: Path, to: Path, finished: bool, tracked: bool = False) -> Path:
    """The run as it was left: finished, or cut short after its step-30 checkpoint; without
    its wandb run unless `tracked` (a tracked run resumes tracked: `train`'s default is not)."""
    run_dir = to / "run"
    shutil.copytree(base / "run", run_dir, symlinks=True)
    if not tracked:
        shutil.rmtree(run_dir / "wandb")
        (run_dir / "run_id").unlink()
    if not finished:
        (run_dir / "summary.json").unlink()
        (run_dir / "final_model.pt").unlink()
    return run_dir


RUN_FILES = [
    # (file, cut-short run or finished one, what the one line names, the fix it names)
    ("checkpoints/step_00000030/rank0.pt", False, "checkpoints", "checkpoints"),
    ("checkpoints/step_00000030/commit.json", False, "checkpoints", "checkpoints"),
    ("checkpoints/step_00000020/rank0.pt", False, "checkpoints", "checkpoints"),
    ("checkpoints/latest.json", False, "checkpoints", "checkpoints"),
    ("config.yaml", False, "config.yaml", "config.yaml"),
    ("config.yaml", True, "config.yaml", "config.yaml"),
    ("summary.json", True, "summary.json", "summary.json"),
]


@pytest.mark.parametrize("name,finished,named,fix", RUN_FILES)
def test_damaged_run_file_recovers_or_names_it(base, tmp_path, name, finished, named, fix):
    for kind, seed in trials():
        run_dir = _copy(base, tmp_path / f"{kind}{seed}", finished)
        damage(run_dir / name, kind, random.Random(f"{name}{finished}{kind}{seed}"))
        code, _, err = train(run_dir, base / "data")
        if code != 0:
            assert code == 2, err
            one_error_line(err, run_dir / named)
            target = run_dir / fix
            shutil.rmtree(target) if target.is_dir() else target.unlink()
            code, _, err = train(run_dir, base / "data")
            assert code == 0, err
        same_run(run_dir, base / "run")


@pytest.mark.parametrize(
    "name,finished,found,kind",
    [
        ("summary.json", True, "folder", "file"),
        ("config.yaml", False, "folder", "file"),
        ("checkpoints", False, "file", "folder"),
        ("wandb", False, "file", "folder"),
    ],
)
def test_an_entry_of_the_wrong_kind_in_a_run_is_named_before_anything_runs(
    base, tmp_path, name, finished, found, kind
):
    """A folder where the run's file belongs ended in a traceback (summary.json), or a file
    where its folder belongs was found only at the first checkpoint, after a restart from
    step 0 that lost the run's progress, naming the wrong path (checkpoints), or in wandb's
    traceback (wandb)."""
    run_dir = _copy(base, tmp_path, finished, tracked=True)
    path = run_dir / name
    shutil.rmtree(path) if path.is_dir() else path.unlink()
    path.mkdir() if found == "folder" else path.write_text("x")
    before = sorted(p.relative_to(run_dir) for p in run_dir.rglob("*"))
    code, _, err = train(run_dir, base / "data", "wandb_offline")
    assert code == 2, err
    assert err.strip() == (
        f"error: {path} is a {found} where the run keeps its {name} {kind}; move it away, or "
        "use a new run_dir"
    )
    assert sorted(p.relative_to(run_dir) for p in run_dir.rglob("*")) == before


def _history(run) -> list[dict]:
    return [metrics(row) for row in run.history]


def test_damaged_wandb_file_is_named_and_logged_again(base, tmp_path):
    (want,) = find_runs(base / "run")
    (other,) = find_runs(base / "other")
    for kind, seed in trials():
        root = tmp_path / f"{kind}{seed}"
        run_dir = _copy(base, root, finished=True, tracked=True)
        shutil.copytree(base / "other", root / "other", symlinks=True)
        (log,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
        damage(log, kind, random.Random(f"wandb{kind}{seed}"))
        code, out, err = cli("runs", "ls", str(root))
        assert other.run_id in out  # the others are listed whatever happened to this one
        if code != 0:
            assert code == 2, err
            one_error_line(err, run_dir / "wandb" if kind == "delete" else log)
            shutil.rmtree(log.parent)  # the fix the line names: the segment, the summary
            (run_dir / "summary.json").unlink()
            code, _, err = train(run_dir, base / "data", "wandb_offline")
            assert code == 0, err
            code, _, err = cli("runs", "ls", str(root))
            assert code == 0, err
        (got,) = [r for r in find_runs(root) if r.path == run_dir]
        assert got.exit_code == 0 and _history(got) == _history(want), (kind, seed)


def test_damaged_jobs_file_lists_the_rest(tmp_path):
    records = [
        JobRecord(
            job_id=str(2**22 + i),
            kind="run",
            label=f"run{i}",
            cluster="submitit_local",
            folder=str(tmp_path / "jobs"),
        )
        for i in range(3)
    ]
    append_records(tmp_path / "clean", records)
    code, want, err = cli("jobs", "--root", str(tmp_path / "clean"))
    assert code == 0 and "run2" in want, err
    for kind, seed in trials():
        root = tmp_path / f"{kind}{seed}"
        shutil.copytree(tmp_path / "clean", root)
        path = root / JOBS_FILE
        damage(path, kind, random.Random(f"jobs{kind}{seed}"))
        code, out, err = cli("jobs", "--root", str(root))
        if kind == "delete":
            assert code == 2
            one_error_line(err, path)
            append_records(root, records)  # the next submission records anew
            assert cli("jobs", "--root", str(root))[:2] == (0, want)
            continue
        listed = [r.label for r in records if f" {r.label} " in out]
        lines = err.strip().splitlines()
        if code == 0:  # nothing lost, or a torn last line skipped and said
            assert listed == [r.label for r in records][: len(listed)]
            assert lines == [] or (len(lines) == 1 and "is torn (skipped)" in lines[0]), err
        else:
            assert code == 2
            one_error_line(err, path)
            bad = int(lines[0].split(" line ")[1].split()[0])
            kept = path.read_bytes().split(b"\n")
            path.write_bytes(b"\n".join(kept[: bad - 1] + kept[bad:]))  # the fix it names
            code, out, err = cli("jobs", "--root", str(root))
            assert code == 0 and err == "", err
            assert len(listed) == sum(f" {r.label} " in out for r in records)


def test_no_good_checkpoint_is_one_line_and_removing_them_starts_over(base, tmp_path):
    run_dir = _copy(base, tmp_path, finished=False)
    for step in (20, 30):
        damage(run_dir / f"checkpoints/step_{step:08d}/rank0.pt", "flip", random.Random(step))
    before = sorted(p.relative_to(run_dir) for p in run_dir.rglob("*"))
    code, _, err = train(run_dir, base / "data")
    assert code == 2
    one_error_line(err, run_dir / "checkpoints")
    assert "step 30: rank0.pt" in err and "step 20: rank0.pt" in err and "remove" in err
    assert sorted(p.relative_to(run_dir) for p in run_dir.rglob("*")) == before
    shutil.rmtree(run_dir / "checkpoints")
    code, _, err = train(run_dir, base / "data")
    assert code == 0, err
    same_run(run_dir, base / "run")
    kept = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert kept == ["latest.json", "step_00000020", "step_00000030"]


def test_another_configs_run_is_never_taken_for_this_ones(base, tmp_path):
    """Without its config.yaml, seed 0's finished run was returned as seed 1's and its
    config.yaml written as seed 1's; and a seed-1 checkpoint copied into seed 0's intact
    run made seed 1 call that config.yaml damaged and take the run over."""
    seed1 = [f"data.root={base / 'data'}", "seed=1", "tracking=disabled"]
    run_dir = _copy(base, tmp_path / "unrecorded", finished=True)
    (run_dir / "config.yaml").unlink()
    code, out, err = cli(*ARGS, *seed1, f"run_dir={run_dir}")
    assert (code, out) == (2, "") and err.startswith(f"error: run_dir={run_dir} has no "), err
    assert "holds checkpoints of another config" in err and len(err.splitlines()) == 1
    shutil.rmtree(run_dir / "checkpoints")
    code, _, err = cli(*ARGS, *seed1, f"run_dir={run_dir}")
    assert code == 2 and "holds a finished run's summary.json but no config.yaml" in err, err
    assert not (run_dir / "config.yaml").exists()
    # seed 0's own run without its config.yaml is still its own, and the file written again
    run_dir = _copy(base, tmp_path / "own", finished=True)
    (run_dir / "config.yaml").unlink()
    assert train(run_dir, base / "data")[0] == 0
    same_run(run_dir, base / "run")

    run_dir = _copy(base, tmp_path / "mixed", finished=False)
    shutil.copytree(base / "other/checkpoints/step_00000030", run_dir / "checkpoints/step_00000035")
    before = (run_dir / "config.yaml").read_text()
    code, _, err = cli(*ARGS, *seed1, f"run_dir={run_dir}")
    assert code == 2 and "holds a run of another config (seed: 0 -> 1)" in err, err
    assert (run_dir / "config.yaml").read_text() == before


def test_a_tracked_run_resumes_its_own_wandb_run_or_is_refused(base, tmp_path):
    """Resumed untracked, a tracked run's history ended where it was cut short while its
    summary said it finished, and `repro runs ls` called its file damaged; resumed under
    another project or group, its one run id was split between two."""
    run_dir = _copy(base, tmp_path, finished=False, tracked=True)
    (run_id,) = {r.run_id for r in find_runs(run_dir)}
    before = sorted(p.relative_to(run_dir) for p in run_dir.rglob("*"))
    for extra, fix in (
        (["tracking=disabled"], "resume it tracked (tracking=wandb_offline), or use a new run_dir"),
        (["tracking=wandb_offline", "tracking.project=other"], "resume it there (tracking."),
        (["tracking=wandb_offline", "tracking.group=g2"], "resume it there (tracking.project="),
    ):
        code, out, err = cli(*ARGS, f"run_dir={run_dir}", f"data.root={base / 'data'}", *extra)
        assert (code, out) == (2, ""), err
        assert err.startswith(
            f"error: run_dir={run_dir} logs to wandb run {run_id} (project repro, group default); "
            + fix
        ), err
    assert sorted(p.relative_to(run_dir) for p in run_dir.rglob("*")) == before
    assert train(run_dir, base / "data", "wandb_offline")[0] == 0
    same_run(run_dir, base / "run")


def test_a_checkpoint_written_before_checksums_still_resumes(base, tmp_path):
    """The earlier layout: one step directory and a latest.json without a checksum."""
    run_dir = _copy(base, tmp_path, finished=False)
    latest = read_checked_json(run_dir / "checkpoints/latest.json")
    shutil.rmtree(run_dir / "checkpoints/step_00000020")
    (run_dir / "checkpoints/step_00000030/commit.json").unlink()
    (run_dir / "checkpoints/latest.json").write_text(json.dumps({**latest, "world_size": 1}))
    code, _, err = train(run_dir, base / "data")
    assert code == 0 and err == "", err
    same_run(run_dir, base / "run")


def test_runs_ls_says_which_run_directories_it_cannot_list(base, tmp_path):
    """A run made with tracking=disabled has no wandb log to list: `repro runs ls` lists
    the others and says how many it left out and where, rather than leaving it unseen."""
    shutil.copytree(base / "run", tmp_path / "tracked", symlinks=True)
    code, _, err = train(tmp_path / "untracked", base / "data")
    assert code == 0, err
    code, out, err = cli("runs", "ls", str(tmp_path))
    assert code == 0 and str(tmp_path / "tracked") in out and "untracked" not in out, out
    assert err.strip() == (
        f"note: {tmp_path / 'untracked'} has no wandb log (made with tracking=disabled) and "
        "is not listed"
    )
    code, _, err = train(tmp_path / "other_untracked", base / "data")
    assert code == 0, err
    code, out, err = cli("runs", "ls", str(tmp_path))
    assert err.strip() == (
        f"note: 2 run directories under {tmp_path} have no wandb log (made with "
        f"tracking=disabled) and are not listed, {tmp_path / 'other_untracked'} the first"
    )
    code, _, err = cli("runs", "ls", str(tmp_path / "tracked"))
    assert code == 0 and err == ""
    # a tracked run whose log is a folder, or was deleted, is damage, named as such, not an
    # untracked run nor (the folder) a run missing whose remake says it has finished
    for log in {p.resolve() for p in (tmp_path / "tracked").glob("wandb/*/run-*.wandb")}:
        log.unlink()
        log.mkdir()
    code, _, err = cli("runs", "ls", str(tmp_path / "tracked"))
    assert code == 2 and "holds no log of run" in err and "tracking=disabled" not in err, err
    shutil.rmtree(tmp_path / "tracked" / "wandb")
    code, _, err = cli("runs", "ls", str(tmp_path / "tracked"))
    assert code == 2 and "holds no log of run" in err and "tracking=disabled" not in err, err


def test_runs_ls_names_a_run_stopped_before_it_logged_and_reads_a_finishing_run_whole(
    base, tmp_path, monkeypatch
):
    """A run stopped before its first point reached its log (its wandb file a header, or
    gone) was left out without a word, or called made with tracking=disabled, which the
    report said a run set skips as finished. And a run that finished while its file was
    read was called a finished run cut short, its data to be removed."""
    import repro.track.runs as runs

    cut = _copy(base, tmp_path / "cut", finished=False, tracked=True)
    shutil.rmtree(cut / "wandb")
    never = _copy(base, tmp_path / "never", finished=False)  # no tracker opened yet
    for kept in ("config.yaml", ".lock"):
        shutil.copy(cut / kept, never / kept)
    code, out, err = cli("runs", "ls", str(tmp_path))
    assert (code, out.strip()) == (0, f"no runs under {tmp_path}"), err
    assert err.strip() == (
        f"note: 2 run directories under {tmp_path} are not finished and logged no points "
        "(stopped early, or tracking=disabled): their commands resume them, "
        f"{tmp_path / 'cut' / 'run'} the first"
    )

    done = _copy(base, tmp_path / "finishing", finished=False, tracked=True)
    (log,) = {p.resolve() for p in done.glob("wandb/*/run-*.wandb")}
    log.write_bytes(log.read_bytes()[: log.stat().st_size * 2 // 3])  # cut before its exit
    read = runs._read_segment

    def finishing(file, history=True):
        seg = read(file, history)  # read before its exit record; then the run finishes
        shutil.copy(base / "run" / "summary.json", done / "summary.json")
        return seg

    monkeypatch.setattr(runs, "_read_segment", finishing)
    damaged: list[str] = []
    (run,) = runs.find_runs(done, damaged=damaged)
    assert damaged == [] and run.exit_code is None  # read as still running


def test_runs_ls_notes_a_run_that_logged_nothing_beside_a_damaged_run_of_a_longer_name(
    base, tmp_path
):
    """The damage lines were searched for a quiet run's folder as text: `a/run` was taken as
    named in `a/run2/run`'s damage line, and its note went missing."""
    quiet = _copy(base, tmp_path / "a", finished=False, tracked=True)
    shutil.rmtree(quiet / "wandb")
    damaged = _copy(base, tmp_path / "a" / "run2", finished=True, tracked=True)
    for log in {p.resolve() for p in damaged.glob("wandb/*/run-*.wandb")}:
        log.unlink()
        log.mkdir()
    code, _, err = cli("runs", "ls", str(tmp_path))
    assert code == 2 and "holds no log of run" in err, err
    said = "logged no points (stopped early, or tracking=disabled): the same command resumes it"
    assert f"{quiet} is not finished and {said}" in err, err
