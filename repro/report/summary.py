"""The table a report page opens with: every claim, the paper's number, ours, the verdict.

One row per claim, outcome claims first (the training results that could have come out
otherwise), then the model checks (our implementation against the paper's formulas, never
counted as reproductions). Ours is the mean over the seeds the claim was judged on with its
95% percentile-bootstrap interval, as `repro.claims.verdicts` computes it; the verdict is said
in plain words, with what would change an open one. Each claim's id links to its row in
the detailed claims table, where its criterion, every seed's value and the runs it read are.
"""

from __future__ import annotations

from repro.claims.reads import labels_read
from repro.claims.result import CHECK_WORDS, ClaimResult
from repro.claims.verdicts import claim_seeds, model_checks, outcomes, summary
from repro.pages.writer import Link, Table, counted, fmt
from repro.track.series import Seeded, any_seed

SUMMARY_HEADERS = ["claim", "paper", "ours (mean over seeds, 95% CI)", "verdict"]


def with_unit(value: object, unit: str) -> str:
    text = fmt(value)
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    return f"{text} {unit}" if numeric and unit and text != "never reached" else text


def anchor(claim_id: str) -> str:
    """The HTML id of a claim's row in the detailed claims tables."""
    return f"claim-{claim_id}"


def plain_verdict(result: ClaimResult, scale: str | None = None) -> str:
    """The verdict in words a reader needs no legend for; a model check holds or not. With
    the report's `scale`, a claim not run because it is stated for another scale says so; a
    claim read from runs the run set does not make names their settings."""
    n = result.seeds
    seeds = counted(n, "seed")
    claim = result.claim
    stated = ", ".join(claim.scales)
    if result.unfinished:
        return f"not assessed: runs it reads have not finished ({result.unfinished})"
    if claim.kind == "model_check" and result.verdict in CHECK_WORDS:
        return CHECK_WORDS[result.verdict]
    if result.off_set:
        return f"not assessed: its runs are not the run set's ({result.off_set})"
    if result.moved:
        return (
            f"not assessed: its terms moved after its runs began ({result.moved}); new terms "
            "are judged on runs made afresh (another runs_root)"
        )
    if result.verdict == "not run" and scale is not None and scale not in claim.scales:
        # missing, whether this scale's set makes the run or not (the page says which)
        return f"not run: a run it reads is missing; stated for scale {stated}, not judged here"
    # seeds run by hand (seeds=N) or a cap lowered since can leave a claim past its cap
    at_cap = "its seed cap" if n == claim.cap else f"past its seed cap of {claim.cap}"
    text = {
        "partly": "partly reproduced",
        "undecided": f"undecided at {seeds}: the interval straddles a band edge",
        "inconclusive": f"inconclusive at {seeds} ({at_cap}), 95% CI {result.ci_text()}",
        "not run": "not run: a run it reads is missing",
        "not measured": "not measured: the runs lack a metric or setting it needs",
        "not assessed": f"not assessed: stated for scale {stated}",
    }.get(result.verdict, result.verdict)
    return f"{text}; its magnitude claims are not reproduced" if result.magnitude else text


def checks_summary(results: list[ClaimResult]) -> str:
    """ "3 hold" / "2 hold, 1 does not hold" / "3 not assessed" over the model checks."""
    words = [CHECK_WORDS.get(r.verdict, r.verdict) for r in model_checks(results)]
    plural = {"holds": "hold", "partly holds": "partly hold", "does not hold": "do not hold"}
    counts = {w: words.count(w) for w in dict.fromkeys(words)}
    return ", ".join(f"{n} {plural.get(w, w) if n != 1 else w}" for w, n in counts.items())


def claims_counts(results: list[ClaimResult]) -> str:
    """The outcome claims counted by verdict, then the model checks where there are any."""
    counts = summary(results)
    return f"{counts}; model checks: {checks_summary(results)}" if model_checks(results) else counts


def summary_table(results: list[ClaimResult], scale: str | None = None) -> Table:
    """The page's first table (see module doc)."""
    rows = []
    ids = []
    for r in [*outcomes(results), *model_checks(results)]:
        statement = (r.claim.statement, " ", Link(r.claim.id, f"#{anchor(r.claim.id)}"))
        claim = ("Model check: ", *statement) if r.claim.kind == "model_check" else statement
        published = with_unit(r.claim.published, r.claim.unit)
        rows.append([claim, published, r.ours_text(r.claim.unit), plain_verdict(r, scale)])
        ids.append(f"summary-{r.claim.id}")
    return Table("Summary", SUMMARY_HEADERS, rows, 3, ids, css="summary")


def claim_reads(result: ClaimResult, runs: Seeded) -> tuple[list[str], list[int]]:
    """The labels a claim read (in the page's run order, then those without a run) and the
    seeds it was judged on."""
    params = result.claim.metric.get("params") or {}
    labels = labels_read(result.claim.metric["calculator"], params, any_seed(runs))
    ordered = [label for label in runs if label in labels]
    ordered += sorted(labels - set(ordered))
    return ordered, claim_seeds(result.claim, runs)
