"""Layer-wise Top-k's per-tensor k on the small set's model, `cnn1d_wide`, at c = 0.001.

The default (`method.layer_split=per_tensor`) gives every tensor max(1, int(numel * c))
entries, as the authors' layer-wise baseline and GRACE do; the exact-budget option shares
the model's k by largest remainder, which leaves conv1 and most biases out. Both are checked
against counts computed here from the model's own tensors and against what one exchange of
the strategy actually sends and applies.
"""

import pytest
import torch

from repro.comm.axis_collectives import AxisCollectives
from repro.compress.topk import compress, layer_shares, per_tensor_ks
from repro.netmodel.cost import Link
from repro.strategies.base import StepInfo
from repro.strategies.topk import TopKConfig, TopKStrategy
from repro.train.replicas import Replicas
from repro.workload.models import build_model

CR = 0.001


def wide_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model("cnn1d_wide", 10)


def test_per_tensor_ks_is_the_authors_formula_on_every_tensor():
    sizes = {name: p.numel() for name, p in wide_model().named_parameters()}
    ks = per_tensor_ks(list(sizes.values()), CR)
    direct = [max(1, int(numel * CR)) for numel in sizes.values()]
    assert ks == direct
    assert layer_shares(list(sizes.values()), CR, "per_tensor") == direct
    assert min(ks) == 1  # conv1, every bias: at least one entry each
    assert dict(zip(sizes, ks, strict=True))["hidden.weight"] == 256  # 256,000 x 0.001
    exact = layer_shares(list(sizes.values()), CR, "exact_budget")
    assert sum(exact) == int(sum(sizes.values()) * CR)  # the whole model's k, 271
    left_out = {name for name, k in zip(sizes, exact, strict=True) if k == 0}
    assert {"conv1.weight", "conv1.bias", "conv2.bias", "conv3.bias", "fc.bias"} <= left_out


def test_compress_with_shares_takes_each_tensors_own_largest():
    sizes, shares = [50, 3, 200], [2, 1, 5]
    x = torch.randn(2, sum(sizes), generator=torch.Generator().manual_seed(4))
    _, indices = compress(x, sum(shares), sizes, shares)
    for row in range(2):
        got, offset = sorted(indices[row].tolist()), 0
        expected = []
        for size, share in zip(sizes, shares, strict=True):
            part = x[row, offset : offset + size].abs().tolist()
            best = sorted(range(size), key=lambda i: -part[i])[:share]
            expected += [offset + i for i in best]
            offset += size
        assert got == sorted(expected)
    with pytest.raises(ValueError, match="shares"):
        compress(x, 7, sizes, shares)


def exchange_once(split: str):
    """One layer-wise allgather exchange of 2 workers' random gradients on cnn1d_wide:
    the model's gradient rows (the averaged update) and each worker's residual per tensor."""
    comm = AxisCollectives(2)
    replicas = Replicas(wide_model(), 2, "loop")
    cfg = TopKConfig(cr=CR, collective="allgather", layerwise=True, layer_split=split)
    strategy = TopKStrategy(cfg, 2)
    strategy.setup(replicas, torch.optim.SGD(replicas.parameters(), lr=0.1), comm, None)
    gen = torch.Generator().manual_seed(1)
    sent_grads = {}
    for name, p in replicas.named_parameters():
        p.grad = torch.randn(p.shape, generator=gen)
        sent_grads[name] = p.grad.clone()
    info = StepInfo(1, 0.0, torch.zeros(2), 0.1, 0.0, Link(4e-3, 20e9 / 8))
    strategy.after_backward(info)
    residuals = strategy.memory.state_dict()
    updates = {name: p.grad.clone() for name, p in replicas.named_parameters()}
    return sent_grads, updates, residuals, strategy.metrics()


def test_every_tensor_is_sent_and_updated_at_c0001():
    grads, updates, residuals, metrics = exchange_once("per_tensor")
    direct = {name: max(1, int(g[0].numel() * CR)) for name, g in grads.items()}
    assert metrics["method/k"] == sum(direct.values())
    for name, g in grads.items():
        for worker in range(2):
            flat, kept = g[worker].reshape(-1), residuals[name][worker].reshape(-1)
            sent = kept == 0  # random gradients: the only zeros are the entries sent
            assert int(sent.sum()) == direct[name], name
            # the sent entries are that tensor's largest in magnitude
            assert flat[sent].abs().min() >= flat[~sent].abs().max()
        assert torch.count_nonzero(updates[name][0]) >= 1, name  # the tensor is updated


def test_exact_budget_option_leaves_small_tensors_out():
    grads, updates, _, metrics = exchange_once("exact_budget")
    assert metrics["method/k"] == int(271224 * CR)
    for name in ("conv1.weight", "conv1.bias", "conv2.bias", "fc.bias"):
        assert torch.count_nonzero(updates[name]) == 0, name
    assert torch.count_nonzero(updates["hidden.weight"][0]) >= 256
