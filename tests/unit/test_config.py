"""Every config group composes; wrong keys and values fail at compose time, naming the field."""

import dataclasses
import os
import shutil
from pathlib import Path

import pytest
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from repro.config import (
    CONFIG_DIR,
    GROUPS,
    as_dict,
    compose,
    compose_dict,
    config_hash,
    registered,
)
from repro.config_keys import compose_at
from repro.errors import UserError
from repro.hydra_overrides import GRAMMAR_URL
from repro.schemas.tracking import TrackingConfig


def _choices(group):
    return sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))


@pytest.mark.parametrize(
    "group,choice", [(g, c) for g in GROUPS for c in _choices(g)], ids=lambda v: str(v)
)
def test_every_group_choice_composes(group, choice):
    cfg = compose([f"{group}={choice}"])
    if group == "experiment":
        assert cfg.experiment.name == choice
    elif group == "workload":
        assert cfg.workload.name == choice
    elif group == "tracking":
        assert cfg.tracking.mode == {"wandb": "auto"}.get(choice, choice.removeprefix("wandb_"))
    else:
        assert getattr(cfg, group).name == choice


@pytest.mark.parametrize("experiment", _choices("experiment"))
def test_every_method_composes_beside_every_experiment(experiment):
    """`experiment=X method=M` puts any method beside a paper's set (the README's way to
    compare a new method), so no experiment file may set a key only its own method has."""
    for method in _choices("method"):
        cfg = compose_dict([f"experiment={experiment}", f"method={method}"])
        assert cfg.method.name == method


