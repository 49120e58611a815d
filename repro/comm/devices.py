"""Which device a worker computes on, and which backends carry its messages.

A process group gets one backend per device type (`cpu:gloo,cuda:nccl` on a GPU): NCCL
carries the method's traffic between GPUs, gloo the instrumentation (metric sums, the
measured-clock exchange), which lives on the CPU and never belongs on NCCL, which takes
CUDA tensors only.

Asking for GPUs (`cluster.gpus_per_node > 0`, `trainer.device=cuda...` or
`cluster.backend=nccl`) on a machine where torch cannot use CUDA stops here with one line
naming the cause (a CPU-only torch build, a missing or too old NVIDIA driver) and the fix,
instead of quietly training on the CPU while a scheduler bills the GPUs. The decision is a
pure function of what the machine reports (`CudaFacts`), so every branch is tested on a
machine without a GPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from repro.errors import UserError
from repro.schemas.cluster import device_request

# The CPU backend rides along in every group: instrumentation traffic stays off NCCL.
GPU_BACKEND = "cpu:gloo,cuda:nccl"
CPU_BACKEND = "gloo"
INSTALL = (
    "rm -rf .venv && make install TORCH_INDEX_URL=https://download.pytorch.org/whl/cuXYZ "
    "(XYZ: a CUDA version the driver supports, e.g. 126)"
)


def backend_for(device: str) -> str:
    """The process group's backend string for workers computing on `device`."""
    return GPU_BACKEND if device.startswith("cuda") else CPU_BACKEND


@dataclass(frozen=True)
class CudaFacts:
    """What this machine reports: why torch cannot use CUDA (None when it can), how many
    devices this process sees, and its local rank on the node."""

    problem: str | None
    count: int
    local_rank: int = 0


def cuda_problem() -> str | None:
    """Why torch cannot use CUDA in this process, in one line; None when it can."""
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU-only build (no CUDA)"
    if torch.cuda.is_available():
        return None
    try:
        # Only reached when CUDA is unusable: init() then raises with the driver's reason.
        torch.cuda.init()
    except (RuntimeError, AssertionError) as e:
        reason = str(e).splitlines()[0].split(". ")[0] if str(e) else type(e).__name__
        reason = reason[:1].lower() + reason[1:]
        return f"{reason} (torch {torch.__version__} needs a driver for CUDA {torch.version.cuda})"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
    return f"torch {torch.__version__} sees no CUDA device (CUDA_VISIBLE_DEVICES={visible})"


def cuda_fix() -> str:
    """How to get a usable CUDA: a driver for this torch build, or a build for the driver."""
    if torch.version.cuda is None:
        return f"install a CUDA build of torch: {INSTALL}"
    return (
        f"load a driver for CUDA {torch.version.cuda}, or install a torch build for this "
        f"driver: {INSTALL}"
    )


def machine_facts() -> CudaFacts:
    problem = cuda_problem()
    count = 0 if problem else torch.cuda.device_count()
    return CudaFacts(problem, count, int(os.environ.get("LOCAL_RANK", "0")))


def choose_device(requested: str, gpus_per_node: int, backend: str, facts: CudaFacts) -> str:
    """The device for `trainer.device=requested` given the cluster's GPU request and what
    the machine reports; every refusal is one line naming the setting and the fix.

    `auto` is a CUDA device when the machine has one (the local rank's), else the CPU;
    but once GPUs are asked for, their absence is an error, never a quiet CPU run.
    """
    kind, index, asked = device_request(requested, gpus_per_node, backend)
    if kind == "cpu":
        return "cpu"
    if facts.problem is not None:
        if not asked:
            return "cpu"  # auto on a machine without CUDA, and nobody asked for GPUs
        request = " and ".join(asked)
        raise UserError(
            f"{request} asks for CUDA but {facts.problem}; "
            f"{cuda_fix()}; or drop {request} to run on the CPU"
        )
    if gpus_per_node > facts.count:
        raise UserError(
            f"cluster.gpus_per_node={gpus_per_node} but this node shows {facts.count} CUDA "
            f"device(s) (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')});"
            f" set cluster.gpus_per_node={facts.count} or pick a partition with larger nodes"
        )
    if index is not None:
        if int(index) >= facts.count:
            raise UserError(
                f"trainer.device={requested} is out of range: this machine has {facts.count} "
                f"CUDA device(s), cuda:0 to cuda:{facts.count - 1}; pick one of them or use "
                f"trainer.device=auto"
            )
        return requested
    if facts.local_rank >= facts.count:
        raise UserError(
            f"LOCAL_RANK={facts.local_rank} needs CUDA device {facts.local_rank} but this node "
            f"shows {facts.count}: one worker per GPU; run at most {facts.count} workers per "
            f"node (trainer.world_size / cluster.nodes)"
        )
    return f"cuda:{facts.local_rank}"


