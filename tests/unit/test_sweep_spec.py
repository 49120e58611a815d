"""Sweep specs are refused with one clear line before any trial."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser

from repro.errors import UserError
from repro.sweep.cli import main as sweep_main
from repro.sweep.launch import check_config_keys, run_sweep
from repro.sweep.space import ParamSpec, format_override, grid_size
from repro.sweep.spec import load_spec, spec_from_dict
from repro.sweep.storage import expand_storage_url, mask_url, open_storage, scrub

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "hunter2-S3cret"


def tiny(tmp_path: Path, **changes) -> dict:
    raw = yaml.safe_load((ROOT / "sweeps" / "tiny.yaml").read_text())
    raw["out"] = str(tmp_path / "out")
    raw.update(changes)
    return raw


def refused(raw: dict, *needles: str) -> str:
    with pytest.raises(UserError) as info:
        spec_from_dict(raw, "t.yaml")
    msg = str(info.value)
    assert "\n" not in msg
    for n in needles:
        assert n in msg, msg
    return msg


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket closes


def test_tiny_spec_loads_with_defaults(tmp_path):
    spec = spec_from_dict(tiny(tmp_path), "t.yaml")
    assert spec.name == "tiny" and spec.n_trials == 4
    assert spec.directions == ["maximize", "maximize"]
    assert spec.storage_label == str(tmp_path / "out" / "tiny" / "journal.log")
    assert spec.heartbeat_s == 30 and spec.grace_s == 120


def test_default_sampler_is_nsga2_for_two_objectives_and_tpe_for_one(tmp_path):
    two = spec_from_dict(tiny(tmp_path, sampler=None), "t.yaml")
    one = spec_from_dict(
        tiny(tmp_path, sampler=None, objectives=[{"metric": "test/acc", "direction": "maximize"}]),
        "t.yaml",
    )
    assert two.sampler.name == "nsga2" and one.sampler.name == "tpe"


@pytest.mark.parametrize("path", sorted((ROOT / "sweeps").glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_specs_are_valid(path):
    spec = load_spec(path)
    assert spec.name == path.stem
    assert spec.storage is None  # shipped sweeps default to the journal file
    check_config_keys(spec)  # every search key and value composes with the base experiment


def test_unknown_metric_is_refused(tmp_path):
    raw = tiny(tmp_path, objectives=[{"metric": "test/accuracy", "direction": "maximize"}])
    refused(raw, "test/accuracy", "not logged", "test/acc")
    assert not (tmp_path / "out").exists()


def test_string_strategy_metric_is_not_an_objective(tmp_path):
    refused(
        tiny(tmp_path, objectives=[{"metric": "method/collective", "direction": "maximize"}]),
        "method/collective",
    )


def test_an_out_folder_starting_with_a_tilde_is_refused_with_the_path_written_out(tmp_path):
    home = os.path.expanduser("~/sweeps")
    refused(tiny(tmp_path, out="~/sweeps"), "out=~/sweeps starts with ~", f"out={home}")


def test_empty_search_space_is_refused(tmp_path):
    refused(tiny(tmp_path, space=[]), "search space is empty")
    refused(tiny(tmp_path, space=None), "search space is empty")


@pytest.mark.parametrize(
    ("entry", "needle"),
    [
        ({"key": "method.cr", "type": "float", "low": 1.0, "high": 0.01}, "low=1.0 must be below"),
        ({"key": "method.cr", "type": "float", "low": 0.5, "high": 0.5}, "must be below"),
        (
            {"key": "method.cr", "type": "float", "low": 0.0, "high": 1.0, "log": True},
            "log scale needs low > 0",
        ),
        ({"key": "method.collective", "type": "categorical", "choices": []}, "choices is empty"),
        ({"key": "method.cr", "type": "float", "low": 0.1}, "needs both low and high"),
        ({"key": "trainer.steps", "type": "int", "low": 1.5, "high": 9}, "must be an integer"),
        ({"key": "method.cr", "type": "normal", "low": 0.1, "high": 1}, "type='normal'"),
        (
            {"key": "method.cr", "type": "float", "low": 0.1, "high": 1, "step": -0.1},
            "must be positive",
        ),
        (
            {"key": "method.cr", "type": "float", "low": 0.1, "high": 1, "log": True, "step": 0.1},
            "cannot be combined",
        ),
        ({"key": "method.cr", "type": "float", "low": 0.1, "high": float("nan")}, "finite number"),
        ({"key": "method.collective", "type": "categorical", "choices": ["a", "a"]}, "duplicates"),
        (
            {"key": "method.cr", "type": "float", "low": 0.1, "high": 1, "mean": 3},
            "space[0]: unknown key(s) mean",
        ),
        (
            {"key": "method.cr", "type": "float", "low": 0.1, "high": 1, "log": "yes"},
            "space[0]: log='yes' must be true or false",
        ),
    ],
)
def test_bad_distribution_is_refused(tmp_path, entry, needle):
    refused(tiny(tmp_path, space=[entry]), needle)


def test_unknown_sampler_is_refused(tmp_path):
    refused(tiny(tmp_path, sampler="cmaes"), "sampler='cmaes'", "nsga2, tpe, gp, random, grid")
    refused(tiny(tmp_path, sampler={"name": "tpe", "population_size": 4}), "nsga2 only")
    for seed in (-1, 2**31):  # numpy would refuse it at the first trial, with a traceback
        refused(tiny(tmp_path, sampler={"name": "random", "seed": seed}), f"sampler.seed={seed}")


def test_an_override_choosing_the_experiment_is_refused(tmp_path):
    """It would override the spec's experiment: key (Hydra's last override wins)."""
    for o in ("experiment=topk_small", "+experiment=topk_small"):
        refused(tiny(tmp_path, overrides=[o]), f"overrides: '{o}' chooses the run set")


def test_unknown_top_level_key_and_bad_direction_are_refused(tmp_path):
    refused(tiny(tmp_path, trials=3), "t.yaml: unknown key(s) trials; known:")
    refused(tiny(tmp_path, objectives=[{"metric": "test/acc"}]), "objectives[0]: missing")
    refused(tiny(tmp_path, objectives=["test/acc"]), "objectives[0] must be a mapping")
    refused(
        tiny(tmp_path, space=[{"type": "float", "low": 0.1, "high": 1}]),
        "space[0]: missing key(s) key",
    )
    refused(
        tiny(tmp_path, objectives=[{"metric": "test/acc", "direction": "max"}]), "direction='max'"
    )


def test_a_key_written_twice_or_a_folder_for_the_file_is_refused_in_one_line(tmp_path):
    """Plain YAML keeps a repeated key's last value unseen: a budget set twice would run the
    second."""
    text = (ROOT / "sweeps" / "tiny.yaml").read_text()
    path = tmp_path / "twice.yaml"
    path.write_text(f"{text}\nn_trials: 9\n")
    first = 1 + next(i for i, line in enumerate(text.splitlines()) if line.startswith("n_trials:"))
    last = len(text.splitlines()) + 2
    with pytest.raises(UserError) as info:
        load_spec(path)
    msg = str(info.value)
    assert msg == f"{path}: key n_trials is written twice (lines {first} and {last}); keep one"
    with pytest.raises(UserError, match=f"^search spec {tmp_path} is a directory; give the"):
        load_spec(tmp_path)
    path.write_text(f"{text}\n? [n_trials, 2]\n: 9\n")  # a key YAML cannot hash: its own line
    with pytest.raises(UserError, match=f"^{path}: not valid YAML \\(while constructing a"):
        load_spec(path)


def test_grid_needs_discrete_points_and_fits_the_budget(tmp_path):
    refused(tiny(tmp_path, sampler="grid"), "space[method.cr].step")
    space = [
        {"key": "method.cr", "type": "float", "low": 0.25, "high": 1.0, "step": 0.25},
        {"key": "method.collective", "type": "categorical", "choices": ["allgather", "ar_ring"]},
    ]
    spec = spec_from_dict(tiny(tmp_path, sampler="grid", space=space, n_trials=8), "t.yaml")
    assert spec.space[0].grid_values() == [0.25, 0.5, 0.75, 1.0]
    assert grid_size(spec.space) == 8
    refused(tiny(tmp_path, sampler="grid", space=space, n_trials=9), "exceeds the grid's 8")


def test_int_grid_points():
    p = ParamSpec(key="trainer.steps", type="int", low=2, high=11, step=3)
    assert p.grid_values() == [2, 5, 8, 11]


def test_format_override_quotes_only_what_hydra_would_misread():
    assert format_override("method.cr", 0.0125) == "method.cr=0.0125"
    assert format_override("method.cr", 1e-05) == "method.cr=1e-05"
    assert format_override("method.collective", "ar_ring") == "method.collective=ar_ring"
    assert format_override("method.layerwise", True) == "method.layerwise=true"
    assert format_override("x.name", "a b,c") == "x.name='a b,c'"
    assert format_override("x.name", "it's") == "x.name='it\\'s'"  # read back whole
    assert format_override("x.v", None) == "x.v=null"


def test_format_override_keeps_a_string_choice_that_reads_as_another_type_a_string():
    parser = OverridesParser.create()
    for text in ("null", "true", "1e-3", "16"):
        override = format_override("x.name", text)
        assert override == f"x.name='{text}'"
        assert parser.parse_override(override).value() == text


def test_mask_url_and_scrub_hide_the_password():
    url = f"postgresql://sweeper:{PASSWORD}@db.example:5432/optuna"
    assert mask_url(url) == "postgresql://sweeper:***@db.example:5432/optuna"
    assert mask_url("sqlite:///x.db") == "sqlite:///x.db"
    assert mask_url("postgresql://user@h/db") == "postgresql://user@h/db"
    encoded = "postgresql://u:p%40ss@h/db"  # password "p@ss", percent-encoded
    assert mask_url(encoded) == "postgresql://u:***@h/db"
    assert scrub("auth failed for p@ss and p%40ss", encoded) == "auth failed for *** and ***"


def test_storage_url_scheme_and_environment(tmp_path, monkeypatch):
    with pytest.raises(UserError, match=r"expected a postgresql/mysql/sqlite URL") as info:
        expand_storage_url(f"postgres://u:{PASSWORD}@h/db")
    assert PASSWORD not in str(info.value) and "u:***@h" in str(info.value)
    monkeypatch.delenv("REPRO_TEST_PGPASS", raising=False)
    with pytest.raises(UserError, match="REPRO_TEST_PGPASS is not set"):
        expand_storage_url("postgresql://u:${REPRO_TEST_PGPASS}@h/db")
    monkeypatch.setenv("REPRO_TEST_PGPASS", PASSWORD)
    # A bare postgresql:// gets the psycopg2 driver the project depends on.
    assert expand_storage_url("postgresql://u:$REPRO_TEST_PGPASS@h/db") == (
        f"postgresql+psycopg2://u:{PASSWORD}@h/db"
    )
    assert expand_storage_url("sqlite:///x.db") == "sqlite:///x.db"
    # a password the URL would split: a piece of it was named as the host in every error
    monkeypatch.setenv("REPRO_TEST_PGPASS", "se@cret/x")
    with pytest.raises(UserError) as info:
        expand_storage_url("postgresql://u:${REPRO_TEST_PGPASS}@h/db")
    assert str(info.value) == (
        "storage postgresql://u:***@h/db: the value of REPRO_TEST_PGPASS holds '@', which a "
        "URL's user or password must percent-encode (%40); export it encoded, as "
        "urllib.parse.quote(value, safe='') writes it"
    )
    # a whole URL in a variable keeps its own '@' and '/'
    monkeypatch.setenv("REPRO_TEST_PGPASS", f"postgresql://u:{PASSWORD}@h/db")
    assert expand_storage_url("${REPRO_TEST_PGPASS}").endswith(f"u:{PASSWORD}@h/db")


def test_unreachable_database_is_refused_with_the_password_masked(tmp_path):
    port = closed_port()
    url = f"postgresql://sweeper:{PASSWORD}@127.0.0.1:{port}/optuna"
    spec = spec_from_dict(tiny(tmp_path, storage=url), "t.yaml")
    with pytest.raises(UserError, match="cannot connect") as info:
        open_storage(spec)
    msg = str(info.value)
    assert PASSWORD not in msg and "sweeper:***@127.0.0.1" in msg and "\n" not in msg
    # named by its file, and as the spec writes it (not the driver's postgresql+psycopg2)
    assert msg.startswith(f"t.yaml: storage postgresql://sweeper:***@127.0.0.1:{port}/optuna: ")


def test_run_sweep_refuses_bad_storage_before_any_trial(tmp_path, capsys):
    url = f"postgresql://sweeper:{PASSWORD}@127.0.0.1:{closed_port()}/optuna"
    spec = spec_from_dict(tiny(tmp_path, storage=url), "t.yaml")
    with pytest.raises(UserError, match="cannot connect") as info:
        run_sweep(spec, workers=1)
    out = capsys.readouterr()
    assert PASSWORD not in str(info.value) + out.out + out.err


def test_search_key_that_is_not_a_config_field_is_refused_before_any_trial(tmp_path):
    space = [{"key": "method.crr", "type": "float", "low": 0.01, "high": 1.0, "log": True}]
    spec = spec_from_dict(tiny(tmp_path, space=space), "t.yaml")
    with pytest.raises(UserError, match=r"^t.yaml: space key method.crr .* is not a valid config"):
        run_sweep(spec, workers=1)
    assert not (tmp_path / "out").exists()  # no journal, hence no study and no trial


def test_a_float_range_over_a_whole_number_setting_is_refused_before_any_trial(tmp_path):
    """`low: 2, high: 10` passed as written, but the sampler draws floats: every trial
    failed, the sweep exited 0, and its journal held a study the fixed spec refused."""
    space = [{"key": "trainer.eval_every", "type": "float", "low": 2, "high": 10}]
    spec = spec_from_dict(tiny(tmp_path, space=space), "t.yaml")
    with pytest.raises(UserError) as info:
        run_sweep(spec, workers=1)
    assert str(info.value).startswith(
        "t.yaml: space key trainer.eval_every (trainer.eval_every=2.0) is not a valid config "
        "setting: trainer.eval_every=2.0: expected an int"
    ) and str(info.value).endswith("; make its type int")
    assert not (tmp_path / "out").exists()


def test_a_base_override_the_config_rejects_is_refused_naming_the_spec_file(tmp_path):
    raw = tiny(tmp_path)
    spec = spec_from_dict({**raw, "overrides": [*raw["overrides"], "trainer.steps=0"]}, "t.yaml")
    with pytest.raises(UserError, match=r"^t.yaml: its overrides do not compose: trainer"):
        run_sweep(spec, workers=1)
    assert not (tmp_path / "out").exists()


def test_search_value_the_config_rejects_is_refused(tmp_path):
    space = [{"key": "method.cr", "type": "float", "low": 0.01, "high": 2.0}]
    spec = spec_from_dict(tiny(tmp_path, space=space), "t.yaml")
    with pytest.raises(UserError, match=r"method.cr=2.0 .*must be in \(0, 1\]"):
        run_sweep(spec, workers=1)
    assert not (tmp_path / "out").exists()


def test_new_study_over_an_earlier_studys_trial_dirs_is_refused(tmp_path):
    spec = spec_from_dict(tiny(tmp_path), "t.yaml")
    (spec.study_dir / "trial_0").mkdir(parents=True)
    with pytest.raises(UserError, match="holds trial directories of an earlier study tiny"):
        run_sweep(spec, workers=1)
    assert not any(spec.study_dir.glob("trial_*/summary.json"))


def _refused_cluster_sweep(tmp_path, monkeypatch, capsys, **changes) -> str:
    """`repro sweep SPEC --cluster slurm_local` from tmp_path: exit 2, one line, nothing
    written (no study directory, no runs_root with a job folder or job record)."""
    monkeypatch.chdir(tmp_path)
    spec_path = tmp_path / "t.yaml"
    spec_path.write_text(yaml.safe_dump(tiny(tmp_path, **changes)))
    assert sweep_main([str(spec_path), "--workers", "2", "--cluster", "slurm_local"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.yaml"]
    return err


def test_cluster_sweep_on_storage_without_heartbeat_is_refused_naming_the_fix(
    tmp_path, monkeypatch, capsys
):
    err = _refused_cluster_sweep(tmp_path, monkeypatch, capsys)
    assert "cluster=slurm_local runs workers on several hosts" in err
    assert "journal file" in err and "has no heartbeat" in err
    assert "set `storage: postgresql://USER:PASSWORD@HOST/DB` in" in err
    err = _refused_cluster_sweep(tmp_path, monkeypatch, capsys, storage="sqlite:///t.db")
    assert "sqlite:///t.db, a file that hosts cannot share safely" in err


def test_cluster_sweep_with_an_unreachable_database_is_refused_before_any_job(
    tmp_path, monkeypatch, capsys
):
    url = f"postgresql://sweeper:{PASSWORD}@127.0.0.1:{closed_port()}/optuna"
    err = _refused_cluster_sweep(tmp_path, monkeypatch, capsys, storage=url)
    assert err.startswith(
        f"error: {tmp_path / 't.yaml'}: storage postgresql://sweeper:***@127.0.0.1:"
    )
    assert "cannot connect" in err and PASSWORD not in err
