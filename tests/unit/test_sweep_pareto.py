"""Pareto front, knee and hypervolume against hand-computed values and naive references.

The hypervolume is Optuna's (what `repro sweep show` plots); these tests hold it to the values
our former hand-written implementation was checked against, so the swap changed nothing."""

from __future__ import annotations

import itertools
import random
import warnings

import matplotlib.pyplot as plt
import optuna
import pytest
from optuna.visualization.matplotlib import plot_hypervolume_history

from repro.sweep.front import knee_index, pareto_indices, reference_point


def optuna_history(points, ref, directions=None) -> list[float]:
    """Optuna's hypervolume after each point, read off its hypervolume-history plot."""
    directions = directions or ["minimize"] * len(ref)
    study = optuna.create_study(directions=directions)
    for p in points:
        study.add_trial(optuna.trial.create_trial(values=list(p)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        ax = plot_hypervolume_history(study, list(ref))
    plt.close(ax.figure)
    return list(ax.lines[0].get_ydata())


def hypervolume(points, ref) -> float:
    return optuna_history(points, ref)[-1]


def test_hypervolume_2d_by_hand():
    # Staircase (1,3), (2,2), (3,1) under ref (4,4): slabs y in [1,2) width 1, [2,3) width 2,
    # [3,4) width 3, so 1 + 2 + 3 = 6.
    assert hypervolume([(1, 3), (2, 2), (3, 1)], (4, 4)) == 6
    # A dominated point and one beyond the reference point add nothing.
    assert hypervolume([(1, 3), (2, 2), (3, 1), (3, 3), (5, 0)], (4, 4)) == 6


def test_hypervolume_3d_by_inclusion_exclusion():
    # Three 3x3x1 boxes; pairwise overlaps 1x3x1 = 3, triple overlap 1: 27 - 9 + 1 = 19.
    assert hypervolume([(1, 1, 3), (1, 3, 1), (3, 1, 1)], (4, 4, 4)) == 19


def _cells_dominated(points, ref):
    """Naive reference: count unit cells [c, c+1)^d below ref whose corner some point reaches."""
    ranges = [range(min(p[i] for p in points), ref[i]) for i in range(len(ref))]
    return sum(
        any(all(p[i] <= c[i] for i in range(len(ref))) for p in points)
        for c in itertools.product(*ranges)
    )


@pytest.mark.parametrize("dims", [2, 3])
def test_hypervolume_matches_cell_counting(dims):
    rng = random.Random(dims)
    for _ in range(10):
        points = [tuple(rng.randint(0, 7) for _ in range(dims)) for _ in range(rng.randint(1, 8))]
        ref = (8,) * dims
        assert hypervolume(points, ref) == _cells_dominated(points, ref)


def test_pareto_indices_match_optuna_best_trials():
    rng = random.Random(0)
    directions = ["maximize", "minimize"]
    values = [(rng.randint(0, 9), rng.randint(0, 9)) for _ in range(30)]
    study = optuna.create_study(directions=directions)
    for v in values:
        study.add_trial(optuna.trial.create_trial(values=list(v)))
    expected = sorted(t.number for t in study.best_trials)
    assert pareto_indices(values, directions) == expected


def test_knee_is_the_point_nearest_the_scaled_ideal():
    # Both maximised: scaled (0,1), (0.5,0.6), (1,0); distances 1, 0.64, 1.
    assert knee_index([(0, 10), (5, 6), (10, 0)], ["maximize", "maximize"]) == 1
    # Mixed directions: scaled (1,0), (0.6,0.6), (0,1) -> the middle point again.
    assert knee_index([(0, 0), (4, 6), (10, 10)], ["minimize", "maximize"]) == 1
    # An objective without spread does not decide: the second objective's best wins.
    assert knee_index([(1, 3), (1, 5)], ["maximize", "maximize"]) == 1


def test_reference_point_is_just_beyond_the_worst_point():
    # Minimise form (0,-10), (-10,0): worst 0 and 0, spread 10 -> pushed out by 1.
    assert reference_point([(0, 10), (10, 0)], ["maximize", "maximize"]) == (1.0, 1.0)
    assert reference_point([(2.0,)], ["minimize"]) == (2.2,)


def test_hypervolume_history_of_maximised_objectives_against_our_reference_point():
    directions = ["maximize", "maximize"]
    points = [(0.5, 100.0), (0.9, 50.0), (0.4, 40.0), (0.95, 80.0)]
    ref_min = reference_point(points, directions)
    # Optuna takes the reference point in the objectives' own directions.
    history = optuna_history(points, [-r for r in ref_min], directions)
    assert all(b >= a for a, b in itertools.pairwise(history))
    assert history[2] == history[1]  # the third point is dominated by the first
    # First point alone: a rectangle from (-0.5, -100) to the reference point.
    assert history[0] == pytest.approx((ref_min[0] + 0.5) * (ref_min[1] + 100.0))
