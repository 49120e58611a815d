"""What a reproduction's runs were set up with, per arm, in words for the setup table.

Arms of one reproduction may differ in learning rate (each tuned on its own), optimizer,
workers, batch or horizon. A setting every arm shares is one value; one that differs names
which arm has which value ("0.0667: sync, local_sgd_tau5; 0.0375: local_sgd_tau20"), never a
bare list of values a reader cannot match to arms. The stopping rule is the one the trainer
applies (`repro.schemas.trainer.TrainerConfig`): a modeled-time budget, a target accuracy, or the
step count, with the steps the runs actually reached, since a budgeted run stops long
before its step bound.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from repro.pages.writer import fmt
from repro.track.series import NotMeasurable, Run, Seeded, cfg, final_step


def network(run: Run) -> str:
    net = cfg(run, "network", {}) or {}
    text = (
        f"{net.get('name', '?')}: latency {fmt(net.get('latency_ms'))} ms, bandwidth "
        f"{fmt(net.get('bandwidth_gbps'))} Gbit/s, bytes x{fmt(net.get('bytes_scale', 1.0))}"
    )
    return text + (" (changes over time: schedule)" if net.get("schedule") else "")


def compute(run: Run) -> str:
    c = cfg(run, "compute", {}) or {}
    if c.get("mode", "measured") == "measured":
        return "measured on this machine"
    text = f"sampled {c.get('dist', '?')}, mean {fmt(c.get('mean_ms'))} ms"
    if c.get("shift_ms"):
        text += f", shift {fmt(c['shift_ms'])} ms"
    if c.get("straggler_prob"):
        text += f", stragglers p={fmt(c['straggler_prob'])} x{fmt(c.get('straggler_factor'))}"
    return text


def workload(run: Run) -> str:
    name = cfg(run, "workload.name")
    extra = [str(cfg(run, f"workload.{k}")) for k in ("dataset", "model")]
    extra = [e for e in extra if e != "None"]
    return f"{name} ({', '.join(extra)})" if extra else str(name)


def optimizer(run: Run) -> str:
    name = str(cfg(run, "optim.name"))
    momentum = cfg(run, "optim.momentum")
    return f"{name} (momentum {fmt(momentum)})" if name == "sgd" and momentum else name


def learning_rate(run: Run) -> str:
    """The peak rate, with its decay (milestones in epochs) and warm-up."""
    text = fmt(cfg(run, "optim.lr"))
    milestones = cfg(run, "optim.milestones") or []
    if milestones:
        at = ", ".join(fmt(m) for m in milestones)
        plural = "s" if len(milestones) > 1 else ""
        text += f", x{fmt(cfg(run, 'optim.gamma', 0.1))} at epoch{plural} {at}"
    if cfg(run, "optim.warmup_steps"):
        text += f", warm-up {cfg(run, 'optim.warmup_steps'):,} steps"
    return text


def stopping_rule(run: Run) -> str:
    """How the trainer stops this run: a modeled-time budget, a target accuracy, or steps."""
    steps = int(cfg(run, "trainer.steps", 0) or 0)
    rules = []
    if (cfg(run, "trainer.time_budget_s", 0) or 0) > 0:
        rules.append(f"{fmt(cfg(run, 'trainer.time_budget_s'))} s modeled budget")
    if (cfg(run, "trainer.target_acc", 0) or 0) > 0:
        rules.append(f"test accuracy {fmt(cfg(run, 'trainer.target_acc'))} reached")
    if not rules:
        return f"{steps:,} steps"
    return f"{' or '.join(rules)} (at most {steps:,} steps)"


def _reached(runs: list[Run]) -> str:
    steps = []
    for run in runs:
        try:
            steps.append(int(final_step(run)))
        except NotMeasurable:
            continue
    if not steps:
        return "no steps logged"
    low, high = min(steps), max(steps)
    return f"{low:,} steps reached" if low == high else f"{low:,}-{high:,} steps reached"


def _arms_by(runs: Seeded, get: Callable[[Run], str]) -> dict[str, list[str]]:
    """Each value of `get` over the runs, with the arms (labels) that have it."""
    groups: dict[str, list[str]] = {}
    for label, by_seed in runs.items():
        for value in dict.fromkeys(get(run) for run in by_seed.values()):
            groups.setdefault(value, []).append(label)
    return groups


def by_arm(runs: Seeded, get: Callable[[Run], Any]) -> str:
    """One value when every run shares it; else each value with the arms that have it."""
    groups = _arms_by(runs, lambda run: fmt(get(run)))
    if len(groups) <= 1:
        return next(iter(groups), "—")
    return "; ".join(f"{value}: {', '.join(labels)}" for value, labels in groups.items())


def stopping_text(runs: Seeded) -> str:
    """Each stopping rule, with its arms when they differ, and the steps reached under it."""
    groups = _arms_by(runs, stopping_rule)
    parts = []
    for rule, labels in groups.items():
        members = [r for lab in labels for r in runs[lab].values() if stopping_rule(r) == rule]
        if len(groups) == 1:
            return f"{rule}; {_reached(members)}"
        parts.append(f"{rule} for {', '.join(labels)}: {_reached(members)}")
    return "; ".join(parts) or "—"
