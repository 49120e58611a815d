"""Stated choices in a claims file: validated when loaded, rendered as their own table."""

from __future__ import annotations

import pytest

from repro.claims.choices import Choice, choices_table
from repro.claims.claims_file import ClaimsFile
from repro.errors import UserError
from repro.spec_loader import load

CHOICE = {
    "setting": "method.var_norm",
    "ours": "grad",
    "paper": "||g||^2 (Sec. III)",
    "why": "the paper's rule; grad_plus_residual is the option",
}


def _file(choices: list) -> dict:
    head = {"paper": "x", "title": "t", "citation": "c", "seed_cap": 10}
    return {**head, "claims": [], "choices": choices}


def test_choices_load_and_render_row_by_row() -> None:
    parsed = load(ClaimsFile, _file([CHOICE]), "x.yaml")
    assert parsed.choices == [Choice(**CHOICE)]
    table = choices_table(parsed.choices)
    assert table.headers == ["setting", "ours", "paper", "why"]
    assert table.rows == [[CHOICE[k] for k in ("setting", "ours", "paper", "why")]]


@pytest.mark.parametrize(
    "bad,message",
    [
        ({k: v for k, v in CHOICE.items() if k != "why"}, "missing key(s) why"),
        ({**CHOICE, "why": " "}, "why must be a non-empty text"),
        ({**CHOICE, "extra": 1}, "unknown key(s) extra"),
    ],
)
def test_a_bad_choice_is_refused_naming_where(bad, message) -> None:
    with pytest.raises(UserError, match=r"choices\[0\]") as err:
        load(ClaimsFile, _file([bad]), "x.yaml")
    assert message in str(err.value)
