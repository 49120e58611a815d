"""Bad input ends with one clear line naming the setting, a non-zero exit, and nothing written."""

import pytest

from tests.helpers import repro_cli

CASES = [
    (["workload=imagenet_vit"], "workload"),
    (["method=nope"], "method"),
    (["trainer.world_size=0"], "trainer.world_size"),
    (["trainer.world_size=9000"], "trainer.world_size"),
    (["trainer.batch_size=0"], "trainer.batch_size"),
    (["optim.lr=-1"], "optim.lr"),
    (["method=local_sgd", "method.tau=0"], "method.tau"),
    (["method=adacomm", "method.interval_s=0"], "method.interval_s"),
    (["method=adacomm", "method.tau0_search=true", "method.tau0_candidates=[]"], "tau0_candidates"),
    (["network.bandwidth_gbps=0"], "bandwidth"),
    (["trainer.nonsense=1"], "nonsense"),
]


def _assert_one_line_error(proc, needle):
    assert proc.returncode != 0
    err = proc.stderr.strip()
    assert "Traceback" not in proc.stderr
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error:") and needle in err, err


@pytest.mark.slow
@pytest.mark.parametrize("overrides,needle", CASES, ids=[c[1] for c in CASES])
def test_bad_input_is_one_line(tmp_path, overrides, needle):
    proc = repro_cli(
        "train", *overrides, f"runs_root={tmp_path}/runs", "tracking=disabled", cwd=tmp_path
    )
    _assert_one_line_error(proc, needle)
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_cifar_offline_names_data_root(tmp_path):
    proc = repro_cli(
        "train",
        "workload=cifar10_resnet20",
        f"data.root={tmp_path}/cifar",
        f"runs_root={tmp_path}/runs",
        "tracking=disabled",
        cwd=tmp_path,
    )
    _assert_one_line_error(proc, "data.root")
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_unwritable_run_dir(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    proc = repro_cli("train", f"run_dir={blocker}/run", "tracking=disabled", cwd=tmp_path)
    _assert_one_line_error(proc, "run_dir")
    assert blocker.read_text() == "not a directory"


@pytest.mark.slow
def test_resume_with_another_config_is_refused(tmp_path):
    run = tmp_path / "run"
    common = [
        f"run_dir={run}",
        "tracking=disabled",
        "workload=synthetic_mlp",
        "trainer.steps=20",
        "trainer.progress=false",
        f"data.root={tmp_path}/data",
    ]
    first = repro_cli("train", *common, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    before = sorted(p.name for p in run.rglob("*"))
    proc = repro_cli("train", *common, "optim.lr=0.5", cwd=tmp_path)
    _assert_one_line_error(proc, "optim.lr")
    assert sorted(p.name for p in run.rglob("*")) == before


@pytest.mark.slow
def test_unknown_command_and_paper(tmp_path):
    _assert_one_line_error(repro_cli("frobnicate", cwd=tmp_path), "frobnicate")
    _assert_one_line_error(repro_cli("reproduce", "nopaper", cwd=tmp_path), "nopaper")
