"""The `drops` figure: each run's accuracy drop below the same seed's reference run against
c x steps, checked against drops computed here from the runs' logged accuracies."""

import math

import pytest

from repro.claims.figure_specs import FigureSpec
from repro.errors import UserError
from repro.report.plots import draw_figure, render
from repro.report.point_plots import drops_by_family, sends_per_parameter
from repro.track.series import NotMeasurable
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
            by_x = expected.setdefault(family, {})
            by_x.setdefault(cr * steps, []).append(100 * (ref - last3(base, steps)))
    assert set(got) == set(expected) == {"star_topk_c", "var_topk_c"}
    for family, by_x in expected.items():
        pairs = zip(sorted(got[family].items()), sorted(by_x.items()), strict=True)
        for (got_x, got_drops), (x, drops) in pairs:
            assert got_x == pytest.approx(x) and got_drops == pytest.approx(drops, abs=1e-9)
    # c x steps from the run's own config
    assert sends_per_parameter(runs["star_topk_c0.001"][1]) == pytest.approx(0.8)


def test_drops_figure_is_drawn_and_refuses_what_it_cannot_draw(tmp_path):
    runs = seeded_runs()
    path = draw_figure(spec(), runs, lambda label: label, tmp_path / "drops.svg")
    assert path.read_text().startswith("<?xml") and "<svg" in path.read_text()
    no_reference = {k: v for k, v in runs.items() if k != "dense_ring"}
    with pytest.raises(NotMeasurable, match="dense_ring"):
        draw_figure(spec(), no_reference, str, tmp_path / "none.svg")
    with pytest.raises(UserError, match="kind 'drops' needs series"):
        spec(measure={})


def test_drops_against_the_ratio_beside_the_papers_per_family_panel():
    runs = seeded_runs()
    paper = {"series": "star_topk_c", "x": [0.1, 0.001], "y": [0.6, 1.98], "label": "paper"}
    figure = spec(
        x="method.cr",
        series=["star_topk_c", "var_topk_c"],
        panels=[{"title": "STAR", "runs": "star.*"}, {"title": "VAR", "runs": "var.*"}],
        published=[paper],
        ylim=[-1.0, 5.0],
    )
    fig = render(figure, runs, str)
    star, var = fig.axes
    assert (star.get_title(), var.get_title()) == ("STAR", "VAR")
    (drawn,) = [line for line in star.lines if line.get_gid() == "published-star_topk_c"]
    assert list(drawn.get_xdata()) == paper["x"] and list(drawn.get_ydata()) == paper["y"]
    assert not any(line.get_gid() == "published-star_topk_c" for line in var.lines)
    # ours: the mean over the seeds of each ratio's drops, at the run's own c
    means = {
        ax.get_title(): line
        for ax in fig.axes
        for line in ax.lines
        if "mean-" in str(line.get_gid())
    }
    drops = drops_by_family(figure, runs)
    for title, family in (("STAR", "star_topk_c"), ("VAR", "var_topk_c")):
        by_c = drops[family]
        assert list(means[title].get_xdata()) == sorted(by_c)
        assert list(means[title].get_ydata()) == pytest.approx(
            [sum(by_c[c]) / len(by_c[c]) for c in sorted(by_c)]
        )
    # VAR's mean drop at c = 0.001 is above the ylim: marked at the edge with its value
    beyond = sum(drops["var_topk_c"][0.001]) / 2
    assert beyond > 5.0
    notes = [t.get_text() for t in var.texts]
    assert notes == [f"{beyond:.3g}\noff scale"]
