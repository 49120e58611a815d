"""Layers over the worker axis compute each worker's own torch layer; the stacked
vectorization trains every worker as a lone worker's module would.

References are torch's own layers run worker by worker. In float64 the orders of
summation no longer matter, so agreement there is to 1e-12: a wrong tap, channel or
worker would be off by the size of the values, not by rounding."""

import copy

import pytest
import torch
import torch.nn.functional as F

from repro.compress.memory import GradientTargets, sq_norms
from repro.config import compose
from repro.errors import UserError
from repro.train.replicas import Replicas, has_workers_forward
from repro.workload import worker_layers
from repro.workload.config import MODELS, STACKED_MODELS
from repro.workload.models import CNN1D, build_model

WORKERS = 3


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


@pytest.mark.parametrize(
    "c_in,c_out,k,stride,padding,length",
    [(1, 25, 5, 2, 2, 40), (25, 25, 3, 2, 1, 20), (25, 25, 3, 1, 1, 10), (3, 4, 4, 3, 0, 17)],
)
def test_conv1d_is_each_workers_conv1d(c_in, c_out, k, stride, padding, length):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(WORKERS, 5, c_in, length, generator=g, dtype=torch.float64)
    w = torch.randn(WORKERS, c_out, c_in, k, generator=g, dtype=torch.float64)
    b = torch.randn(WORKERS, c_out, generator=g, dtype=torch.float64)
    for t in (x, w, b):
        t.requires_grad_()
    out = worker_layers.conv1d(x.transpose(2, 3), w, b, stride, padding).transpose(2, 3)
    upstream = torch.randn(out.shape, generator=g, dtype=torch.float64)
    grads = torch.autograd.grad(out, (x, w, b), upstream)
    for i in range(WORKERS):
        mine = [t[i].detach().requires_grad_() for t in (x, w, b)]
        want = F.conv1d(*mine, stride=stride, padding=padding)
        assert out[i].shape == want.shape
        assert _relative(out[i], want) < 1e-12
        # every gradient; the input's: every tap's contribution, the padding's dropped
        for ours, wanted in zip(grads, torch.autograd.grad(want, mine, upstream[i]), strict=True):
            assert _relative(ours[i], wanted) < 1e-12


