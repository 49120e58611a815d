"""Verdict rules: the bounds within which our value for a claim counts as reproduced.

A claim's band and the `verdict.reproduced` and `verdict.partly` rules of a claims file each
become a `Rule`: `holds` says whether a value lies within its bounds (NaN never does), and
`contains` whether it is at least as wide as another, so that a claims file whose `partly`
rule is narrower than the band is refused when loaded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from repro.errors import UserError


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True)
class Rule:
    """Bounds our value must lie within: `at_least` and/or `at_most`."""

    at_least: float | None = None
    at_most: float | None = None

    def __post_init__(self) -> None:
        for name in ("at_least", "at_most"):
            value = getattr(self, name)
            if value is not None and not is_number(value):
                raise UserError(f"{name}={value!r} must be a number")
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

    def text(self) -> str:
        if self.at_least is not None and self.at_most is not None:
            return f"{self.at_least:g} to {self.at_most:g}"
        if self.at_least is not None:
            return f"at least {self.at_least:g}"
        return f"at most {self.at_most:g}"
