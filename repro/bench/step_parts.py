"""Where a simulated training step's time goes: exclusive time per part, per step.

`instrument` wraps the trainer's parts (the stacked forward/backward, the optimizer, the
strategy's hooks, the collectives) and the Top-k exchange's selection and error-feedback
functions in timers. A part's time excludes the wrapped calls nested inside it, so the parts
add up to the step. Only calls made inside a timed step count (an evaluation's averaging
allreduce is evaluation, timed on its own by the caller). Inside an absorbing part (MOO's
probes) nested calls are not split out: the probe's trial steps are all probe time.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import repro.compress.topk as topk_mod

COLLECTIVES = (
    "allreduce",
    "allreduce_first",
    "allgather",
    "broadcast",
    "reduce_scatter",
    "sendrecv",
    "allreduce_untracked",
    "allgather_untracked",
)
ERROR_FEEDBACK = ("compensate_flat", "keep")
REST = "rest of the step"


class PartTimer:
    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self.history: list[tuple[float, dict[str, float]]] = []  # per step: seconds, parts
        self._stack: list[list] = []  # [time of nested parts, absorbing]

    def wrap(self, fn: Callable, part: str, absorb: bool = False) -> Callable:
        def timed(*args, **kwargs):
            if not self._stack or self._stack[-1][1]:
                return fn(*args, **kwargs)
            return self._time(fn, part, absorb, args, kwargs)

        return timed

    def step(self, fn: Callable, *args) -> float:
        """Run one whole step, timed, its unwrapped remainder counted as REST; keep its
        parts and return its seconds."""
        before = dict(self.totals)
        started = time.perf_counter()
        self._time(fn, REST, False, args, {})
        elapsed = time.perf_counter() - started
        self.history.append((elapsed, {k: v - before.get(k, 0.0) for k, v in self.totals.items()}))
        return elapsed

    def _time(self, fn, part, absorb, args, kwargs):
        frame = [0.0, absorb]
        self._stack.append(frame)
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            elapsed = time.perf_counter() - started
            self._stack.pop()
            self.totals[part] += elapsed - frame[0]
            if self._stack:
                self._stack[-1][0] += elapsed

    def reset(self) -> None:
        self.totals.clear()
        self.history.clear()

    def typical(self, share: float = 0.25) -> tuple[float, dict[str, float]]:
        """Seconds per step and each part's, REST last: the steps grouped by the parts they
        ran (a local-SGD step that averages calls collectives, one that does not calls
        none), each group's fastest `share` averaged (on a shared machine, the least
        disturbed) and the groups weighted by how often they ran. The parts add up to the
        step, and a step that comes once a period is charged at its rate, not left out as
        the slowest."""
        groups: dict[frozenset, list[tuple[float, dict[str, float]]]] = defaultdict(list)
        for elapsed, parts in self.history:
            groups[frozenset(k for k, v in parts.items() if v > 0)].append((elapsed, parts))
        step, out = 0.0, defaultdict(float)
        for steps in groups.values():
            weight = len(steps) / len(self.history)
            fastest = sorted(steps, key=lambda h: h[0])[: max(1, int(len(steps) * share))]
            step += weight * sum(e for e, _ in fastest) / len(fastest)
            for _, parts in fastest:
                for k, v in parts.items():
                    out[k] += weight * v / len(fastest)
        rest = out.pop(REST, 0.0)
        return step, {**dict(sorted(out.items(), key=lambda kv: -kv[1])), REST: rest}


def fastest_mean(seconds: list[float], share: float = 0.25) -> float:
    """The mean of the fastest `share` of `seconds`, the statistic of `PartTimer.typical`."""
    fastest = sorted(seconds)[: max(1, int(len(seconds) * share))]
    return sum(fastest) / len(fastest)


def _wrap_attr(owner, name: str, timer: PartTimer, part: str, absorb: bool = False) -> None:
    if hasattr(owner, name):
        setattr(owner, name, timer.wrap(getattr(owner, name), part, absorb))


def instrument(trainer, timer: PartTimer) -> None:
    """Wrap one trainer's own objects (instance attributes: nothing shared is touched)."""
    _wrap_attr(trainer.replicas, "forward_backward", timer, "forward/backward")
    _wrap_attr(trainer.optimizer, "step", timer, "optimizer")
    _wrap_attr(trainer.rehearsal, "rehearse", timer, "MOO probes", absorb=True)
    strategy = trainer.strategy
    for hook in ("after_backward", "after_step"):
        _wrap_attr(strategy, hook, timer, "exchange (rest)")
    for name in COLLECTIVES:
        _wrap_attr(trainer.comm, name, timer, "collective")
    memory = getattr(strategy, "memory", None)
    for name in ERROR_FEEDBACK:
        _wrap_attr(memory, name, timer, "error feedback")
    _wrap_attr(strategy, "_adasum", timer, "Adasum combination")


@contextmanager
def module_parts(timer: PartTimer) -> Iterator[None]:
    """Time the Top-k exchange's selection while inside."""
    saved = topk_mod.compress
    topk_mod.compress = timer.wrap(saved, "selection")
    try:
        yield
    finally:
        topk_mod.compress = saved
