"""PowerSGD through the compressed-SGD strategy against PyTorch's own: DDP with
`torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook` on 2 gloo workers, the same
model, seed, data and settings, a few hundred SGD steps.

Both engines run the strategy: as 2 worker processes beside DDP in the same processes, and
as 2 workers on one axis in this process. The parameters must agree with DDP's to float
rounding, and every step must move the same bytes (the allreduces DDP's hook issues, read
from the calls it makes, against the strategy's records). Two settings cover both
orthogonalizations (Gram-Schmidt at rank 2, Householder QR at rank 3), error feedback and
warm start on and off, the plain-average start, the compression threshold and the
epsilon.
"""

import functools

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as torch_powersgd

from repro.comm.axis_collectives import AxisCollectives
from repro.comm.launch import init_process_group, spawn
from repro.comm.process_collectives import ProcessCollectives
from repro.netmodel.cost import Link
from repro.strategies.base import StepInfo
from repro.strategies.powersgd import PowerSGDConfig, PowerSGDStrategy
from repro.train.replicas import Replicas

N, STEPS, LR = 2, 200, 0.05
SETTINGS = {
    "rank2_feedback_warm": {
        "rank": 2,
        "start_iter": 5,
        "error_feedback": True,
        "warm_start": True,
        "min_compression_rate": 2.0,
        "epsilon": 0.0,
        "seed": 0,
    },
    "rank3_qr_cold": {
        "rank": 3,
        "start_iter": 2,
        "error_feedback": False,
        "warm_start": False,
        "min_compression_rate": 1.0,
        "epsilon": 1e-8,
        "seed": 7,
    },
}


def template() -> torch.nn.Module:
    """Two weights of one shape apart from each other: the hook draws Q shape by shape."""
    torch.manual_seed(0)
    layers = [torch.nn.Linear(16, 32), torch.nn.Linear(32, 16), torch.nn.Linear(16, 32)]
    relu = torch.nn.ReLU
    return torch.nn.Sequential(
        *(m for layer in layers for m in (layer, relu())), torch.nn.Linear(32, 8)
    )


def batch(worker: int, step: int):
    gen = torch.Generator().manual_seed(10_000 * step + worker)
    return torch.randn(16, 16, generator=gen), torch.randint(0, 8, (16,), generator=gen)


def ddp_run(rank: int, s: dict) -> tuple[list[torch.Tensor], list[list[int]]]:
    """DDP with PyTorch's PowerSGD hook; the bytes of every allreduce of each step."""
    model = template()
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    state = torch_powersgd.PowerSGDState(
        process_group=None,
        matrix_approximation_rank=s["rank"],
        start_powerSGD_iter=s["start_iter"],
        min_compression_rate=s["min_compression_rate"],
        use_error_feedback=s["error_feedback"],
        warm_start=s["warm_start"],
        orthogonalization_epsilon=s["epsilon"],
        random_seed=s["seed"],
    )
    ddp.register_comm_hook(state, torch_powersgd.powerSGD_hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    sent: list[list[int]] = []
    real = dist.all_reduce

    def counted(tensor, *args, **kwargs):
        sent[-1].append(tensor.numel() * tensor.element_size())
        return real(tensor, *args, **kwargs)

    dist.all_reduce = counted  # the hook's calls, counted, each still carried by gloo
    try:
        for step in range(1, STEPS + 1):
            sent.append([])
            optimizer.zero_grad()
            x, y = batch(rank, step)
            F.cross_entropy(ddp(x), y).backward()
            optimizer.step()
    finally:
        dist.all_reduce = real
    return [p.detach().clone() for p in model.parameters()], sent


def strategy_run(comm, s: dict) -> tuple[list[torch.Tensor], list[list[int]]]:
    """The strategy over the held workers; parameters of every held worker, stacked."""
    rows = len(comm.ranks)
    replicas = Replicas(template(), rows, "loop")
    strategy = PowerSGDStrategy(PowerSGDConfig(**s), N)
    strategy.setup(replicas, None, comm, None)
    sent = []
    for step in range(1, STEPS + 1):
        xs, ys = zip(*(batch(r, step) for r in comm.ranks), strict=True)
        replicas.forward_backward(torch.stack(xs), torch.stack(ys), F.cross_entropy)
        info = StepInfo(step, 0.0, torch.zeros(rows), LR, 0.0, Link(1e-3, 1e9))
        records = strategy.after_backward(info)
        assert {r.op for r in records} == {"allreduce"}
        sent.append([r.nbytes for r in records])
        with torch.no_grad():
            for p in replicas.parameters():
                p.add_(p.grad, alpha=-LR)
    return [p.detach().clone() for p in replicas.parameters()], sent


def worker(rank: int, world: int) -> dict:
    init_process_group()
    torch.set_num_threads(1)
    return {
        name: {"ddp": ddp_run(rank, s), "processes": strategy_run(ProcessCollectives(), s)}
        for name, s in SETTINGS.items()
    }


@functools.cache
def runs() -> list[dict]:
    return spawn(worker, N)


@pytest.mark.parametrize("name", list(SETTINGS))
def test_strategy_equals_torch_powersgd_hook(name):
    ranks = runs()
    torch.set_num_threads(1)
    simulated, simulated_sent = strategy_run(AxisCollectives(N), SETTINGS[name])
    start = list(template().parameters())
    for rank, out in enumerate(ranks):
        ddp_params, ddp_sent = out[name]["ddp"]
        params, sent = out[name]["processes"]
        # the same bytes, step by step: the plain start's one allreduce, then PowerSGD's
        # three (uncompressed tensors, every P, every Q); empty ones carry nothing
        assert sent == [[b for b in step if b] for step in ddp_sent]
        assert simulated_sent == sent
        assert len(sent[0]) == 1 and len(sent[-1]) == 3
        for ours, sim, theirs, before in zip(params, simulated, ddp_params, start, strict=True):
            torch.testing.assert_close(ours[0], theirs, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(sim[rank], theirs, rtol=1e-5, atol=1e-6)
            assert not torch.equal(theirs, before.detach())  # trained
