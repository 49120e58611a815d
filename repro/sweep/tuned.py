"""Tuned values as data: `configs/tuned/<paper>_<scale>.yaml`, written by `repro tune PAPER`.

A run set whose experiment says `experiment.tuned: true` takes, for each run label, the
overrides this file lists for it (`tuned_overrides`), after the label's own overrides and
before the command line's; the file is committed, so a reproduction never tunes. The file
also holds the search that chose the values (space, trials per arm, seeds, objective,
design, how long it took) and per arm its chosen values and best objective, which a report
states (`tuning_table`), as AlgoPerf's rule of equal tuning budgets asks.

A tuned run set whose file is missing, or lacks one of its labels, is refused with one line
naming `repro tune PAPER`: its runs would otherwise run at hand-set values while the report
claims tuned ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from repro.errors import UserError
from repro.storage import atomic_write

REPO = Path(__file__).resolve().parents[2]
TUNED_DIR = REPO / "configs" / "tuned"


def tune_command(paper: str, scale: str) -> str:
    return f"repro tune {paper}" + ("" if scale == "small" else f" scale={scale}")


def tuned_path(paper: str, scale: str, root: Path = TUNED_DIR) -> Path:
    return Path(root) / f"{paper}_{scale}.yaml"


def write_tuned(data: dict[str, Any], root: Path = TUNED_DIR) -> Path:
    """Write one run set's tuned file atomically (a reader never sees half of it)."""
    path = tuned_path(data["paper"], data["scale"], root)
    head = (
        f"# Tuned values of the {data['paper']} run set at scale {data['scale']}: written by "
        f"`{tune_command(data['paper'], data['scale'])}` from {data['spec']}.\n"
        "# Data, not settings: run the search again rather than edit it by hand.\n"
    )
    text = head + yaml.safe_dump(data, sort_keys=False, width=100)
    atomic_write(path, lambda f: f.write(text.encode()), setting="--out")
    return path


def load_tuned(paper: str, scale: str, root: Path = TUNED_DIR) -> dict[str, Any]:
    path = tuned_path(paper, scale, root)
    if not path.is_file():
        raise UserError(
            f"{path} is missing: the {paper} run set at scale {scale} is tuned "
            f"(experiment.tuned), so its runs take their values from it; run "
            f"`{tune_command(paper, scale)}` to make it"
        )
    again = f"run `{tune_command(paper, scale)}` again (or restore the file from git)"
    try:
        data = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"{path} is damaged ({first}); {again}") from None
    if not isinstance(data, dict) or not isinstance(data.get("runs"), dict):
        raise UserError(f"{path} has no `runs` mapping; {again}")
    bad = [k for k, v in data["runs"].items() if not isinstance(v, list | None)]
    if bad:
        raise UserError(f"{path}: runs.{bad[0]} is not a list of overrides; {again}")
    return data


def tuned_overrides(paper: str, scale: str, label: str, root: Path = TUNED_DIR) -> list[str]:
    """The overrides the search chose for run `label` of `paper` at `scale` (none for a run
    the search leaves untuned, with its reason in the file)."""
    data = load_tuned(paper, scale, root)
    if label not in data["runs"]:
        raise UserError(
            f"{tuned_path(paper, scale, root)} has no tuned values for run {label}; run "
            f"`{tune_command(paper, scale)}` again (its spec sweeps/tune/{paper}_{scale}.yaml "
            "must put the run in an arm or under untuned)"
        )
    return [str(o) for o in data["runs"][label] or []]


def run_overrides(experiment: Any, label: str, root: Path = TUNED_DIR) -> list[str]:
    """What a run set adds to run `label`: its tuned overrides when `experiment.tuned`."""
    if not experiment.tuned:
        return []
    return tuned_overrides(experiment.paper, experiment.scale, label, root)


@dataclass(frozen=True)
class TuningTable:
    """What a report states of the search: a summary line and one row per arm."""

    summary: str
    title: str
    headers: list[str]
    rows: list[list[str]]


def _value(v: Any) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def _range(entry: dict) -> str:
    scale = ", log" if entry.get("log") else ""
    return f"{entry['key']} in [{_value(entry['low'])}, {_value(entry['high'])}]{scale}"


def tuning_table(paper: str, scale: str, root: Path = TUNED_DIR) -> TuningTable | None:
    """The report's statement of the search, or None when the run set has no tuned file."""
    if not tuned_path(paper, scale, root).is_file():
        return None
    data = load_tuned(paper, scale, root)
    search = data["search"]
    spaces = "; ".join(
        f"{name}: {', '.join(_range(e) for e in entries)}"
        for name, entries in search["spaces"].items()
    )
    summary = (
        f"Tuned baselines, equal budgets: every arm's values come from one search with "
        f"{search['trials_per_arm']} trials per arm, seeds {search['seeds']} per trial, "
        f"{search['design']}, objective {search['objective']}; spaces {spaces}. The search "
        f"took {search['elapsed_s'] / 60:.1f} min ({search['started']} to {search['finished']})."
    )
    untuned = data.get("untuned") or {}
    if untuned:
        summary += " Untuned: " + "; ".join(f"{k} ({v})" for k, v in untuned.items()) + "."
    rows = []
    for name, arm in data["arms"].items():
        chosen = ", ".join(f"{k}={_value(v)}" for k, v in arm["chosen"].items())
        edge = arm.get("at_edge", [])
        rows.append(
            [
                name,
                ", ".join(arm["labels"]),
                arm["space"]
                + (" + " + ", ".join(e["key"] for e in arm["extra"]) if arm["extra"] else ""),
                chosen + (f" (the end of the range tried: {', '.join(edge)})" if edge else ""),
                f"{arm['objective']:.4g}",
                f"{arm['trials']} ({arm['diverged_trials']} with a diverged seed)",
            ]
        )
    headers = ["arm", "runs", "space", "chosen", "best objective", "trials"]
    return TuningTable(summary, "Tuning: chosen values per arm", headers, rows)