def test_a_key_an_experiment_file_sets_for_another_method_names_the_file(tmp_path):
    """Hydra's error for such a key names the file but not the key's owners or the fix."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException

    from repro.hydra_overrides import explain

    registered()
    configs = tmp_path / "configs"
    shutil.copytree(CONFIG_DIR, configs)
    (configs / "experiment" / "mine.yaml").write_text("# @package _global_\nmethod:\n  tau: 3\n")
    (configs / "experiment" / "nested.yaml").write_text("experiment:\n  seeds: 2\n")
    lines = {}
    tries = (["experiment=mine", "method=topk"], ["experiment=mine"], ["experiment=nested"])
    for overrides in tries:
        with (
            pytest.raises(HydraException) as err,
            initialize_config_dir(config_dir=str(configs), version_base=None),
        ):
            hydra_compose("config", overrides=overrides)
        lines[overrides[-1]] = explain(err.value, overrides, configs)
    assert lines["method=topk"] == (
        "method.tau is set by experiment=mine (configs/experiment/mine.yaml) and is not a "
        "setting of method=topk: choose method=local_sgd, or drop method.tau "
        "from configs/experiment/mine.yaml"
    )
    assert "not a setting of the method chosen: choose method=local_sgd" in lines["experiment=mine"]
    assert lines["experiment=nested"].startswith(
        "experiment.experiment is set by experiment=nested (configs/experiment/nested.yaml) "
        "and is not a setting of experiment: "
    )
    assert "`# @package _global_`" in lines["experiment=nested"]


def test_a_kept_composition_is_a_copy_and_is_read_again_once_a_file_changes(tmp_path):
    """Compositions are kept in the process: each caller gets its own copy, and an edited
    config file (a notebook changing a preset, a tuning search writing configs/tuned/) is
    read at the next composition, in place or replaced."""
    registered()
    configs = tmp_path / "configs"
    shutil.copytree(CONFIG_DIR, configs)
    root = configs / "config.yaml"
    for _ in range(3):
        cfg = compose_at(configs, ["trainer.world_size=2"])
        assert cfg.trainer.steps == 1000
        cfg.trainer.steps = 7
    root.write_text(root.read_text().replace("steps: 1000", "steps: 1234"))
    assert compose_at(configs, ["trainer.world_size=2"]).trainer.steps == 1234
    replaced = tmp_path / "config.yaml"
    replaced.write_text(root.read_text().replace("steps: 1234", "steps: 4321"))
    os.replace(replaced, root)
    assert compose_at(configs, ["trainer.world_size=2"]).trainer.steps == 4321


def test_a_kept_composition_is_composed_again_once_a_schema_changes():
    """A schema stored again (a notebook cell redefining a method's config) is read."""

    @dataclasses.dataclass
    class Grouped(TrackingConfig):
        group: str = "mine"

    registered()
    assert compose_at(CONFIG_DIR, []).tracking.group == ""
    store = ConfigStore.instance()
    original = store.repo["tracking"]["tracking_schema.yaml"]
    try:
        store.store(group="tracking", name="tracking_schema", node=Grouped)
        assert compose_at(CONFIG_DIR, []).tracking.group == "mine"
    finally:
        store.repo["tracking"]["tracking_schema.yaml"] = original
    assert compose_at(CONFIG_DIR, []).tracking.group == ""


def test_default_is_mnist1d_sync():
    cfg = compose([])
    assert (cfg.workload.dataset, cfg.method.name, cfg.network.name) == (
        "mnist1d",
        "sync",
        "loopback",
    )


def test_a_quoted_group_choice_is_that_choice():
    """Hydra reads `method='adacomm'` as adacomm; the check of choices read the quotes too,
    and refused it while listing it among the choices."""
    assert compose(["method='adacomm'"]).method.name == "adacomm"
    assert compose(['method="local_sgd"']).method.name == "local_sgd"


def test_a_group_sweep_that_names_no_choices_is_one_line():
    """glob() outside a multirun (a run set's or a sweep's overrides): Hydra's own error
    without its runner was a traceback."""
    with pytest.raises(UserError, match=r"^method=glob\(\*\): give one method, one of \["):
        compose(["method=glob(*)"])


@pytest.mark.parametrize(
    "override,field",
    [
        ("trainer.no_such_key=1", "no_such_key"),
        ("method.tau=2", "tau"),  # sync has no tau
        ("trainer.world_size=abc", "trainer.world_size"),
        ("trainer.world_size=0", "trainer.world_size"),
        ("trainer.batch_size=0", "trainer.batch_size"),
        ("optim.lr=-0.1", "optim.lr"),
        ("optim.lr=1e39", "optim.lr=1e+39 makes steps past the largest float32"),  # finite
        ("method=nope", "method"),
        ("workload=nope", "workload"),
        ("trainer.world_size=100000", "trainer.world_size"),
    ],
)
def test_bad_overrides_name_the_field(override, field):
    with pytest.raises(UserError) as err:
        compose([override])
    msg = str(err.value)
    assert field in msg and "\n" not in msg


def test_network_calibrated_before_calibrating_names_the_command(tmp_path, monkeypatch):
    """The one group choice a command writes (`repro calibrate`, git-ignored)."""
    import repro.config

    configs = tmp_path / "configs"
    shutil.copytree(CONFIG_DIR, configs)
    (configs / "network" / "calibrated.yaml").unlink(missing_ok=True)
    monkeypatch.setattr(repro.config, "CONFIG_DIR", configs)
    with pytest.raises(UserError) as err:
        compose(["network=calibrated"])
    assert str(err.value).startswith("network=calibrated is this machine's fit, not measured")
    assert "`repro calibrate` writes it" in str(err.value) and "'eth1g'" in str(err.value)


def test_local_sgd_tau_must_be_positive():
    with pytest.raises(UserError, match="method.tau=0"):
        compose(["method=local_sgd", "method.tau=0"])


def test_hash_ignores_presentation_and_kernel_order_but_not_training_settings():
    base = compose([])
    assert config_hash(base) == config_hash(
        compose(["trainer.progress=false", "tracking=disabled", "trainer.deterministic=false"])
    )
    assert config_hash(base) != config_hash(compose(["optim.lr=0.02"]))


def test_where_the_data_is_kept_is_not_part_of_a_runs_identity(tmp_path):
    """Moving the data (another mount, `data.root=/shared/data` on a cluster) keeps a run's
    directory, a sweep's study and a run set's own search: they were refused or made again."""
    from dataclasses import replace

    from repro.sweep.spec import identity_name, load_spec
    from repro.sweep.study import sweep_search

    here = [f"data.root={tmp_path / 'a'}"]
    there = [f"data.root={tmp_path / 'b'}", "data.download=false"]
    assert config_hash(compose(here)) == config_hash(compose(there))
    spec = load_spec(Path(__file__).resolve().parents[2] / "sweeps" / "tiny.yaml")
    a, b = (replace(spec, overrides=(*spec.overrides, *extra)) for extra in (here, there))
    assert sweep_search(a) == sweep_search(b) and identity_name(a) == identity_name(b)
    moved = replace(spec, overrides=(*spec.overrides, "optim.lr=0.3"))
    assert sweep_search(moved) != sweep_search(a) and identity_name(moved) != identity_name(a)


@pytest.mark.parametrize("paper", ["adacomm", "topk", "adasum"])
def test_as_dict_is_omegaconfs_container_for_every_run_of_a_set(paper):
    """The plain dict that hashes a run (its directory) is OmegaConf's own container of the
    config, for every run of the small set: a change here would move every run's directory."""
    from omegaconf import OmegaConf

    from repro.config import as_dict
    from repro.reproduce.run_sets import run_set

    for _, cfg in run_set(paper, "small", [], seeds=1):
        assert as_dict(cfg) == OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)


