"""Links from a report page to the runs behind it.

A run id links to the run's directory (its config.yaml, summary.json, checkpoints and wandb
log), by a path relative to the page, so a page and the runs tree it was built from can be
moved together; and to the run's wandb page when its summary records one (a run tracked
online, or synced later). A claim's row links every run it read: the labels its calculator
reads (`repro.claims.reads`) at the seeds it was judged on (`repro.claims.verdicts`), and names
the labels it reads that have no run.
"""

from __future__ import annotations

import os
from pathlib import Path

from repro.pages.writer import Cell, Link
from repro.track.series import Run, Seeded

# the summary key under which a run's wandb page is recorded
WANDB_URL = "wandb_url"


def run_href(run: Run, page_dir: Path) -> str:
    """The run's directory relative to the page's, ending in '/'."""
    path = Path(getattr(run, "path", "")).absolute()
    return Path(os.path.relpath(path, Path(page_dir).absolute())).as_posix() + "/"


def wandb_url(run: Run) -> str | None:
    url = run.summary.get(WANDB_URL) if isinstance(run.summary, dict) else None
    return url if isinstance(url, str) and url.startswith(("https://", "http://")) else None


def run_cell(run: Run, page_dir: Path) -> Cell:
    """The run id, linked to its directory, and to its wandb page when it has one."""
    link = Link(str(run.run_id), run_href(run, page_dir))
    url = wandb_url(run)
    return (link, " (", Link("wandb", url), ")") if url else link


def reads_cell(labels: list[str], seeds: list[int], runs: Seeded, page_dir: Path) -> Cell:
    """Each label and its seeds ("sync: seeds 0, 1, 2"), each seed linked to that run's
    directory; a label with no run at those seeds is named as such."""
    parts: list[Cell] = []
    for label in labels:
        if parts:
            parts.append("; ")
        by_seed = runs.get(label, {})
        present = [seed for seed in seeds if seed in by_seed]
        if not present:
            parts.append(f"{label} (no run)")
            continue
        parts.append(f"{label}: seed{'s' if len(present) > 1 else ''} ")
        for i, seed in enumerate(present):
            parts += [", "] if i else []
            parts.append(Link(str(seed), run_href(by_seed[seed], page_dir)))
    return tuple(parts) if parts else "—"
