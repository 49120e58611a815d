"""The radix select against `torch.topk` and against a stable sort (the tie rule).

Without ties at the threshold the selected set must be exactly `torch.topk`'s; with ties it
must be the first k of a stable sort by magnitude, descending (equal magnitudes: lowest
index first), which `torch.sort(stable=True)` computes independently of the radix loops.
"""

import numpy as np
import pytest
import torch

from repro.compress import select_kernels
from repro.compress.select import add_selected, topk_entries, topk_indices, zero_selected
from repro.compress.topk import compress

WIDE = 271_224  # cnn1d_wide's parameters: the Top-k run set's rows
_BITS = {torch.float16: torch.int16, torch.float32: torch.int32, torch.float64: torch.int64}


def _selected(x: torch.Tensor, ks, sizes) -> torch.Tensor:
    """The selection's indices, once its values are checked to be x's entries there bit for
    bit (-0.0 apart from +0.0, a subnormal's own bits)."""
    values, indices = topk_entries(x, ks, sizes)
    bits = _BITS[x.dtype]
    assert torch.equal(values.view(bits), x.gather(1, indices).view(bits))
    return indices


def _stable_reference(x: torch.Tensor, ks, sizes) -> torch.Tensor:
    parts, offset = [], 0
    for k, size in zip(ks, sizes, strict=True):
        mag = x[:, offset : offset + size].abs()
        order = torch.sort(mag, dim=1, descending=True, stable=True).indices
        parts.append(order[:, :k].sort(dim=1).values + offset)
        offset += size
    return torch.cat(parts, dim=1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("k", [1, 27, 271, 2_712, 27_122, WIDE])
def test_the_same_set_as_torch_topk_on_eight_wide_rows(dtype, k):
    # Gaussian values: ties at a threshold are all but impossible, so the set is topk's
    x = torch.randn(8, WIDE, generator=torch.Generator().manual_seed(k), dtype=dtype)
    got = _selected(x, [k], [WIDE])
    assert got.shape == (8, k) and got.dtype == torch.int64
    expected = torch.topk(x.abs(), k, dim=1).indices.sort(dim=1).values
    assert torch.equal(got, expected)
    assert torch.equal(got, got.sort(dim=1).values)  # ascending, as documented


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("k", [1, 5, 271, 27_122])
def test_ties_at_the_threshold_go_to_the_lowest_indices(dtype, k):
    # 11 distinct magnitudes over 8 x 271,224 entries: every threshold is heavily tied.
    # float16 on the CPU takes the torch path, which must follow the same rule.
    gen = torch.Generator().manual_seed(7)
    x = torch.randint(-5, 6, (8, WIDE), generator=gen).to(dtype)
    got = _selected(x, [k], [WIDE])
    assert torch.equal(got, _stable_reference(x, [k], [WIDE]))
    mag = x.abs()
    kept = torch.zeros_like(mag, dtype=torch.bool).scatter_(1, got, True)
    threshold = mag.gather(1, got).min(dim=1, keepdim=True).values
    assert bool((mag[~kept].view(8, -1) <= threshold).all())  # nothing larger left out
    assert bool((mag[kept].view(8, -1) >= threshold).all())


def test_layer_segments_each_keep_their_own_count():
    gen = torch.Generator().manual_seed(1)
    sizes = [125, 25, 1875, 25, 1875, 25, 256_000, 1024, 10_240, 10]
    ks = [1, 0, 19, 0, 19, 0, 2_560, 10, 102, 1]
    x = torch.randn(8, sum(sizes), generator=gen)
    x[:, 150:160] = 2.5  # a tied block inside the third segment
    got = _selected(x, ks, sizes)
    assert torch.equal(got, _stable_reference(x, ks, sizes))
    # and no tensor's entries come from another tensor's columns
    starts = torch.tensor([0, *sizes]).cumsum(0)
    at = 0
    for s, k in enumerate(ks):
        part = got[:, at : at + k]
        assert bool(((part >= starts[s]) & (part < starts[s + 1])).all())
        at += k


def test_special_values_rank_as_torch_ranks_them():
    x = torch.tensor(
        [[0.0, -0.0, float("inf"), -1e-45, 3.0, float("-inf"), float("nan"), -3.0, 1e-38]]
    )
    assert topk_indices(x, [1], [9]).tolist() == [[6]]  # NaN first, as in torch.topk
    assert topk_indices(x, [3], [9]).tolist() == [[2, 5, 6]]
    assert topk_indices(x, [4], [9]).tolist() == [[2, 4, 5, 6]]  # |3.0| == |-3.0|: lower index
    assert topk_indices(x, [7], [9]).tolist() == [[2, 3, 4, 5, 6, 7, 8]]  # subnormal above 0
    assert topk_indices(x, [8], [9]).tolist() == [[0, 2, 3, 4, 5, 6, 7, 8]]  # +0 before -0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_ranks_special_values_as_the_compiled_loops(dtype):
    # torch's path (half precision here, any dtype on a GPU): a NaN ranks first, above
    # infinity, and no selection comes out short of k (a NaN equals no float threshold)
    x = torch.tensor([[0.0, -0.0, float("inf"), -1.0, 3.0, float("-inf"), float("nan"), -3.0]])
    for k, want in [
        (1, [6]),
        (2, [2, 6]),
        (3, [2, 5, 6]),
        (4, [2, 4, 5, 6]),
        (6, [2, 3, 4, 5, 6, 7]),
    ]:
        assert topk_indices(x.to(dtype), [k], [8]).tolist() == [want], k
        assert topk_indices(x, [k], [8]).tolist() == [want], k  # the compiled loops alike


@pytest.mark.parametrize("nonzero", [0, 10, 270, 271, 5_000])
def test_rows_of_almost_only_zeros_keep_their_non_zeros_and_the_first_zeros(nonzero):
    # a dead layer's gradients: fewer non-zeros than k makes the threshold 0 (the one-pass
    # path), as many or more keeps the radix passes; the non-zeros are tiny (subnormals
    # share the zeros' top bits), and -0.0 ties with +0.0 by index
    gen = torch.Generator().manual_seed(nonzero)
    x = torch.zeros(8, WIDE)
    x[:, 1000:1100] = -0.0
    where = torch.randperm(WIDE, generator=gen)[:nonzero]
    x[:, where] = torch.randn(8, nonzero, generator=gen) * 1e-40
    x[5] = torch.randn(WIDE, generator=gen)  # one live row beside the dead ones
    got = _selected(x, [271], [WIDE])
    assert torch.equal(got, _stable_reference(x, [271], [WIDE]))
    # a sample of a dead row is mostly zeros: the zero threshold is tried before anything
    # else; at 5,000 non-zeros the sample holds enough of them to narrow the row as usual
    mostly_zero = _narrowed(x[0], 271) == select_kernels._MOSTLY_ZERO
    assert mostly_zero == (nonzero <= 271)


def test_compress_takes_the_selection_and_its_values():
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(4, 10_000, generator=gen)
    values, indices = compress(x, 100)
    assert torch.equal(indices, _stable_reference(x, [100], [10_000]))
    assert torch.equal(values, x.gather(1, indices))


def test_bad_segments_are_refused():
    x = torch.randn(2, 10)
    with pytest.raises(ValueError, match="do not fit"):
        topk_indices(x, [3], [9])
    with pytest.raises(ValueError, match="segment's size"):
        topk_indices(x, [11], [10])


@pytest.mark.parametrize("k", [100, 5_000])
def test_a_sample_that_sees_only_the_largest_values_falls_back_to_the_whole_segment(k):
    # A long segment is first narrowed to the entries at or above a magnitude estimated
    # from 4,096 evenly spaced entries (every 9th here). Large values sit exactly on those
    # entries, so the estimate is one of the large values near the top of the sample's
    # k-share, and it lists about k / 9 candidates, fewer than k: the selection must then
    # take the whole segment and still be exact.
    gen = torch.Generator().manual_seed(k)
    x = torch.rand(2, 40_000, generator=gen)
    x[:, ::9] = 10.0 + torch.rand(2, len(range(0, 40_000, 9)), generator=gen)
    assert _narrowed(x[0], k) == -1  # the estimate did fall short
    got = _selected(x, [k], [40_000])
    assert torch.equal(got, _stable_reference(x, [k], [40_000]))


@pytest.mark.parametrize("by_blocks", [True, False])
@pytest.mark.parametrize("share", [0.0005, 0.01, 0.1])
def test_the_candidate_listing_holds_every_entry_at_or_above_the_estimate(share, by_blocks):
    # A segment that starts inside the row and ends in a partial block, with its large
    # values crowded into a few places (as a layer's gradients are): listed block by block
    # (only the blocks whose largest magnitude reaches the estimate) or entry by entry, the
    # list is every entry whose magnitude is at or above the estimate, in index order, with
    # its bits, sign and all (the filter writes the kept entries from them).
    gen = torch.Generator().manual_seed(3)
    row = torch.randn(100_000, generator=gen) * 1e-3
    row[40_000:40_300] *= 1e3
    row[70_001] = float("-inf")
    start, stop = 1_237, 97_789  # neither a multiple of the block from the start
    bits = row.view(torch.int32).numpy()
    mag = np.abs(row.numpy()).view(np.int32).astype(np.int64)
    estimate = np.sort(mag[start:stop])[-int(share * (stop - start)) - 1]
    listed, vals = (np.empty(stop - start, dtype=np.int64) for _ in range(2))
    peaks = np.empty((stop - start) // select_kernels._BLOCK + 1, dtype=np.int64)
    magnitude = np.int64(2**31 - 1)
    blocks = 0
    if by_blocks:
        blocks = select_kernels._block_peaks(bits, magnitude, start, stop, peaks)
        assert blocks == len(peaks)  # the partial block at the end is one more
    m = select_kernels._listed(bits, magnitude, start, stop, estimate, listed, vals, peaks, blocks)
    expected = np.flatnonzero(mag[start:stop] >= estimate) + start
    assert np.array_equal(listed[:m], expected)
    assert np.array_equal(vals[:m], bits[expected].astype(np.int64))
    assert (bits[expected] < 0).any()  # negative entries are listed with their sign


@pytest.mark.parametrize("k", [1, 10, 102, 160])
def test_short_segments_narrowed_by_their_block_peaks_keep_torch_topk_s_set(k):
    # Segments too short to sample (a layer's 10,240 weights, its 25 biases) are narrowed
    # to the blocks whose peak reaches the k-th largest peak, a bound never above the k-th
    # largest entry; with the largest values crowded into one block and a tied pair at the
    # threshold's side, the set is still the stable sort's first k.
    gen = torch.Generator().manual_seed(k)
    sizes = [10_240, 25, 1_875]
    x = torch.randn(3, sum(sizes), generator=gen, dtype=torch.float64)
    x[0, 640:704] *= 100.0
    x[1, 5_000] = x[1, 7_001] = -x[1, :10_240].abs().max()
    x[2, :10_240] = 0.0  # a dead layer: the bound is 0 and the zero threshold takes it
    x[2, 9_000] = 1.0
    ks = [k, 1, min(k, 29)]
    assert torch.equal(_selected(x, ks, sizes), _stable_reference(x, ks, sizes))


def _narrowed(row: torch.Tensor, k: int) -> int:
    """What the candidate narrowing makes of one float32 row: how many it listed, -1 (fell
    short) or its mostly-zero mark."""
    listed, vals = (np.empty(row.numel(), dtype=np.int64) for _ in range(2))
    sample = np.empty(select_kernels._SAMPLE, dtype=np.int64)
    peaks = np.empty(row.numel() // select_kernels._BLOCK + 1, dtype=np.int64)
    bits = row.contiguous().view(torch.int32).numpy()
    magnitude = np.int64(2**31 - 1)
    low = np.zeros(1 << select_kernels._DIGIT, dtype=np.int64)
    return select_kernels._candidates(
        bits, magnitude, 0, row.numel(), k, listed, vals, sample, peaks, low
    )


@pytest.mark.parametrize("width", [32, 64])
@pytest.mark.parametrize("prefix_bits", [0, 20])
def test_the_digit_passes_find_the_rank_th_largest_and_its_ties(width, prefix_bits):
    # The threshold's digits (and the sample's estimate, and the k-th block peak) come from
    # `_narrow`: among the values whose bits from `bits` up equal the prefix, the rank-th
    # largest and how many values equal to it that rank takes, against a sort. Values
    # crowd onto a few magnitudes (ties), include 0 and the largest magnitude, and half
    # lie outside the prefix when one is set.
    rng = np.random.default_rng(width + prefix_bits)
    top = 2 ** (width - 1) - 1
    bits = prefix_bits or width - 1
    prefix = (rng.integers(1, top >> bits) << bits) if prefix_bits else 0
    inside = prefix + rng.choice([0, 1, 7, (1 << bits) - 1, *rng.integers(0, 1 << bits, 60)], 3000)
    outside = rng.integers(0, top, 3000, dtype=np.int64)
    outside = outside[(outside >> bits) != (prefix >> bits)] if prefix_bits else outside[:0]
    vals = rng.permutation(np.concatenate([inside, outside])).astype(np.int64)
    low = np.zeros(1 << select_kernels._DIGIT, dtype=np.int64)
    ordered = np.sort(inside)[::-1]
    for rank in (1, 2, 100, 1500, len(inside)):
        value, count = select_kernels._narrow(vals, len(vals), rank, prefix, bits, low)
        assert value == ordered[rank - 1]
        assert count == rank - int((inside > value).sum())
        assert not low.any()  # cleared for the next use, as every caller expects


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shared", [False, True])
def test_zeroing_the_selection_writes_what_scatter_writes(dtype, shared):
    # per-row positions (AG-Topk) and one row expanded over all (AR-Topk's leader), each
    # against torch's own writes; a strided view takes torch's path and must agree too
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(8, 10_000, generator=gen, dtype=dtype)
    rows = 1 if shared else 8
    idx = torch.stack([torch.randperm(10_000, generator=gen)[:997].sort().values] * rows)
    idx = idx.expand(8, -1) if shared else idx
    expected = x.scatter(1, idx.contiguous(), 0.0)
    got = x.clone()
    zero_selected(got, idx)
    assert torch.equal(got, expected)
    assert int((got == 0).sum()) == 8 * 997  # nothing else touched (no zeros in randn)
    wide = torch.zeros(8, 20_000, dtype=dtype)
    wide[:, ::2] = x
    zero_selected(wide[:, ::2], idx)
    assert torch.equal(wide[:, ::2], expected) and int((wide[:, 1::2] != 0).sum()) == 0
    # taking the values out as they are zeroed (AR-Topk's message: a view beside its norms)
    for given in (x.clone(), torch.zeros(8, 20_000, dtype=dtype)[:, ::2].copy_(x)):
        message = torch.full((8, 999), 7.0, dtype=dtype)
        zero_selected(given, idx, taken=message[:, :997])
        assert torch.equal(given, expected) and torch.equal(message[:, :997], x.gather(1, idx))
        assert (message[:, 997:] == 7).all()
    with pytest.raises(IndexError):  # refused, as torch refuses it, not written past the end
        zero_selected(got, torch.full_like(idx, 10_000))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_adding_every_row_s_values_gives_index_add_s_sums_bit_for_bit(dtype):
    # 8 workers' positions overlapping heavily (AG-Topk's sum), read as the allgather's
    # message holds them: values and indices side by side in each row, indices in the
    # values' width; a float sum depends on its order, so this pins the order
    gen = torch.Generator().manual_seed(11)
    k, numel = 3_000, 10_000
    values = torch.randn(8, k, generator=gen, dtype=dtype) * 10 ** torch.randint(
        -4, 4, (8, k), generator=gen
    ).to(dtype)
    indices = torch.stack([torch.randperm(numel, generator=gen)[:k] for _ in range(8)])
    width = torch.int32 if dtype == torch.float32 else torch.int64
    message = torch.cat([values, indices.to(width).view(dtype)], dim=1)
    expected = torch.zeros(numel, dtype=dtype)
    expected.index_add_(0, indices.reshape(-1), values.reshape(-1))
    got = torch.zeros(numel, dtype=dtype)
    add_selected(got, message[:, k:].view(width), message[:, :k])
    assert torch.equal(got, expected)
    # another order gives other bits, so the test can tell
    other = torch.zeros(numel, dtype=dtype)
    other.index_add_(0, indices.flip(0).reshape(-1), values.flip(0).reshape(-1))
    assert not torch.equal(got, other)
    with pytest.raises(IndexError):  # a damaged message's position is refused
        add_selected(got, torch.tensor([[3, numel]]), torch.ones(1, 2, dtype=dtype))


def test_the_threshold_filter_writes_nothing_past_its_k_entries():
    # The filter writes each listed index before it knows whether it keeps it, and must stop
    # at the k-th kept: here 30 equal magnitudes are listed for k = 10, so entries 10-29
    # follow the last one kept. Run as plain Python (`py_func`), where numpy refuses a write
    # past `out`'s k slots that the compiled loop would make unchecked.
    row = np.full(100, 0.5, dtype=np.float32)
    row[:30] = -1.0
    k = 10
    out, kept = np.empty(k, dtype=np.int64), np.empty(k, dtype=np.int32)
    scratch = [np.empty(100, dtype=np.int64) for _ in range(3)]  # listed, vals, members
    select_kernels._select_segment.py_func(
        row.view(np.int32),
        0,
        100,
        k,
        out,
        kept,
        0,
        np.zeros(select_kernels._LANES << select_kernels._TOP, dtype=np.int32),
        np.zeros(1 << select_kernels._DIGIT, dtype=np.int64),
        scratch[0],
        scratch[1],
        np.empty(select_kernels._SAMPLE, dtype=np.int64),
        np.empty(100 // select_kernels._BLOCK + 1, dtype=np.int64),
        scratch[2],
    )
    assert out.tolist() == list(range(10))
    assert np.array_equal(kept.view(np.float32), np.full(k, -1.0, dtype=np.float32))
