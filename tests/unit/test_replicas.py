"""The stacked worker models: each row trains exactly as a lone worker's module would."""

import copy

import pytest
import torch
import torch.nn.functional as F

from repro.train.replicas import Replicas
from repro.workload.models import build_model


def _lone(template, x, y):
    """A plain module's loss, gradients and buffers after one forward/backward on (x, y)."""
    module = copy.deepcopy(template)
    loss = F.cross_entropy(module(x), y)
    loss.backward()
    return loss.detach(), [p.grad for p in module.parameters()], list(module.buffers())


@pytest.fixture
def resnet():
    torch.manual_seed(0)
    return build_model("resnet20", 10, 32)


def _batches(n):
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, 4, 3, 32, 32, generator=g), torch.randint(0, 10, (n, 4), generator=g)


def test_looped_workers_are_lone_workers_bit_for_bit(resnet):
    torch.set_num_threads(1)
    x, y = _batches(3)
    replicas = Replicas(resnet, 3, "loop")
    losses = replicas.forward_backward(x, y, F.cross_entropy)
    for i in range(3):
        loss, grads, buffers = _lone(resnet, x[i], y[i])
        assert losses[i] == loss
        assert all(torch.equal(p.grad[i], g) for p, g in zip(replicas.params, grads, strict=True))
        # BatchNorm: each worker's running statistics are its own batch's
        assert all(torch.equal(b[i], o) for b, o in zip(replicas.buffers, buffers, strict=True))


def test_vectorized_workers_keep_their_own_batchnorm_statistics(resnet):
    torch.set_num_threads(1)
    x, y = _batches(3)
    replicas = Replicas(resnet, 3, "vmap")
    losses = replicas.forward_backward(x, y, F.cross_entropy)
    named = zip(replicas.buffer_names, replicas.buffers, strict=True)
    running_means = [b for n, b in named if "mean" in n]
    assert not torch.allclose(running_means[0][0], running_means[0][1])
    for i in range(3):
        loss, grads, buffers = _lone(resnet, x[i], y[i])
        assert torch.allclose(losses[i], loss, rtol=1e-5)
        for p, g in zip(replicas.params, grads, strict=True):
            assert torch.allclose(p.grad[i], g, rtol=1e-3, atol=1e-5)
        for b, o in zip(replicas.buffers, buffers, strict=True):
            assert torch.allclose(b[i].double(), o.double(), rtol=1e-5, atol=1e-6)


def test_state_round_trip_keeps_worker_views(resnet):
    replicas = Replicas(resnet, 2, "loop")
    saved = replicas.state_dict()
    with torch.no_grad():
        replicas.params[0].add_(1.0)
    replicas.load_state_dict(saved)
    assert torch.equal(replicas.params[0], saved["params"][0])
    # the worker modules still read the stacked rows (loaded in place)
    first = next(replicas.workers[1].parameters())
    assert torch.equal(first, replicas.params[0][1])


def _one_product_is_the_batched(template) -> bool:
    """Whether this machine's kernels give the stacked linear layers' one product over all
    workers' samples (`addmm` and `mm`, shared rows) the bits of the batched products over
    each worker's own row (`baddbmm` and `bmm`), forward and for the input's gradient, at the
    model's shapes: so on most CPUs; on a Xeon whose kernels block 32 x 250 @ 250 x 10
    otherwise the two agree to float rounding only."""
    g = torch.Generator().manual_seed(3)
    for layer in (m for m in template.modules() if isinstance(m, torch.nn.Linear)):
        w = torch.randn(layer.out_features, layer.in_features, generator=g)
        b = torch.randn(layer.out_features, generator=g)
        h = torch.randn(4, 8, layer.in_features, generator=g)
        grad = torch.randn(4, 8, layer.out_features, generator=g)
        rows, biases = w.expand(4, *w.shape).contiguous(), b.expand(4, -1).contiguous()
        one = torch.addmm(b, h.reshape(32, -1), w.t()).view(4, 8, -1)
        if not torch.equal(one, torch.baddbmm(biases.unsqueeze(1), h, rows.transpose(1, 2))):
            return False
        if not torch.equal(torch.mm(grad.reshape(32, -1), w).view_as(h), torch.bmm(grad, rows)):
            return False
    return True


