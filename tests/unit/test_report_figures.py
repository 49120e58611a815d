"""Report figures for reading: seed means with bands on a common grid, small multiples with a
shared y axis, legends outside the data, reference styles, crossings, colours and the files.

The numbers the figures draw are checked against values computed here from the runs' logged
points (numpy's interpolation as the independent reference), read back from the drawn
matplotlib artists by the ids the figure gives them."""

import math
import struct
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import yaml

from repro.claims.figure_specs import FigureSpec
from repro.errors import UserError
from repro.report.colours import colour_for
from repro.report.plots import draw_figure, render, seed_ranges, seeds_sentence
from repro.track.runs import STOPPED
from tests.unit.report_data import make_run, seeded

CLAIMS_DIR = Path(__file__).resolve().parents[2] / "reports" / "claims"


def loss_runs() -> dict:
    """Two seeds of sync and of AdaComm whose modeled clocks tick at different rates, so the
    seeds log at different x values."""
    return seeded(
        [
            make_run("sync", loss=lambda s: 100 / s, sec_per_step=1.0),
            make_run("sync", loss=lambda s: 120 / s, sec_per_step=1.1, seed=1),
            make_run("adacomm", loss=lambda s: 80 / s, sec_per_step=0.25),
            make_run(
                "adacomm", loss=lambda s: 90 / s + 0.05 * (s % 20 == 0), sec_per_step=0.3, seed=1
            ),
        ]
    )


def spec(**changes) -> FigureSpec:
    return FigureSpec(**{"id": "f", "title": "Loss", "x": "modeled", "y": "train/loss", **changes})


def artist(fig, gid: str):
    found = [a for ax in fig.axes for a in [*ax.lines, *ax.collections] if a.get_gid() == gid]
    assert len(found) == 1, f"{gid}: {len(found)} artists"
    return found[0]


def logged(run) -> tuple[np.ndarray, np.ndarray]:
    rows = [(r["time/modeled_s"], r["train/loss"]) for r in run.history]
    return np.array([x for x, _ in rows]), np.array([y for _, y in rows])


def expected_band(runs: dict, label: str) -> tuple[np.ndarray, np.ndarray]:
    """The union of the seeds' x inside the range all cover, and each seed read there."""
    curves = [logged(run) for run in runs[label].values()]
    start, end = max(xs[0] for xs, _ in curves), min(xs[-1] for xs, _ in curves)
    grid = np.unique(np.concatenate([xs for xs, _ in curves]))
    grid = grid[(grid >= start) & (grid <= end)]
    return grid, np.array([np.interp(grid, xs, ys) for xs, ys in curves])


def test_the_mean_is_the_seeds_mean_on_their_common_grid_and_the_band_holds_every_seed():
    runs = loss_runs()
    fig = render(spec(), runs, str)
    grid, seeds = expected_band(runs, "adacomm")
    assert grid[0] == 3.0 and grid[-1] == 25.0  # seed 1 starts at 3 s, seed 0 ends at 25 s
    mean = artist(fig, "mean-adacomm")
    assert mean.get_xdata() == pytest.approx(grid)
    assert mean.get_ydata() == pytest.approx(seeds.mean(axis=0), rel=1e-12)
    # the band's outline holds, at each grid x, the lowest and the highest seed
    outline: dict = {}
    for x, y in artist(fig, "band-adacomm").get_paths()[0].vertices:
        outline.setdefault(round(float(x), 9), []).append(float(y))
    for i, x in enumerate(grid):
        ys = outline[round(float(x), 9)]
        assert min(ys) == pytest.approx(seeds[:, i].min()) and max(ys) == pytest.approx(
            seeds[:, i].max()
        )
    # and every seed's own logged points inside the grid lie within it
    low, high = seeds.min(axis=0), seeds.max(axis=0)
    for run in runs["adacomm"].values():
        for x, y in zip(*logged(run), strict=True):
            if grid[0] <= x <= grid[-1]:
                i = int(np.searchsorted(grid, x))
                assert low[i] - 1e-12 <= y <= high[i] + 1e-12
    # each seed is also drawn on its own, faintly
    assert artist(fig, "seed-adacomm-s1").get_alpha() < 0.5


