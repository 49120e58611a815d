"""The 'why it did not reproduce' table: shown only for the outcome it was written for."""

import pytest

from repro.claims.claims_file import ClaimsFile
from repro.claims.findings import findings_table
from repro.claims.result import ClaimResult
from repro.errors import UserError
from tests.unit.report_data import claim_dict

WHY = "too few updates per parameter"


def claims_file(findings) -> ClaimsFile:
    c = claim_dict(id="c", scales=["small", "paper"])
    claims = [claim_dict(id="a"), claim_dict(id="b"), c, claim_dict(id="d")]
    return ClaimsFile(
        paper="adacomm", title="t", citation="c", seed_cap=10, claims=claims, findings=findings
    )


def test_rows_for_outcomes_that_ask_for_a_reason():
    cf = claims_file(
        [
            {"claim": "a", "scale": "small", "verdicts": ["not reproduced"], "why": WHY},
            {"claim": "b", "scale": "small", "verdicts": ["not reproduced"], "why": "stale"},
            {"claim": "c", "scale": "paper", "verdicts": ["partly"], "why": "other scale"},
        ]
    )
    a, b, c, d = cf.claims
    results = [
        ClaimResult(a, 0.9, "not reproduced", ""),
        ClaimResult(b, 0.5, "partly", ""),
        ClaimResult(c, 0.5, "undecided", "", {0: 0.4, 1: 0.6}),
        ClaimResult(d, 0.33, "reproduced", ""),
    ]
    table = findings_table(cf.findings, results, "small", {})
    assert table.rows == [
        ["a", "not reproduced", WHY],
        [
            "b",
            "partly",
            "the analysis on file was written for not reproduced, and the runs now give "
            "partly: not shown",
        ],
        ["c", "undecided at 2 seeds", "no analysis written for this outcome yet"],
    ]


@pytest.mark.parametrize(
    "finding, message",
    [
        ({"claim": "zz", "scale": "small", "verdicts": ["partly"], "why": WHY}, "'zz' is not"),
        ({"claim": "a", "scale": "small", "verdicts": ["reproduced"], "why": WHY}, "verdicts="),
        ({"claim": "a", "scale": "small", "verdicts": [], "why": WHY}, "verdicts="),
        ({"claim": "a", "scale": "small", "verdicts": ["partly"], "why": " "}, "why must be"),
        # a scale its claim is not stated at: never shown, and said nowhere
        (
            {"claim": "a", "scale": "tny", "verdicts": ["partly"], "why": WHY},
            r"findings\[0\]: scale 'tny' is not one claim 'a' is stated at \(small\)",
        ),
    ],
)
def test_bad_findings_are_refused_when_loaded(finding, message):
    with pytest.raises(UserError, match=message):
        claims_file([finding])


def test_a_claim_explained_twice_at_one_scale_is_refused():
    twice = {"claim": "a", "scale": "small", "verdicts": ["partly"], "why": WHY}
    with pytest.raises(UserError, match="explained twice"):
        claims_file([twice, twice])