def _bitwise(a: torch.Tensor, b: torch.Tensor) -> None:
    assert torch.equal(a, b)


def _close(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize(
    ("model", "vectorize"),
    [("cnn1d", "stacked"), ("cnn1d_wide", "stacked"), ("cnn1d", "loop"), ("mlp", "vmap")],
)
def test_one_shared_row_trains_as_rows_of_their_own_bit_for_bit(model, vectorize):
    # workers that apply one update hold one row viewed by all: the same gradients, the
    # same checkpoint, and an optimizer step on row 0 moves every worker
    torch.set_num_threads(1)
    torch.manual_seed(0)
    template = build_model(model, 10, 16)
    g = torch.Generator().manual_seed(2)
    shape = (4, 8, 16) if model == "mlp" else (4, 8, 1, 40)
    x, y = torch.randn(*shape, generator=g), torch.randint(0, 10, (4, 8), generator=g)
    own, shared = Replicas(template, 4, vectorize), Replicas(template, 4, vectorize, shared=True)
    assert all(p.stride(0) == 0 and p.is_leaf for p in shared.params)
    same = _bitwise if vectorize != "stacked" or _one_product_is_the_batched(template) else _close
    same(
        own.forward_backward(x, y, F.cross_entropy), shared.forward_backward(x, y, F.cross_entropy)
    )
    for a, b in zip(own.params, shared.params, strict=True):
        same(a.grad, b.grad)
        assert b.grad.stride(0) != 0
    for a, b in zip(own.state_dict()["params"], shared.state_dict()["params"], strict=True):
        assert torch.equal(a, b) and b.is_contiguous()
    with torch.no_grad():
        shared.params[0][0].add_(1.0)
    assert all(torch.equal(row, shared.params[0][0]) for row in shared.params[0])
    assert torch.equal(next(shared.workers[3].parameters()), shared.params[0][0])
    shared.load_state_dict(own.state_dict())
    assert torch.equal(shared.params[0], own.params[0])


def test_averaged_module_holds_the_given_values():
    torch.manual_seed(0)
    template = build_model("mlp", 4, 16)
    replicas = Replicas(template, 2, "loop")
    flat = torch.arange(sum(p[0].numel() for p in replicas.params), dtype=torch.float32)
    module = replicas.module_with(flat)
    assert torch.equal(torch.cat([p.detach().reshape(-1) for p in module.parameters()]), flat)


class _DataDependent(torch.nn.Module):
    """Branches on a value, which vmap cannot batch."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.lin(x) if x.sum() > 0 else -self.lin(x)


def test_a_model_that_cannot_be_vectorized_is_refused_with_the_fix():
    from repro.errors import UserError

    replicas = Replicas(_DataDependent(), 2, "vmap")
    x, y = torch.ones(2, 3, 4), torch.zeros(2, 3, dtype=torch.long)
    with pytest.raises(UserError, match="trainer.vectorize=loop or trainer.engine=processes"):
        replicas.forward_backward(x, y, F.cross_entropy)
    looped = Replicas(_DataDependent(), 2, "loop")
    assert looped.forward_backward(x, y, F.cross_entropy).shape == (2,)


class _Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
        self.b.weight = self.a.weight

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


@pytest.mark.parametrize("vectorize", ["loop", "vmap"])
def test_tied_and_frozen_parameters_are_refused_in_one_line(vectorize):
    """Each worker's copy held a tied weight apart (a traceback at the first step or the
    first evaluation), and a requires_grad=False parameter was trained and sent."""
    from repro.errors import UserError

    with pytest.raises(UserError) as err:
        Replicas(_Tied(), 2, vectorize)
    assert str(err.value) == (
        "model _Tied: b.weight is the same tensor as a.weight (tied weights), which each "
        "worker's copy would hold apart; register the shared module once and call it twice, or "
        "untie them"
    )
    frozen = build_model("mlp", 4, 16)
    frozen.net[0].bias.requires_grad_(False)
    with pytest.raises(UserError) as err:
        Replicas(frozen, 2, vectorize)
    assert str(err.value) == (
        "model MLP: parameter net.0.bias has requires_grad=False, but every parameter is "
        "trained and sent here; keep a fixed tensor as a buffer (register_buffer)"
    )
