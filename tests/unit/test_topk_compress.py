"""Top-k compressor and error feedback: exact invariants and hand-computed values.

The compressor works on rows (workers, size), one per worker on the leading axis; a single
worker's vector is a one-row tensor here.
"""

import pytest
import torch

from repro.comm.axis_collectives import AxisCollectives
from repro.compress.exchange import dense_exchange
from repro.compress.memory import ErrorFeedback, NoMemory, gain_from_norms, sq_norms
from repro.compress.topk import (
    compress,
    decompress,
    k_for,
    layer_ks,
)
from tests.helpers import residual_after


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
    x = torch.tensor([[0.5, -3.0, 2.0, -0.1, 4.0, 1.0]])
    values, indices = compress(x, 3)
    assert values.shape == indices.shape == (1, 3)
    assert sorted(indices[0].tolist()) == [1, 2, 4]
    assert torch.equal(values, x.gather(1, indices))
    dense = decompress(values, indices, 6)
    assert torch.equal(dense, torch.tensor([[0.0, -3.0, 2.0, 0.0, 4.0, 0.0]]))


def test_compress_matches_a_naive_sort():
    x = torch.randn(1, 5000, generator=torch.Generator().manual_seed(3))
    values, indices = compress(x, 50)
    naive = sorted(range(5000), key=lambda i: -abs(x[0, i].item()))[:50]
    assert sorted(indices[0].tolist()) == sorted(naive)