@pytest.mark.parametrize("interpolate", [False, True])
def test_a_target_line_gets_a_marker_where_each_mean_first_reaches_it(interpolate):
    """Read as the claim it shows reads it: at the first logged point that reaches the line,
    or between it and the one before. The marker was always interpolated, so AdaComm's
    headline figure put it at 0.18x sync's time where its claim (not interpolated) read
    0.36x: the figure showed faster than published, the claim slower."""
    runs = loss_runs()
    target = {"run": "sync", "y_times": 1.0, "role": "target", "cross": "min", "label": "target"}
    fig = render(spec(reference=[{**target, "interpolate": interpolate}]), runs, str)
    goal = (100 / 100 + 120 / 100) / 2  # the mean of sync's two last losses
    assert artist(fig, "ref-target").get_ydata() == pytest.approx([goal, goal])
    grid, seeds = expected_band(runs, "adacomm")
    mean = seeds.mean(axis=0)
    i = int(np.argmax(mean <= goal))  # the first grid point at or below the target
    x = grid[i]
    if interpolate:
        x = grid[i - 1] + (goal - mean[i - 1]) / (mean[i] - mean[i - 1]) * (grid[i] - grid[i - 1])
    marker = artist(fig, "cross-adacomm")
    assert marker.get_xdata() == pytest.approx([x]) and marker.get_ydata() == pytest.approx([goal])
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert f"adacomm (target at {x:.3g})" in legend
    assert "where the mean first reaches the target line" in legend


def test_a_loss_axis_names_the_loss_of_the_runs_drawn():
    """Adasum's toy problem is a regression: its loss is a squared error, not a cross-entropy."""
    toy = {"workload": {"task": "regression"}}
    fit = seeded([make_run("toy_adasum", config=toy), make_run("toy_mean", config=toy)])
    assert render(spec(), fit, str).axes[0].get_ylabel() == "training loss (mean squared error)"
    assert render(spec(), loss_runs(), str).axes[0].get_ylabel() == "training loss (cross-entropy)"
    both = seeded([*fit["toy_mean"].values(), *loss_runs()["sync"].values()])
    assert render(spec(), both, str).axes[0].get_ylabel() == (
        "training loss (cross-entropy or mean squared error)"
    )


def test_reference_roles_are_drawn_in_different_styles():
    fig = render(
        spec(reference=[{"y": 1.0, "role": "target"}, {"x": 10.0, "label": "paper"}]),
        loss_runs(),
        str,
    )
    target, published = artist(fig, "ref-target"), artist(fig, "ref-published")
    assert target.get_color() != published.get_color()
    assert target.get_linestyle() != published.get_linestyle()


def topk_like() -> dict:
    labels = ["dense_ring", "ag_topk_c0.1", "ag_topk_c0.01", "star_topk_c0.1", "var_topk_c0.1"]
    labels += ["flex_topk_c0.1", "moo", "odd_one"]
    return seeded(make_run(label, seed=seed) for label in labels for seed in (0, 1))


PANELS = [
    {"title": "AG", "runs": "ag_topk_c.*"},
    {"title": "STAR", "runs": "star_topk_c.*"},
    {"title": "VAR", "runs": "var_topk_c.*"},
    {"title": "C1", "runs": "flex_topk_c.*|moo"},
]


def test_panels_hold_one_family_each_with_the_baseline_and_share_the_y_axis():
    fig = render(spec(panels=PANELS, baseline="dense_ring"), topk_like(), str)
    axes = fig.axes
    titles = [ax.get_title() for ax in axes]
    assert titles == ["AG", "STAR", "VAR", "C1", "other runs"]
    means = [{line.get_gid() for line in ax.lines if "mean-" in str(line.get_gid())} for ax in axes]
    assert means == [
        {"mean-dense_ring", "mean-ag_topk_c0.1", "mean-ag_topk_c0.01"},
        {"mean-dense_ring", "mean-star_topk_c0.1"},
        {"mean-dense_ring", "mean-var_topk_c0.1"},
        {"mean-dense_ring", "mean-flex_topk_c0.1", "mean-moo"},
        {"mean-dense_ring", "mean-odd_one"},
    ]
    # the baseline is repeated without its seeds; the panels' runs keep theirs
    seeds = {line.get_gid() for line in axes[0].lines if "seed-" in str(line.get_gid())}
    assert seeds == {f"seed-ag_topk_c{c}-s{s}" for c in ("0.1", "0.01") for s in (0, 1)}
    assert all(axes[0].get_shared_y_axes().joined(axes[0], ax) for ax in axes[1:])


