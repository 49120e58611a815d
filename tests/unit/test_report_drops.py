"""The `drops` figure: each run's accuracy drop below the same seed's reference run against
c x steps, checked against drops computed here from the runs' logged accuracies."""

import math

import pytest

from repro.errors import UserError
from repro.report.plots import FigureSpec, draw_figure
from repro.report.point_plots import drops_by_family, sends_per_parameter
from repro.report.series import NotMeasurable
from tests.unit.report_data import make_run

# label -> (cr, controller, steps, accuracy offset per seed)
RUNS = {
    "dense_ring": (1.0, "fixed", 100, (0.95, 0.96)),
    "star_topk_c0.1": (0.1, "fixed", 100, (0.94, 0.955)),
    "star_topk_c0.001": (0.001, "fixed", 800, (0.90, 0.97)),
    "var_topk_c0.001": (0.001, "fixed", 800, (0.85, 0.93)),
    "moo": (0.01, "moo", 100, (0.9, 0.9)),
}


def acc_at(base: float, step: int) -> float:
    return base + step / 100_000  # still rising: the 3-point mean differs from the last


def seeded_runs() -> dict:
    runs: dict = {}
    for label, (cr, controller, steps, bases) in RUNS.items():
        for seed, base in enumerate(bases):
            run = make_run(
                label,
                seed=seed,
                steps=list(range(steps // 10, steps + 1, steps // 10)),
                method={"name": "topk", "cr": cr, "cr_controller": controller},
                extra=lambda s, base=base: {"test/acc": acc_at(base, s)},
            )
            runs.setdefault(label, {})[seed] = run
    return runs


def spec(**changes) -> FigureSpec:
    fields = {
        "id": "drop_vs_sends",
        "title": "drops",
        "kind": "drops",
        "x": "sends_per_parameter",
        "y": "test/acc",
        "smooth": 3,
        "series": ["star_topk_c", "var_topk_c", "moo"],
        "measure": {"reference": "dense_ring"},
    }
    return FigureSpec(**{**fields, **changes})


def last3(base: float, steps: int) -> float:
    return (
        math.fsum(acc_at(base, s) for s in (steps - 2 * steps // 10, steps - steps // 10, steps))
        / 3
    )


def test_drops_are_the_seeds_own_reference_minus_the_run():
    runs = seeded_runs()
    got = drops_by_family(spec(), runs)
    expected: dict = {}
    for label, (cr, controller, steps, bases) in RUNS.items():
        if label == "dense_ring" or controller != "fixed":
            continue  # a ratio that moves has no single c x steps
        family = label.split("_c0")[0] + "_c"
        for seed, base in enumerate(bases):
            ref = last3(RUNS["dense_ring"][3][seed], 100)
            expected.setdefault(family, []).append((cr * steps, 100 * (ref - last3(base, steps))))
    assert set(got) == set(expected) == {"star_topk_c", "var_topk_c"}
    for family, dots in expected.items():
        for (gx, gy), (ex, ey) in zip(sorted(got[family]), sorted(dots), strict=True):
            assert gx == pytest.approx(ex) and gy == pytest.approx(ey, abs=1e-9)
    # c x steps from the run's own config
    assert sends_per_parameter(runs["star_topk_c0.001"][1]) == pytest.approx(0.8)


def test_drops_figure_is_drawn_and_refuses_what_it_cannot_draw(tmp_path):
    runs = seeded_runs()
    path = draw_figure(spec(), runs, lambda label: label, tmp_path / "drops.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    no_reference = {k: v for k, v in runs.items() if k != "dense_ring"}
    with pytest.raises(NotMeasurable, match="dense_ring"):
        draw_figure(spec(), no_reference, str, tmp_path / "none.png")
    with pytest.raises(UserError, match="kind 'drops' needs series"):
        spec(measure={})
