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
    table = choices_table(parsed.choices, "small")
    assert table.headers == ["setting", "ours", "paper", "why"]
    assert table.rows == [[CHOICE[k] for k in ("setting", "ours", "paper", "why")]]


@pytest.mark.parametrize(
    "bad,message",
    [
        ({k: v for k, v in CHOICE.items() if k != "why"}, "missing key(s) why"),
        ({**CHOICE, "why": " "}, "why must be a non-empty text"),
        ({**CHOICE, "extra": 1}, "unknown key(s) extra"),
        ({**CHOICE, "scales": ["huge"]}, "scales ['huge'] must be a subset of"),
    ],
)
def test_a_bad_choice_is_refused_naming_where(bad, message) -> None:
    with pytest.raises(UserError, match=r"choices\[0\]") as err:
        load(ClaimsFile, _file([bad]), "x.yaml")
    assert message in str(err.value)


def test_a_choice_of_one_scale_is_stated_at_that_scale_only() -> None:
    """A horizon or regime the small set chose is not the tiny set's: its report leaves it
    out, and with nothing left there is no table."""
    horizon = {**CHOICE, "setting": "trainer.steps", "scales": ["small"]}
    parsed = load(ClaimsFile, _file([CHOICE, horizon]), "x.yaml")
    assert [r[0] for r in choices_table(parsed.choices, "small").rows] == [
        "method.var_norm",
        "trainer.steps",
    ]
    assert [r[0] for r in choices_table(parsed.choices, "tiny").rows] == ["method.var_norm"]
    assert choices_table(parsed.choices[1:], "tiny") is None
