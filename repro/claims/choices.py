"""Implementation choices a paper leaves open or that we made differently, stated in its report.

Each claims file may list `choices`: a setting, the value our runs use, what the paper (or
its reference implementation) does, and why. Where the paper's behaviour is an option
beside ours, the report names the option, so a reader can rerun with it: a deviation the
suite keeps is stated, never left for a reader to find in the code.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from repro.errors import UserError
from repro.pages.writer import Table


def require_texts(item: object, *names: str) -> None:
    """Refuse a claims-file entry whose named fields are not non-empty texts."""
    for name in names:
        value = getattr(item, name)
        if not value.strip():
            raise UserError(f"{name} must be a non-empty text, got {value!r}")


@dataclass(frozen=True)
class Choice:
    """One stated choice: `setting` (a config key or topic), `ours`, `paper`, `why`; and
    `scales`, the scales it is true at when it states one scale's regime (a horizon, a
    batch ladder), else every scale: a report at another scale does not state it."""

    setting: str
    ours: str
    paper: str
    why: str
    scales: list = field(default_factory=list)

    def __post_init__(self) -> None:
        require_texts(self, "setting", "ours", "paper", "why")


def choices_table(choices: list[Choice], scale: str) -> Table | None:
    """The choices stated at `scale`, or None when there are none."""
    rows = [
        [c.setting, c.ours, c.paper, c.why] for c in choices if not c.scales or scale in c.scales
    ]
    if not rows:
        return None
    return Table("Choices and deviations", ["setting", "ours", "paper", "why"], rows)