@pytest.mark.parametrize(
    "count, labelled",
    [
        (5, [False, False, True, True, True]),  # two rows of three, the last one short
        (7, [False] * 4 + [True] * 3),  # three rows, the middle one ends two columns
        (8, [False] * 5 + [True] * 3),
    ],
)
def test_only_the_lowest_panel_of_each_column_labels_its_x_axis(count, labelled):
    runs = seeded(make_run(f"p{i}") for i in range(count))
    panels = [{"title": f"P{i}", "runs": f"p{i}"} for i in range(count)]
    fig = render(spec(panels=panels), runs, str)
    assert [ax.xaxis.get_tick_params()["labelbottom"] for ax in fig.axes] == labelled
    assert [bool(ax.get_xlabel()) for ax in fig.axes] == labelled


@pytest.mark.parametrize("panels", [[], PANELS])
def test_the_legend_lies_outside_every_axes(panels):
    fig = render(spec(panels=panels, reference=[{"y": 1.0, "label": "paper"}]), topk_like(), str)
    fig.draw_without_rendering()
    (legend,) = fig.legends
    box = legend.get_window_extent()
    assert len(legend.get_texts()) == 9  # eight methods and the reference
    for ax in fig.axes:
        assert ax.get_legend() is None and not box.overlaps(ax.get_window_extent())


def test_svg_is_valid_and_the_same_for_the_same_runs_png_is_twice_the_screen_size(tmp_path):
    runs = loss_runs()
    first = draw_figure(spec(), runs, str, tmp_path / "a.svg")
    again = draw_figure(spec(), runs, str, tmp_path / "b.svg")
    assert first.read_bytes() == again.read_bytes()
    root = ET.parse(first).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    ids = {el.get("id") for el in root.iter()}
    assert {"mean-adacomm", "band-adacomm", "seed-sync-s1"} <= ids
    png = draw_figure(spec(), runs, str, tmp_path / "a.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = (int(v * 100 * 2) for v in render(spec(), runs, str).get_size_inches())
    assert struct.unpack(">II", png[16:24]) == (width, height) == (1600, 840)
    with pytest.raises(UserError, match="must end in .svg or .png"):
        draw_figure(spec(), runs, str, tmp_path / "a.jpg")


def test_dense_seed_lines_are_rasterized_and_the_svg_stays_small(tmp_path):
    steps = list(range(1, 11_001))
    runs = seeded(make_run("sync", steps=steps, seed=seed) for seed in (0, 1))
    path = draw_figure(spec(x="step"), runs, str, tmp_path / "big.svg")
    fig = render(spec(x="step"), runs, str)
    assert artist(fig, "seed-sync-s0").get_rasterized()
    assert not artist(fig, "mean-sync").get_rasterized()
    assert path.stat().st_size < 1_000_000


@pytest.mark.parametrize("exit_code", [None, STOPPED])
def test_an_unfinished_run_is_drawn_dashed_and_left_out_of_the_mean(exit_code):
    """Killed (no exit record) or stopped by Ctrl-C: the claims read neither as a measurement,
    and a curve cut short would pull the mean of the others' tail."""
    runs = loss_runs()
    runs["adacomm"][1] = make_run(
        "adacomm",
        loss=lambda s: 90 / s,
        sec_per_step=0.3,
        steps=[10, 20, 30],
        seed=1,
        exit_code=exit_code,
    )
    fig = render(spec(), runs, str)
    xs, ys = logged(runs["adacomm"][0])
    assert artist(fig, "mean-adacomm").get_xdata() == pytest.approx(xs)
    assert artist(fig, "mean-adacomm").get_ydata() == pytest.approx(ys)
    assert artist(fig, "seed-adacomm-s1").get_linestyle() == "--"
    assert seeds_sentence(spec(), runs, str).endswith("left out of the mean: adacomm seed 1.")


def lab(colour: str) -> np.ndarray:
    """CIELAB (D65) of an sRGB colour, from the sRGB and CIE 1976 definitions."""
    rgb = np.array([int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)])
    linear = np.where(rgb > 0.04045, ((rgb + 0.055) / 1.055) ** 2.4, rgb / 12.92)
    m = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
    xyz = m @ linear / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


