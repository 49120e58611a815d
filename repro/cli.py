"""`repro` command line: a thin dispatcher over the parts of the package.

  repro train [overrides] [--multirun] [--cfg job] [--help]   one training run (Hydra)
  repro reproduce PAPER [scale=..] [..]   a paper's run set, then its report
  repro report PAPER | all | compare | check | publish   reports from runs on disk
  repro runs ls | show RUN                offline wandb runs, read without a server
  repro cost ...                          the network cost model by hand
  repro calibrate ...                     fit latency/bandwidth to this machine's gloo
  repro sweep SPEC | show SPEC | dashboard SPEC
  repro tune PAPER [scale=..]             equal-budget tuning of a run set's arms
  repro jobs [--watch]                    SLURM jobs of reproductions and sweeps

Any `UserError` ends the command with one line on stderr and exit code 2. A closed pipe on
stdout (`repro runs ls | head -1`) ends it quietly with exit code 141, as a Unix tool that
SIGPIPE ends.
"""

from __future__ import annotations

import importlib
import os
import select
import sys
import tempfile
from pathlib import Path

from repro.errors import UserError, dropped_stops_sent_again

# command -> module whose `main(argv) -> int` implements it, or module:function
COMMANDS = {
    "train": "repro.cluster.train_cli",
    "reproduce": "repro.reproduce.reproduce_cli",
    "report": "repro.report.report_cli",
    "runs": "repro.track.runs_cli",
    "cost": "repro.netmodel.cost_cli",
    "calibrate": "repro.netmodel.calibrate",
    "sweep": "repro.sweep.cli",
    "tune": "repro.sweep.cli:tune",
    "jobs": "repro.cluster.jobs_cli",
}


def available() -> dict[str, str]:
    return {
        c: m for c, m in COMMANDS.items() if importlib.util.find_spec(m.split(":")[0]) is not None
    }


def usage() -> str:
    return (__doc__ or "").split("\n\n")[1] if __doc__ else ""


# variable -> the folders it stands for: (base directory variable, folder below it, below the
# home folder without it); MPLCONFIGDIR is matplotlib's config and font cache both
_HOME_CACHES = {
    "MPLCONFIGDIR": (
        ("XDG_CONFIG_HOME", "matplotlib", ".config"),
        ("XDG_CACHE_HOME", "matplotlib", ".cache"),
    ),
    "WANDB_CACHE_DIR": (("XDG_CACHE_HOME", "", ".cache"),),
}


def _writable(folder: Path) -> bool:
    """Whether `folder` is, or could be made, a folder this user writes (nothing is made:
    a command creates nothing in a home folder it does not use). A link on the way is read
    where it points: ~/.cache linked to a scratch space not mounted cannot be made."""
    folder = Path(os.path.realpath(folder))
    while not folder.exists():
        if folder.parent == folder:
            return False
        folder = folder.parent
    return folder.is_dir() and os.access(folder, os.W_OK | os.X_OK)


def caches_off_an_unwritable_home() -> None:
    """matplotlib (which the MNIST-1D generator imports) and wandb's service keep a cache
    below the home folder. Where that cannot be written (a read-only home on a cluster, a
    container's user without one), each printed its complaint on every run: matplotlib's
    advice to set MPLCONFIGDIR, wandb-core's own log of its service, 17-20 lines a run
    does not own. Each is given a folder below the temporary directory instead, unless its
    variable is set; worker processes and SLURM jobs inherit the variables."""
    for variable, folders in _HOME_CACHES.items():
        if variable in os.environ:
            continue
        for base, below, in_home in folders:
            root = os.environ.get(base) or os.path.join(os.path.expanduser("~"), in_home)
            if not _writable(Path(root, below)):
                os.environ[variable] = str(_own_temporary_folder() / variable.lower())
                break


def _own_temporary_folder() -> Path:
    """`repro-<uid>` below the temporary directory, kept across commands (matplotlib's font
    cache takes seconds to build), made private; where another user holds that name (or a
    link stands there), a fresh folder of this process's own."""
    folder = Path(tempfile.gettempdir(), f"repro-{os.getuid()}")
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        held = folder.lstat()
        if held.st_uid == os.getuid() and not folder.is_symlink():
            return folder
    except OSError:
        pass
    return Path(tempfile.mkdtemp(prefix="repro-"))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    caches_off_an_unwritable_home()
    if not argv or argv[0] in ("-h", "--help", "help"):
        print("usage: repro COMMAND [args]\n" + usage())
        return 0
    cmd, rest = argv[0], argv[1:]
    commands = available()
    if cmd not in commands:
        print(f"error: unknown command {cmd!r}; choose one of {sorted(commands)}", file=sys.stderr)
        return 2
    try:
        try:
            module, _, function = commands[cmd].partition(":")
            with dropped_stops_sent_again():
                return getattr(importlib.import_module(module), function or "main")(rest) or 0
        finally:  # argparse's --help exits: flush here, where a closed pipe is caught
            sys.stdout.flush()
    except BrokenPipeError:
        if not _stdout_closed():
            raise
        # as a Unix tool killed by SIGPIPE: quiet, 128 + 13; nothing more reaches stdout
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _stdout_closed() -> bool:
    """Whether the reader of stdout has gone (`repro ... | head -1`): a pipe whose read end
    is closed polls as an error. A broken pipe elsewhere (a socket) is not this one."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in poller.poll(0))
    except (OSError, ValueError):
        return False
