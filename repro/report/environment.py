"""The environment an index page was built in: versions, hardware, the repository's commit.

A reproduction's numbers depend on the software and, for the wall clock, on the machine, so
the index states both. These are facts about the machine that builds the page; the runs'
own settings (seeds, workers, network model) come from the runs' configs.
"""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

PACKAGES = (
    "repro",
    "torch",
    "numpy",
    "matplotlib",
    "wandb",
    "wandb-workspaces",
    "hydra-core",
    "optuna",
    "scipy",
)


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what `platform` reports."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown"


def gpus() -> str:
    """The CUDA devices torch sees, or "none"."""
    import torch

    if not torch.cuda.is_available():
        return "none (CUDA not available to torch)"
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return ", ".join(names)


def git_commit(repo: Path) -> str:
    """HEAD of the git checkout at `repo`, with "(uncommitted changes)" when the tree differs."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=30
        ).stdout.strip()

    try:
        head = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return "unknown (git not available)"
    if not head:
        return f"unknown ({repo} is not a git checkout)"
    return head + (" (uncommitted changes)" if dirty else "")


def environment_rows(repo: Path) -> list[list[str]]:
    """[name, value] rows: Python, package versions, OS, CPU, GPU and the repo's commit."""
    rows = [["python", platform.python_version()]]
    rows += [[package, _version(package)] for package in PACKAGES]
    rows += [
        ["operating system", platform.platform()],
        ["CPU", f"{os.cpu_count()} logical cores, {cpu_model()}"],
        ["GPU", gpus()],
        ["git commit", git_commit(repo)],
    ]
    return rows
