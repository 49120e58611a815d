"""Claims judged per seed and on the mean of the seeds (issue 14: verdicts over seeds).

A reproduction runs every label for several seeds; the report holds its runs as
label -> seed -> run (`Seeded`). A claim's calculator runs once per seed on that seed's runs
(label -> run), and the claim's value is the mean of the per-seed values. Verdicts:

* "reproduced": the criterion (band or direction rule) holds on the mean and on every seed;
* "unstable": the seeds disagree (their one-value verdicts differ), so one seed alone could
  have told either story; the report lists each seed's value and verdict;
* "partly" / "not reproduced": every seed agrees on it;
* "not run" when a run a claim needs is absent for some seed, "not measured" when the runs lack
  a metric or setting, "not assessed" when the claim does not apply to the report's scale
  (its values are still computed and shown).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from repro.report.claims import Claim
from repro.report.render import fmt
from repro.report.series import MissingRun, NotMeasurable, Seeded, at_seed, seeds_of


@dataclass(frozen=True)
class ClaimResult:
    """A claim with our value (the mean over seeds; None when not computed), its verdict, each
    seed's value and one-value verdict, and how we got there."""

    claim: Claim
    ours: float | None
    verdict: str
    note: str
    per_seed: dict[int, float] = field(default_factory=dict)
    seed_verdicts: dict[int, str] = field(default_factory=dict)

    def per_seed_text(self) -> str:
        """Each seed's value, with its verdict when the seeds disagree."""
        parts = []
        for seed, value in self.per_seed.items():
            text = f"seed {seed}: {fmt(value)}"
            if self.verdict == "unstable":
                text += f" ({self.seed_verdicts[seed]})"
            parts.append(text)
        return "; ".join(parts) or "—"


def mean(values: list[float]) -> float:
    """The mean of the per-seed values (inf when a seed never reached a target)."""
    return sum(values) / len(values)


def combine(seed_verdicts: list[str], mean_verdict: str) -> str:
    """One verdict from each seed's and the mean's (see module doc)."""
    if len(set(seed_verdicts)) > 1:
        return "unstable"
    agreed = seed_verdicts[0]
    # every seed inside the band but the mean outside: only possible for a rule that is not
    # an interval, and then the mean decides
    return mean_verdict if agreed == "reproduced" else agreed


def _measure(claim: Claim, runs: Seeded, seeds: list[int]) -> tuple[dict[int, float], str]:
    """Each seed's value and the notes of how; MissingRun / NotMeasurable name the seed."""
    values: dict[int, float] = {}
    notes = []
    for seed in seeds:
        try:
            m = claim.measure(at_seed(runs, seed))
        except NotMeasurable as err:
            named = f"seed {seed}: {err}" if len(seeds) > 1 else str(err)
            raise type(err)(named) from None
        values[seed] = float(m.value)
        notes.append(f"seed {seed}: {m.note}" if len(seeds) > 1 else m.note)
    return values, "; ".join(notes)


def evaluate(claims: list[Claim], runs: Seeded, scale: str) -> list[ClaimResult]:
    """Evaluate every claim on the runs of one reproduction at `scale` (never raises)."""
    seeds = seeds_of(runs) or [0]
    results = []
    for claim in claims:
        try:
            values, note = _measure(claim, runs, seeds)
        except MissingRun as err:
            results.append(ClaimResult(claim, None, "not run", str(err)))
            continue
        except NotMeasurable as err:
            results.append(ClaimResult(claim, None, "not measured", str(err)))
            continue
        ours = mean(list(values.values()))
        if len(seeds) > 1:
            note = f"mean of {len(seeds)} seeds; {note}"
        if scale not in claim.scales:
            note = f"applies to scale {', '.join(claim.scales)}, not {scale}; {note}"
            results.append(ClaimResult(claim, ours, "not assessed", note, values))
            continue
        judged = {seed: claim.judge(value) for seed, value in values.items()}
        verdict = combine(list(judged.values()), claim.judge(ours))
        results.append(ClaimResult(claim, ours, verdict, note, values, judged))
    return results


def summary(results: list[ClaimResult]) -> str:
    """ "2 reproduced, 1 unstable, ..." in the order the verdicts first appear."""
    verdicts = [r.verdict for r in results]
    return ", ".join(f"{verdicts.count(v)} {v}" for v in dict.fromkeys(verdicts)) or "none"


VERDICTS_TEXT = (
    "reproduced: the criterion holds on the mean of the seeds and on every seed; unstable: "
    "the seeds disagree (each seed's value and verdict are listed); partly / not reproduced: "
    "every seed agrees on it; not run / not measured / not assessed: a run or metric is "
    "missing, or the claim is stated for another scale"
)
