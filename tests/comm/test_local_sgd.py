"""Local SGD and AdaComm through the real trainer on 2 workers, under both engines.

`processes` runs 2 gloo workers; `simulated` holds both on one axis in this process (it
needs sampled compute times, which nothing asserted here reads).
"""

import pytest
import torch

from repro.track.runs import read_run
from tests.helpers import train


def _final_params(summary: dict) -> torch.Tensor:
    state = torch.load(f"{summary['run_dir']}/final_model.pt")
    return torch.cat([v.reshape(-1).double() for v in state.values()])


ENGINES = {
    "processes": ["trainer.engine=processes"],
    "simulated": ["trainer.engine=simulated", "compute.mode=sampled"],
}


@pytest.mark.slow
@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_tau1_local_sgd_follows_sync(tmp_path, engine):
    common = ["trainer.world_size=2", "trainer.steps=30", "optim.momentum=0.0", *ENGINES[engine]]
    sync = train(tmp_path, *common, "method=sync")
    local = train(tmp_path, *common, "method=local_sgd", "method.tau=1")
    assert torch.allclose(_final_params(sync), _final_params(local), rtol=1e-5, atol=1e-6)
    assert local["train/loss"] == pytest.approx(sync["train/loss"], rel=1e-5)
    # one allreduce per step either way, of the same model (local SGD adds one loss scalar)
    assert local["comm/collectives"] == sync["comm/collectives"] == 30
    assert local["comm/bytes"] - sync["comm/bytes"] == 30 * 4
    # a larger tau really is different
    tau4 = train(tmp_path, *common, "method=local_sgd", "method.tau=4")
    assert tau4["comm/collectives"] == 30 // 4
    assert not torch.allclose(_final_params(sync), _final_params(tau4), atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_adacomm_tau_falls_with_the_loss(tmp_path, engine):
    summary = train(
        tmp_path,
        *ENGINES[engine],
        "trainer.world_size=2",
        "trainer.steps=240",
        "trainer.eval_every=8",
        "method=adacomm",
        "method.tau0=8",
        "method.interval_steps=40",
        tracking="wandb_offline",
    )
    history = read_run(summary["run_dir"]).history
    taus = [row["method/tau"] for row in history]
    losses = [row["train/loss"] for row in history]
    assert taus[0] == 8 and taus[-1] < 8
    assert all(b <= a for a, b in zip(taus, taus[1:], strict=False)), taus
    assert losses[-1] < losses[0] / 2