def pick_device(requested: str = "auto", gpus_per_node: int = 0, backend: str = "auto") -> str:
    """`choose_device` for this machine and this process's LOCAL_RANK."""
    return choose_device(requested, gpus_per_node, backend, machine_facts())


def fix_kernel_order(device: str, deterministic: bool) -> None:
    """`trainer.deterministic` for this process when it trains on a CUDA device: kernels
    that sum in one fixed order (torch's deterministic algorithms, cuDNN's deterministic
    convolutions, cuBLAS on a fixed workspace), or with False the defaults, among them
    cuDNN's heuristic picks, which sum with atomics in an order that varies between runs.

    Under those defaults a ResNet-18 run differs from itself by 6e-10 relative after one
    step, and training amplifies that: measured on an H200, a run killed after step 37 and
    resumed ended 80 steps with parameters O(1) relative away from its uninterrupted twin
    (bit for bit equal under fixed-order kernels). cuBLAS reads its workspace setting when
    its first handle is made, so this goes before the process's first matrix product. The
    CPU's kernels already sum in a fixed order, and its settings are left alone."""
    if not device.startswith("cuda"):
        return
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(deterministic)
    torch.backends.cudnn.deterministic = deterministic
    torch.backends.cudnn.benchmark = False


# what holds the free memory, as a refusal names it
_GROUP = "this process's memory group (a job's --mem, a container's limit) leaves"


def free_memory(device: str) -> tuple[int, str]:
    """Free bytes where the workers will live, and the words a refusal names them by: the
    GPU's, or the machine's and no more than this process's memory control group leaves
    it (`cgroup_free_bytes`), which is then named instead: a SLURM user checking `free`
    would find the machine's memory far from the figure."""
    if device.startswith("cuda"):
        return torch.cuda.mem_get_info(torch.device(device))[0], f"{device} has"
    have = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                have = int(line.split()[1]) * 1024
    limited = cgroup_free_bytes()
    if limited is not None and limited < have:
        return limited, _GROUP
    return have, "this machine has"


# (controller list in /proc/self/cgroup, its mount, limit file, usage file, reclaimable
# page cache in memory.stat): cgroup v2's unified hierarchy, then v1's memory controller
_CGROUPS = (
    ("", Path("/sys/fs/cgroup"), "memory.max", "memory.current", "inactive_file"),
    (
        "memory",
        Path("/sys/fs/cgroup/memory"),
        "memory.limit_in_bytes",
        "memory.usage_in_bytes",
        "total_inactive_file",
    ),
)
_NO_LIMIT = 2**62  # v1 writes "no limit" as the largest page-aligned int64


def cgroup_free_bytes(
    proc_cgroup: Path = Path("/proc/self/cgroup"), hierarchies: tuple = _CGROUPS
) -> int | None:
    """What this process's memory control group and its ancestors leave before their
    limits (limit - usage + reclaimable page cache, the smallest along the path), or None
    with no limit set. A SLURM job with its memory constrained (`--mem`), or a container,
    is killed at its group's limit however much the machine has free (a run refused here
    at 0.6 GiB of a 1 GiB group was killed by the kernel when the machine's memory was
    counted), so the refusal before a run counts the group's."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    found = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for names, mount, limit_file, usage_file, cache_key in hierarchies:
            if names in (controllers.split(",") if controllers else [""]):
                found += _free_along(mount, path, limit_file, usage_file, cache_key)
    return min(found) if found else None


def _free_along(mount: Path, path: str, limit_file: str, usage_file: str, cache_key: str):
    """Each limited group's room on the way from `path` up to its hierarchy's root."""
    folder = mount / path.lstrip("/")
    for group in (folder, *folder.parents):
        try:
            raw = (group / limit_file).read_text().strip()
            if raw != "max" and int(raw) < _NO_LIMIT:
                usage = int((group / usage_file).read_text())
                lines = (group / "memory.stat").read_text().splitlines()
                cache = dict(line.split() for line in lines).get(cache_key, 0)
                yield max(0, int(raw) - usage + int(cache))
        except (OSError, ValueError):
            pass  # a group outside this mount namespace, or no such controller
        if group == mount:
            break


def require_free_memory(subject: str, need: int, detail: str, fix: str) -> None:
    """Refuse, before anything is allocated, `need` bytes that the free memory cannot hold,
    in one line: `<subject> about X GiB<detail> and this machine has Y GiB free; <fix>` (the
    subject names the setting and its verb; a memory group's limit is named as such)."""
    have, where = free_memory("cpu")
    if need > have:
        gib = 2**30
        more = ", or give the job more memory" if where == _GROUP else ""
        raise UserError(
            f"{subject} about {need / gib:.1f} GiB{detail} and {where} {have / gib:.1f} GiB "
            f"free; {fix}{more}"
        )
