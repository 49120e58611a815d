"""Top-k compressor and error feedback: exact invariants and hand-computed values."""

import pytest
import torch

from repro.compress.memory import ErrorFeedback, compression_gain, gain_from_norms
from repro.compress.topk import (
    compress,
    decompress,
    k_for,
    layer_ks,
    residual_after,
)


def test_k_for_floor_and_bounds():
    assert k_for(1000, 0.01) == 10
    assert k_for(1000, 0.0333) == 33
    assert k_for(10, 0.001) == 1  # never zero entries
    assert k_for(10, 1.0) == 10
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="cr="):
            k_for(10, bad)
    with pytest.raises(ValueError, match="empty"):
        k_for(0, 0.1)


def test_compress_keeps_the_largest_magnitudes():
    x = torch.tensor([0.5, -3.0, 2.0, -0.1, 4.0, 1.0])
    values, indices = compress(x, 3)
    assert sorted(indices.tolist()) == [1, 2, 4]
    assert torch.equal(values, x[indices])
    dense = decompress(values, indices, 6)
    assert torch.equal(dense, torch.tensor([0.0, -3.0, 2.0, 0.0, 4.0, 0.0]))


def test_compress_matches_a_naive_sort():
    x = torch.randn(5000, generator=torch.Generator().manual_seed(3))
    values, indices = compress(x, 50)
    naive = sorted(range(5000), key=lambda i: -abs(x[i].item()))[:50]
    assert sorted(indices.tolist()) == sorted(naive)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_residual_plus_decompressed_is_compensated_exactly(dtype):
    gen = torch.Generator().manual_seed(0)
    memory = ErrorFeedback()
    shapes = {"w": (20, 30), "b": (30,)}
    for _ in range(5):
        grads = {n: torch.randn(s, generator=gen, dtype=dtype) for n, s in shapes.items()}
        compensated = memory.compensate(grads)
        flat = torch.cat([compensated[n].reshape(-1) for n in shapes])
        values, indices = compress(flat, k_for(flat.numel(), 0.05))
        residual = residual_after(flat, indices)
        assert torch.equal(residual + decompress(values, indices, flat.numel()), flat)
        sizes = [compensated[n].numel() for n in shapes]
        pieces = residual.split(sizes)
        memory.update({n: r.view(shapes[n]) for n, r in zip(shapes, pieces, strict=True)})


def test_error_feedback_loses_no_gradient_mass():
    gen = torch.Generator().manual_seed(1)
    memory = ErrorFeedback()
    total_grad = torch.zeros(400, dtype=torch.float64)
    total_sent = torch.zeros(400, dtype=torch.float64)
    for _ in range(10):
        g = torch.randn(400, generator=gen, dtype=torch.float64)
        total_grad += g
        compensated = memory.compensate({"p": g})["p"]
        values, indices = compress(compensated, 8)
        total_sent += decompress(values, indices, 400)
        memory.update({"p": residual_after(compensated, indices)})
    torch.testing.assert_close(total_sent + memory.residuals["p"], total_grad)


def test_compensate_adds_residual_and_never_aliases():
    memory = ErrorFeedback()
    g = torch.tensor([1.0, 2.0])
    first = memory.compensate({"p": g})["p"]
    assert torch.equal(first, g) and first.data_ptr() != g.data_ptr()
    memory.update({"p": torch.tensor([0.5, -1.0])})
    assert torch.equal(memory.compensate({"p": g})["p"], torch.tensor([1.5, 1.0]))


def test_error_feedback_state_dict_round_trip():
    memory = ErrorFeedback()
    memory.update({"a": torch.tensor([1.0, 2.0]), "b": torch.tensor([3.0])})
    state = memory.state_dict()
    state["a"][0] = 99.0  # the saved copy must not alias the live residual
    restored = ErrorFeedback()
    restored.load_state_dict(memory.state_dict())
    assert torch.equal(restored.residuals["a"], torch.tensor([1.0, 2.0]))
    assert torch.equal(restored.residuals["b"], torch.tensor([3.0]))


def test_layer_ks_split_proportionally_and_sum_to_k():
    assert layer_ks([30, 70, 3], 10) == [3, 7, 0]
    assert layer_ks([5, 5], 3) == [2, 1]  # equal remainders: the earlier tensor first
    assert layer_ks([1, 1, 1], 3) == [1, 1, 1]
    for k in range(1, 104):
        shares = layer_ks([30, 70, 3], k)
        assert sum(shares) == k
        assert all(0 <= s <= n for s, n in zip(shares, [30, 70, 3], strict=True))
    with pytest.raises(ValueError, match="k="):
        layer_ks([3, 4], 8)


def test_layerwise_selects_within_each_tensor():
    # The first tensor dominates: whole-vector Top-k takes everything from it, layer-wise
    # Top-k takes each tensor's share from that tensor.
    x = torch.cat([torch.arange(10.0, 20.0), torch.arange(1.0, 11.0) / 100])
    _, whole = compress(x, 4)
    assert sorted(whole.tolist()) == [6, 7, 8, 9]
    values, layered = compress(x, 4, layer_sizes=[10, 10])
    assert sorted(layered.tolist()) == [8, 9, 18, 19]
    assert torch.equal(values, x[layered])
    residual = residual_after(x, layered)
    assert torch.equal(residual + decompress(values, layered, 20), x)
    with pytest.raises(ValueError, match="sum to"):
        compress(x, 4, layer_sizes=[10, 9])


def test_compression_gain_by_hand():
    compensated = torch.tensor([3.0, 4.0, 0.0])
    values, indices = compress(compensated, 1)
    assert compression_gain(values, compensated) == pytest.approx(16 / 25)  # keeps the 4
    sent = decompress(values, indices, 3)
    assert compression_gain(sent, compensated) == pytest.approx(0.64)
    assert compression_gain(compensated, compensated) == 1.0
    assert compression_gain(torch.zeros(3), torch.zeros(3)) == 1.0
    assert gain_from_norms(2.0, 8.0) == 0.25