@pytest.mark.parametrize(
    "labels",
    [
        ["local_sgd_tau5", "local_sgd_tau20", "local_sgd_tau100"],
        *[[f"{v}_topk_c{c}" for c in ("0.1", "0.01", "0.001")] for v in ("ag", "star", "var")],
    ],
)
def test_ordered_settings_get_colours_a_reader_tells_apart(labels):
    colours = [lab(colour_for(label)) for label in labels]
    gaps = [float(np.linalg.norm(a - b)) for a, b in zip(colours, colours[1:], strict=False)]
    assert min(gaps) > 20, gaps  # CIE76 distance; about 2 is just noticeable
    assert [c[0] for c in colours] == sorted((c[0] for c in colours), reverse=True)  # darker


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"panels": [{"title": "a", "runs": "("}]}, "not a regex"),
        ({"panels": [{"title": "a"}]}, "must be {title, runs"),
        ({"reference": [{"x": 1.0, "cross": "min"}]}, "horizontal line only"),
        ({"reference": [{"y": 1.0, "interpolate": True}]}, "it needs cross"),
        (
            {"reference": [{"y": 1.0, "cross": "min", "interpolate": "yes"}]},
            "interpolate .true or false",
        ),
        ({"reference": [{"y": 1.0, "role": "guess"}]}, "role must be one of"),
        ({"ylim": [3, 1]}, "low < high"),
        (
            {"series": ["a_c"], "published": [{"series": "b_c", "x": [1], "y": [2], "label": "p"}]},
            "series one of",
        ),
    ],
)
def test_bad_figure_settings_are_refused_with_the_fix(changes, message):
    with pytest.raises(UserError, match=message):
        spec(**changes)


def test_each_paper_has_one_headline_figure_and_topk_draws_the_published_drops():
    for path in sorted(CLAIMS_DIR.glob("*.yaml")):
        figures = yaml.safe_load(path.read_text())["figures"]
        assert sum(bool(f.get("headline")) for f in figures) == 1, path.name
    data = yaml.safe_load((CLAIMS_DIR / "topk.yaml").read_text())
    (figure,) = [f for f in data["figures"] if f.get("headline")]
    drops = {p["series"]: dict(zip(p["x"], p["y"], strict=True)) for p in figure["published"]}
    claims = {c["id"]: c["published"] for c in data["claims"]}
    # the claims' published drops are the largest of the families they name
    assert max(d[0.1] for d in drops.values()) == claims["small_loss_at_c01"]
    assert drops["ag_topk_c"][0.01] == claims["ag_topk_loss_at_c001"]
    assert drops["ag_topk_c"][0.001] == claims["ag_topk_loss_at_c0001"]
    for c, claim in ((0.01, "ar_topk_loss_at_c001"), (0.001, "ar_topk_loss_at_c0001")):
        assert max(drops["star_topk_c"][c], drops["var_topk_c"][c]) == claims[claim]
    # and each is DenseSGD's top-1 minus the row's, as the published table records them
    (table,) = data["tables"]
    acc = {row["run"]: row.get("acc") for row in table["rows"]}
    for family, by_c in drops.items():
        for c, drop in by_c.items():
            assert acc["dense_ring"] - acc[f"{family}{c}"] == pytest.approx(drop, abs=0.011)


