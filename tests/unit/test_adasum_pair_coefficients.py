"""The one-pair coefficients in Python floats are `adasum_coefficients`' tensors, bit for bit,
on random statistics and at the zero-norm guard's edges."""

import math
import sys

import torch

from repro.comm.adasum_allreduce import adasum_coefficients, pair_coefficients
from repro.comm.adasum_rules import ZERO_NORM_GUARDS


def _tensor_pair(dot: float, a_sq: float, b_sq: float, guard: float) -> tuple[float, float]:
    t = torch.tensor([dot, a_sq, b_sq], dtype=torch.float64)
    ca, cb = adasum_coefficients(t[0], t[1], t[2], guard)
    return ca.item(), cb.item()


def test_random_statistics_give_the_same_bits():
    gen = torch.Generator().manual_seed(0)
    norms = torch.rand(2000, 2, generator=gen, dtype=torch.float64) * 10.0 ** torch.randint(
        -30, 30, (2000, 2), generator=gen
    )
    cosines = torch.rand(2000, generator=gen, dtype=torch.float64) * 2 - 1
    for guard in ZERO_NORM_GUARDS.values():
        for (a_sq, b_sq), cos in zip(norms.tolist(), cosines.tolist(), strict=True):
            dot = cos * math.sqrt(a_sq * b_sq)
            assert pair_coefficients(dot, a_sq, b_sq, guard) == _tensor_pair(dot, a_sq, b_sq, guard)


def test_the_guard_keeps_a_coefficient_at_one_on_both_paths():
    tiny = sys.float_info.min
    for guard in ZERO_NORM_GUARDS.values():
        for a_sq, b_sq in ((0.0, 1.0), (1.0, 0.0), (0.0, 0.0), (guard, guard), (tiny, 4.0)):
            got = pair_coefficients(0.5 * math.sqrt(a_sq * b_sq), a_sq, b_sq, guard)
            assert got == _tensor_pair(0.5 * math.sqrt(a_sq * b_sq), a_sq, b_sq, guard)
            if a_sq < guard:
                assert got[0] == 1.0
            if b_sq < guard:
                assert got[1] == 1.0
        assert pair_coefficients(0.0, 0.0, 0.0, guard) == (1.0, 1.0)  # two zeros: summed