@pytest.mark.parametrize(
    "override,key,value,quoted",
    [
        # `~` reaches Hydra as typed after `data.root=`; the fix is the path written out
        ("data.root=~/data", "data.root", "~/data", False),
        ("run_dir=/tmp/a#b", "run_dir", "/tmp/a#b", True),
        ("runs_root=/tmp/ünï", "runs_root", "/tmp/ünï", True),
    ],
)
def test_a_path_hydra_cannot_read_unquoted_gets_the_override_that_it_can(
    override, key, value, quoted
):
    """The one line ends with the override to type instead (inside the shell's double
    quotes where Hydra needs its own), and that override composes to the path meant."""
    with pytest.raises(UserError) as err:
        compose([override])
    path = os.path.expanduser(value)
    fix = f"{key}='{path}'" if quoted else f"{key}={path}"
    said = str(err.value)
    assert said.endswith(f': "{fix}"' if quoted else f": {fix}"), said
    cfg = compose([fix])
    assert OmegaConf.select(OmegaConf.structured(cfg), key) == path


def test_other_syntax_errors_get_the_grammars_page():
    with pytest.raises(UserError) as err:
        compose(["trainer.steps=(4)"])
    assert str(err.value).endswith(f"write key=value, see {GRAMMAR_URL}")


@pytest.mark.parametrize("key", ["data.root", "run_dir", "runs_root"])
def test_a_quoted_path_starting_with_a_tilde_is_refused_with_the_path_written_out(key):
    """Quoted, `~` would reach the run as a folder named `~` in the current one."""
    with pytest.raises(UserError) as err:
        compose([f"{key}='~/place'"])
    assert str(err.value) == (
        f"{key}=~/place starts with ~, which is not expanded here (it would make a folder "
        f"named ~ in this one); write the path out: {key}={os.path.expanduser('~/place')}"
    )


@pytest.mark.parametrize(
    "override, expected",
    [
        # an empty folder (an unset environment variable, say) wrote into the current one
        ("data.root=", "data.root= is empty; name a folder (. for the current one)"),
        ("runs_root=", "runs_root= is empty; name a folder (. for the current one)"),
        # one folder of the run's directory: .. climbed out of runs_root, / nested folders
        ("experiment.label=../../out", "experiment.label='../../out' names one folder of the"),
        ("experiment.label=a/b", "experiment.label='a/b' names one folder of the run's"),
        ("experiment.name=..", "experiment.name='..' names one folder of the run's directory"),
    ],
)
def test_a_path_setting_that_would_write_elsewhere_is_refused(override, expected):
    with pytest.raises(UserError) as err:
        compose([override])
    assert str(err.value).startswith(expected)
    compose(["run_dir="])  # empty: the default run directory


@pytest.mark.parametrize("method", sorted(registered()))
def test_method_name_cannot_rename_the_method_the_group_chose(method):
    """Every method: `method.name` of another would run one method's strategy under the
    other's name (its runs, tags and reports saying so) or fail on settings it lacks."""
    other = "sync" if method != "sync" else "topk"
    with pytest.raises(UserError) as err:
        compose([f"method={method}", f"method.name={other}"])
    assert str(err.value) == (
        f"method.name={other} does not choose the method (method={method} did, and names it); "
        f"use method={other} instead"
    )
    assert compose([f"method={method}", f"method.name={method}"]).method.name == method


def test_a_decay_inside_the_warm_up_is_refused_at_the_runs_batch():
    """Milestones are epochs, the warm-up steps: at 2 x 100 of 8,000 samples an epoch is 40
    steps, so a decay at epoch 1 comes at step 40, before a 50-step warm-up has reached the
    peak rate (the run would train at a tenth of a peak it never reached)."""
    at = ["trainer.world_size=2", "trainer.batch_size=100", "optim.milestones=[1.0]"]
    with pytest.raises(UserError) as err:
        compose([*at, "optim.warmup_steps=50"])
    assert str(err.value) == (
        "optim.milestones=[1.0] decays the rate at epoch 1, step 40 at trainer.world_size x "
        "trainer.batch_size = 200 of 8000 samples, inside optim.warmup_steps=50; shorten the "
        "warm-up to under 40 steps or move the milestones"
    )
    assert compose([*at, "optim.warmup_steps=39"]).optim.warmup_steps == 39


def test_a_cpu_device_beside_a_gpu_request_is_refused_before_any_job_is_queued():
    """Decided by the settings alone, so at config time: a SLURM job would otherwise wait in
    the queue for its GPUs, then stop on its first line."""
    with pytest.raises(UserError) as err:
        compose(["cluster.gpus_per_node=4", "trainer.device=cpu"])
    assert str(err.value).startswith(
        "trainer.device=cpu contradicts cluster.gpus_per_node=4 (GPUs requested, then left idle)"
    )
    with pytest.raises(UserError, match=r"^trainer.device=tpu is not a device"):
        compose(["trainer.device=tpu"])


