"""Layers over a leading worker axis, for a model's hand-written all-workers forward.

The simulated engine runs every worker's forward at once. torch.func's vmap does that for
any model, but it turns a convolution over W workers into one grouped convolution, whose
oneDNN kernels took 1.7-1.9x as long forward and 1.2x backward as one ungrouped
convolution over all W workers' samples (the MNIST-1D CNN, 8 workers, one thread). A
model can instead write its forward over the worker axis with these layers
(`CNN1D.forward_workers`), which keep activations channels-last, (workers, batch, length,
channels), so that no layer needs a layout change, and compute each layer as batched
matrix products over the workers (`torch.baddbmm`: row w multiplies worker w's weight).

Each function equals torch's own layer applied worker by worker, to float rounding (the
products are summed in another order): tested against a lone worker's module.

`weight_grads_into` lets a caller name, for some weights, a tensor the weight's gradient
goes to from its own product: added in place (error feedback's G = g + residual formed in
the residual's own buffer, with no flat buffer of G filled beside it) or written
(the product's `out=`: the flat buffer a method without feedback sends, G = g, with no
copy and no fresh allocation), each the same bits as the product written out first (`Replicas`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import torch
from torch.nn import functional as F

# id(weight leaf) -> (target, add, where each worker's ||gradient||^2 goes or None)
_INTO: dict[int, tuple[torch.Tensor, bool, torch.Tensor | None]] = {}


@contextmanager
def weight_grads_into(
    targets: Mapping[torch.Tensor, torch.Tensor],
    add: bool,
    norms: Mapping[torch.Tensor, torch.Tensor] | None = None,
) -> Iterator[None]:
    """While active, a workers' linear layer whose weight is a key of `targets` adds its
    weight's gradient into that tensor (same shape), or writes it there (`add` False), in
    the backward, and gives autograd none for it. Weights that reach no layer directly (a
    convolution's, reshaped first) get their gradients from autograd as usual.

    `norms` (by weight, a (workers,) tensor each): where such a layer also writes each
    worker's squared gradient norm, `repro.compress.memory.sq_norms` of the gradient's rows
    to the bit (tested), for a caller that ranks by ||g||^2 once g is gone into a residual
    (VAR-Topk)."""
    norms = norms or {}
    _INTO.update({id(w): (t, add, norms.get(w)) for w, t in targets.items()})
    try:
        yield
    finally:
        _INTO.clear()


def conv1d(
    h: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    stride: int,
    padding: int,
    relu: bool = False,
) -> torch.Tensor:
    """Every worker's `F.conv1d` (zero padding, no dilation, one group) as im2col + bmm,
    followed by `F.relu` where `relu` is set.

    h is (workers, batch, length, c_in), weight (workers, c_out, c_in, k), bias (workers,
    c_out); the result is (workers, batch, length_out, c_out). The columns hold tap j of
    channel c in column j * c_in + c, and the weight is laid out the same way.
    """
    return _WorkerConv.apply(h, weight, bias, stride, padding, relu)


class _WorkerConv(torch.autograd.Function):
    """The convolution as the columns' product with the weight, a few workers at a time.

    The columns are k times the input's size. Written out for all workers and read back by
    one product (12 MB per layer for the Adasum CNN at 32 x 128 samples, past this core's
    cache), the columns and the products took 1.2-1.3x as long, forward and backward, as
    here, where each chunk of workers' columns (at most `_CHUNK_BYTES`) is built in one
    reused buffer and used at once by that chunk's products, and the backward builds them
    again rather than keeping them; the Adasum CNN's whole forward and backward at 32
    workers took about 0.9x as long. Where all workers fit one chunk (the Top-k and AdaComm
    runs) the columns are kept for the backward, as before. On the run sets' shapes a
    chunk's `bmm` gives each worker the bits of its row of one `bmm` over all workers, so
    the chunking moves no result (tested).

    Backward: the weight's gradient g^T cols (`_weight_grads`, as the linear layer's) and
    the columns' gradient g w per worker, the latter added back tap by tap onto the input's
    positions (`_add_taps`).

    The ReLU after it (`relu`) goes chunk by chunk too: applied to each chunk's output as
    it is written, and its backward, torch's own `threshold_backward` against the output
    as `F.relu`'s, to each chunk's gradient once that chunk is contiguous. The gradient
    reaching the CNN's last convolution is a transposed view (the model flattens
    channel-major, these layers are channels-last), and `threshold_backward` over it took
    5.3 ms at 32 x 128 samples, against 0.7 ms for a contiguous copy and the same kernel;
    the forward and backward of the Adasum CNN took 0.86-0.93x as long at 32 workers
    (the same bits, tested).
    """

    @staticmethod
    def forward(ctx, h, weight, bias, stride, padding, relu):
        h = h.contiguous()
        workers, batch, length, c_in = h.shape
        c_out, k = weight.shape[1], weight.shape[3]
        out_len = (length + 2 * padding - k) // stride + 1
        w = weight.permute(0, 1, 3, 2).reshape(workers, c_out, k * c_in)
        out = h.new_empty(workers, batch, out_len, c_out)
        chunks = _chunks(h, out_len, k)
        for at, n, cols in chunks:
            _columns_into(cols, h[at : at + n], k, stride, padding)
            rows = out[at : at + n].view(n, batch * out_len, c_out)
            torch.baddbmm(
                bias[at : at + n].unsqueeze(1), cols.flatten(1, 2), w[at : at + n].mT, out=rows
            )
            if relu:
                rows.clamp_min_(0)
        # one chunk's columns are kept: built again, they cost the small runs 3-10% a step
        kept = chunks[0][2:] if len(chunks) == 1 else ()
        ctx.save_for_backward(h, w, out if relu else None, *kept)
        ctx.geometry = (k, stride, padding, out_len)
        return out

    @staticmethod
    def backward(ctx, grad):
        h, w, out, *kept = ctx.saved_tensors
        k, stride, padding, out_len = ctx.geometry
        workers, batch, _, c_in = h.shape
        c_out = w.shape[1]
        grad_w = h.new_empty(workers, c_out, k * c_in)
        grad_b = h.new_empty(workers, c_out)
        grad_h = torch.empty_like(h) if ctx.needs_input_grad[0] else None
        grad_cols = None
        chunks = [(0, workers, kept[0])] if kept else _chunks(h, out_len, k)
        for at, n, cols in chunks:
            if not kept:
                _columns_into(cols, h[at : at + n], k, stride, padding)
            g = grad[at : at + n].contiguous()
            if out is not None:
                g = torch.ops.aten.threshold_backward(g, out[at : at + n], 0)
            g = g.view(n, batch * out_len, c_out)
            torch.sum(g, 1, out=grad_b[at : at + n])
            _weight_grads(g.mT, cols.flatten(1, 2), grad_w[at : at + n], False)
            if grad_h is not None:
                if grad_cols is None:
                    grad_cols = torch.empty_like(cols)
                taps = torch.bmm(g, w[at : at + n], out=grad_cols[:n].flatten(1, 2))
                _add_taps(grad_h[at : at + n], taps.view_as(cols), k, stride, padding)
        # the weight's own layout, as autograd's backward of the permute gives it
        grad_weight = grad_w.view(workers, c_out, k, c_in).permute(0, 1, 3, 2)
        return grad_h, grad_weight, grad_b, None, None, None


def _chunks(h: torch.Tensor, out_len: int, k: int) -> list[tuple[int, int, torch.Tensor]]:
    """(first worker, workers, columns buffer) for each chunk of `h`'s workers whose
    columns fit `_CHUNK_BYTES`; one buffer serves every chunk."""
    workers, batch, _, c_in = h.shape
    per_worker = batch * out_len * k * c_in * h.element_size()
    size = max(1, min(workers, _CHUNK_BYTES // per_worker))
    buffer = h.new_empty(size, batch, out_len, k * c_in)
    spans = [(at, min(size, workers - at)) for at in range(0, workers, size)]
    return [(at, n, buffer[:n]) for at, n in spans]


# A chunk's columns: at 32 workers, chunks of 0.8, 1.6 and 3.2 MB took about as long (a
# core's L2 here is 1 MB, the shared L3 32 MB).
_CHUNK_BYTES = 1_600_000


def _columns_into(cols: torch.Tensor, h: torch.Tensor, k: int, stride: int, padding: int) -> None:
    """Write the im2col columns of a channels-last input into `cols` (workers, batch,
    length_out, k * c_in): the k strided slices of the zero-padded input side by side.

    The windows that lie inside the input are copied straight from it, and only the few
    at its ends are padded (a padded copy of the whole input was a fill and a copy of the
    input's size per convolution)."""
    length, out_len = h.shape[2], cols.shape[2]
    # window t covers input positions stride * t - padding onwards, k of them; those in
    # [first, last) need no padding
    first = min(out_len, -(-padding // stride))
    last = max(first, min(out_len, (length + padding - k) // stride + 1))
    _windows_into(cols[:, :, first:last], h, stride * first - padding, stride)
    for lo, hi in ((0, first), (last, out_len)):
        if lo < hi:
            start, end = stride * lo - padding, stride * (hi - 1) - padding + k
            piece = h[:, :, max(start, 0) : min(end, length)]
            pad = (0, 0, max(-start, 0), max(end - length, 0))
            _windows_into(cols[:, :, lo:hi], F.pad(piece, pad), 0, stride)


def _add_taps(
    grad_in: torch.Tensor, grad_cols: torch.Tensor, k: int, stride: int, padding: int
) -> None:
    """Write into `grad_in` the input's gradient from its columns' gradient: each tap's
    gradient, where it lands inside the input, added into zeros, taps in descending order
    as autograd sums the gradients of the k slices, so that the bits are autograd's.

    (Autograd's own backward of the slices gave each a zero tensor of the padded input's
    size; `Tensor.unfold`'s backward took 0.5 ms per call here, more than the whole
    convolution.)"""
    length, c_in, out_len = grad_in.shape[2], grad_in.shape[3], grad_cols.shape[2]
    grad_in.zero_()
    for j in reversed(range(k)):
        # tap j of window t reads input position stride * t - padding + j
        lo = max(0, -((j - padding) // stride))
        hi = min(out_len, (length - 1 + padding - j) // stride + 1)
        if lo < hi:
            at = stride * lo - padding + j
            taps = grad_cols[:, :, lo:hi, j * c_in : (j + 1) * c_in]
            grad_in[:, :, at : at + stride * (hi - lo - 1) + 1 : stride] += taps


def _windows_into(out: torch.Tensor, h: torch.Tensor, at: int, stride: int) -> None:
    """Copy into out (workers, batch, n, k * c_in) the n windows of h (length and channels
    contiguous) starting at position `at`, `stride` apart: overlapping views, copied once."""
    workers, batch, n, width = out.shape
    if n:
        c_in = h.shape[3]
        windows = h.as_strided(
            (workers, batch, n, width),
            (h.stride(0), h.stride(1), stride * c_in, 1),
            h.storage_offset() + at * c_in,
        )
        out.copy_(windows)


def linear(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Every worker's `F.linear`: h (workers, batch, in), weight (workers, out, in), bias
    (workers, out) -> (workers, batch, out)."""
    return _WorkerLinear.apply(h, weight, bias)


class _WorkerLinear(torch.autograd.Function):
    """out = h @ weight^T + bias per worker, one `baddbmm`, with its backward written out.

    Autograd's own backward of `baddbmm(bias, h, weight.transpose(1, 2))` forms the
    weight's gradient as (h^T g)^T, a transposed view that every later pass (the copy into
    `p.grad`) reads against its layout; here it is g^T h, computed in the weight's own
    layout. The products are the same, so each gradient equals autograd's to float
    rounding (tested against a lone worker's module). Under `weight_grads_into` the product
    goes into the named tensor instead, added or written: the same bits as the product
    written out and then added or copied (tested; `_weight_grads`).

    Where every worker reads one row of the weight and bias (`Replicas`' shared rows), the
    forward and the input's gradient are one product over all workers' samples (`addmm`,
    `mm`) instead of a batched one over n views of that row: cnn1d_wide's hidden layer at
    8 x 32 samples took 0.86x and 0.91x the time, a Top-k step 0.25-0.35 ms less. Each
    output is the same dot product, on most CPUs' kernels with the same bits (tested against
    rows of their own); on some (a Xeon whose kernels block the MNIST-1D CNN's classifier,
    32 x 250 @ 250 x 10, another way) the two agree to float rounding only.
    """

    @staticmethod
    def forward(ctx, h, weight, bias):
        ctx.save_for_backward(h, weight)
        ctx.into = _INTO.get(id(weight))
        if _one_row(weight) and _one_row(bias):
            out = torch.addmm(bias[0], h.reshape(-1, h.shape[2]), weight[0].t())
            return out.view(*h.shape[:2], -1)
        return torch.baddbmm(bias.unsqueeze(1), h, weight.transpose(1, 2))

    @staticmethod
    def backward(ctx, grad):
        h, weight = ctx.saved_tensors
        grad_h = None
        if ctx.needs_input_grad[0] and _one_row(weight):
            grad_h = torch.mm(grad.reshape(-1, grad.shape[2]), weight[0]).view_as(h)
        elif ctx.needs_input_grad[0]:
            grad_h = torch.bmm(grad, weight)
        if ctx.into is None:
            return grad_h, _weight_grads(grad.transpose(1, 2), h, None, False), grad.sum(1)
        _weight_grads(grad.transpose(1, 2), h, *ctx.into)
        return grad_h, None, grad.sum(1)


def _weight_grads(
    grad_t: torch.Tensor,
    h: torch.Tensor,
    into: torch.Tensor | None,
    add: bool,
    norms: torch.Tensor | None = None,
) -> torch.Tensor:
    """Every worker's weight gradient grad_t[w] @ h[w]: written to a fresh tensor (`into`
    None), written to `into`, or added into it; each one's squared norm into `norms[w]`
    (if given), taken from the product before it is added.

    A large weight's products are taken worker by worker, each added or written while still
    in cache, where one batched product (8 MB for cnn1d_wide's hidden layer at 8 workers)
    was written out and read back to be added: a STAR or AG step 0.6-0.8 ms shorter. An
    added product is written into one buffer reused by every worker (1 MB for that layer, a
    core's cache) and added from there. `baddbmm_` (beta = 1) was 1.4-1.9 ms slower, and a
    worker's own `addmm_` (C += A B), faster alone with C in cache (2.0 against 2.5 ms for
    the eight), made a Top-k training step 1.1-1.5 ms longer, where the residual C comes
    from memory (its 8.7 MB last read by the previous step's selection); a fresh product per
    worker (a 1 MB allocation each) cost more again. Small weights keep the one batched
    product, whose launch is cheaper than n; a worker's `mm` and its row of `bmm` differ in
    the last bit for some shapes, so each weight is taken one way in all three cases, and a
    gradient put in place has the same bits as a fresh one (tested).
    """
    workers, rows, cols = grad_t.shape[0], grad_t.shape[1], h.shape[2]
    if into is None:
        into, add = grad_t.new_empty(workers, rows, cols), False
    if rows * cols < _PER_WORKER_FROM:
        product = torch.bmm(grad_t, h) if add else torch.bmm(grad_t, h, out=into)
        if norms is not None:
            norms.copy_(_sq_norms(product.view(workers, -1)))
        if add:
            into.add_(product)
        return into
    product = grad_t.new_empty(rows, cols) if add else None
    for w in range(workers):
        written = torch.mm(grad_t[w], h[w], out=product if add else into[w])
        if norms is not None:
            norms[w : w + 1] = _sq_norms(written.view(1, -1))
        if add:
            into[w].add_(written)
    return into


# Weights of at least this many entries (a 256 KB float32 product per worker, a cache's
# share) take their gradient products worker by worker.
_PER_WORKER_FROM = 65_536


def _sq_norms(rows: torch.Tensor) -> torch.Tensor:
    """Each row's ||row||^2 by the kernel `repro.compress.memory.sq_norms` uses (a layer
    must not import the methods' package), so a row measured here has its bits."""
    return torch.linalg.vector_norm(rows, dim=1).square()


def _one_row(t: torch.Tensor) -> bool:
    """Every worker reads one row (`Replicas`' shared rows, stride 0 on the worker axis)."""
    return t.shape[0] > 1 and t.stride(0) == 0
