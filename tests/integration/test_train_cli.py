"""`repro train` and `python -m repro train` as a user types them, multirun included."""

import fcntl
import json
import math
import os
import signal
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from tests.helpers import REPO, repro_cli

TINY = ["workload=synthetic_mlp", "trainer.steps=20", "trainer.progress=false", "tracking=disabled"]


@pytest.mark.slow
def test_multirun_runs_every_combination(tmp_path):
    proc = repro_cli(
        "train",
        "--multirun",
        *TINY,
        "method=local_sgd",
        "method.tau=1,4",
        f"runs_root={tmp_path}/runs",
        f"data.root={tmp_path}/data",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    summaries = sorted((tmp_path / "runs").glob("default/local_sgd-*/summary.json"))
    assert len(summaries) == 2
    collectives = sorted(json.loads(p.read_text())["comm/collectives"] for p in summaries)
    assert collectives == [5, 20]  # 20 steps at tau=4 and tau=1
    # the runs share a label: each line names the value that sets it apart
    done = sorted(line.split(":")[0] for line in proc.stdout.splitlines() if "done " in line)
    assert done == ["done local_sgd (method.tau=1)", "done local_sgd (method.tau=4)"]
    assert not list(tmp_path.glob("*.yaml"))  # Hydra writes nothing into the working directory


@pytest.mark.slow
def test_a_multirun_with_a_diverging_run_ends_alike_every_time_it_is_given(tmp_path):
    """A diverged run of several is a result, not the command's failure: given again, with
    the other run finished earlier and skipped, the command ends as it did the first time
    (it used to fail once the diverged run was the only one left to do)."""
    args = ["train", "--multirun", *TINY, "optim.name=sgd", "optim.lr=3,0.05"]
    args += [f"runs_root={tmp_path}/runs", f"data.root={tmp_path}/data"]
    first, again = (repro_cli(*args, cwd=tmp_path) for _ in range(2))
    assert first.returncode == 0, first.stderr
    assert "train: 2 runs ready in " in first.stdout and ", 1 of them diverged" in first.stdout
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("skip sync (optim.lr=0.05): finished earlier") == 1, again.stdout
    assert again.stderr.count("training diverged at step") == 0, again.stderr
    assert again.stdout.count("diverged sync (optim.lr=3): training diverged at") == 1, again.stdout


def test_a_multirun_whose_runs_would_share_a_directory_is_refused_before_any_runs(tmp_path):
    """A fixed run_dir under a comma list: the first run finished, then the second found it
    and stopped ("holds a run of another config"), or, side by side, found it in use."""
    shared = tmp_path / "shared"
    args = ["train", "--multirun", *TINY, "seed=0,1", f"run_dir={shared}"]
    proc = repro_cli(*args, f"data.root={tmp_path}/data", cwd=tmp_path)
    assert proc.returncode == 2 and not shared.exists(), proc.stdout
    assert proc.stderr == (
        f"error: run_dir={shared}: runs sync (seed=0) and sync (seed=1) of this multirun would "
        "share it; leave run_dir unset (each run then gets runs_root/<experiment>/<label>-<hash>) "
        f"or make it differ by run, e.g. run_dir={shared}/${{seed}}\n"
    )


@pytest.mark.slow
def test_runs_of_a_multirun_that_compute_the_same_run_once(tmp_path):
    """Two values of a setting outside the run's identity (or one value twice) make one run:
    side by side, the second found the first's directory in use and failed."""
    args = ["train", "--multirun", *TINY, "trainer.keep_checkpoints=1,2", "compute.mode=sampled"]
    proc = repro_cli(*args, f"runs_root={tmp_path}/runs", f"data.root={tmp_path}/data")
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = (tmp_path / "runs" / "default").iterdir()
    said = "train: sync (trainer.keep_checkpoints=2) is the same run as sync "
    said += "(trainer.keep_checkpoints=1)"
    assert f"{said} ({run_dir}): run once" in proc.stdout.splitlines()
    assert proc.stdout.count("done sync") == 1


@pytest.mark.slow
@pytest.mark.parametrize("umask", [0o022, 0o027], ids=["022", "027"])
def test_a_runs_files_take_the_users_umask_like_any_other_file(tmp_path, umask):
    """Config, summary, model and checkpoints are written to a temporary file and renamed
    into place; they get the mode the user's umask gives (readable by the group that shares
    the runs), not the temporary file's owner-only 0600."""
    before = os.umask(umask)  # the command inherits it
    try:
        proc = repro_cli(
            "train", *TINY, "trainer.checkpoint_every=10", f"runs_root={tmp_path}/runs"
        )
    finally:
        os.umask(before)
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = (tmp_path / "runs" / "default").iterdir()
    written = [run_dir / n for n in ("config.yaml", "summary.json", "final_model.pt")]
    written += list((run_dir / "checkpoints").rglob("*.pt"))
    assert len(written) > 3
    assert {oct(p.stat().st_mode & 0o777) for p in written} == {oct(0o666 & ~umask)}


@pytest.mark.slow
def test_reading_curves_of_a_run_made_without_tracking_says_why_there_are_none(tmp_path):
    assert repro_cli("train", *TINY, f"runs_root={tmp_path}/runs").returncode == 0
    (run_dir,) = (tmp_path / "runs" / "default").iterdir()
    why = (
        f"error: no wandb run records under {run_dir}: the run was made with "
        f"tracking=disabled, so it logged no curves; its final metrics are in "
        f"{run_dir / 'summary.json'}"
    )
    for command in (["runs", "show"], ["report", "compare"]):
        proc = repro_cli(*command, str(run_dir), cwd=tmp_path)
        assert (proc.returncode, proc.stderr.strip()) == (2, why), command


@pytest.mark.slow
def test_python_dash_m_repro_is_the_same_command(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "repro",
            "train",
            *TINY,
            f"run_dir={tmp_path}/run",
            f"data.root={tmp_path}/data",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "step=20" in proc.stdout
    assert (Path(tmp_path) / "run" / "summary.json").exists()


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["simulated", "processes"])
def test_an_image_workload_trains_from_the_command_line(tmp_path, engine):
    """CIFAR-shaped uint8 images through the memory checks, the normalization, training
    and evaluation of both engines: the paper-scale path on a few small steps."""
    proc = repro_cli(
        "train",
        "workload=cifar100_resnet18",
        "workload.dataset=synthetic_images",
        "workload.num_samples=40",
        "trainer.world_size=2",
        "trainer.batch_size=2",
        "trainer.steps=2",
        "trainer.eval_every=2",
        "trainer.progress=false",
        "tracking=disabled",
        "compute.mode=sampled",
        f"trainer.engine={engine}",
        f"run_dir={tmp_path}/run",
        f"data.root={tmp_path}/data",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["step"] == 2 and 0 <= summary["test/acc"] <= 1
    assert math.isfinite(summary["train/loss"]) and math.isfinite(summary["test/loss"])


def test_a_run_stopped_on_a_terminal_says_so_on_a_line_of_its_own(tmp_path):
    """The progress bar is closed as the run stops, so the message that follows starts a
    line rather than continuing the bar's."""
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    args = [*TINY[:-2], "trainer.steps=100000", "trainer.eval_every=50", "tracking=disabled"]
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "repro"), "train", *args, f"runs_root={tmp_path}"],
        stdout=follower,
        stderr=follower,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        # Ctrl-C as on a terminal, even where this test runs with SIGINT ignored (a job
        # started in the background of a non-interactive shell)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    os.close(follower)
    drawn = b""
    while b"step=" not in drawn:  # the bar with its first logged point
        drawn += os.read(leader, 4096)
    proc.send_signal(signal.SIGINT)
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the pty's EIO once the process has gone
            break
        if not chunk:
            break
        drawn += chunk
    os.close(leader)
    assert proc.wait(timeout=60) == 130
    text = drawn.decode(errors="replace")
    assert "\ninterrupted: train stopped" in text.replace("\r\n", "\n"), text[-300:]


