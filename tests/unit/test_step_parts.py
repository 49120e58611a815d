"""The floor benchmark's breakdown reaches the code it names: a Top-k step's selection is
timed as "selection" while `module_parts` is active, and the module is itself again after;
and a row's lines say when the floor and its evaluation alone already pass the goal."""

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