def test_each_row_is_compressed_on_its_own():
    # Two workers whose largest entries sit in different places: each row keeps its own,
    # exactly as compressing that row alone would, and the rows never mix.
    x = torch.tensor([[9.0, 1.0, -8.0, 0.5, 0.0], [0.1, -7.0, 0.2, 6.0, -0.3]])
    values, indices = compress(x, 2)
    assert [sorted(row) for row in indices.tolist()] == [[0, 2], [1, 3]]
    for r in range(2):
        alone_values, alone_indices = compress(x[r : r + 1], 2)
        assert torch.equal(indices[r : r + 1], alone_indices)
        assert torch.equal(values[r : r + 1], alone_values)
    dense = decompress(values, indices, 5)
    assert torch.equal(dense, torch.tensor([[9.0, 0, -8.0, 0, 0], [0, -7.0, 0, 6.0, 0]]))
    residual = residual_after(x, indices)
    assert torch.equal(residual, torch.tensor([[0, 1.0, 0, 0.5, 0.0], [0.1, 0, 0.2, 0, -0.3]]))
    assert torch.equal(residual + dense, x)
    with pytest.raises(ValueError, match="rows"):
        compress(x[0], 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_residual_plus_decompressed_is_compensated_exactly(dtype):
    gen = torch.Generator().manual_seed(0)
    memory = ErrorFeedback()
    shapes = {"w": (2, 600), "b": (2, 30)}  # two workers' rows of two tensors
    residuals = {n: torch.zeros(s, dtype=dtype) for n, s in shapes.items()}
    for _ in range(5):
        grads = {n: torch.randn(s, generator=gen, dtype=dtype) for n, s in shapes.items()}
        flat = memory.compensate_flat(grads)
        # G = grad + residual, computed here independently of the memory
        expected = torch.cat([grads[n] + residuals[n] for n in shapes], dim=1)
        assert torch.equal(flat, expected)
        values, indices = compress(flat, k_for(flat.shape[1], 0.05))
        residual = residual_after(flat, indices)
        assert torch.equal(residual + decompress(values, indices, flat.shape[1]), flat)
        memory.keep(flat, indices)
        assert torch.equal(flat, residual)  # kept in place: the same bits as residual_after
        residuals = dict(zip(shapes, residual.split([600, 30], dim=1), strict=True))
        for n in shapes:
            assert torch.equal(memory.residuals[n], residuals[n])


def test_error_feedback_loses_no_gradient_mass():
    gen = torch.Generator().manual_seed(1)
    memory = ErrorFeedback()
    total_grad = torch.zeros(1, 400, dtype=torch.float64)
    total_sent = torch.zeros(1, 400, dtype=torch.float64)
    for _ in range(10):
        g = torch.randn(1, 400, generator=gen, dtype=torch.float64)
        total_grad += g
        compensated = memory.compensate_flat({"p": g})
        values, indices = compress(compensated, 8)
        total_sent += decompress(values, indices, 400)
        memory.keep(compensated, indices)
    torch.testing.assert_close(total_sent + memory.residuals["p"], total_grad)


def test_compensate_adds_residual_and_never_aliases():
    memory = ErrorFeedback()
    g = torch.tensor([[1.0, 2.0]])
    first = memory.compensate_flat({"p": g})
    assert torch.equal(first, g) and first.data_ptr() != g.data_ptr()
    memory.load_state_dict({"p": torch.tensor([[0.5, -1.0]])})
    assert torch.equal(memory.compensate_flat({"p": g}), torch.tensor([[1.5, 1.0]]))
    assert torch.equal(g, torch.tensor([[1.0, 2.0]]))  # the gradient itself is untouched


def test_two_buffers_alternate_across_steps():
    """A step writes G into the buffer the residual before last lived in: no allocation
    of the model's size per step, and never into the residual it is adding."""
    memory = ErrorFeedback()
    g = torch.ones(2, 5)
    first = memory.compensate_flat({"p": g})
    memory.keep(first, torch.tensor([[0], [1]]))
    second = memory.compensate_flat({"p": g})
    assert second.data_ptr() != first.data_ptr()
    assert torch.equal(second, torch.tensor([[1.0, 2, 2, 2, 2], [2, 1, 2, 2, 2]]))
    memory.keep(second, None)  # a dense exchange: nothing stays behind
    assert memory.residuals == {} and memory.state_dict() == {}
    third = memory.compensate_flat({"p": g})
    assert third.data_ptr() == second.data_ptr()  # free once all of it went out
    assert torch.equal(third, g)


def test_a_dense_exchange_frees_g_for_the_next_backward_and_shares_none_of_it():
    """The dense average sums G in place and divides one row of its own: the memory then
    offers G's buffer for the next backward to write into (nothing to add), and writing
    there leaves the update the optimizer is about to read as it was."""
    memory = ErrorFeedback()
    g = torch.arange(12.0).view(3, 4)
    flat = memory.compensate_flat({"p": g})
    result = dense_exchange(AxisCollectives(3), flat, "ring")
    expected = torch.tensor([4.0, 5.0, 6.0, 7.0])  # each column's mean over the 3 workers
    assert all(torch.equal(row, expected) for row in result.average)
    memory.update(flat, result)
    targets = memory.gradient_targets()
    assert not targets.add and targets.tensors["p"].data_ptr() == flat.data_ptr()
    targets.tensors["p"].fill_(-1.0)  # the next backward's gradient
    assert all(torch.equal(row, expected) for row in result.average)
    assert torch.equal(
        memory.compensate_flat({"p": targets.tensors["p"]}), torch.full((3, 4), -1.0)
    )


def test_gradients_added_into_the_residuals_form_g_in_their_buffer():
    """Where the backward added a gradient into its residual (`gradient_targets`), G
    forms in the residuals' own buffer: the other gradients are added there in place, and
    the result is the G of fresh gradients. After a load the residuals are tensors of
    their own and are offered to no backward."""
    memory = ErrorFeedback()
    assert memory.gradient_targets() is None  # no residual yet
    grads = {"w": torch.arange(6.0).view(2, 3), "b": torch.full((2, 2), 0.5)}
    first = memory.compensate_flat(grads)
    memory.keep(first, torch.tensor([[0, 4], [1, 2]]))
    want = first + torch.cat([grads["w"], grads["b"]], 1)  # residual + g, as a fresh G
    targets = memory.gradient_targets()
    assert targets.add
    targets.tensors["w"].add_(grads["w"])  # what the weight-gradient product does in the backward
    formed = memory.compensate_flat({"w": targets.tensors["w"], "b": grads["b"]})
    assert formed.data_ptr() == first.data_ptr()
    assert torch.equal(formed, want)
    memory.keep(formed, torch.tensor([[3], [0]]))
    assert memory.residuals["w"].data_ptr() == first.data_ptr()
    memory.load_state_dict(memory.state_dict())
    assert memory.gradient_targets() is None


def test_gradients_written_into_no_memorys_buffer_are_sent_from_it_uncopied():
    """`NoMemory` offers the buffer the last G went out from; a gradient the backward wrote
    there is G as it is, the others are copied in beside it."""
    memory = NoMemory()
    assert memory.gradient_targets() is None  # no buffer yet
    grads = {"w": torch.arange(6.0).view(2, 3), "b": torch.full((2, 2), 0.5)}
    first = memory.compensate_flat(grads)
    memory.update(first, None)  # what went out does not matter: nothing is kept
    targets = memory.gradient_targets()
    assert not targets.add and targets.tensors["w"].data_ptr() == first.data_ptr()
    targets.tensors["w"].copy_(grads["w"] * 2)  # what the weight-gradient product writes
    g = memory.compensate_flat({"w": targets.tensors["w"], "b": grads["b"]})
    assert g.data_ptr() == first.data_ptr()
    assert torch.equal(g, torch.cat([grads["w"] * 2, grads["b"]], 1))


def test_error_feedback_state_dict_round_trip():
    memory = ErrorFeedback()
    flat = memory.compensate_flat({"a": torch.tensor([[1.0, 2.0]]), "b": torch.tensor([[3.0]])})
    memory.keep(flat, torch.tensor([[1]]))
    state = memory.state_dict()
    state["a"][0, 0] = 99.0  # the saved copy must not alias the live residual
    restored = ErrorFeedback()
    restored.load_state_dict(memory.state_dict())
    assert torch.equal(restored.residuals["a"], torch.tensor([[1.0, 0.0]]))
    assert torch.equal(restored.residuals["b"], torch.tensor([[3.0]]))


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
    x = torch.cat([torch.arange(10.0, 20.0), torch.arange(1.0, 11.0) / 100]).view(1, -1)
    _, whole = compress(x, 4)
    assert sorted(whole[0].tolist()) == [6, 7, 8, 9]
    values, layered = compress(x, 4, layer_sizes=[10, 10])
    assert sorted(layered[0].tolist()) == [8, 9, 18, 19]
    assert torch.equal(values, x.gather(1, layered))
    residual = residual_after(x, layered)
    assert torch.equal(residual + decompress(values, layered, 20), x)
    with pytest.raises(ValueError, match="sum to"):
        compress(x, 4, layer_sizes=[10, 9])
    # A second worker whose second tensor dominates: its whole-vector pick differs, its
    # layer-wise pick is each tensor's share again, row by row.
    rows = torch.cat([x, x.flip(1)])
    _, whole_rows = compress(rows, 4)
    assert sorted(whole_rows[1].tolist()) == [10, 11, 12, 13]
    _, layered_rows = compress(rows, 4, layer_sizes=[10, 10])
    assert [sorted(r) for r in layered_rows.tolist()] == [[8, 9, 18, 19], [0, 1, 10, 11]]


def test_compression_gain_by_hand():
    compensated = torch.tensor([[3.0, 4.0, 0.0]])
    values, indices = compress(compensated, 1)
    kept = sq_norms(values)[0].item()
    assert gain_from_norms(kept, sq_norms(compensated)[0].item()) == pytest.approx(16 / 25)
    sent = decompress(values, indices, 3)
    assert sq_norms(sent)[0].item() == kept  # the 4, wherever it sits
    assert gain_from_norms(2.0, 8.0) == 0.25
    assert gain_from_norms(0.0, 0.0) == 1.0  # an all-zero gradient lost nothing
