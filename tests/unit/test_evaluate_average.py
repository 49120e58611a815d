"""The evaluated model is the float64 average of every worker's parameters, the sum taken in
rank order as an allreduce forms it, whichever way the engine gets there; its test sums
cover the same samples whether read slice by slice or in one pass."""

import torch

from repro.comm.axis_collectives import AxisCollectives
from repro.config import compose
from repro.strategies.flat import flatten
from repro.train import evaluate
from repro.train.evaluate import averaged_model
from repro.train.replicas import Replicas
from repro.workload.models import build_model
from repro.workload.workload import Workload, prepare


def _replicas(workers: int) -> Replicas:
    torch.manual_seed(0)
    replicas = Replicas(build_model("cnn1d", 10), workers)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # the workers hold different weights, as between averagings
        for p in replicas.params:
            p.add_(torch.randn(p.shape, generator=gen))
    return replicas


def test_the_average_is_the_rank_order_float64_sum_bit_for_bit():
    for workers in (2, 4, 8):
        replicas = _replicas(workers)
        model = averaged_model(replicas, AxisCollectives(workers))
        rows = flatten(replicas.float_tensors()).double()
        total = rows[0].clone()
        for r in rows[1:]:
            total += r
        want = (total / workers).float()
        got = torch.cat([t.detach().reshape(-1) for t in model.parameters()])
        assert torch.equal(got, want)
        # and it is the average: not worker 0's model
        assert not torch.equal(got, rows[0].float())


def test_the_allreduce_path_gives_the_same_model():
    """A comm holding one row of several workers takes the allreduce; with every worker
    held the sum is local. Both give one model, bit for bit."""

    class OneRowAtATime(AxisCollectives):
        """All workers on the axis, but reported as holding only rank 0: the averaging
        then goes through `allreduce`, as a process of the process engine does."""

        def __init__(self, world_size: int):
            super().__init__(world_size)
            self.ranks = [0]

    replicas = _replicas(4)
    local = averaged_model(replicas, AxisCollectives(4))
    reduced = averaged_model(replicas, OneRowAtATime(4))
    for a, b in zip(local.parameters(), reduced.parameters(), strict=True):
        assert torch.equal(a, b)


def test_one_pass_over_the_test_set_sums_what_the_slices_sum(tmp_path):
    """Holding every worker, the evaluation reads the whole test set at once: the same
    samples, counts and correct answers as each worker's slice rank::world, added up."""
    cfg = compose(["workload=mnist1d_cnn", "workload.num_samples=2000", f"data.root={tmp_path}"])
    workload = Workload(cfg.workload, prepare(cfg.workload, cfg.data, 0), "cpu")
    torch.manual_seed(0)
    model = workload.model_factory()
    for workers in (4, 32):
        got = evaluate.test_sums(model, workload, AxisCollectives(workers))
        slices = sum(workload.evaluate_shard(model, r, workers) for r in range(workers))
        assert got[2] == slices[2] == len(workload.arrays.y_test)
        assert got[1] == slices[1]
        torch.testing.assert_close(got[0], slices[0], rtol=1e-6, atol=0)
