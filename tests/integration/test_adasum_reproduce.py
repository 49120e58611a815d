"""The Adasum run set at test size: reproduce -> runs read back -> report; repeats skip."""

import re
from pathlib import Path

import pytest
import yaml

from tests.helpers import repro_cli, reproduce_tiny_args

SECTIONS = ("## Setup", "## Claims", "## Figures", "## Final metrics per run")
LABELS = (
    "adasum_sgd_b256",
    "mean_sgd_b256",
    "adasum_sgd_b4096",
    "mean_sgd_b4096",
    "adasum_lamb_b4096",
    "mean_lamb_b4096",
    "adasum_sgd_b128",
    "mean_sgd_b128",
    "toy_adasum",
    "toy_mean",
)
CLAIMS = (
    "sgd_large_batch_vs_mean",
    "adam_large_batch_vs_mean",
    "lamb_fewer_steps_than_lamb",
    "toy_fewer_steps_than_mean",
    "cost_close_to_allreduce",
    "sgd_large_batch_vs_mean_paper",
    "lamb_fewer_steps_than_lamb_paper",
    "cost_close_to_allreduce_paper",
)
REPO = Path(__file__).resolve().parents[2]
VERDICTS = (
    r"(reproduced|undecided at \d+ seeds?|inconclusive at \d+ seeds?, CI [^|]*|partly"
    r"|not reproduced|not run|not measured|not assessed)"
)


