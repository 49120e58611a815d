"""The design a tuning search tries (repro.sweep.space): in one dimension the even grid
of cell midpoints, in two a Latin hypercube, the same for every arm of one space."""

from __future__ import annotations

import math
import tracemalloc

import pytest

from repro.sweep.space import ParamSpec, design, value_at

LR = ParamSpec("optim.lr", "float", low=0.005, high=0.5, log=True)
TAU0 = ParamSpec("method.tau0", "int", low=1, high=100, log=True)


def test_one_dimension_is_the_log_grid_of_cell_midpoints():
    points = design((LR,), 8, seed=0)
    # two decades in 8 cells: 0.005 x 100^((k + 1/2) / 8), a factor 1.78 apart
    expected = [0.005 * 100 ** ((k + 0.5) / 8) for k in range(8)]
    assert sorted(p["optim.lr"] for p in points) == pytest.approx(expected, rel=1e-12)
    assert points == design((LR,), 8, seed=0)  # the seed fixes the design


def test_two_dimensions_are_a_latin_hypercube_on_the_same_learning_rates():
    points = design((LR, TAU0), 8, seed=0)
    one = design((LR,), 8, seed=0)
    assert sorted(p["optim.lr"] for p in points) == sorted(p["optim.lr"] for p in one)
    # tau0: one point in each eighth of log(1)..log(101), so 8 distinct integers
    cells = sorted(math.floor(math.log(p["method.tau0"] + 0.5) / math.log(101) * 8) for p in points)
    assert cells == list(range(8))
    assert all(isinstance(p["method.tau0"], int) for p in points)


def test_value_mapping_at_the_ends_and_for_choices():
    assert value_at(TAU0, 0.0) == 1 and value_at(TAU0, 0.999999) == 100
    assert value_at(ParamSpec("x", "float", low=0.0, high=1.0, step=0.25), 0.3) == 0.25
    assert value_at(ParamSpec("n", "int", low=2, high=8, step=2), 0.9) == 8
    assert value_at(ParamSpec("c", "categorical", choices=("a", "b", "c")), 0.5) == "b"


def test_a_wide_int_entry_is_read_at_its_cell_without_listing_its_grid():
    steps = ParamSpec("trainer.steps", "int", low=0, high=10**6)
    tracemalloc.start()
    try:
        values = [value_at(steps, u) for u in (0.0, 0.5, 0.9999999)]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # 1,000,001 cells: u = 0.5 falls in cell 500,000, the last u in the last cell
    assert values == [0, 500_000, 10**6] and all(isinstance(v, int) for v in values)
    assert peak < 100_000  # bytes; a list of the grid takes about 36 MB
