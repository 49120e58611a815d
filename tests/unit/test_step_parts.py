"""The floor benchmark's breakdown reaches the code it names: a Top-k step's selection is
timed as "selection" while `module_parts` is active, and the module is itself again after."""

import torch

import repro.compress.topk as topk_mod
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
