"""The new compressed methods log what the papers' methods log, so `repro report compare`
draws them beside a paper's runs of the same regime: the AdaComm tiny set's regime (the
small sets' at a test's size), its synchronous baseline, PowerSGD and signSGD, each run
labelled as a set labels its runs (`experiment.label`)."""

import re

import pytest

from repro.errors import UserError
from repro.report.compare import main as compare
from repro.track.runs import read_run
from tests.helpers import train

REGIME = ["experiment=adacomm_tiny", "trainer.steps=24", "trainer.eval_every=12"]
RUNS = {
    "sync": ["method=sync"],
    "powersgd": ["method=powersgd", "method.rank=2"],
    "signsgd": ["method=signsgd", "optim.lr=0.001"],
}


@pytest.fixture
def own_wandb_service():
    """Ends the wandb service these in-process runs start: every later `repro` command
    started from this process inherits WANDB_SERVICE, and a resumed run of one would find
    its run id still held there."""
    yield
    import wandb

    wandb.teardown()


def test_powersgd_and_signsgd_compare_beside_the_papers_baseline(tmp_path, own_wandb_service):
    for label, overrides in RUNS.items():
        labelled = [*overrides, f"experiment.label={label}"]
        train(tmp_path, *REGIME, *labelled, tracking="wandb_offline")
    out = tmp_path / "compare"
    args = ["adacomm_tiny", "--runs", str(tmp_path / "runs"), "--x", "step", "--out", str(out)]
    assert compare(args) == 0
    html = (out / "compare.html").read_text()
    rows = [re.findall(r"<td>(.*?)</td>", r) for r in re.findall(r"<tr>(.*?)</tr>", html)[1:]]
    # the paper's name for its baseline, the method's own name for the others
    assert sorted(r[:2] for r in rows) == [
        ["Fully synchronous SGD", "sync"],
        ["powersgd", "powersgd"],
        ["signsgd", "signsgd"],
    ]
    for row in rows:
        assert read_run(row[-1]).config["method"]["name"] == row[1]
        assert row[5] == "24"  # its curve reaches the run's last step
    assert (out / "compare.png").stat().st_size > 0
    # a metric no run logged: the line lists what they did log; an --out that cannot be made
    with pytest.raises(UserError, match=r"logged 'test/accuracy' .* take one of .*test/acc, "):
        compare([*args, "--metric", "test/accuracy"])
    with pytest.raises(UserError, match=r"^/dev/null/compare: not a directory; .* --out"):
        compare([*args[:-1], "/dev/null/compare"])