@pytest.mark.parametrize("workers", [8, 32])
def test_conv1d_in_chunks_of_workers_has_the_bits_of_one_product(monkeypatch, workers):
    """The Adasum CNN's three convolutions at its 8- and 32-worker rungs (128 samples a
    worker), whose columns outgrow one chunk: built and multiplied a few workers at a time,
    they give the bits of one product over all workers, forward and every gradient, so the
    chunking moves no result of those runs. On one thread, as the simulated engine runs: on
    two, the kernels split the work otherwise and this test failed when it ran first in its
    process (other tests had left one thread set)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _chunked_and_whole_agree(monkeypatch, workers)
    finally:
        torch.set_num_threads(threads)


def _chunked_and_whole_agree(monkeypatch, workers: int) -> None:
    g = torch.Generator().manual_seed(1)
    layers = [(1, 5, 2, 2, 40), (25, 3, 2, 1, 20), (25, 3, 1, 1, 10)]
    default = worker_layers._CHUNK_BYTES
    for c_in, k, stride, padding, length in layers:
        h = torch.randn(workers, 128, length, c_in, generator=g)
        w = torch.randn(workers, 25, c_in, k, generator=g) / (c_in * k) ** 0.5
        b = torch.randn(workers, 25, generator=g)
        results, chunks = [], []
        for chunk_bytes in (default, 1 << 40):
            monkeypatch.setattr(worker_layers, "_CHUNK_BYTES", chunk_bytes)
            out_len = (length + 2 * padding - k) // stride + 1
            chunks.append(len(list(worker_layers._chunks(h, out_len, k))))
            leaves = [t.clone().requires_grad_() for t in (h, w, b)]
            out = worker_layers.conv1d(*leaves, stride, padding)
            upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(3))
            results.append([out, *torch.autograd.grad(out, leaves, upstream)])
        assert chunks[1] == 1
        if c_in > 1:  # the wide layers' columns: 384 KB a worker
            assert chunks[0] > 1
        for ours, one_product in zip(*results, strict=True):
            assert torch.equal(ours.contiguous().view(torch.int32), one_product.view(torch.int32))


@pytest.mark.parametrize("workers", [4, 32])
@pytest.mark.parametrize("transposed", [False, True])
def test_conv1d_with_its_relu_has_the_bits_of_a_relu_after_it(workers, transposed):
    """The ReLU taken chunk by chunk inside the convolution gives the bits of `F.relu` on
    its output, forward and every gradient: with all workers in one chunk (4) and in
    several (32), and for a contiguous gradient as for the transposed view the CNN's
    channel-major flatten hands its last convolution."""
    g = torch.Generator().manual_seed(4)
    for c_in, k, stride, padding, length in [
        (1, 5, 2, 2, 40),
        (25, 3, 2, 1, 20),
        (25, 3, 1, 1, 10),
    ]:
        h = torch.randn(workers, 128, length, c_in, generator=g)
        w = torch.randn(workers, 25, c_in, k, generator=g) / (c_in * k) ** 0.5
        b = torch.randn(workers, 25, generator=g)
        results = []
        for fused in (True, False):
            leaves = [t.clone().requires_grad_() for t in (h, w, b)]
            if fused:
                out = worker_layers.conv1d(*leaves, stride, padding, relu=True)
            else:
                out = F.relu(worker_layers.conv1d(*leaves, stride, padding))
            upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(5))
            if transposed:
                upstream = upstream.transpose(2, 3).contiguous().transpose(2, 3)
            results.append([out, *torch.autograd.grad(out, leaves, upstream)])
        assert (results[0][0] == 0).any() and (results[0][0] > 0).any()
        for ours, relu_after in zip(*results, strict=True):
            assert torch.equal(ours.contiguous().view(torch.int32), relu_after.view(torch.int32))


@pytest.mark.parametrize(
    "k,stride,padding,length",
    # the CNN's three convolutions; windows reaching into both paddings (a short input);
    # padding wider than the stride; one tap; a one-position input
    [(5, 2, 2, 40), (3, 2, 1, 20), (3, 1, 1, 10), (4, 3, 0, 17), (5, 2, 2, 3), (3, 1, 3, 7)]
    + [(3, 3, 2, 8), (1, 1, 0, 4), (2, 1, 1, 1)],
)
def test_columns_and_their_gradient_have_the_bits_of_autograds_slices(k, stride, padding, length):
    """The columns are the padded input's k strided slices side by side, whichever windows
    reach into the padding; their gradient adds the taps as autograd adds the gradients of
    those slices (last tap first): in float32, where the order shows, the same bits, sign
    of zero included."""
    g = torch.Generator().manual_seed(2)
    h = torch.randn(WORKERS, 6, length, 5, generator=g).requires_grad_()
    padded = F.pad(h, (0, 0, padding, padding))
    out_len = (length + 2 * padding - k) // stride + 1
    span = stride * (out_len - 1) + 1
    want = torch.cat([padded[:, :, j : j + span : stride] for j in range(k)], dim=3)
    cols = torch.empty_like(want)
    worker_layers._columns_into(cols, h.detach(), k, stride, padding)
    assert torch.equal(cols, want)
    upstream = torch.randn(cols.shape, generator=g)
    ours = torch.full_like(h, float("nan"))  # every entry written, none left over
    worker_layers._add_taps(ours, upstream, k, stride, padding)
    (autograds,) = torch.autograd.grad(want, h, upstream)
    assert torch.equal(ours.view(torch.int32), autograds.view(torch.int32))


def test_linear_is_each_workers_linear():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(WORKERS, 5, 7, generator=g, dtype=torch.float64)
    w = torch.randn(WORKERS, 4, 7, generator=g, dtype=torch.float64)
    b = torch.randn(WORKERS, 4, generator=g, dtype=torch.float64)
    out = worker_layers.linear(x, w, b)
    for i in range(WORKERS):
        assert _relative(out[i], F.linear(x[i], w[i], b[i])) < 1e-12


def _batch(dtype, samples=8):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(WORKERS, samples, 1, 40, generator=g, dtype=dtype)
    return x, torch.randint(0, 10, (WORKERS, samples), generator=g)


@pytest.mark.parametrize("name", ["cnn1d", "cnn1d_wide"])
def test_stacked_workers_train_as_lone_workers(name):
    """Each worker's loss and gradient under `stacked` equal a looped lone worker's: in
    float64 to 1e-12, and in float32 (as runs train) to rounding."""
    torch.manual_seed(0)
    template = build_model(name, 10)
    for dtype, tolerance in ((torch.float64, 1e-12), (torch.float32, 1e-5)):
        x, y = _batch(dtype)
        model = copy.deepcopy(template).to(dtype)
        stacked, looped = Replicas(model, WORKERS, "stacked"), Replicas(model, WORKERS, "loop")
        scale = torch.linspace(0.5, 1.5, WORKERS, dtype=dtype)
        with torch.no_grad():  # the workers hold different weights, as after local steps
            for p in (*stacked.params, *looped.params):
                p.mul_(scale.view(-1, *[1] * (p.dim() - 1)))
        losses = stacked.forward_backward(x, y, F.cross_entropy)
        want = looped.forward_backward(x, y, F.cross_entropy)
        assert _relative(losses.double(), want.double()) < tolerance
        for p, q in zip(stacked.params, looped.params, strict=True):
            for i in range(WORKERS):
                assert _relative(p.grad[i], q.grad[i]) < tolerance


@pytest.mark.parametrize("samples", [8, 32, 256])
@pytest.mark.parametrize("measured", [True, False])
@pytest.mark.parametrize("add", [True, False])
def test_weight_gradients_put_into_targets_have_the_bits_of_fresh_ones(add, measured, samples):
    """`forward_backward(into=...)`: the linear layers' weights get their gradients added
    into their targets as each product is made (or written there by it), the same bits as the
    gradient written out and then added (or copied); the convolutions' weights and the
    biases get fresh gradients and leave their targets untouched (float32, as runs train;
    shared rows, as Top-k holds them). The squared norms measured of the gradients put in
    place are `sq_norms` of the fresh gradients to the bit (VAR-Topk ranks by them), one
    weight taken worker by worker (hidden, each product written into one buffer reused by
    every worker) and one by a batched product (fc); measured or not (VAR; STAR, AG).
    Samples per worker: a few, the Top-k runs' 32, and more than one block of the product."""
    torch.manual_seed(0)
    model = build_model("cnn1d_wide", 10)
    x, y = _batch(torch.float32, samples)
    plain = Replicas(model, WORKERS, "stacked", shared=True)
    fused = Replicas(model, WORKERS, "stacked", shared=True)
    plain.forward_backward(x, y, F.cross_entropy)
    g = torch.Generator().manual_seed(3)
    # residuals of the gradients' own size, as error feedback keeps: against much larger
    # ones, any order of the product's sum rounds to the same bits
    targets = {
        n: torch.randn(WORKERS, p[0].numel(), generator=g) * p.grad.std()
        for n, p in plain.named_parameters()
    }
    into = {n: t.clone() for n, t in targets.items()}
    norms = {n: torch.full((WORKERS,), -1.0) for n in targets}
    fused.forward_backward(
        x, y, F.cross_entropy, GradientTargets(into, add, norms if measured else None)
    )
    put = []
    for (name, p), (_, q) in zip(plain.named_parameters(), fused.named_parameters(), strict=True):
        fresh, got = p.grad.reshape(WORKERS, -1), q.grad.reshape(WORKERS, -1)
        want = fresh + targets[name] if add else fresh
        if q.grad.data_ptr() == into[name].data_ptr():
            put.append(name)
            want_norms = sq_norms(fresh) if measured else torch.full((WORKERS,), -1.0)
            assert torch.equal(norms[name], want_norms), name
        else:  # a fresh gradient: its target untouched, the addition done here
            assert torch.equal(into[name], targets[name])
            assert torch.equal(norms[name], torch.full((WORKERS,), -1.0))
            got = got + targets[name] if add else got
        assert torch.equal(got.view(torch.int32), want.view(torch.int32)), name
    assert put == ["hidden.weight", "fc.weight"]


