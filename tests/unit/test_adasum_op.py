"""The Adasum reference operator against values worked out independently."""

import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from repro.comm.adasum_rules import ZERO_NORM_GUARDS
from repro.errors import UserError
from repro.strategies.adasum import (
    COMBINERS,
    AdasumConfig,
    adasum_pair,
    adasum_per_tensor,
    adasum_reduce,
)


def _naive_pair(a: list[float], b: list[float]) -> list[float]:
    """The paper's formula in plain Python floats (double precision)."""
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na, nb = sum(x * x for x in a), sum(y * y for y in b)
    ca = 1 - dot / (2 * na) if na > 0 else 1.0
    cb = 1 - dot / (2 * nb) if nb > 0 else 1.0
    return [ca * x + cb * y for x, y in zip(a, b, strict=True)]


def test_pair_matches_formula_by_hand():
    a, b = torch.tensor([3.0, 4.0], dtype=torch.float64), torch.tensor([1.0, 0.0]).double()
    # a.b = 3, |a|^2 = 25, |b|^2 = 1: weights 1 - 3/50 = 0.94 and 1 - 3/2 = -0.5.
    expected = torch.tensor([0.94 * 3 - 0.5, 0.94 * 4], dtype=torch.float64)
    torch.testing.assert_close(adasum_pair(a, b), expected, rtol=1e-15, atol=0)


def test_orthogonal_inputs_are_summed():
    q, _ = torch.linalg.qr(torch.randn(16, 4, dtype=torch.float64, generator=_gen(1)))
    vecs = [q[:, i] * s for i, s in enumerate([0.3, 2.0, 7.0, 1e-3])]
    torch.testing.assert_close(adasum_reduce(vecs), sum(vecs), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_parallel_inputs_with_random_magnitudes_and_signs_give_the_mean(n):
    g = _gen(n)
    direction = torch.randn(37, dtype=torch.float64, generator=g)
    scales = torch.rand(n, dtype=torch.float64, generator=g) * 10 + 0.1
    signs = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).double()
    vecs = [direction * s * sign for s, sign in zip(scales, signs, strict=True)]
    expected = sum(vecs) / n
    torch.testing.assert_close(adasum_reduce(vecs), expected, rtol=1e-12, atol=1e-12)


def test_values_near_smallest_normal_float32_stay_finite_and_correct():
    tiny = torch.finfo(torch.float32).tiny  # 1.18e-38: their squares underflow in float32
    g = _gen(3)
    direction = torch.randn(64, generator=g)
    a, b = direction * (2 * tiny), direction * (6 * tiny)
    out = adasum_pair(a, b)
    assert torch.isfinite(out).all()
    # Parallel inputs: the mean, i.e. 4 * tiny * direction, not the sum.
    torch.testing.assert_close(out, direction * (4 * tiny), rtol=1e-5, atol=0)
    # Orthogonal tiny inputs: the sum; a tiny input against a normal one: the exact formula.
    e0, e1 = torch.zeros(4), torch.zeros(4)
    e0[0], e1[1] = 3 * tiny, 5 * tiny
    torch.testing.assert_close(adasum_pair(e0, e1), e0 + e1, rtol=0, atol=0)
    # Against a normal input, a tiny one's weight 1 - a.b/(2|a|^2) ~ -1/(2 * scale) exceeds
    # the float32 range below scale ~ 1.5e-39, though the weighted term stays ~ -b_0/2.
    big = torch.tensor([1.0, 2.0, -1.0, 0.5])
    for scale in (tiny, tiny / 16):
        small = torch.tensor([1.0, 0.0, 0.0, 0.0]) * scale
        expected = torch.tensor(_naive_pair(small.tolist(), big.tolist()), dtype=torch.float64)
        got = adasum_pair(small, big)
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got.double(), expected, rtol=1e-6, atol=0)


def test_zero_vector_leaves_the_other_unchanged():
    v = torch.tensor([1.5, -2.0, 0.25])
    z = torch.zeros(3)
    assert torch.equal(adasum_pair(v, z), v)
    assert torch.equal(adasum_pair(z, v), v)
    assert torch.equal(adasum_pair(z, z), z)


FIXED = ZERO_NORM_GUARDS["fixed_1e-8"]
# Horovod's C++ Adasum (ops/adasum/adasum.h) weighs an input only when its squared norm is
# at least sqrt(DBL_MIN); DBL_MIN = 2^-1022, the smallest normal double.
HOROVOD_BOUND = math.sqrt(2.0**-1022)