@pytest.mark.slow
def test_a_paper_scale_run_on_the_cpu_says_so(tmp_path):
    """A GPU cluster's configuration run where there is no CUDA device trains on the CPU,
    as `trainer.device=auto` allows, but not without a word."""
    args = ["experiment=adacomm_paper", "experiment.label=sync", "method=sync", *TINY[:-2]]
    args.append("tracking=disabled")
    proc = repro_cli("train", *args, f"runs_root={tmp_path}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("note: a paper-scale run on the CPU (no CUDA device here)") == 1


@pytest.mark.slow
def test_a_home_that_cannot_be_written_adds_no_lines_to_a_run(tmp_path, monkeypatch):
    """matplotlib (which the MNIST-1D generator imports) and wandb's service keep caches below
    the home folder: with none writable, a run printed 17-20 lines of their complaints."""
    home = tmp_path / "home"
    home.write_text("")  # a file: nothing can be made below it, by root either
    monkeypatch.setenv("HOME", str(home))
    for variable in ("MPLCONFIGDIR", "WANDB_CACHE_DIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(variable, raising=False)
    proc = repro_cli(
        "train",
        *TINY,
        "workload=mnist1d_cnn",
        "tracking=wandb_offline",
        f"runs_root={tmp_path}/runs",
        f"data.root={tmp_path}/data",  # generated afresh: matplotlib is imported
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    lines = (proc.stdout + proc.stderr).splitlines()
    assert [line.split(":")[0] for line in lines] == ["done sync"], lines


@pytest.mark.parametrize("cache", ["a file", "a link to nothing"])
def test_a_home_whose_cache_folder_cannot_be_written_adds_no_matplotlib_lines(tmp_path, cache):
    """~/.config writable but ~/.cache not (a file, or a link to a scratch space not mounted):
    the check looked at matplotlib's config folder only, and its font cache, kept under
    ~/.cache, printed matplotlib's advice to set MPLCONFIGDIR on every run."""
    home = tmp_path / "home"
    (home / ".config").mkdir(parents=True)
    if cache == "a file":
        (home / ".cache").write_text("")
    else:
        (tmp_path / "unmounted").write_text("")  # nothing can be made below it, by root either
        (home / ".cache").symlink_to(tmp_path / "unmounted" / "scratch")
    unset = ("MPLCONFIGDIR", "WANDB_CACHE_DIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    code = "from repro.cli import main; main(['--help']); import matplotlib.font_manager"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "HOME": str(home)},
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr

    nowhere = tmp_path / "no-home"  # a command makes no home folder of its own
    env["HOME"] = str(nowhere)
    check = subprocess.run(
        [sys.executable, "-c", "from repro.cli import main; main(['--help'])"],
        env=env,
        cwd=REPO,
        capture_output=True,
        check=False,
    )
    assert check.returncode == 0 and not nowhere.exists()
