"""Generated data sets: a long generation says so first, one this machine cannot hold is
refused before it starts."""

from pathlib import Path

import pytest

from repro.comm import devices
from repro.errors import UserError
from repro.workload import data


def test_a_long_generation_says_so_once_and_a_short_or_cached_one_says_nothing(
    tmp_path, monkeypatch, capsys
):
    data.mnist1d(str(tmp_path / "short"), num_samples=600, seed=4)  # about 0.3 s here
    assert capsys.readouterr().err == ""
    # a machine a thousand times slower: the same 600 samples take 600 s, 10 min
    monkeypatch.setattr(data, "_MNIST1D_S_PER_SAMPLE", 1.0)
    data.mnist1d(str(tmp_path), num_samples=600, seed=4)
    cache = tmp_path / "mnist1d_n600_s4.npz"
    assert capsys.readouterr().err.splitlines() == [
        f"generating MNIST-1D: 600 samples of seed 4, about 10 min on one core; once, then "
        f"read from {cache}"
    ]
    data.mnist1d(str(tmp_path), num_samples=600, seed=4)  # read from its cache: nothing said
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("dataset", ["mnist1d", "synthetic", "synthetic_images", "toy_quadratic"])
def test_a_data_set_too_large_for_free_memory_is_refused_before_anything_is_written(
    tmp_path, monkeypatch, dataset
):
    per_sample = data._GENERATED_BYTES[dataset]
    monkeypatch.setattr(devices, "free_memory", lambda d: (1000 * per_sample, "this machine has"))
    with pytest.raises(UserError) as refused:
        data.load(dataset, str(tmp_path / "data"), False, 1001, seed=0)
    assert str(refused.value) == (
        f"workload.num_samples=1001 needs about {1001 * per_sample / 2**30:.1f} GiB to "
        f"generate workload.dataset={dataset} (about {per_sample:,} bytes a sample) and this "
        "machine has 0.0 GiB free; lower workload.num_samples"
    )
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").iterdir())
    data.load(dataset, str(tmp_path / "data"), False, 1000, seed=0)  # what fits is made


def test_a_failed_cifar_fetch_takes_back_only_what_it_made(tmp_path, monkeypatch):
    """A download that fails into a data.root it made removed its outermost new folder
    whole: another run's MNIST-1D cache, and a live run's directory, written there while the
    download stalled, went with it. Its own lock and partial archive, and the folders they
    leave empty, are all it takes back."""
    from torchvision import datasets

    class Stalled(datasets.CIFAR10):
        others = True

        def __init__(self, root, train, download):
            project = Path(root).parent
            if self.others:  # other runs, meanwhile
                (project / "runs" / "live").mkdir(parents=True)
                (Path(root) / "mnist1d_n200_s0.npz").write_bytes(b"another run's cache")
            (Path(root) / self.filename).write_bytes(b"the first bytes")
            raise OSError("Connection reset by peer")

    monkeypatch.setattr(datasets, "CIFAR10", Stalled)
    for others, left in (
        (True, ["data", "data/mnist1d_n200_s0.npz", "runs", "runs/live"]),
        (False, None),
    ):
        Stalled.others = others
        project = tmp_path / f"project_{others}"
        with pytest.raises(UserError, match="could not be downloaded"):
            data.cifar("cifar10", str(project / "data"), download=True)
        if left is None:  # alone in the folders it made: it leaves none of them
            assert not project.exists()
        else:
            assert sorted(p.relative_to(project).as_posix() for p in project.rglob("*")) == left
