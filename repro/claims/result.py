"""What judging a claim on the runs gives: our value, its interval and the verdict.

The report pages, the index, the tracker's Report and the seed extension of `repro
reproduce` read these records; `repro.claims.verdicts` makes them. This module imports
nothing else of `repro.claims`, so every module that reads a result (the findings of a
claims file among them) can import it without importing the claim model back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from repro.pages.writer import counted, fmt

CHECK_WORDS = {"reproduced": "holds", "partly": "partly holds", "not reproduced": "does not hold"}
"""A model check's verdicts in its own words: it follows from the modeled clock or the rule
itself, so it holds or not; "reproduced" is kept for claims that could have come out
otherwise."""


@dataclass(frozen=True)
class Interval:
    """The mean of the values and its percentile-bootstrap interval [low, high]."""

    mean: float
    low: float
    high: float


@dataclass(frozen=True)
class ClaimResult:
    """A claim with our value (the mean over seeds; None when not computed), its interval,
    its verdict, each seed's value, and how we got there. `edge` is the band or partly edge
    an undecided interval straddles; `magnitude` what the claim's magnitude claims say when
    one of them is not reproduced; `off_set` the settings where the runs it read are not the
    run set's, `unfinished` the runs it reads that have not run to their end, `moved` which
    of its terms changed after its runs began (with any of these, it is not assessed)."""

    claim: Any  # the `repro.claims.claims_file.Claim` judged, not imported: this is a leaf
    ours: float | None
    verdict: str
    note: str
    per_seed: dict[int, float] = field(default_factory=dict)
    seed_verdicts: dict[int, str] = field(default_factory=dict)
    interval: Interval | None = None
    edge: float | None = None
    magnitude: str = ""
    off_set: str = ""
    unfinished: str = ""
    moved: str = ""

    @property
    def seeds(self) -> int:
        return len(self.per_seed)

    def ci_text(self) -> str:
        if self.interval is None:
            return "—"
        return f"[{fmt(self.interval.low)}, {fmt(self.interval.high)}]"

    def verdict_text(self) -> str:
        """The verdict as the tables show it, with the seeds and interval where undecided,
        and what a failed magnitude claim says; a model check's in its words (`CHECK_WORDS`)."""
        text = self._words(self.verdict)
        seeds = counted(self.seeds, "seed")
        if self.verdict == "undecided":
            text = f"undecided at {seeds}"
        elif self.verdict == "inconclusive":
            text = f"inconclusive at {seeds}, CI {self.ci_text()}"
        return f"{text}; {self.magnitude}" if self.magnitude else text

    def ours_text(self, unit: str) -> str:
        """The mean with its unit and 95% interval."""
        if self.ours is None:
            return "—"
        text = fmt(self.ours)
        if unit and text not in ("never reached", "undefined"):
            text += f" {unit}"
        return text + (f" (95% CI {self.ci_text()})" if self.interval else "")

    def per_seed_text(self) -> str:
        """Each seed's value, with its verdict when a model check's seeds disagree."""
        disagree = len(set(self.seed_verdicts.values())) > 1
        parts = []
        for seed, value in self.per_seed.items():
            text = f"seed {seed}: {fmt(value)}"
            if disagree:
                text += f" ({self._words(self.seed_verdicts[seed])})"
            parts.append(text)
        return "; ".join(parts) or "—"

    def _words(self, verdict: str) -> str:
        if self.claim.kind == "model_check":
            return CHECK_WORDS.get(verdict, verdict)
        return verdict
