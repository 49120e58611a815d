"""`repro sweep show`'s front files from a real sweep: a study on a journal file whose trials
are real training runs (the synthetic MLP, two simulated workers, 8 steps each), run in this
process by the sweep's own worker loop. Its two objectives, training loss (down) and modeled
throughput (up), trade off over the compression ratio, so its front has several points.
Each file is checked against the study itself: the front computed here from the trials'
values, the knee from its definition, the colours from the trials' collectives."""

from __future__ import annotations

import csv
import io
import math
import xml.etree.ElementTree as ET

import pytest
from optuna.trial import TrialState

from repro.sweep.front import front_of
from repro.sweep.front_plot import draw_front
from repro.sweep.launch import run_sweep
from repro.sweep.results import load_study, show_sweep
from repro.sweep.spec import spec_from_dict

pytestmark = pytest.mark.slow

SVG = "{http://www.w3.org/2000/svg}"


def spec_for(tmp):
    return spec_from_dict(
        {
            "name": "front_files",
            "experiment": None,
            "overrides": [
                "workload=synthetic_mlp",
                "method=topk",
                "trainer.world_size=2",
                "trainer.engine=simulated",
                "compute.mode=sampled",
                "network=eth1g",
                "trainer.steps=8",
                "trainer.eval_every=8",
                "trainer.progress=false",
                "tracking=disabled",
                f"data.root={tmp}/data",
            ],
            "space": [
                {"key": "method.cr", "type": "float", "low": 0.01, "high": 1.0, "log": True},
                {
                    "key": "method.collective",
                    "type": "categorical",
                    "choices": ["allgather", "ar_ring"],
                },
            ],
            "objectives": [
                {"metric": "train/loss", "direction": "minimize"},
                {"metric": "throughput/modeled_samples_per_s", "direction": "maximize"},
            ],
            "sampler": {"name": "random", "seed": 0},
            "n_trials": 6,
            "out": str(tmp / "out"),
        }
    )


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """(spec, completed trials) of the real sweep, `repro sweep show` run on it."""
    spec = spec_for(tmp_path_factory.mktemp("front"))
    run_sweep(spec, workers=1)
    show_sweep(spec, io.StringIO())
    study = load_study(spec)
    return spec, study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))


def signed(trial, directions):
    """The trial's values, each turned so that larger is better."""
    return [v if d == "maximize" else -v for v, d in zip(trial.values, directions, strict=True)]


def non_dominated(trials, directions):
    def beats(a, b):
        return all(x >= y for x, y in zip(a, b, strict=True)) and a != b

    points = {t.number: signed(t, directions) for t in trials}
    return {n for n, p in points.items() if not any(beats(q, p) for q in points.values())}


def knee_of(front, directions):
    """The front trial nearest (1, ..., 1) with each objective scaled to [0, 1], 1 best."""
    points = {t.number: signed(t, directions) for t in front}
    columns = list(zip(*points.values(), strict=True))
    lows, highs = [min(c) for c in columns], [max(c) for c in columns]

    def distance(p):
        spans = zip(p, lows, highs, strict=True)
        scaled = [(v - lo) / (hi - lo) if hi > lo else 1.0 for v, lo, hi in spans]
        return math.dist(scaled, [1.0] * len(scaled))

    return min(points, key=lambda n: distance(points[n]))


def test_csv_rows_are_the_studys_front_with_its_knee(swept):
    spec, trials = swept
    assert len(trials) == 6
    expected = non_dominated(trials, spec.directions)
    assert len(expected) >= 2  # a trade-off, not one best trial
    with (spec.study_dir / "front.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert sorted(int(r["trial"]) for r in rows) == sorted(expected)
    by_number = {t.number: t for t in trials}
    for row in rows:
        t = by_number[int(row["trial"])]
        assert float(row["method.cr"]) == t.params["method.cr"]  # full precision
        assert row["method.collective"] == t.params["method.collective"]
        assert [float(row[m]) for m in spec.metric_names] == t.values
    front = [by_number[n] for n in expected]
    assert [int(r["trial"]) for r in rows if r["knee"] == "yes"] == [
        knee_of(front, spec.directions)
    ]


def test_html_holds_every_trials_settings_the_knee_ring_and_collective_colours(swept):
    spec, trials = swept
    page = (spec.study_dir / "pareto.html").read_text()
    # self-contained: nothing fetched, no plotting library
    assert "src=" not in page and "href" not in page and "<link" not in page
    svg = ET.fromstring(page[page.index("<svg") : page.index("</svg>") + len("</svg>")])
    circles = list(svg.iter(f"{SVG}circle"))
    points = {int(c.get("data-trial")): c for c in circles if c.get("class") == "pt"}
    assert set(points) == {t.number for t in trials}  # every trial can be hovered
    front = non_dominated(trials, spec.directions)
    fills: dict[str, set[str]] = {}
    for t in trials:
        title = points[t.number].find(f"{SVG}title").text
        assert title.startswith(f"trial {t.number} (")
        assert f"method.cr = {t.params['method.cr']:.6g}" in title
        assert f"method.collective = {t.params['method.collective']}" in title
        for metric, value in zip(spec.metric_names, t.values, strict=True):
            assert f"{metric} = {value:.6g}" in title
        fill = points[t.number].get("fill")
        if t.number in front:
            fills.setdefault(t.params["method.collective"], set()).add(fill)
        else:
            assert "dominated" in title and fill == "#fff"  # open circles
    # one colour per collective, a different one for each
    assert all(len(f) == 1 for f in fills.values())
    assert len({next(iter(f)) for f in fills.values()}) == len(fills)
    assert all("#fff" not in f for f in fills.values())
    knee = knee_of([t for t in trials if t.number in front], spec.directions)
    (ring,) = [c for c in circles if c.get("class") == "knee"]
    assert (ring.get("cx"), ring.get("cy")) == (points[knee].get("cx"), points[knee].get("cy"))
    assert ring.get("fill") == "none"  # a ring: the knee's own point shows through
    assert f"knee: trial {knee}" in page and f">#{knee}<" in page  # labelled by trial number


def test_png_rings_the_knee_over_its_visible_point(swept):
    from matplotlib.figure import Figure

    spec, trials = swept
    assert (spec.study_dir / "pareto.png").read_bytes()[:4] == b"\x89PNG"
    front = front_of(spec, load_study(spec))
    ax = Figure().subplots()
    draw_front(ax, front, "throughput/modeled_samples_per_s", "train/loss")
    knee = front.knee_row
    at = [knee["values"]["throughput/modeled_samples_per_s"], knee["values"]["train/loss"]]
    named = {c.get_label(): c for c in ax.collections}
    ring = named[f"knee: trial {knee['trial']}"]
    assert ring.get_offsets().tolist() == [at]
    assert len(ring.get_facecolor()) == 0  # unfilled
    collective = knee["params"]["method.collective"]
    point = named[collective]  # the front's points of the knee's collective, under the ring
    assert at in point.get_offsets().tolist() and point.get_zorder() < ring.get_zorder()
    assert "Best Trial" not in named