def test_a_label_of_the_chosen_run_set_without_its_overrides_is_refused():
    """`experiment=X experiment.label=L` alone ran the set's default method (sync) under L's
    name and directory; the set makes L with its overrides and, at small scale, its tuned
    values, which `repro reproduce` applies."""
    with pytest.raises(UserError) as err:
        compose(["experiment=adacomm_small", "experiment.label=adacomm_lrdecay"])
    assert str(err.value) == (
        "experiment.label=adacomm_lrdecay is a run of the adacomm_small set, made with "
        "method=adacomm method.tau0=20 method.interval_s=9.0 method.rule=loss_lr "
        "optim.milestones=[20.0] and configs/tuned/adacomm_small.yaml's values: `repro "
        "reproduce adacomm scale=small` makes it; add them to train it here, or name a label "
        "of your own"
    )
    own = compose(["experiment=adacomm_tiny"]).experiment.runs["adacomm"]
    made = compose(["experiment=adacomm_tiny", "experiment.label=adacomm", *own])
    assert made.method.name == "adacomm"
    # a label the set does not list (a method compared beside it) is left as given
    beside = compose(["experiment=adacomm_small", "method=powersgd", "experiment.label=mine"])
    assert beside.method.name == "powersgd"


def test_a_field_a_method_inherits_and_never_reads_is_not_offered_as_its_setting():
    """AdaComm holds local SGD's method.tau and refuses it: --help and the hints listed it
    as AdaComm's. It stays a field, so AdaComm runs keep their identity and directories."""
    from repro.config_keys import choices_with

    assert list(choices_with("method", CONFIG_DIR)["method.tau"]) == ["local_sgd"]
    assert as_dict(compose(["method=adacomm"]))["method"]["tau"] == 4


def test_a_rate_whose_steps_leave_float32_is_refused_where_the_optimizer_forms_them():
    """Adam's first step is lr / (1 - beta1): at lr 1e38 torch refused it mid-step."""
    with pytest.raises(UserError, match=r"\(Adam's first is lr / \(1 - betas\[0\]\)\)"):
        compose(["optim.name=adam", "optim.lr=1e38"])
    assert compose(["optim.name=sgd", "optim.lr=1e38"]).optim.lr == 1e38  # steps of lr


def test_a_typo_of_a_free_maps_key_is_named_and_a_new_key_needs_a_plus():
    with pytest.raises(UserError, match=r"did you mean experiment.runs.sync\?"):
        compose(["experiment=adacomm_small", "experiment.runs.sycn=[a]"])
    with pytest.raises(UserError) as err:
        compose(["cluster=slurm", "cluster.sbatch_args.constraint=a100"])
    assert str(err.value) == (
        "cluster.sbatch_args.constraint is a new key of the map cluster.sbatch_args: add it "
        "with +cluster.sbatch_args.constraint=a100"
    )


@pytest.mark.parametrize(
    "overrides, expected",
    [
        # a typo near the unread field: the method that has it, not AdaComm
        (["method=adacomm", "method.tua=8"], r"did you mean method.tau \(with method=local_sgd\)"),
        # no value, or a value of the wrong type, for the unread field: it is not AdaComm's
        (["method=adacomm", "method.tau="], r"^method.tau is not a setting of method=adacomm"),
        (["method=adacomm", "method.tau=x"], r"^method.tau is not a setting of method=adacomm"),
        # a key added with + close to it: AdaComm's own setting
        (["method=adacomm", "+method.tauu=3"], r"did you mean method.tau0\?"),
    ],
)
def test_hints_never_offer_a_field_a_method_never_reads(overrides, expected):
    with pytest.raises(UserError, match=expected):
        compose(overrides)


def test_mnist1d_sizes_follow_its_generator(tmp_path):
    """MNIST-1D makes num_samples // 10 signals of each of its 10 classes: below 10 it made
    none (numpy's traceback), and 19 samples train on 8, as its generator splits them."""
    with pytest.raises(UserError, match=r"^workload.num_samples=9 must be at least 10 for MNIST"):
        compose(["workload.num_samples=9"])
    from repro.workload.data import mnist1d

    for n in (10, 19, 2000):
        cfg = compose([f"workload.num_samples={n}", "trainer.batch_size=1"])
        assert cfg.workload.train_size() == len(mnist1d(str(tmp_path), n, 0).y_train)


def test_a_bool_set_by_an_interpolation_is_its_resolved_value(monkeypatch):
    """Only a literal bool is checked as one: `${...}` is resolved as OmegaConf resolves it."""
    monkeypatch.setenv("REPRO_PROGRESS", "false")
    assert compose(["trainer.progress=${oc.env:REPRO_PROGRESS}"]).trainer.progress is False
