"""The trainer's rehearsal: runs from one snapshot take their shared first trial step's
forward/backward once, and each run sees, bit for bit, what it sees rehearsed alone."""

from collections.abc import Callable

import pytest
import torch

from repro.bench.gpu_check import SYNTHETIC
from repro.comm.axis_collectives import AxisCollectives
from repro.config import compose
from repro.train.trainer import Trainer

WORKLOADS = {
    # BatchNorm: the running statistics the first step leaves must be replayed too
    "resnet20": (
        ["workload=cifar10_resnet20", f"workload.dataset={SYNTHETIC}", "workload.num_samples=64"],
        "loop",
    ),
    # one shared row of parameters, gradients by the stacked layers
    "cnn1d": (["workload=mnist1d_cnn", "workload.num_samples=256"], "stacked"),
}


def _trainer(tmp_path, name: str) -> Trainer:
    overrides, vectorize = WORKLOADS[name]
    cfg = compose(
        [
            *overrides,
            "tracking=disabled",
            "compute.mode=sampled",
            "trainer.world_size=2",
            "trainer.batch_size=4",
            "trainer.progress=false",
            f"trainer.vectorize={vectorize}",
            "optim.name=sgd",
            "optim.momentum=0.9",
            f"data.root={tmp_path}/data",
            f"run_dir={tmp_path}/run",
        ]
    )
    return Trainer(cfg, AxisCollectives(2), "cpu", vectorize)


def _state(trainer: Trainer) -> list[torch.Tensor]:
    """Parameters, buffers, the optimizer's slots and the data position, as tensors."""
    r = trainer.replicas
    slots = [t for s in trainer.optimizer.state.values() for t in s.values()]
    position = [torch.as_tensor(s.state_dict()["position"]) for s in trainer.data.samplers]
    return [t.detach().clone() for t in [*r.params, *r.buffers, *slots, *position]]


def _run(trainer: Trainer, factor: float, seen: list) -> Callable[[int], None]:
    """A run that scales the gradients in place, as an exchange may write into what it is
    handed, so the runs part after their first step; it records what each step sees."""

    def per_step(i: int) -> None:
        r = trainer.replicas
        for p in r.params:
            p.grad.mul_(factor)
        seen.append([t.clone() for t in [*(p.grad for p in r.params), *r.buffers]])

    return per_step


def _equal(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_runs_from_one_snapshot_share_the_first_step_and_see_what_they_see_alone(tmp_path, name):
    torch.set_num_threads(1)
    trainer = _trainer(tmp_path, name)
    trainer.train_step(1)  # momentum and running statistics of their own
    calls = []
    forward_backward = trainer.replicas.forward_backward

    def counted(*args):
        calls.append(1)
        return forward_backward(*args)

    trainer.replicas.forward_backward = counted
    before = _state(trainer)
    together = {0.5: [], 2.0: [], 3.0: []}
    trainer.rehearsal.rehearse(3, *(_run(trainer, f, seen) for f, seen in together.items()))
    assert len(calls) == 3 + 2 * 2  # the first step once, the later ones per run
    assert trainer.rehearsal.take()[1] == 9  # every run's steps charged
    assert _equal(_state(trainer), before)

    for factor, seen in together.items():
        alone = []
        trainer.rehearsal.rehearse(3, _run(trainer, factor, alone))
        assert all(_equal(a, b) for a, b in zip(seen, alone, strict=True)), factor
        assert _equal(_state(trainer), before)
    # the runs did part after their first step: a later step is really taken per run
    assert not _equal(together[0.5][1], together[2.0][1])
    n_params, buffers = len(trainer.replicas.params), len(trainer.replicas.buffers)
    if buffers:  # the first step moved the running statistics the later runs are handed
        assert not _equal(together[2.0][0][n_params:], before[n_params : n_params + buffers])
