"""The memory a process's control group leaves it (`cgroup_free_bytes`), read from group
trees written here as the kernel lays them out: cgroup v2's unified hierarchy and v1's
memory controller, a limit set on an ancestor, "no limit" in both forms, a path missing
from this mount namespace. (A real group limiting a real run: tests/integration/
test_memory_limit.py, where the machine lets one be made.)"""

from __future__ import annotations

from pathlib import Path

from repro.comm.devices import cgroup_free_bytes

GIB = 2**30
V1_NO_LIMIT = "9223372036854771712"


def _group(folder: Path, limit: str, usage: int, stat: dict[str, int], v2: bool) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    names = (
        ("memory.max", "memory.current")
        if v2
        else ("memory.limit_in_bytes", "memory.usage_in_bytes")
    )
    (folder / names[0]).write_text(f"{limit}\n")
    (folder / names[1]).write_text(f"{usage}\n")
    (folder / "memory.stat").write_text("".join(f"{k} {v}\n" for k, v in stat.items()))


def _hierarchies(root: Path) -> tuple:
    return (
        ("", root / "v2", "memory.max", "memory.current", "inactive_file"),
        (
            "memory",
            root / "v1",
            "memory.limit_in_bytes",
            "memory.usage_in_bytes",
            "total_inactive_file",
        ),
    )


def _proc(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cgroup"
    path.write_text(text)
    return path


def test_v2_a_limit_on_an_ancestor_counts_with_its_reclaimable_cache(tmp_path):
    v2 = tmp_path / "v2"
    _group(v2, "max", 5 * GIB, {"inactive_file": 0}, v2=True)
    _group(v2 / "job_5", str(GIB), GIB // 2, {"inactive_file": 1000, "active_file": 7}, True)
    _group(v2 / "job_5" / "step_0", "max", GIB // 2, {"inactive_file": 1000}, v2=True)
    proc = _proc(tmp_path, "0::/job_5/step_0\n")
    assert cgroup_free_bytes(proc, _hierarchies(tmp_path)) == GIB // 2 + 1000


def test_v1_the_smallest_room_along_the_path_and_no_limit_is_none(tmp_path):
    v1 = tmp_path / "v1"
    _group(v1, V1_NO_LIMIT, 9 * GIB, {}, v2=False)
    _group(v1 / "slurm", str(4 * GIB), GIB, {"total_inactive_file": 0}, v2=False)
    _group(v1 / "slurm" / "job_7", str(2 * GIB), GIB, {"total_inactive_file": 10}, v2=False)
    proc = _proc(tmp_path, "11:cpu,cpuacct:/slurm/job_7\n4:memory:/slurm/job_7\n")
    assert cgroup_free_bytes(proc, _hierarchies(tmp_path)) == GIB + 10
    unlimited = _proc(tmp_path, "4:memory:/\n")
    assert cgroup_free_bytes(unlimited, _hierarchies(tmp_path)) is None


def test_a_path_outside_this_namespace_and_no_memory_controller_are_none(tmp_path):
    _group(tmp_path / "v2", "max", GIB, {}, v2=True)
    elsewhere = _proc(tmp_path, "0::/kubepods/pod1/abc\n")  # not under the mount here
    assert cgroup_free_bytes(elsewhere, _hierarchies(tmp_path)) is None
    no_memory = _proc(tmp_path, "3:cpuset:/\n1:name=systemd:/\n")
    assert cgroup_free_bytes(no_memory, _hierarchies(tmp_path)) is None
    assert cgroup_free_bytes(tmp_path / "absent", _hierarchies(tmp_path)) is None


def test_usage_past_the_limit_leaves_nothing(tmp_path):
    _group(tmp_path / "v2" / "g", str(GIB), 2 * GIB, {"inactive_file": 0}, v2=True)
    proc = _proc(tmp_path, "0::/g\n")
    assert cgroup_free_bytes(proc, _hierarchies(tmp_path)) == 0
