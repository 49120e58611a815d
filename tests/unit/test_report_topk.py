"""The report pieces added for Flexible Top-k: run-set comparisons, per-phase choices and the
published-beside-ours table, on synthetic runs whose numbers are known by hand."""

import pytest

from repro.claims.calculators.comparisons import (
    accuracy_drop,
    choice_by_phase,
    drop_grows,
    share_in_range,
    step_time_ratio,
)
from repro.claims.claims_file import load_claims
from repro.claims.published import PublishedTable, render_table
from repro.errors import UserError
from repro.report.build import default_claims_dir
from repro.track.series import MissingRun, NotMeasurable
from tests.unit.report_data import make_run, seeded

SCHEDULE = {"network": {"schedule": [{"from_epoch": e} for e in (0.0, 3.0, 6.0)]}}


def acc_offset(points: float):
    """test/acc = s / 100 - points / 100: the run ends `points` percentage points lower."""
    return lambda s: {"test/acc": s / 100 - points / 100, "epoch": s / 10}


def run_set():
    return {
        "dense": make_run("dense", sec_per_step=1.0),
        "ag_c0.1": make_run("ag_c0.1", sec_per_step=0.5, extra=acc_offset(0.5)),
        "ag_c0.001": make_run("ag_c0.001", sec_per_step=0.2, extra=acc_offset(3.0)),
        "star_c0.1": make_run("star_c0.1", sec_per_step=0.25, extra=acc_offset(2.0)),
        "star_c0.001": make_run("star_c0.001", sec_per_step=0.2, extra=acc_offset(1.0)),
    }


def test_step_time_ratio_is_the_slowest_over_the_reference():
    m = step_time_ratio(run_set(), pattern=r".*_c.*", reference="dense")
    assert m.value == pytest.approx(0.5)
    assert "ag_c0.1 0.5x" in m.note and "star_c0.1 0.25x" in m.note
    with pytest.raises(MissingRun):
        step_time_ratio(run_set(), pattern="var_.*", reference="dense")
    with pytest.raises(MissingRun):
        step_time_ratio(run_set(), pattern=".*", reference="sync")


def test_accuracy_drop_in_points_and_whether_it_grows():
    runs = run_set()
    assert accuracy_drop(runs, r".*_c0\.1", "dense", smooth=3).value == pytest.approx(2.0)
    assert accuracy_drop(runs, "ag_c0.1", "dense").value == pytest.approx(0.5)
    # ag: 0.5 -> 3.0 grows; star: 2.0 -> 1.0 shrinks
    m = drop_grows(runs, ["ag_c", "star_c"], "0.1", "0.001", "dense", smooth=3)
    assert m.value == 0.5 and "ag_c: +0.5 -> +3 pt" in m.note
    with pytest.raises(MissingRun):
        drop_grows(runs, ["var_c"], "0.1", "0.001", "dense")


def test_share_in_range_counts_logged_points():
    def cr(s):
        return {"method/cr": 0.1 if s <= 30 else 0.004 if s <= 60 else 0.033}

    runs = {"moo": make_run("moo", extra=cr)}
    # steps 10-30 at 0.1 (the bound counts) and 70-100 at 0.033: 7 of 10 points
    assert share_in_range(runs, "moo", "method/cr", 0.01, 0.1).value == pytest.approx(0.7)
    with pytest.raises(NotMeasurable):
        share_in_range(runs, "moo", "method/gain", 0.0, 1.0)


def test_choice_by_phase_takes_the_dominant_value_per_schedule_phase():
    def coll(s):
        # epochs 1-2: phase 0; 3-5: phase 1 (one allgather among ar_ring); 6-10: phase 2
        value = "allgather" if s < 30 or s >= 60 or s == 50 else "ar_ring"
        return {"epoch": s / 10, "method/collective": value}

    runs = {
        "star_c0.1": make_run("star_c0.1", extra=coll, config=SCHEDULE),
        "star_c0.001": make_run(
            "star_c0.001",
            extra=lambda s: {"epoch": s / 10, "method/collective": "allgather"},
            config=SCHEDULE,
        ),
    }
    ar = choice_by_phase(runs, r"star_c0\.1", [1], ["ar_ring", "ar_tree"])
    assert ar.value == 1.0 and ar.note == "star_c0.1 phase 1: ar_ring"
    ag = choice_by_phase(runs, "star_c.*", [0, 2], ["allgather"])
    assert ag.value == 1.0
    mixed = choice_by_phase(runs, "star_c.*", [1], ["ar_ring"])
    assert mixed.value == 0.5
    with pytest.raises(NotMeasurable, match="phase 3"):
        choice_by_phase(runs, "star_c.*", [3], ["allgather"])


def table_spec(**changes) -> PublishedTable:
    spec = {
        "id": "t",
        "title": "Table",
        "reference": "dense",
        "rows": [
            {"run": "dense", "step_ms": 100.0, "acc": 90.0, "source": "T3"},
            {"run": "star_c0.1", "step_ms": 50.0, "acc": 89.0, "source": "T4"},
            {"run": "var_c0.1", "step_ms": 80.0, "acc": 88.0, "source": "T4"},
            {"run": "moo", "acc": 89.5, "source": "Sec. V"},
        ],
        **changes,
    }
    return PublishedTable(**spec)


def test_published_table_puts_our_ratios_beside_the_papers():
    runs = run_set()
    runs["moo"] = make_run(
        "moo", sec_per_step=0.3, extra=lambda s: {"method/cr": 0.1 if s < 50 else 0.01}
    )
    # a second seed of star_c0.1 at 350 ms per step: our columns are the means over seeds
    again = make_run("star_c0.1", sec_per_step=0.35, extra=acc_offset(2.0), seed=1)
    table = render_table(table_spec(smooth=3), seeded([*runs.values(), again]), str.upper)
    rows = {row[1]: row for row in table.rows}
    # dense: 1000 ms per step, test acc at the last 3 points (0.8, 0.9, 1.0) -> 90%
    assert rows["dense"][4:7] == ["1000", "1", "90"]
    assert rows["star_c0.1"][4:10] == ["300", "0.3", "88", "50", "0.5", "89"]
    assert rows["var_c0.1"][3] == "not run" and rows["var_c0.1"][8] == "0.8"
    assert rows["moo"][0] == "MOO" and rows["moo"][2] == "0.01 to 0.1"
    assert rows["moo"][7:9] == ["—", "—"]


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"reference": "sync"}, "reference 'sync' is not a row's run"),
        ({"rows": []}, "non-empty list"),
        ({"rows": [{"run": "dense", "step": 1, "source": "x"}]}, "rows[0]: unknown key"),
        ({"rows": [{"run": "dense", "step_ms": "fast", "source": "x"}]}, "must be a number"),
        ({"smooth": 0}, "smooth=0"),
    ],
)
def test_published_table_rejects_bad_specs(changes, message):
    with pytest.raises(UserError, match=message.replace("[", r"\[").replace("]", r"\]")):
        table_spec(**changes)


def test_topk_claims_file_loads_with_its_table():
    claims = load_claims("topk", default_claims_dir())
    assert [t.id for t in claims.tables] == ["table_iv"]
    rows = claims.tables[0].parsed
    assert len(rows) == 14 and rows[0].run == claims.tables[0].reference == "dense_ring"
    assert {r.step_ms for r in rows if r.run.startswith("star_")} == {64.83, 49.68, 48.17}
    assert claims.display_name("var_topk_c0.01") == "VAR-Topk (c = 0.01)"
