"""signSGD with majority vote and EF-signSGD, through the compressed-SGD strategy, against
both written here in plain torch (Bernstein et al. 2019's majority vote; Karimireddy et al.
2019's EF-signSGD, the scaled signs averaged over workers): the same parameters bit for bit
after 20 steps of 4 simulated workers, and one allgather of one bit per value a step."""

import copy

import pytest
import torch
import torch.nn.functional as F

from repro.comm.axis_collectives import AxisCollectives
from repro.compress.sign import ScaledSign, pack_signs, unpack_signs
from repro.netmodel.cost import Link
from repro.strategies.base import StepInfo
from repro.strategies.signsgd import SignSGDConfig, SignSGDStrategy
from repro.train.replicas import Replicas

N, STEPS, LR = 4, 20, 0.01


def template() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


def batch(worker: int, step: int):
    gen = torch.Generator().manual_seed(1_000 * step + worker)
    return torch.randn(8, 10, generator=gen), torch.randint(0, 4, (8,), generator=gen)


def test_signs_travel_one_bit_each():
    x = torch.tensor([[0.5, -1.0, 0.0, -0.0, 3.0, -2.0, 1e-30, -1e-30, 7.0, -7.0, 0.1]])
    packed = pack_signs(x)
    assert packed.dtype == torch.uint8 and packed.shape == (1, 2)  # 11 values, 2 bytes
    # bit j of byte i is value 8i + j's sign, set for >= 0 (zero, even -0.0, sends +1)
    expected_bits = [1, 0, 1, 1, 1, 0, 1, 0, 1, 0, 1]
    by_hand = [sum(b << j for j, b in enumerate(expected_bits[i : i + 8])) for i in (0, 8)]
    assert packed[0].tolist() == by_hand
    assert unpack_signs(packed, 11)[0].tolist() == [2.0 * b - 1 for b in expected_bits]


def test_a_lone_workers_scaled_sign_decodes_at_any_model_size():
    """One worker's row (the process engine at one GPU): its float32 scale follows
    ceil(n / 8) sign bytes, at an offset no multiple of 4 for n = 41 (6 bytes)."""
    x = torch.linspace(-1.0, 1.0, 41).view(1, -1)
    encoded = ScaledSign().encode(x)
    row = torch.cat([part.reshape(1, -1) for part in encoded.payload], 1)
    assert row.shape == (1, 6 + 4)
    scale = x.abs().sum() / 41
    assert torch.equal(ScaledSign().combine(row, 1, 41), scale * torch.where(x[0] >= 0, 1.0, -1.0))


def plain_run(error_feedback: bool) -> list[list[torch.Tensor]]:
    """N plain models; majority vote of the gradient signs, or the mean of the scaled signs
    of gradient + residual with the residual kept."""
    models = [copy.deepcopy(template()) for _ in range(N)]
    numel = sum(p.numel() for p in models[0].parameters())
    residuals = [torch.zeros(numel) for _ in range(N)]
    for step in range(1, STEPS + 1):
        sent = []
        for w, model in enumerate(models):
            model.zero_grad()
            x, y = batch(w, step)
            F.cross_entropy(model(x), y).backward()
            g = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
            s = torch.where(g + residuals[w] >= 0, 1.0, -1.0)
            if error_feedback:
                p = g + residuals[w]
                scale = p.abs().sum() / numel
                residuals[w] = p - scale * s
                s = s * scale
            sent.append(s)
        total = torch.zeros(numel)
        for s in sent:
            total += s
        update = total / N if error_feedback else torch.sign(total)
        with torch.no_grad():
            for model in models:
                offset = 0
                for p in model.parameters():
                    p.sub_(LR * update[offset : offset + p.numel()].view_as(p))
                    offset += p.numel()
    return [[p.detach() for p in m.parameters()] for m in models]


@pytest.mark.parametrize("error_feedback", [False, True])
def test_strategy_equals_plain_signsgd_bit_for_bit(error_feedback):
    replicas = Replicas(template(), N, "loop")
    strategy = SignSGDStrategy(SignSGDConfig(error_feedback=error_feedback), N)
    strategy.setup(replicas, None, AxisCollectives(N), None)
    numel = sum(p[0].numel() for p in replicas.parameters())
    ties = 0
    for step in range(1, STEPS + 1):
        xs, ys = zip(*(batch(w, step) for w in range(N)), strict=True)
        replicas.forward_backward(torch.stack(xs), torch.stack(ys), F.cross_entropy)
        info = StepInfo(step, 0.0, torch.zeros(N), LR, 0.0, Link(1e-3, 1e9))
        records = strategy.after_backward(info)
        # one allgather: a bit per value, rounded up to whole bytes, and the float32 scale
        assert [(r.op, r.nbytes) for r in records] == [
            ("allgather", -(-numel // 8) + (4 if error_feedback else 0))
        ]
        ties += sum(int((p.grad[0] == 0).sum()) for p in replicas.parameters())
        with torch.no_grad():
            for p in replicas.parameters():
                p.sub_(LR * p.grad)
    if not error_feedback:
        assert ties > 0  # 4 workers: the vote does tie, and a tie moves nothing
    start = next(template().parameters())
    assert (replicas.parameters()[0] != start).float().mean() > 0.9  # the run trained
    expected = plain_run(error_feedback)
    for w in range(N):
        for got, want in zip(replicas.parameters(), expected[w], strict=True):
            assert torch.equal(got[w], want)
    assert strategy.metrics() == {"method/collective": "allgather"}
