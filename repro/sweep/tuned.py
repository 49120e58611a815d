"""Tuned values as data: `configs/tuned/<paper>_<scale>.yaml`, written by `repro tune PAPER`.

A run set whose experiment says `experiment.tuned: true` takes, for each run label, the
overrides this file lists for it (`tuned_overrides`), after the label's own overrides and
before the command line's; the file is committed, so a reproduction never tunes. The file
also holds the search that chose the values (space, trials per arm, seeds, objective,
design, how long it took) and per arm its chosen values and best objective, which a report
states (`tuning_table`), as AlgoPerf's rule of equal tuning budgets asks.

The file is the export step of a tuning search (`export_data`): once every arm's study has its
trials, each arm's best trial gives the values its labels take.

A tuned run set whose file is missing, or lacks one of its labels, is refused with one line
naming `repro tune PAPER`: its runs would otherwise run at hand-set values while the report
claims tuned ones.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from repro.errors import UserError
from repro.pages.writer import fmt
from repro.storage import atomic_write
from repro.sweep.space import format_override
from repro.sweep.spec import STEPS_TO_TARGET
from repro.sweep.study import completed

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


def shown_path(source: str) -> str:
    """A spec's path as the tuned file records it: relative to the repository when inside."""
    path = Path(source).resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else source


def _objective_text(objective: Any) -> str:
    if objective.metric == STEPS_TO_TARGET:
        return (
            "steps to the target test accuracy (minimize; a run that never reaches it: "
            "budget x (1 + shortfall / target))"
        )
    return (
        f"final {objective.metric} ({objective.direction}; a diverged seed scores "
        f"{objective.diverged:g})"
    )


def _entry(p: Any) -> dict[str, Any]:
    """A space entry as data, without the fields it leaves at their defaults."""
    return {k: v for k, v in asdict(p).items() if v is not None and v != () and v is not False}


def _arm_data(spec: Any, arm: Any, done: list[Any], best: Any) -> dict[str, Any]:
    """One arm's part of the file: its search, chosen values and every point it tried."""
    types = {p.key: p.type for p in spec.space_of(arm)}
    return {
        "run": arm.trained,
        "labels": list(arm.labels),
        "space": arm.space,
        "extra": [_entry(p) for p in arm.extra],
        "overrides": list(arm.overrides),
        "chosen": dict(best.params),
        "objective": best.value,
        "best_trial": best.number,
        "trials": len(done),
        "diverged_trials": sum(1 for t in done if t.user_attrs.get("diverged")),
        "tried": [
            {**t.params, "objective": t.value}
            for t in sorted(done, key=lambda t: t.user_attrs["design_index"])
        ],
        # a best value at the end of what was tried may have been cut off by the range
        "at_edge": [
            k
            for k, v in best.params.items()
            if types[k] != "categorical"
            and v in (min(t.params[k] for t in done), max(t.params[k] for t in done))
        ],
    }


def export_data(spec: Any, studies: dict[str, Any]) -> dict[str, Any]:
    """The tuned file's data from the finished study of each arm of the search `spec`."""
    arms, runs, trials = {}, {}, []
    for arm in spec.arms.values():
        study = studies[arm.name]
        done = completed(study)
        if len(done) < spec.n_trials:
            raise UserError(
                f"arm {arm.name} has {len(done)} of {spec.n_trials} trials; run "
                f"`{tune_command(spec.paper, spec.scale)}` again to finish the search"
            )
        trials += done
        best = study.best_trial
        arms[arm.name] = _arm_data(spec, arm, done, best)
        for label in arm.labels:
            runs[label] = [format_override(k, v) for k, v in best.params.items()]
    runs |= {label: [] for label in spec.untuned}
    start = min(t.datetime_start for t in trials)
    end = max(t.datetime_complete for t in trials)
    search = {
        "spaces": {name: [_entry(p) for p in entries] for name, entries in spec.spaces.items()},
        "trials_per_arm": spec.n_trials,
        "seeds": list(spec.seeds),
        "objective": _objective_text(spec.objective),
        "design": (
            f"scrambled Sobol design (seed {spec.sampler.seed}) centred in its cells: one point "
            "per equal slice of each range, the same points for arms sharing a space"
        ),
        "overrides": list(spec.overrides),
        "started": start.isoformat(timespec="seconds"),
        "finished": end.isoformat(timespec="seconds"),
        "elapsed_s": round((end - start).total_seconds(), 1),
        "trial_s": round(sum((t.duration.total_seconds() for t in trials), 0.0), 1),
    }
    return {
        "paper": spec.paper,
        "scale": spec.scale,
        "experiment": spec.experiment,
        "spec": shown_path(spec.source),
        "search": search,
        "arms": arms,
        "untuned": dict(spec.untuned),
        "runs": runs,
    }


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
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"{path} is damaged ({first}); {again}") from None
    if not isinstance(data, dict) or not isinstance(data.get("runs"), dict):
        raise UserError(f"{path} has no `runs` mapping; {again}")
    bad = [k for k, v in data["runs"].items() if not isinstance(v, list | None)]
    if bad:
        raise UserError(f"{path}: runs.{bad[0]} is not a list of overrides; {again}")
    _check_chosen(path, data, again)
    return data


def _check_chosen(path: Path, data: dict[str, Any], again: str) -> None:
    """Refuse a file whose runs do not take their arm's chosen values: a file cut short can
    still parse (a run left with no values, or with some of them) and a hand-edited value
    would be run while the report states the chosen one (`tuning_table`)."""
    arms = data.get("arms")
    if not isinstance(arms, dict) or not all(
        isinstance(arm, dict)
        and isinstance(arm.get("labels"), list)
        and isinstance(arm.get("chosen"), dict)
        for arm in arms.values()
    ):
        raise UserError(f"{path} has no `arms` with each arm's labels and chosen values; {again}")
    for name, arm in arms.items():
        chosen = [format_override(k, v) for k, v in arm["chosen"].items()]
        for label in arm["labels"]:
            runs = data["runs"].get(label, chosen)  # a label not there: `tuned_overrides`
            if [str(o) for o in runs or []] != chosen:
                raise UserError(
                    f"{path}: runs.{label} is {runs or 'empty'}, not arm {name}'s chosen "
                    f"values {chosen} (the file was cut short or edited); {again}"
                )


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
    """A value as the page shows every number (`fmt`), so the setup table's learning rate
    and this table's chosen one read alike."""
    return fmt(v) if isinstance(v, float) else str(v)


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
        chosen += f" (the end of the range tried: {', '.join(edge)})" if edge else ""
        extra = ", ".join(e["key"] for e in arm["extra"])
        space = arm["space"] + (f" + {extra}" if extra else "")
        trials = f"{arm['trials']} ({arm['diverged_trials']} with a diverged seed)"
        rows.append([name, ", ".join(arm["labels"]), space, chosen, fmt(arm["objective"]), trials])
    headers = ["arm", "runs", "space", "chosen", "best objective", "trials"]
    return TuningTable(summary, "Tuning: chosen values per arm", headers, rows)