@pytest.mark.slow
def test_tiny_run_set_produces_full_report_and_repeat_skips(tmp_path):
    args = reproduce_tiny_args("adasum", tmp_path)
    first = repro_cli(*args, cwd=tmp_path, timeout=900)
    assert first.returncode == 0, first.stderr[-3000:]
    report = tmp_path / "reports" / "adasum" / "tiny"
    md = (report / "report.md").read_text()
    for section in SECTIONS:
        assert section in md
    for label in LABELS:
        assert f"| {label} |" in md, label
    rows = {c: [ln for ln in md.splitlines() if ln.startswith(f"| {c} |")] for c in CLAIMS}
    for claim, found in rows.items():
        assert len(found) == 1 and re.search(rf"\| {VERDICTS} \|", found[0]), (claim, found)
    # Claims of the small scale are computed on the tiny runs but not judged there; the
    # Adam claims have no Adam runs at this scale, the paper's claims no 16K-batch runs.
    assert "not assessed" in rows["toy_fewer_steps_than_mean"][0]
    assert "not assessed" in rows["cost_close_to_allreduce"][0]
    assert "not run" in rows["adam_large_batch_vs_mean"][0]
    assert "not run" in rows["sgd_large_batch_vs_mean_paper"][0]
    html = (report / "report.html").read_text()
    images = re.findall(r'<img src="([^"]+)"', html)
    assert all((report / img).exists() for img in images)
    # Steps-to-target points (SGD and LAMB panels; Adam has no runs here, so no panel),
    # loss and accuracy curves, toy, cost.
    assert {
        "steps_to_target.svg",
        "toy_loss_vs_step.svg",
        "loss_vs_step_largest.svg",
        "comm_seconds_adasum_vs_allreduce.svg",
    } <= set(images)
    svg = (report / "steps_to_target.svg").read_text()
    assert "<!-- Momentum-SGD -->" in svg and "<!-- LAMB -->" in svg  # the panel titles
    assert "<!-- Adam -->" not in svg

    # the repeat's report is the AdaComm set's test; here only what it runs
    second = repro_cli(*args, "--no-report", cwd=tmp_path, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    skipped = second.stderr.count("finished earlier") + second.stdout.count("finished earlier")
    assert skipped == len(LABELS)


def _written_lr(overrides: list[str]) -> float:
    (lr,) = [float(o.split("=")[1]) for o in overrides if o.startswith("optim.lr=")]
    return lr


def test_every_scale_composes_its_run_set():
    from repro.reproduce.run_sets import run_set

    small = dict(run_set("adasum", "small", [], seeds=1))
    cost = {"adasum_sgd_b128", "mean_sgd_b128"}  # equal steps on gloo: the cost claim's pair
    grid = {k: c for k, c in small.items() if not k.startswith("toy_") and k not in cost}
    assert len(grid) == 18 and len(small) == 22
    # 128 samples per worker, the effective batch grown by the worker count up to 32 workers
    workers = {"b256": 2, "b1024": 8, "b4096": 32}
    written = {k: _written_lr(c.experiment.runs[k]) for k, c in grid.items()}
    eta1 = {"sgd": 0.05, "adam": 0.01, "lamb": 0.01}  # the header's single-worker rates
    tuned = yaml.safe_load((REPO / "configs/tuned/adasum_small.yaml").read_text())["arms"]
    for label, cfg in grid.items():
        combiner, opt, batch = label.split("_")
        assert cfg.method.name == "adasum" and cfg.experiment.label == label
        assert (cfg.method.combiner, cfg.optim.name) == (combiner, opt)
        # Adasum combines local steps' deltas, Horovod's Average the gradients
        assert cfg.method.combines == {"adasum": "delta", "mean": "gradient"}[combiner]
        assert cfg.trainer.batch_size == 128 and cfg.trainer.world_size == workers[batch]
        assert cfg.trainer.engine == "simulated" and cfg.trainer.target_acc == 0.85
        assert cfg.workload.num_samples == 40000 and cfg.trainer.steps == 500
        # the untuned rates written in the file follow the header's rule: Adasum at 2x the
        # single-worker rate, mean sqrt(N)x (to 3 significant digits)
        scale = {"adasum": 2, "mean": cfg.trainer.world_size**0.5}[combiner]
        assert written[label] == pytest.approx(scale * eta1[opt], rel=5e-3), label
        # experiment.tuned: the run takes its arm's searched rate, one for every worker count
        assert cfg.optim.lr == tuned[f"{combiner}_{opt}"]["chosen"]["optim.lr"], label
    for label in cost:
        cfg = small[label]
        assert cfg.trainer.engine == "processes" and cfg.trainer.world_size == 4
        assert cfg.trainer.steps == 300 and cfg.trainer.target_acc == 0.0
    assert small["adasum_sgd_b128"].optim.lr == small["mean_sgd_b128"].optim.lr
    toy = small["toy_adasum"]
    assert toy.workload.task == "regression" and toy.trainer.batch_size == 1
    assert toy.workload.num_samples == 4096  # its own points, not the MNIST-1D set's size
    tiny = dict(run_set("adasum", "tiny", [], seeds=1))
    assert set(tiny) == set(LABELS) <= set(small)
    paper = dict(run_set("adasum", "paper", [], seeds=1))
    big = paper["adasum_sgd_b16384"]
    assert big.workload.model == "resnet50" and big.trainer.world_size * 256 == 16384
    # every batch trains the same 90 epochs of one schedule, warmed up over its first 5 and
    # evaluated once an epoch, whatever its steps an epoch
    for cfg in paper.values():
        epoch = 50_000 / (cfg.trainer.world_size * cfg.trainer.batch_size)
        assert round(cfg.trainer.steps / epoch) == 90 and round(cfg.optim.warmup_steps / epoch) == 5
        assert round(cfg.trainer.eval_every / epoch) == 1 and cfg.optim.milestones == [30, 60, 80]


@pytest.mark.slow
def test_paper_scale_starts_and_stops_at_missing_data(tmp_path):
    """Its 16 worker processes past what the cores hold are refused from the config alone,
    before CIFAR is fetched (they were refused once it had been); where they fit, the set
    stops at the data it cannot fetch offline."""
    args = ["reproduce", "adasum", "scale=paper", f"runs_root={tmp_path}/runs"]
    args += [f"data.root={tmp_path}/cifar", "tracking=disabled"]
    proc = repro_cli(*args, cwd=tmp_path, under=("taskset", "-c", "0"))
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert err[-1].startswith("error: trainer.world_size=16 worker processes on the 1 core")
    assert not (tmp_path / "cifar").exists()
    proc = repro_cli(*args, "trainer.world_size=4", cwd=tmp_path)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert err[-1].startswith("error:") and "data.root" in err[-1], err[-3:]