@pytest.mark.parametrize(
    "guard, bound", [("horovod", HOROVOD_BOUND), ("fixed_1e-8", 1e-8)], ids=["horovod", "1e-8"]
)
@pytest.mark.parametrize("side", [1 - 1e-6, 1 + 1e-6], ids=["below", "above"])
def test_each_guard_switches_at_its_own_bound(guard, bound, side):
    # a = (x, 0) with |a|^2 = x^2 just below or above the bound; b = (0.6, 0.8), |b|^2 = 1,
    # a.b = 0.6 x. Below: a keeps weight 1, so the result is (x + 0.6 cb, 0.8 cb) with
    # cb = 1 - 0.3 x; above: a's weight is 1 - 0.3 / x, giving (x - 0.3 + 0.6 cb, 0.8 cb).
    x = math.sqrt(bound * side)
    assert (x * x < bound) == (side < 1)
    a = torch.tensor([x, 0.0], dtype=torch.float64)
    b = torch.tensor([0.6, 0.8], dtype=torch.float64)
    cb = 1 - 0.3 * x
    first = x + 0.6 * cb if side < 1 else x - 0.3 + 0.6 * cb
    expected = torch.tensor([first, 0.8 * cb], dtype=torch.float64)
    torch.testing.assert_close(
        adasum_pair(a, b, ZERO_NORM_GUARDS[guard]), expected, rtol=1e-12, atol=0
    )


def test_default_guard_is_horovods():
    assert AdasumConfig().zero_norm_guard == "horovod"
    assert ZERO_NORM_GUARDS["horovod"] == pytest.approx(HOROVOD_BOUND, rel=1e-15)


def test_fixed_guard_sums_small_inputs_that_horovods_guard_weighs():
    # |a|^2 = 1e-10 and |b|^2 = 2.5e-9, both under 1e-8, far over Horovod's bound.
    a = torch.tensor([1e-5, 0.0, 0.0], dtype=torch.float64)
    b = torch.tensor([3e-5, 4e-5, 0.0], dtype=torch.float64)
    assert torch.equal(adasum_pair(a, b, FIXED), a + b)
    # a.b = 3e-10: weights 1 - 3e-10 / 2e-10 = -0.5 and 1 - 3e-10 / 5e-9 = 0.94.
    expected = torch.tensor([-0.5e-5 + 0.94 * 3e-5, 0.94 * 4e-5, 0.0], dtype=torch.float64)
    torch.testing.assert_close(adasum_pair(a, b), expected, rtol=1e-14, atol=0)
    torch.testing.assert_close(adasum_pair(a, b, ZERO_NORM_GUARDS["horovod"]), expected)


def test_fixed_guard_keeps_only_the_small_inputs_weight_at_one():
    small = torch.tensor([1e-5, 0.0], dtype=torch.float64)  # |small|^2 = 1e-10
    big = torch.tensor([2.0, 1.0], dtype=torch.float64)  # |big|^2 = 5, a.b = 2e-5
    # 1e-8: 1 * small + (1 - 2e-5 / 10) * big; under Horovod's bound the small input's
    # weight is 1 - 2e-5 / 2e-10 = -99999, which nearly cancels big's first entry.
    fixed = adasum_pair(small, big, FIXED)
    torch.testing.assert_close(fixed, small + (1 - 2e-6) * big, rtol=1e-15, atol=0)
    horovod = adasum_pair(small, big)
    naive = torch.tensor(_naive_pair(small.tolist(), big.tolist()), dtype=torch.float64)
    torch.testing.assert_close(horovod, naive)
    assert abs(horovod[0].item() - 1.0) < 0.01 and abs(fixed[0].item() - 2.0) < 1e-4


def test_fixed_guard_through_the_tree_and_per_tensor():
    g = _gen(11)
    # Layer 0 small on every worker (sums of up to 4 stay under 1e-8), layer 1 normal.
    workers = [
        [torch.randn(5, generator=g, dtype=torch.float64) * 1e-5, torch.randn(6, generator=g)]
        for _ in range(4)
    ]
    workers = [[w[0], w[1].double()] for w in workers]
    guarded = adasum_per_tensor(workers, FIXED)
    assert torch.equal(
        guarded[0], (workers[0][0] + workers[1][0]) + (workers[2][0] + workers[3][0])
    )
    assert not torch.allclose(adasum_per_tensor(workers)[0], guarded[0])
    assert torch.equal(guarded[1], adasum_per_tensor(workers)[1])


