"""A damaged or half-written MNIST-1D cache: the cache is derived from its seed alone, so a
damaged one is made again with one note, a killed writer's temporary file is removed by the
next writer of that cache, and a folder where the cache belongs is named."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest
import torch

from repro.errors import UserError
from repro.workload.data import mnist1d
from tests.helpers import unshare_works
from tests.integration.test_state_faults import damage, trials


@pytest.mark.parametrize("kind,seed", [*trials(), ("stray", 0)])
def test_a_damaged_mnist1d_cache_is_generated_again_with_one_note(tmp_path, kind, seed, capsys):
    """The data cache is derived from its seed alone: a damaged one is replaced by the
    same bytes, noted once, and the run goes on with the very arrays it would have read."""
    want = mnist1d(str(tmp_path), num_samples=600, seed=4)
    cache = tmp_path / "mnist1d_n600_s4.npz"
    whole = cache.read_bytes()
    if kind == "stray":  # a file of that name that is no archive at all
        cache.write_text("not an archive\n")
    else:
        damage(cache, kind, random.Random(seed))
    capsys.readouterr()
    got = mnist1d(str(tmp_path), num_samples=600, seed=4)
    assert cache.read_bytes() == whole
    for name in ("x_train", "y_train", "x_test", "y_test"):
        assert torch.equal(getattr(got, name), getattr(want, name))
    err = capsys.readouterr().err.splitlines()
    if kind == "delete":
        assert err == []
    else:
        assert len(err) == 1 and err[0].startswith(f"note: {cache} was damaged ("), err


def test_a_killed_cache_writers_temporary_file_is_removed_and_a_folder_in_its_place_named(
    tmp_path,
):
    """A writer killed between its temporary file and the rename left the file for good (a
    third of a gigabyte at the default 100k samples); the next writer of that cache removes
    it, and leaves another cache's, which its own writer may be filling. A folder where the
    cache belongs was noted as damaged and "generated again", then blamed on the disk."""
    left = tmp_path / ".mnist1d_n600_s4-k1ll3d.npz.tmp"
    other = tmp_path / ".mnist1d_n800_s4-wr1t1ng.npz.tmp"
    left.write_bytes(b"cut short"), other.write_bytes(b"being written")
    mnist1d(str(tmp_path), num_samples=600, seed=4)
    assert sorted(p.name for p in tmp_path.glob("*.tmp")) == [other.name]
    (tmp_path / "mnist1d_n700_s4.npz").mkdir()
    with pytest.raises(UserError) as err:
        mnist1d(str(tmp_path), num_samples=700, seed=4)
    assert str(err.value) == (
        f"{tmp_path / 'mnist1d_n700_s4.npz'} is a folder where the MNIST-1D cache file "
        "belongs; move it away, or set data.root elsewhere"
    )


_READ = """
import sys
from repro.errors import UserError
from repro.workload.data import mnist1d
try:
    mnist1d(sys.argv[1], num_samples=600, seed=4)
except UserError as err:
    sys.exit(f"error: {err}")
"""


@pytest.mark.skipif(not unshare_works(), reason="needs unshare -rm (a user namespace)")
def test_a_cache_another_user_owns_and_keeps_unreadable_is_named_not_replaced(tmp_path):
    """Another user's cache (mode 600) was called damaged and generated again over theirs."""
    mnist1d(str(tmp_path), num_samples=600, seed=4)
    cache = tmp_path / "mnist1d_n600_s4.npz"
    whole = cache.read_bytes()
    os.chown(cache, 12345, 12345)  # an owner the namespace does not map: its root is not root
    cache.chmod(0o600)
    proc = subprocess.run(
        ["unshare", "-r", sys.executable, "-c", _READ, str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip() == (
        f"error: {cache}: permission denied reading the MNIST-1D cache; make it readable, or "
        "set data.root elsewhere"
    )
    assert cache.read_bytes() == whole and cache.stat().st_uid == 12345
