"""Why a claim did not reproduce: the analysis written for an outcome, shown beside it.

Where a claim does not reproduce in the paper's regime the report says so and why. The
verdict is computed; the why is analysis, written after the runs into the claims file's
`findings` list: the claim, the scale, the verdicts it explains and the text, whose numbers
are slots filled from the runs when the report is built (`repro.claims.slots`),
so no re-run can contradict the table above it. Bands and regimes are fixed before results
and never move; a finding moves nothing, it only explains. It is bound to the verdicts it was
written for: when a re-run changes the verdict, the report says the analysis is for another
outcome instead of showing a stale reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from repro.claims.choices import require_texts
from repro.claims.result import ClaimResult
from repro.claims.slots import Computed, check_slots, check_values, compute_values, fill
from repro.errors import UserError
from repro.pages.writer import Table
from repro.track.series import Seeded

# verdicts that ask for a reason; "reproduced" needs none, "not run" and the like say theirs
EXPLAINED = ("partly", "undecided", "inconclusive", "not reproduced")


@dataclass(frozen=True)
class Finding:
    """The analysis of `claim` at `scale` for the outcomes in `verdicts`; `why` may quote
    the claims' values and the named `values` by slot."""

    claim: str
    scale: str
    verdicts: list
    why: str
    values: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        require_texts(self, "claim", "scale", "why")
        check_values(self.values)
        if not self.verdicts or any(v not in EXPLAINED for v in self.verdicts):
            raise UserError(
                f"verdicts={self.verdicts!r} must list the outcomes it explains, among "
                f"{', '.join(EXPLAINED)}"
            )


def check_findings(findings: list[Finding], claim_ids: list[str]) -> None:
    """Each finding names a claim of the file, once per claim and scale, and quotes only
    computed values."""
    seen = set()
    for f in findings:
        if f.claim not in claim_ids:
            raise UserError(f"findings: claim '{f.claim}' is not a claim of this file")
        try:
            check_slots(f.why, f.values, claim_ids)
        except UserError as err:
            raise UserError(f"claim '{f.claim}': finding at scale {f.scale}: {err}") from None
        if (f.claim, f.scale) in seen:
            raise UserError(f"findings: claim '{f.claim}' at scale {f.scale} is explained twice")
        seen.add((f.claim, f.scale))


def findings_table(
    findings: list[Finding], results: list[ClaimResult], scale: str, runs: Seeded
) -> Table:
    """One row per claim at `scale` whose verdict asks for a reason, its numbers filled."""
    by_claim = {f.claim: f for f in findings if f.scale == scale}
    claims = {
        r.claim.id: Computed(r.per_seed) if r.per_seed else Computed(missing=r.note)
        for r in results
    }
    rows = []
    for result in results:
        if result.verdict not in EXPLAINED:
            continue
        finding = by_claim.get(result.claim.id)
        if finding is None:
            why = "no analysis written for this outcome yet"
        elif result.verdict in finding.verdicts:
            computed = {**claims, **compute_values(finding.values, runs, result.per_seed)}
            why = fill(finding.why, finding.claim, computed)
        else:
            why = (
                f"the analysis on file was written for {' / '.join(finding.verdicts)}, and the "
                f"runs now give {result.verdict}: not shown"
            )
        rows.append([result.claim.id, result.verdict_text(), why])
    return Table("Why claims did not reproduce", ["claim", "verdict", "why"], rows)