def test_the_config_knows_which_models_have_their_own_forward():
    """`trainer.vectorize=stacked` is checked by model name before anything runs."""
    own = [m for m in MODELS if has_workers_forward(build_model(m, 10, 16))]
    assert own == list(STACKED_MODELS)


def test_a_subclass_that_rewrites_forward_alone_runs_under_vmap():
    """Its inherited all-workers forward would skip the change (here: a scale), silently."""

    class Scaled(CNN1D):
        def forward(self, x):
            return 3.0 * super().forward(x)

    class Wider(CNN1D):  # forward and forward_workers both CNN1D's: still its own forward
        pass

    assert Replicas(Scaled(), 2, "auto").vectorize == "vmap"
    assert Replicas(Wider(), 2, "auto").vectorize == "stacked"
    with pytest.raises(ValueError, match="vectorize=stacked: Scaled has no forward_workers"):
        Replicas(Scaled(), 2, "stacked")


def test_auto_takes_the_models_own_forward_where_it_has_one():
    assert Replicas(build_model("cnn1d", 10), 2, "auto").vectorize == "stacked"
    assert Replicas(build_model("cnn1d_wide", 10), 2, "auto").vectorize == "stacked"
    assert Replicas(build_model("mlp", 4, 16), 2, "auto").vectorize == "vmap"
    assert Replicas(build_model("resnet20", 10), 2, "auto").vectorize == "vmap"


def test_stacked_without_the_models_own_forward_is_refused():
    """By model name in the config (the user's one line: tests/integration/
    test_engine_errors.py), and by the model itself where Replicas is built directly."""
    with pytest.raises(UserError, match="workload.model=mlp has none; use trainer.vectorize=vmap"):
        compose(["workload=synthetic_mlp", "compute.mode=sampled", "trainer.vectorize=stacked"])
    with pytest.raises(ValueError, match="MLP has no forward_workers"):
        Replicas(build_model("mlp", 4, 16), 2, "stacked")
