"""The `tracking` group's schema: where a run's training curves go (wandb, and how).

Its code (`repro.track`) names a run from the whole composed config, so the schema lives
here, in a leaf the root config imports, rather than beside the tracker: the root config and
the tracking package would otherwise import each other.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from hydra.core.config_store import ConfigStore

from repro.errors import UserError

MODES = ("auto", "offline", "online", "disabled")
GROUP_MAX = 128  # wandb refuses longer group names


@dataclass
class TrackingConfig:
    """Where training curves go. `mode`: auto | offline | online | disabled. `group`: the
    wandb run group; empty: the experiment's (`repro.track.naming`); a sweep or tuning
    search sets its study's, which keeps its trials out of the reproduction's group."""

    mode: str = "auto"
    project: str = "repro"
    entity: str | None = None
    group: str = ""
    tags: list[str] = field(default_factory=list)

    def __post_init__(self):
        if self.mode not in MODES:
            raise UserError(f"tracking.mode={self.mode!r} must be one of {', '.join(MODES)}")
        if not self.project or any(c in self.project for c in "/\\#?%:"):
            raise UserError(
                f"tracking.project={self.project!r} must be a non-empty name without / \\ # ? % :"
            )
        if self.entity is not None and not self.entity:
            raise UserError("tracking.entity must be null or a non-empty name")
        if len(self.group) > GROUP_MAX:
            raise UserError(f"tracking.group={self.group!r} must be at most {GROUP_MAX} characters")
        bad = [t for t in self.tags if not t or len(t) > 64]
        if bad:
            raise UserError(f"tracking.tags={bad} must each be 1 to 64 characters long")

    def resolved_mode(self, environ: Mapping[str, str] | None = None) -> str:
        """`auto` -> online if WANDB_API_KEY is set (in `environ`, default os.environ)."""
        if self.mode != "auto":
            return self.mode
        env = os.environ if environ is None else environ
        return "online" if env.get("WANDB_API_KEY") else "offline"


ConfigStore.instance().store(group="tracking", name="tracking_schema", node=TrackingConfig)
