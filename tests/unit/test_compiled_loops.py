"""numba's on-disk cache of the compiled loops, damaged: the loops are compiled again.

Each run is a fresh interpreter whose numba cache lies in its own folder
(`NUMBA_CACHE_DIR`), so damaging it touches no other test's loops.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import unshare_works

# the selection against torch.topk's, Adasum's statistics against float64 torch
_USE_LOOPS = """
import torch
from repro.comm import adasum_kernels
from repro.compress.select import topk_indices
x = torch.randn(4, 5000, generator=torch.Generator().manual_seed(0))
picked = topk_indices(x, [50], [5000])
expected = torch.topk(x.abs(), 50, dim=1).indices.sort(dim=1).values
a, b = x[0].double(), x[1].double()
stats = adasum_kernels.dot_stats(x[0].contiguous(), x[1].contiguous())
print(torch.equal(picked, expected), torch.allclose(stats, torch.stack([a @ b, a @ a, b @ b])))
"""


def _run(cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    return subprocess.run(
        [sys.executable, "-c", _USE_LOOPS], env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_a_damaged_cache_of_compiled_loops_is_compiled_again_with_one_note(tmp_path):
    first = _run(tmp_path)
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == ["True", "True"] and "note" not in first.stderr
    damaged = []
    for name in ("select_kernels._select-", "adasum_kernels._stats-"):
        for path in tmp_path.rglob(f"{name}*.nbc"):  # cut short, as by a copy interrupted
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
            damaged.append(path)
    for path in tmp_path.rglob("position_kernels._add_at-*.nbi"):  # a stray file of the name
        path.write_bytes(b"not numba's index")
        damaged.append(path)
    assert len(damaged) == 3

    again = _run(tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout.split() == ["True", "True"]
    notes = again.stderr.strip().splitlines()
    folders = sorted({str(path.parent) for path in damaged})
    assert len(notes) == len(folders) == 2, again.stderr  # one per cache folder, no traceback
    for note, folder in zip(sorted(notes), folders, strict=True):
        assert note.startswith(f"note: numba's cache of compiled loops in {folder} was damaged")
        assert note.endswith("; compiling them again")

    third = _run(tmp_path)  # compiled anew and cached again: read back without a note
    assert third.returncode == 0 and third.stdout.split() == ["True", "True"], third.stderr
    assert third.stderr == ""


@pytest.mark.slow
@pytest.mark.skipif(not unshare_works(), reason="needs unshare -rm (a user namespace)")
def test_with_no_writable_folder_for_the_cache_the_loops_compile_with_one_note(tmp_path):
    """The source tree, NUMBA_CACHE_DIR and the user's cache folder all read-only (mounted so in a
    namespace of the test's own: root may write any folder): numba raised at import."""
    package = Path(__file__).resolve().parents[2] / "repro"
    script = tmp_path / "use_loops.py"
    script.write_text(_USE_LOOPS)
    folder = tmp_path / "read-only"
    folder.mkdir()
    mounts = " && ".join(
        f"mount --bind {p} {p} && mount -o remount,ro,bind {p}" for p in (package, folder)
    )
    proc = subprocess.run(
        ["unshare", "-rm", "sh", "-c", f'{mounts} && exec "$0" {script}', sys.executable],
        env={
            **{k: v for k, v in os.environ.items() if k != "XDG_CACHE_HOME"},
            "NUMBA_CACHE_DIR": str(folder),
            "HOME": str(folder),  # numba's user-wide cache: $XDG_CACHE_HOME, else ~/.cache
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True"]
    assert proc.stderr.startswith("note: numba finds no writable folder"), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
