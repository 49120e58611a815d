"""Bad input ends with one clear line naming the setting, a non-zero exit, and nothing written."""

import itertools

import pytest
import yaml

from repro import cli
from repro.report.report_cli import SUBCOMMANDS
from tests.helpers import REPO, repro_cli

CASES = [
    (["workload=imagenet_vit"], "workload"),
    (["method=nope"], "method"),
    (["method=compressed/nope"], "'compressed/topk_c0.1'"),
    (["trainer.world_size=0"], "trainer.world_size"),
    (["trainer.world_size=9000"], "trainer.world_size"),
    # a data set no machine here can hold while it is generated: not hours, then killed
    (["workload.num_samples=1000000000"], "workload.num_samples=1000000000 needs about"),
    (["workload=synthetic_mlp", "workload.num_samples=1000000000"], "workload.dataset=synthetic"),
    (["trainer.batch_size=0"], "trainer.batch_size"),
    (["optim.lr=-1"], "optim.lr"),
    (["method=local_sgd", "method.tau=0"], "method.tau"),
    (["method=adacomm", "method.interval_s=0"], "method.interval_s"),
    (["method=adacomm", "method.tau0_search=true", "method.tau0_candidates=[]"], "tau0_candidates"),
    (["network.bandwidth_gbps=0"], "bandwidth"),
    (["trainer.nonsense=1"], "nonsense"),
]


# Hydra's own errors, each with its reason and fix: (overrides, words the line must hold).
HYDRA_CASES = [
    # a key with no value: what it expects, and the method that has it
    (["method.tau"], ("method.tau", "no value", "int", "method=local_sgd")),
    (["method=local_sgd", "method.tau"], ("method.tau", "no value", "int", "method.tau=4")),
    (["method"], ("method", "no value", "local_sgd")),
    # a value of the wrong type: the type expected and an example
    (["trainer.steps=abc"], ("trainer.steps=abc", "int", "trainer.steps=1000")),
    (["optim.lr=fast"], ("optim.lr=fast", "float")),
    (["trainer.progress=maybe"], ("trainer.progress", "bool", "true or false")),
    # what OmegaConf itself reads as a bool (2 is true, yes is true): a bool is true or false
    (["method=topk", "method.layerwise=2"], ("method.layerwise=2", "true or false")),
    (["trainer.progress=yes"], ("trainer.progress=yes", "true or false")),
    (["trainer.steps="], ("trainer.steps", "no value", "int")),
    (["trainer.device=null"], ("trainer.device", "null", "str")),
    (["trainer=3"], ("trainer", "section", "steps", "trainer.world_size=VALUE")),
    # an unknown key: the closest known key
    (["trainer.step=100"], ("trainer.step ", "did you mean trainer.steps?")),
    (["steps=100"], ("did you mean trainer.steps?",)),
    (["+trainer.step=100"], ("trainer.step ", "trainer.steps", "ignored")),
    (["method.tau=4"], ("method.tau", "method=sync", "method=local_sgd")),
    (["method=local_sgd", "method.tua=4"], ("method.tua", "did you mean method.tau?")),
    # nothing close in its own section: its keys, not another's that shares the section name
    (["method=signsgd", "method.foo=1"], ("method.foo is not a setting; method has name, ",)),
    (["~trainer.steps"], ("~trainer.steps", "cannot be deleted")),
    # a group or a top-level setting: not the schema's default in its place, nor OmegaConf's
    # "missing mandatory value" without a fix
    (["~method"], ("~method: every run has a method", "method=CHOICE", "local_sgd")),
    (["~seed"], ("~seed: a setting of a typed config cannot be deleted", "e.g. seed=0")),
    (["~trainer"], ("~trainer: a section", "set its settings instead, e.g. trainer.")),
    # a comma list without --multirun: every fix on the one line
    (["method=local_sgd", "method.tau=1,4"], ("method.tau=1,4", "--multirun", "[1,4]")),
    (["method=local_sgd,adacomm"], ("several choices", "--multirun")),
    # a group's choice as Hydra reads it: quoted is the choice, a list or null is refused
    (["method=[sync,adacomm]"], ("one method per run", "--multirun method=sync,adacomm")),
    (["experiment=null"], ("experiment=null: a config group takes one of", "not null")),
    (["--multirun", "seed=glob(*)"], ("glob() picks among a config group's choices",)),
    (["--multirun", "method=glob(zzz*)"], ("matches no method; choose from",)),
    # Hydra's output places, its runner's state and `+` on a key that exists: the fix
    (["hydra.run.dir=out"], ("hydra.run.dir=out: repro places a run by run_dir=DIR",)),
    (["run_dir=r/${hydra:job.num}"], ("run_dir: ${hydra:...}", "run_dir=runs/s${seed}")),
    (["+trainer.steps=5"], ("trainer.steps exists already", "set it as trainer.steps=5")),
    (["trainer.steps=${optim.lr}"], ("expected an int", "e.g. trainer.steps=VALUE")),
    # syntax and flags
    (["trainer.steps=[1,"], ("trainer.steps=[1,", "key=value")),
    (["trainer.steps=1,"], ("trainer.steps=1,", "key=value")),  # not quoted into a string
    (["run_dir=/x/copy (1)"], ("quote the value", "\"run_dir='/x/copy (1)'\"")),
    (["--cfg", "jobs"], ("--cfg jobs", "--cfg job")),
    (["--bogus"], ("--bogus", "--multirun", "--help")),
]


