"""What made a run beside its settings: the software, the machine and the data it read.

One config can give different numbers on two installs. MNIST-1D is generated at run time
by the `mnist1d` package from numpy's generator, and a run's floats depend on the torch
build and the CPU's kernels (an AVX-512 and an AVX2 kernel sum in other orders, and
training amplifies the last bit). So each run records these three in its tracker config
(`environment`), each as one line, and a report's setup table names them, by arm where they
differ: a reader can then tell a change of method from a change of install or machine.
The data's line is a digest of the arrays the run trained and was tested on, so two runs
that read the same bits show the same digest whatever produced them. The reports' index
states the same of the machine that builds it (`environment_rows`), with its commit.
"""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the index page reads the versions and the CPU without loading torch
    import torch

    from repro.workload.data import Arrays

PACKAGES = ("torch", "numpy", "scipy", "mnist1d")


def version(package: str) -> str:
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


def software() -> str:
    packages = ", ".join(f"{p} {version(p)}" for p in PACKAGES)
    return f"python {platform.python_version()}, {packages}"


def machine(device: torch.device) -> str:
    """The device the run's arithmetic ran on: a GPU's name and CUDA version, or the CPU's
    model, the vector instructions torch's kernels use and torch's thread count."""
    import torch

    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)}, CUDA {torch.version.cuda}"
    capability = torch.backends.cpu.get_cpu_capability()
    threads = torch.get_num_threads()
    return f"{cpu_model()} ({capability}), {threads} torch thread{'s' if threads != 1 else ''}"


def data_digest(arrays: Arrays) -> str:
    """The first 16 hex digits of a SHA-256 over the training and test arrays' bytes."""
    import torch

    digest = hashlib.sha256()
    for t in (arrays.x_train, arrays.y_train, arrays.x_test, arrays.y_test):
        digest.update(str((t.dtype, tuple(t.shape))).encode())
        digest.update(t.detach().cpu().contiguous().view(torch.uint8).numpy())
    return f"sha256 {digest.hexdigest()[:16]}"


def environment(device: torch.device, arrays: Arrays) -> dict[str, str]:
    """The record one run segment keeps (module doc); `repro.track.runs` merges a resumed
    run's segments."""
    return {"software": software(), "machine": machine(device), "data": data_digest(arrays)}


BUILD_PACKAGES = (
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
    """[name, value] rows of the machine building the reports (the index states them): Python,
    package versions, OS, CPU, GPU and the repo's commit."""
    rows = [["python", platform.python_version()]]
    rows += [[package, version(package)] for package in BUILD_PACKAGES]
    rows += [
        ["operating system", platform.platform()],
        ["CPU", f"{os.cpu_count()} logical cores, {cpu_model()}"],
        ["GPU", gpus()],
        ["git commit", git_commit(repo)],
    ]
    return rows
