"""The fused CPU loops against plain float64 arithmetic and against the torch path they
replace (which non-contiguous, half-precision and CUDA tensors still take)."""

import pytest
import torch

from repro.comm.adasum_allreduce import dot_stats, scaled_add_


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_stats_are_the_float64_sums(dtype):
    g = torch.Generator().manual_seed(3)
    a, b = (torch.randn(100_003, generator=g, dtype=dtype) for _ in range(2))
    a64, b64 = a.double(), b.double()
    expected = [torch.dot(a64, b64), torch.dot(a64, a64), torch.dot(b64, b64)]
    torch.testing.assert_close(dot_stats(a, b), torch.stack(expected), rtol=1e-12, atol=1e-9)
    # every other element: a strided view takes the torch path
    strided = dot_stats(a[::2], b[::2])
    packed = dot_stats(a[::2].contiguous(), b[::2].contiguous())
    torch.testing.assert_close(packed, strided, rtol=1e-12, atol=1e-9)


def test_stats_of_float32_products_below_float32_range_are_kept():
    tiny = torch.finfo(torch.float32).tiny
    a = torch.full((1000,), 3 * tiny)
    b = torch.full((1000,), 5 * tiny)
    # each product is ~1e-75: zero in float32, exact in float64
    ab, aa, bb = dot_stats(a, b).tolist()
    t = float(a[0])
    assert aa == pytest.approx(1000 * t * t, rel=1e-12) and aa > 0
    assert ab == pytest.approx(1000 * t * float(b[0]), rel=1e-12)
    assert bb == pytest.approx(1000 * float(b[0]) ** 2, rel=1e-12)


def test_weighted_sum_is_rounded_once_from_float64():
    g = torch.Generator().manual_seed(4)
    own, other = torch.randn(50_001, generator=g), torch.randn(50_001, generator=g)
    c_own, c_other = 0.3141592653589793, -1.2345678901234567
    expected = (c_own * own.double() + c_other * other.double()).float()
    got = scaled_add_(own.clone(), other, c_own, c_other)
    assert torch.equal(got, expected)
    # a weight beyond float32's range on a tiny input: no overflow, the float64 value
    tiny = torch.full((8,), torch.finfo(torch.float32).tiny)
    ones = torch.ones(8)
    out = scaled_add_(tiny.clone(), ones, 1e39, 1.0)
    assert torch.equal(out, (1e39 * tiny.double() + 1.0).float())


def test_in_place_on_a_slice_leaves_the_rest_alone():
    buf = torch.arange(10, dtype=torch.float32)
    scaled_add_(buf[2:5], torch.ones(3), 2.0, 1.0)
    assert buf.tolist() == [0, 1, 5, 7, 9, 5, 6, 7, 8, 9]