def test_tree_order_for_eight_inputs_is_nested_pairs():
    g = _gen(8)
    xs = [torch.randn(11, dtype=torch.float64, generator=g) for _ in range(8)]
    p = adasum_pair
    expected = p(
        p(p(xs[0], xs[1]), p(xs[2], xs[3])),
        p(p(xs[4], xs[5]), p(xs[6], xs[7])),
    )
    assert torch.equal(adasum_reduce(xs), expected)
    # The operator is not associative, so a different tree gives a different answer.
    left_fold = xs[0]
    for x in xs[1:]:
        left_fold = p(left_fold, x)
    assert not torch.allclose(left_fold, expected)
    lists = [x.tolist() for x in xs]
    quads = [
        _naive_pair(_naive_pair(lists[i], lists[i + 1]), _naive_pair(lists[i + 2], lists[i + 3]))
        for i in (0, 4)
    ]
    naive = _naive_pair(quads[0], quads[1])
    torch.testing.assert_close(expected, torch.tensor(naive, dtype=torch.float64))


def test_odd_count_carries_the_last_input_up():
    g = _gen(5)
    xs = [torch.randn(6, dtype=torch.float64, generator=g) for _ in range(3)]
    assert torch.equal(adasum_reduce(xs), adasum_pair(adasum_pair(xs[0], xs[1]), xs[2]))


def test_single_input_is_copied_not_aliased():
    x = torch.randn(5)
    out = adasum_reduce([x])
    assert torch.equal(out, x) and out.data_ptr() != x.data_ptr()


def test_per_tensor_uses_one_coefficient_pair_per_layer():
    g = _gen(7)
    workers = [
        [torch.randn(3, 2, generator=g, dtype=torch.float64), torch.randn(4, generator=g).double()]
        for _ in range(4)
    ]
    per_layer = adasum_per_tensor(workers)
    assert [t.shape for t in per_layer] == [torch.Size([3, 2]), torch.Size([4])]
    for i in range(2):
        assert torch.equal(per_layer[i], adasum_reduce([w[i] for w in workers]))
    whole = adasum_reduce([torch.cat([w[0].reshape(-1), w[1]]) for w in workers])
    assert not torch.allclose(torch.cat([per_layer[0].reshape(-1), per_layer[1]]), whole)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError):
        adasum_pair(torch.zeros(3), torch.zeros(4))
    with pytest.raises(ValueError):
        adasum_reduce([])
    with pytest.raises(ValueError):
        adasum_per_tensor([[torch.zeros(2)], [torch.zeros(2), torch.zeros(2)]])


def test_config_validates_combiner_and_world_size():
    with pytest.raises(UserError, match="method.combiner='median'"):
        AdasumConfig(combiner="median")
    with pytest.raises(UserError, match="power-of-two"):
        AdasumConfig(combiner="adasum").validate_world_size(6)
    AdasumConfig(combiner="adasum").validate_world_size(8)
    AdasumConfig(combiner="mean").validate_world_size(6)
    AdasumConfig(combiner="sum").validate_world_size(3)
    with pytest.raises(UserError, match="method.gather_below_kb=-1"):
        AdasumConfig(gather_below_kb=-1)
    with pytest.raises(
        UserError, match="method.zero_norm_guard='tiny' must be one of horovod, fixed_1e-8"
    ):
        AdasumConfig(zero_norm_guard="tiny")
    with pytest.raises(UserError, match="method.flow=gradient does not apply"):
        AdasumConfig(flow="gradient")
    with pytest.raises(UserError, match="method.flow='sum' must be one of delta, gradient"):
        AdasumConfig(combiner="mean", flow="sum")
    flows = {
        (c, f): AdasumConfig(combiner=c, flow=f).combines
        for c in COMBINERS
        for f in (None, "delta")
    }
    assert flows == {
        ("adasum", None): "delta",
        ("adasum", "delta"): "delta",
        ("sum", None): "gradient",
        ("sum", "delta"): "delta",
        ("mean", None): "gradient",
        ("mean", "delta"): "delta",
    }


def test_method_config_composes_with_its_schema(tmp_path):
    configs = Path(__file__).resolve().parents[2] / "configs"
    (tmp_path / "config.yaml").write_text(
        "defaults:\n  - method: adasum\n  - _self_\n"
        f"hydra:\n  searchpath:\n    - file://{configs}\n"
    )
    with initialize_config_dir(config_dir=str(tmp_path), version_base="1.3"):
        cfg = OmegaConf.to_object(compose("config", overrides=["method.combiner=sum"]).method)
        # the yaml's own values: its conformance declarations (tested with every method's)
        assert cfg.test_variants and cfg.model_copies is not None
        assert replace(cfg, test_variants=[], model_copies=None) == AdasumConfig(combiner="sum")
        with pytest.raises(UserError, match="method.combiner"):
            OmegaConf.to_object(compose("config", overrides=["method.combiner=median"]).method)
        with pytest.raises(ConfigCompositionException):
            compose("config", overrides=["method.combinr=sum"])


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)
