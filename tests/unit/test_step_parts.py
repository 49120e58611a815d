"""The floor benchmark's breakdown reaches the code it names: a Top-k step's selection is
timed as "selection" while `module_parts` is active, and the module is itself again after;
a step that comes once a period counts at its rate; and a row's lines say when the floor
and its evaluation alone already pass the goal."""

import pytest
import torch

import repro.compress.topk as topk_mod
from repro.bench.step_floor import row_lines
from repro.bench.step_parts import REST, PartTimer, module_parts
from repro.compress.topk import TopKAt


def test_selection_inside_a_step_is_timed_as_its_own_part_and_restored_after():
    original = topk_mod.compress
    timer = PartTimer()
    x = torch.randn(4, 5_000, generator=torch.Generator().manual_seed(0))
    with module_parts(timer):
        timer.step(TopKAt(50).encode, x)
    assert topk_mod.compress is original
    parts = timer.history[0][1]
    assert parts["selection"] > 0.0
    assert parts["selection"] + parts[REST] <= timer.history[0][0] + 1e-9


def test_a_step_that_comes_once_a_period_is_charged_at_its_rate_and_the_parts_add_up():
    """Local SGD at tau = 4 over 8 steps: 6 steps compute alone (1 ms, or 5 ms when
    disturbed), 2 also average (3 ms). The typical step is 3/4 x 1 + 1/4 x 3 ms, not the
    fastest step (which leaves the averaging out); its parts sum to it."""
    timer = PartTimer()
    alone = [{"forward/backward": 0.8e-3, REST: 0.2e-3}] * 5 + [
        {"forward/backward": 4.8e-3, REST: 0.2e-3}
    ]
    averaging = [{"forward/backward": 0.8e-3, "collective": 2.0e-3, REST: 0.2e-3}] * 2
    timer.history = [(sum(p.values()), p) for p in alone + averaging]
    step, parts = timer.typical(share=0.5)
    assert step == pytest.approx(0.75 * 1e-3 + 0.25 * 3e-3)
    assert parts == pytest.approx({"forward/backward": 0.8e-3, "collective": 0.5e-3, REST: 0.2e-3})
    assert sum(parts.values()) == pytest.approx(step)
    assert list(parts)[-1] == REST


def _result(floor_ms: float, step_ms: float, evaluation_ms: float) -> dict:
    floor, evaluation = floor_ms / 1e3, evaluation_ms / 1e3
    return {
        "floor": floor,
        "step": step_ms / 1e3,
        "parts": {"forward/backward": (step_ms - evaluation_ms) / 1e3, "evaluation": evaluation},
        "workers": 8,
        "batch": 1024,
    }


def test_a_row_whose_floor_and_evaluation_pass_the_goal_says_so_with_their_ratio():
    # Adasum's 8-worker rows as measured: evaluation every 5 steps over 8,000 signals
    head, parts = row_lines("adasum", "adasum_sgd_b1024", _result(6.9, 15.0, 3.76))
    assert head == (
        "adasum adasum_sgd_b1024 (8 workers, batch 1024): step 15.0 ms / floor 6.9 ms = "
        "2.17x (over 1.5x; the floor and its evaluation alone: 1.54x)"
    )
    assert parts == "    ms/step: forward/backward 11.24  evaluation 3.76"


def test_a_row_the_goal_leaves_room_for_names_no_bound():
    head, _ = row_lines("topk", "dense_ring", _result(9.1, 12.4, 0.66))
    assert head.endswith("= 1.36x (ok)")
    head, _ = row_lines("topk", "moo", _result(9.1, 17.2, 0.66))
    assert head.endswith("= 1.89x (over 1.5x)")