def _assert_one_line_error(proc, *needles: str) -> None:
    _assert_error_line(proc.returncode, proc.stderr, *needles)


def _assert_error_line(code: int, stderr: str, *needles: str) -> None:
    assert code == 2, stderr
    err = stderr.strip()
    assert "Traceback" not in stderr
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error:"), err
    for needle in needles:
        assert needle in err, (needle, err)


def _train(tmp_path, capsys, monkeypatch, overrides: list[str]) -> tuple[int, str]:
    """`repro train OVERRIDES` in this process (as the command runs it, less the
    interpreter's start: the subprocess tests of start-up are test_startup.py's)."""
    monkeypatch.chdir(tmp_path)
    code = cli.main(["train", *overrides, f"runs_root={tmp_path}/runs", "tracking=disabled"])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("overrides,needle", CASES, ids=[c[1] for c in CASES])
def test_bad_input_is_one_line(tmp_path, capsys, monkeypatch, overrides, needle):
    _assert_error_line(*_train(tmp_path, capsys, monkeypatch, overrides), needle)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    "overrides,needles", HYDRA_CASES, ids=[" ".join(c[0]) for c in HYDRA_CASES]
)
def test_hydra_error_has_reason_and_fix(tmp_path, capsys, monkeypatch, overrides, needles):
    _assert_error_line(*_train(tmp_path, capsys, monkeypatch, overrides), *needles)
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_lists_groups_choices_and_options(tmp_path, flag):
    proc = repro_cli("train", "experiment=adacomm_small", "method=local_sgd", flag, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("usage: repro train")
    lines = out.splitlines()
    for group in ("workload", "method", "network", "tracking", "cluster", "experiment"):
        # the group's line and the lines it wraps onto
        first = next(i for i, ln in enumerate(lines) if ln.strip().startswith(group + " "))
        rest = itertools.takewhile(lambda ln: ln.startswith(" " * 14), lines[first + 1 :])
        listed = " ".join([lines[first], *rest]).split(group, 1)[1]
        listed = {c.strip(" *") for c in listed.split(",")}
        folder = REPO / "configs" / group
        # presets in subfolders as Hydra names them: method=compressed/topk_c0.1
        choices = {p.relative_to(folder).with_suffix("").as_posix() for p in folder.rglob("*.yaml")}
        assert listed == choices, (group, listed ^ choices)
    assert "compressed/topk_c0.1" in out
    # the choices and values of the config the overrides compose, not the bare defaults
    assert "local_sgd*" in out and "adacomm_small*" in out and "mnist1d_cnn*" in out
    assert "sync*" not in out
    for option in ("trainer.world_size=4", "trainer.steps=20000", "optim.lr=", "method.tau=4"):
        assert option in out, option
    assert "--multirun" in out and "--cfg job" in out
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_cfg_job_prints_the_composed_config_and_runs_nothing(tmp_path):
    proc = repro_cli(
        "train", "method=local_sgd", "method.tau=8", "--cfg", "job", "seed=3", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    cfg = yaml.safe_load(proc.stdout)
    assert cfg["method"] == {**cfg["method"], "name": "local_sgd", "tau": 8}
    assert cfg["seed"] == 3 and cfg["trainer"]["steps"] == 1000
    assert "hydra" not in cfg
    assert list(tmp_path.iterdir()) == []
    # the same validation as a run: a config --cfg job prints is one that runs
    _assert_one_line_error(
        repro_cli("train", "method=local_sgd", "method.tau=0", "--cfg", "job", cwd=tmp_path),
        "method.tau",
    )


@pytest.mark.slow
def test_cfg_job_with_multirun_prints_every_combination(tmp_path):
    proc = repro_cli(
        "train", "method=local_sgd", "method.tau=1,4", "--multirun", "--cfg=job", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    docs = list(yaml.safe_load_all(proc.stdout))
    assert [d["method"]["tau"] for d in docs] == [1, 4]


def test_a_groups_glob_in_a_multirun_is_one_run_per_matching_choice(capsys, monkeypatch, tmp_path):
    """Hydra's glob() over a group's choices (it raised "ConfigLoader is not set")."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(["train", "--multirun", "method=glob(s*)", "--cfg", "job"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["method"]["name"] for d in docs] == ["signsgd", "sync"]


@pytest.mark.slow
def test_cifar_offline_names_data_root_and_leaves_no_folder(tmp_path):
    proc = repro_cli(
        "train",
        "workload=cifar10_resnet20",
        f"data.root={tmp_path}/data/cifar",
        f"runs_root={tmp_path}/runs",
        "tracking=disabled",
        cwd=tmp_path,
    )
    _assert_one_line_error(proc, "data.root")
    # Neither the run nor the data folders the download lock and torchvision had made.
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    # downloads turned off: the setting that turns them on is the fix, not the network
    proc = repro_cli(
        "train",
        "workload=cifar10_resnet20",
        f"data.root={tmp_path}/data/cifar",
        "data.download=false",
        "tracking=disabled",
        cwd=tmp_path,
    )
    _assert_one_line_error(proc, "and data.download=false;", "or set data.download=true")


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


COMMAND_LINES = [[c] for c in cli.COMMANDS] + [["report", s] for s in SUBCOMMANDS]


@pytest.mark.parametrize("command", COMMAND_LINES, ids=" ".join)
def test_a_wrong_flag_is_one_line_naming_the_command_and_its_help(command, capsys):
    """Every command's parser, run as `repro` runs it: an unknown flag (or the missing
    argument argparse names first) is the same one line as any other bad input, not
    argparse's usage block and its own exit."""
    rc = cli.main([*command, "--bogus"])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("error:"), err
    assert "--bogus" in err or "required" in err, err
    if command != ["train"]:  # Hydra's own line, checked with the other Hydra cases
        assert f"`repro {' '.join(command)} --help`" in err, err


def test_the_bare_train_help_marks_the_defaults(capsys):
    assert cli.main(["train", "--help"]) == 0
    out = capsys.readouterr().out
    assert "* = default" in out and "sync*" in out and "mnist1d_cnn*" in out
    assert "trainer.world_size=1 " in out and "trainer.steps=1000 " in out
    # with a bad override, its one line, as without --help
    assert cli.main(["train", "trainer.steps", "--help"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: trainer.steps has no value") and len(err.splitlines()) == 1


def test_the_helps_name_every_report_form(capsys):
    """`publish`, which the README uses, was in neither help."""
    with pytest.raises(SystemExit) as done:
        cli.main(["report", "--help"])
    assert done.value.code == 0
    form = capsys.readouterr().out
    assert cli.main(["--help"]) == 0
    usage = next(line for line in capsys.readouterr().out.splitlines() if "repro report" in line)
    for sub in SUBCOMMANDS:
        assert f" {sub}" in usage and f" {sub}" in form, sub


REFUSED = [
    (["jobs", "--watch", "--interval", "0"], "--interval=0.0"),
    (["sweep", "dashboard", "sweeps/topk_cr_pareto.yaml", "--port", "99999"], "--port=99999"),
    (["calibrate", "--sizes", "1K,abc"], "'abc'"),
    (
        ["tune", "adacomm", "scale=tiny", "--out", "/dev/null/tuned"],
        "/dev/null/tuned: not a directory; a file, not a folder, is on that path; set --out",
    ),
    (
        ["calibrate", "--out", "/dev/null/net.yaml"],
        "/dev/null: not a directory; a file, not a folder, is on that path; set --out elsewhere",
    ),
    (["reproduce", "adacomm", "--claims", "no_such_dir"], "claims directory no_such_dir"),
    (
        ["reproduce", "adacomm", "--reports", "/dev/null/r"],
        "/dev/null/r/adacomm: not a directory; a file, not a folder, is on that path; set "
        "--reports elsewhere",
    ),
    (["report", "all", "--runs", "no_such_runs"], "--runs no_such_runs is not a directory"),
    (["runs", "ls", "no_such_runs"], "runs root no_such_runs is not a directory; name the folder"),
    (["report", "all", "--claims", "no_claims"], "claims directory no_claims does not exist"),
    (
        ["report", "adacomm", "--dir", "/dev/null/r"],
        "/dev/null/r: not a directory; a file, not a folder, is on that path; set --dir elsewhere",
    ),
    (["report", "adacomm", "--claims", "."], "claims directory . holds no claims file"),
    # an option between positionals: the command reads both positionals, then refuses them
    (["tune", "adacomm", "--workers", "1", "scale=huge"], "scale=huge: adacomm has no tuning"),
    (["report", "compare", "no_a", "--metric", "test/acc", "no_b"], "'no_a' is not a path"),
    (["sweep", "dashboard", "--port", "8080", "sweeps/tiny.yaml"], "no study tiny yet in runs/"),
    # an option the action does not read is refused, not ignored
    (["sweep", "show", "--port", "8080", "sweeps/tiny.yaml"], "--port does not apply to `repro"),
    (["sweep", "dashboard", "sweeps/tiny.yaml", "--workers", "3"], "which takes --port;"),
    # more workers on this machine than four to a core: refused before the journal is made
    (["sweep", "sweeps/tiny.yaml", "--workers", "100000"], "is more than 4 per core; lower"),
    (["tune", "adacomm", "scale=tiny", "--workers", "100000"], "is more than 4 per core; lower"),
    # a plain sweep given to tune: pointed at repro sweep, not told to add an export it refuses
    (["tune", "adacomm", "scale=tiny", "--spec", "sweeps/tiny.yaml"], "plain sweep, with no arms"),
    # a misspelt action before a spec is named as the action, not taken for the spec
    (["sweep", "shwo", "sweeps/tiny.yaml"], "unknown action 'shwo'; choose one of run, show"),
    (["sweep", "shwo", "--port", "8080", "sweeps/tiny.yaml"], "unknown action 'shwo'; choose"),
    # an action with no spec is a missing spec, not a spec file named after the action
    (["sweep", "show"], "repro sweep: the following arguments are required: spec"),
    (["sweep", "dashboard", "--port", "8080"], "the following arguments are required: spec"),
    (["report", "check"], "reports does not exist: build the pages with `repro report all`"),
    (
        ["reproduce", "adacomm", "experiment=topk_small"],
        "drop it (`repro reproduce topk scale=small`",
    ),
]


@pytest.mark.parametrize("argv,needle", REFUSED, ids=[" ".join(r[0][:3]) for r in REFUSED])
def test_a_bad_option_is_refused_before_anything_runs(argv, needle, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # whatever a command would write lands here
    rc = cli.main([a.replace("sweeps/", f"{REPO}/sweeps/") for a in argv])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and needle in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_whose_out_cannot_be_made_is_one_line_naming_out(capsys, tmp_path):
    spec = yaml.safe_load((REPO / "sweeps" / "topk_cr_pareto.yaml").read_text())
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({**spec, "out": "/dev/null/sweeps"}))
    rc = cli.main(["sweep", str(path)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("error: /dev/null/sweeps/topk_cr_pareto: not a directory"), err
    assert "`out:`" in err


def test_an_unknown_benchmark_is_refused_and_keeps_the_last_results(capsys, tmp_path, monkeypatch):
    from repro.bench.__main__ import main as bench

    monkeypatch.chdir(tmp_path)
    assert bench(["step_floor", "stepfloor"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: no benchmark 'stepfloor'; choose from ") and "step_floor" in err
    assert list(tmp_path.iterdir()) == []  # nothing run, bench-results/latest.txt untouched
    assert bench(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("`python -m repro.bench [NAME ...]`") and "step_floor" in out


def test_a_path_option_written_with_its_tilde_after_the_equals_sign_is_the_home_folder(
    capsys, tmp_path, monkeypatch
):
    """`--out=~/x` reaches the command as typed (the shell expands `~` only at a word's
    start): it is read as the shell would read `--out ~/x`, never as a folder named `~`."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    rc = cli.main(["report", "all", "--runs=~/no_runs", "--out=~/reports"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and f": --runs {tmp_path}/home/no_runs is not a directory;" in err, err
    assert list(tmp_path.iterdir()) == []