def test_points_in_panels_read_only_their_own_runs():
    # test/acc = s / rate reaches 0.5 at step 50 * rate / 100; Adam's runs are faster
    rates = {"sgd": 100, "adam": 60}
    runs = seeded(
        make_run(
            f"{combiner}_{opt}_b{4 * batch}",
            extra=lambda s, r=rates[opt] + 10 * (combiner == "mean") + seed: {"test/acc": s / r},
            config={"trainer": {"batch_size": batch}, "method": {"combiner": combiner}},
            steps=list(range(1, 101)),
            seed=seed,
        )
        for combiner in ("adasum", "mean")
        for opt in rates
        for batch in (16, 64)
        for seed in (0, 1)
    )
    figure = spec(
        kind="points",
        x="effective_batch",
        y="test/acc",
        series=["method.combiner"],
        series_labels={"adasum": "Adasum", "mean": "Average"},
        panels=[
            {"title": "SGD", "runs": r".*_sgd_b\d+"},
            {"title": "Adam", "runs": r".*_adam_b\d+"},
        ],
        measure={"calculator": "steps_to_target", "params": {"target": 0.5}},
    )
    fig = render(figure, runs, str)
    assert [ax.get_title() for ax in fig.axes] == ["SGD", "Adam"]
    for ax, opt in zip(fig.axes, rates, strict=True):
        for combiner, name in (("adasum", "Adasum"), ("mean", "Average")):
            (line,) = [line for line in ax.lines if line.get_gid() == f"mean-{name}"]
            # seeds 0 and 1 reach 0.5 at the first step s with s / r >= 0.5
            steps = [math.ceil(0.5 * (rates[opt] + 10 * (combiner == "mean") + s)) for s in (0, 1)]
            assert list(line.get_xdata()) == [64.0, 256.0]
            assert list(line.get_ydata()) == [sum(steps) / 2] * 2


def test_log_axes_are_labelled_with_plain_numbers():
    fig = render(spec(logy=True), loss_runs(), str)
    fig.draw_without_rendering()
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels() if t.get_text()]
    assert labels and all(float(text) > 0 for text in labels)  # "0.5", not 5 x 10^-1


def test_caption_names_the_seeds_of_the_runs_drawn_and_runs_with_other_seeds():
    # sync and adacomm at seeds 0-2, local_sgd given 5 seeds, topk 2 of them, and a run the
    # figure leaves out at seed 9: the caption counts the drawn runs' seeds and groups the
    # runs by their seeds, the commonest set last
    runs = [make_run(label, seed=s) for label in ("sync", "adacomm") for s in range(3)]
    runs += [make_run("local_sgd", seed=s) for s in range(5)] + [make_run("other", seed=9)]
    runs += [make_run("topk", seed=s) for s in (0, 4)]
    drawn = spec(runs=["sync", "adacomm", "local_sgd", "topk"])
    assert seeds_sentence(drawn, seeded(runs), str.upper).startswith(
        "5 seeds (0-4); seeds 0-4 for LOCAL_SGD; 0, 4 for TOPK; 0-2 for the others: faint "
        "lines are the seeds;"
    )
    two = spec(runs=["sync", "local_sgd"])
    assert seeds_sentence(two, seeded(runs), str).startswith(
        "5 seeds (0-4); seeds 0-4 for local_sgd; 0-2 for sync: faint"
    )
    same = spec(runs=["sync", "adacomm"])
    assert seeds_sentence(same, seeded(runs), str).startswith("3 seeds (0-2): faint")
    # a drop needs the reference's run at the same seed: local_sgd's seeds 3 and 4 have none
    drops = spec(
        kind="drops",
        x="method.cr",
        y="test/acc",
        series=["local_sgd", "adacomm"],
        measure={"reference": "sync"},
    )
    assert seeds_sentence(drops, seeded(runs), str).startswith("3 seeds (0-2): a small dot")
    # a baseline repeated in every panel is drawn, and counted, when it is not selected
    panels = spec(runs=["adacomm"], panels=[{"title": "A", "runs": "adacomm"}], baseline="other")
    assert seeds_sentence(panels, seeded(runs), str).startswith(
        "4 seeds (0-2, 9); seeds 0-2 for adacomm; 9 for other: faint"
    )


@pytest.mark.parametrize(
    "seeds, text",
    [
        ([], ""),
        ([3], "3"),
        ([0, 1], "0, 1"),
        ([0, 1, 2], "0-2"),
        ([0, 1, 2, 5, 7, 8, 9], "0-2, 5, 7-9"),
    ],
)
def test_seed_ranges(seeds, text):
    assert seed_ranges(seeds) == text
