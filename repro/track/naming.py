"""What a training run is called in wandb: its name, group, job type and tags.

A reproduction runs every label of its run set for several seeds, and a report reads them
as one group with a band across seeds, so each seed's run needs a name of its own:
`<label>-s<seed>` (`sync-s0`, `sync-s1`, ...). The group is the reproduction's
(`experiment.group`, else the experiment's name, e.g. `topk_small`) unless the tracking
config names one: a sweep or tuning search sets `tracking.group` to its study, so its trials
never land in the reproduction's group, where a Report's group filter would pull them in.
The job type is the label, so a workspace can group a group's runs by it.

Tags make runs filterable without reading their config: `paper:<paper>`, `scale:<scale>`
(a scale only means something for a paper's reproduction), `method:<method>`,
`seed:<seed>`, then the tracking config's own tags (a sweep's `sweep`, `study:<name>`,
`trial:<n>`; a search's `tune`, `study:<name>`, `arm:<arm>`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from repro.config import Config

NO_PAPER = "none"  # experiment.paper of a run that belongs to no reproduction


@dataclass(frozen=True)
class RunIdentity:
    name: str
    group: str
    job_type: str
    tags: list[str]


def run_name(label: str, seed: int) -> str:
    return f"{label}-s{seed}"


def run_identity(cfg: Config) -> RunIdentity:
    """The wandb name, group, job type and tags of the run `cfg` makes (see module doc)."""
    e = cfg.experiment
    tags = []
    if e.paper != NO_PAPER:
        tags += [f"paper:{e.paper}", f"scale:{e.scale}"]
    tags += [f"method:{cfg.method.name}", f"seed:{cfg.seed}"]
    tags += [t for t in cfg.tracking.tags if t not in tags]
    return RunIdentity(
        name=run_name(cfg.label, cfg.seed),
        group=cfg.tracking.group or e.group or e.name,
        job_type=cfg.label,
        tags=tags,
    )
