"""`repro sweep show` on journal studies filled with hand-made trials: front, knee, groups."""

from __future__ import annotations

import io

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution

from repro.errors import UserError
from repro.sweep.results import pareto_front, show_sweep
from repro.sweep.spec import spec_from_dict
from repro.sweep.storage import open_storage

LR = FloatDistribution(0.001, 1.0, log=True)
COMBINER = CategoricalDistribution(["adasum", "sum"])


def make(tmp_path, objectives, trials, group_by=None):
    spec = spec_from_dict(
        {
            "name": "s",
            "experiment": None,
            "space": [
                {"key": "method.combiner", "type": "categorical", "choices": ["adasum", "sum"]},
                {"key": "optim.lr", "type": "float", "low": 0.001, "high": 1.0, "log": True},
            ],
            "objectives": objectives,
            "n_trials": 10,
            "out": str(tmp_path),
            "group_by": group_by,
        }
    )
    study = optuna.create_study(
        study_name="s", storage=open_storage(spec), directions=spec.directions
    )
    for combiner, lr, values in trials:
        study.add_trial(
            optuna.trial.create_trial(
                params={"method.combiner": combiner, "optim.lr": lr},
                distributions={"method.combiner": COMBINER, "optim.lr": LR},
                values=values,
            )
        )
    study.add_trial(
        optuna.trial.create_trial(
            state=optuna.trial.TrialState.FAIL, user_attrs={"fail_reason": "diverged: nan"}
        )
    )
    return spec


def table_trials(text: str) -> list[tuple[bool, int]]:
    """(is knee, trial number) of each row of the first table printed."""
    lines = text.split("Pareto front")[1].split("\nknee")[0].splitlines()[2:]
    return [(ln.startswith("*"), int(ln.lstrip("* ").split()[0])) for ln in lines if ln.strip()]


def test_two_objective_front_and_knee(tmp_path):
    objectives = [
        {"metric": "test/acc", "direction": "maximize"},
        {"metric": "throughput/modeled_samples_per_s", "direction": "maximize"},
    ]
    # Trial 3 (4, 4) is dominated by trial 1 (5, 6). Scaled to [0, 1] the front is
    # (0, 1), (0.5, 0.6), (1, 0): distances to (1, 1) are 1, 0.64, 1, so trial 1 is the knee.
    points = [(0.0, 10.0), (5.0, 6.0), (10.0, 0.0), (4.0, 4.0)]
    spec = make(tmp_path, objectives, [("adasum", 0.01, list(p)) for p in points])
    out = io.StringIO()
    result = show_sweep(spec, out)
    text = out.getvalue()
    assert "4 complete, 1 failed" in text and "failed trial 4: diverged: nan" in text
    assert table_trials(text) == [(False, 0), (True, 1), (False, 2)]
    assert "knee: trial 1 method.combiner=adasum, optim.lr=0.01 -> test/acc=5" in text
    assert [r["trial"] for r in result["front"]] == [0, 1, 2]
    for name in ("pareto", "hypervolume"):
        assert (tmp_path / "s" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
        page = (tmp_path / "s" / f"{name}.html").read_text()
        assert "<svg" in page and page.rstrip().endswith("</html>")
    rows, knee = pareto_front(spec)
    assert rows == result["front"] and knee["trial"] == 1


def test_single_objective_best_per_group(tmp_path):
    objectives = [{"metric": "test/acc", "direction": "maximize"}]
    trials = [
        ("adasum", 0.01, [0.90]),
        ("adasum", 0.1, [0.95]),
        ("sum", 0.01, [0.92]),
        ("sum", 0.1, [0.50]),
    ]
    spec = make(tmp_path, objectives, trials, group_by="method.combiner")
    out = io.StringIO()
    result = show_sweep(spec, out)
    assert result["knee"]["trial"] == 1
    assert {g: v["knee"]["trial"] for g, v in result["groups"].items()} == {"adasum": 1, "sum": 2}
    text = out.getvalue()
    assert "Best trial (1 of 4 completed trials; * = best):" in text and "Pareto" not in text
    assert "best for method.combiner=sum: trial 2" in text
    assert "best for method.combiner=adasum: trial 1" in text


def test_one_objective_figures_plot_it_against_the_searched_number_on_its_log_scale(tmp_path):
    """A tuning curve: with one objective and one searched number (the learning rate, on a
    log range), both figures put that number on x, logarithmic, not the trial order."""
    import xml.etree.ElementTree as ET

    from matplotlib.figure import Figure

    from repro.sweep.front import front_of
    from repro.sweep.front_plot import draw_front
    from repro.sweep.results import load_study

    objectives = [{"metric": "test/acc", "direction": "maximize"}]
    trials = [("adasum", 0.001, [0.5]), ("sum", 0.01, [0.9]), ("adasum", 1.0, [0.7])]
    spec = make(tmp_path, objectives, trials, group_by="method.combiner")
    show_sweep(spec, io.StringIO())
    page = (tmp_path / "s" / "pareto.html").read_text()
    svg = ET.fromstring(page[page.index("<svg") : page.index("</svg>") + len("</svg>")])
    ns = "{http://www.w3.org/2000/svg}"
    cx = {
        int(c.get("data-trial")): float(c.get("cx"))
        for c in svg.iter(f"{ns}circle")
        if c.get("class") == "pt"
    }
    # equal steps in log10(lr) are equal steps in pixels: 0.001 -> 0.01 is a third of 0.001 -> 1
    assert cx[0] < cx[1] < cx[2]
    assert cx[1] - cx[0] == pytest.approx((cx[2] - cx[0]) / 3, abs=0.2)
    labels = [t.text for t in svg.iter(f"{ns}text")]
    assert "optim.lr (searched, log scale)" in labels
    assert {"0.001", "0.01", "0.1", "1"} <= set(labels)  # decades
    assert "The best of 3 completed trials is filled and ringed" in page
    ax = Figure().subplots()
    front = front_of(spec, load_study(spec))
    assert front.axes() == ("optim.lr", "test/acc")
    draw_front(ax, front, *front.axes())
    ring = next(c for c in ax.collections if c.get_label() == "best: trial 1")
    assert ring.get_offsets().tolist() == [[0.01, 0.9]]


def test_one_objective_ties_are_named_best_trials(tmp_path):
    objectives = [{"metric": "test/acc", "direction": "maximize"}]
    trials = [("adasum", 0.01, [1.0]), ("sum", 0.1, [1.0]), ("sum", 0.5, [0.5])]
    out = io.StringIO()
    show_sweep(make(tmp_path, objectives, trials), out)
    assert "\nBest trials, tied (2 of 3 completed trials; * = best):\n" in out.getvalue()


def test_show_before_the_sweep_ran_is_a_clear_error(tmp_path):
    spec = spec_from_dict(
        {
            "name": "never",
            "experiment": None,
            "space": [{"key": "optim.lr", "type": "float", "low": 0.001, "high": 1.0}],
            "objectives": [{"metric": "test/acc", "direction": "maximize"}],
            "n_trials": 1,
            "out": str(tmp_path),
        }
    )
    with pytest.raises(UserError, match="no study never yet"):
        show_sweep(spec, io.StringIO())
    assert not (tmp_path / "never").exists()
