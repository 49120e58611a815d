"""Verdict rules: the bounds within which our value for a claim counts as reproduced.

A claim's band and the `verdict.reproduced` and `verdict.partly` rules of a claims file each
become a `Rule`: `holds` says whether a value lies within its bounds (NaN never does), and
`contains` whether it is at least as wide as another, so that a claims file whose `partly`
rule is narrower than the band is refused when loaded, and `place` where a confidence
interval lies against the bounds (inside, outside, or straddling an edge). Bounds are finite
numbers: a NaN bound would hold for nothing and an infinite one is no bound, so both are
refused when the file loads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from repro.errors import UserError


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_bound(name: str, value: Any) -> None:
    """UserError unless `value` is None or a finite number."""
    if value is None:
        return
    if not is_number(value):
        raise UserError(f"{name}={value!r} must be a number")
    if not math.isfinite(value):
        raise UserError(
            f"{name}={value!r} must be a finite number; give a finite bound or leave {name} out "
            "for no bound on that side"
        )


@dataclass(frozen=True)
class Rule:
    """Bounds our value must lie within: `at_least` and/or `at_most`."""

    at_least: float | None = None
    at_most: float | None = None

    def __post_init__(self) -> None:
        for name in ("at_least", "at_most"):
            check_bound(name, getattr(self, name))
        if self.at_least is None and self.at_most is None:
            raise UserError("a verdict rule needs at_least and/or at_most")
        if self.at_least is not None and self.at_most is not None and self.at_least > self.at_most:
            raise UserError(
                f"at_least {self.at_least} > at_most {self.at_most} (inverted); swap them"
            )

    def holds(self, ours: float | bool) -> bool:
        """Whether `ours` lies within the bounds (NaN never does)."""
        x = float(ours)
        if math.isnan(x):
            return False
        return (self.at_least is None or x >= self.at_least) and (
            self.at_most is None or x <= self.at_most
        )

    def contains(self, other: Rule) -> bool:
        """Whether every value `other` accepts is accepted here (a wider or equal rule)."""
        low = self.at_least is None or (
            other.at_least is not None and other.at_least >= self.at_least
        )
        high = self.at_most is None or (other.at_most is not None and other.at_most <= self.at_most)
        return low and high

    def place(self, low: float, high: float) -> str:
        """Where the interval [low, high] lies: "inside" the bounds, "outside" them (no point
        of it holds), or "straddles" an edge."""
        below = self.at_least is not None and high < self.at_least
        above = self.at_most is not None and low > self.at_most
        if below or above:
            return "outside"
        if self.holds(low) and self.holds(high):
            return "inside"
        return "straddles"

    def edges(self) -> list[float]:
        return [b for b in (self.at_least, self.at_most) if b is not None]

    def text(self) -> str:
        if self.at_least is not None and self.at_most is not None:
            return f"{self.at_least:g} to {self.at_most:g}"
        if self.at_least is not None:
            return f"at least {self.at_least:g}"
        return f"at most {self.at_most:g}"


BAND_KEYS = ("at_least", "at_most", "reason")


def band_rule(band: Any, published: Any, where: str) -> Rule | None:
    """A claim's band as a rule; None for a claim stated only qualitatively. A numeric
    published value needs one, with a reason and at least one finite bound, not inverted; a
    NaN or infinite published value is none (the page would show the paper's number as
    "undefined")."""
    if is_number(published) and not math.isfinite(published):
        raise UserError(
            f"{where}: published={published!r} must be a finite number (the paper's value), or "
            "a text for a claim the paper states only qualitatively"
        )
    if band is None:
        if is_number(published):
            raise UserError(
                f"{where}: published {published} is a number but has no band; add "
                "band: {at_least and/or at_most, reason} around it"
            )
        return None
    if not is_number(published):
        raise UserError(
            f"{where}: a band needs a numeric published value, not {published!r}; "
            "judge a qualitative claim with verdict.reproduced"
        )
    if set(band) - set(BAND_KEYS):
        raise UserError(f"{where}: band must be a mapping of {', '.join(BAND_KEYS)}")
    reason = band.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise UserError(
            f"{where}: band has no reason; add band.reason saying why these bounds, from "
            "the paper's numbers and what the claim depends on"
        )
    low, high = band.get("at_least"), band.get("at_most")
    if low is None and high is None:
        raise UserError(f"{where}: band has no bound; give band.at_least and/or band.at_most")
    for name, value in (("at_least", low), ("at_most", high)):
        try:
            check_bound(f"band.{name}", value)
        except UserError as err:
            raise UserError(f"{where}: {err}") from None
    if low is not None and high is not None and low > high:
        raise UserError(
            f"{where}: band is inverted (at_least {low} > at_most {high}); swap the bounds"
        )
    return Rule(low, high)
