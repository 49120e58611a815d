"""Numbers in a finding's text filled from the runs when the report is built.

A finding's `why` quotes our numbers by slot, never typed, so that a re-run (another
machine, more seeds) cannot contradict the claims table above it. A slot is
`{ref}`, `{ref.field}` or either with a format spec (`{ref.mean:.2f}`):

* `ref` is the finding's own claim when it is a field name alone (`{mean}`, `{ci}`), another
  claim of the file by id, or a value the finding declares under `values`
  (name -> {calculator, params}), computed per seed by the same calculators as claims, so a
  finding can quote runs its claim does not read;
* `field` is one of FIELDS; without one, `per_seed`: every seed's value, "a / b / c".

A slot that names nothing computed is refused when the claims file loads.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from repro.claims.bootstrap import mean_interval
from repro.claims.calculators.registry import check_params, registered
from repro.claims.reads import seeds_read
from repro.errors import UserError
from repro.pages.writer import fmt
from repro.track.series import NotMeasurable, Seeded, at_seed

FIELDS = ("per_seed", "mean", "low", "high", "ci", "min", "max", "seeds")
SLOT = re.compile(r"\{([a-z0-9_]+)(?:\.([a-z_]+))?(?::([^{}]*))?\}")
# braces that look meant as a slot (one word, maybe dotted or formatted) but are none
ATTEMPT = re.compile(r"\{[\w.\-]+(?::[^{}\s]*)?\}")


def references(text: str) -> list[tuple[str, str, str]]:
    """(slot, ref, field) of every slot in `text`; the own claim's ref is ''."""
    out = []
    for match in SLOT.finditer(text):
        ref, name = match.group(1), match.group(2)
        if not name and ref in FIELDS:
            ref, name = "", ref
        out.append((match.group(0), ref, name or "per_seed"))
    return out


def check_values(values: object) -> None:
    """A finding's `values`: name -> {calculator, params}, each a registered calculator."""
    for name, spec in values.items():
        if not re.fullmatch(r"[a-z0-9_]+", str(name)) or name in FIELDS:
            raise UserError(
                f"values: name '{name}' must be lower-case letters, digits and _, "
                f"and not one of {', '.join(FIELDS)}"
            )
        if not isinstance(spec, dict) or set(spec) - {"calculator", "params"}:
            raise UserError(f"values.{name} must be {{calculator, params}}")
        try:
            check_params(spec.get("calculator"), spec.get("params") or {})
        except UserError as err:
            raise UserError(f"values.{name}: {err}") from None


def check_slots(text: str, values: Mapping, claim_ids: list[str]) -> None:
    """Refuse a slot that names no computed value or formats none, and braces that are no
    slot (`{Mean}`, left in the page as typed), each in one line naming it and the fix."""
    for braces in re.finditer(r"\{[^{}]*\}", text):
        shown, slot = braces.group(0), SLOT.fullmatch(braces.group(0))
        if slot is None and ATTEMPT.fullmatch(shown):  # prose braces ({a, b}) are left alone
            raise UserError(
                f"{shown} is no slot: a slot is {{ref}} or {{ref.field}} in lower case, with "
                "an optional :format"
            )
        if slot and slot.group(3):
            count = "seeds" in (slot.group(1), slot.group(2))  # a whole number, not a value
            try:
                format(1 if count else 1.0, slot.group(3))
            except ValueError as err:
                example = "d" if count else ".3g"
                raise UserError(
                    f"slot {shown}: {err} (a number's format, e.g. {example})"
                ) from None
    for shown, ref, name in references(text):
        known = ref == "" or ref in claim_ids or ref in values
        if not known or name not in FIELDS:
            raise UserError(
                f"slot {shown} names no computed value; use {{FIELD}} for the claim's "
                f"own, {{CLAIM_ID.FIELD}} or {{NAME.FIELD}} for a name under values, FIELD one "
                f"of {', '.join(FIELDS)}"
            )


@dataclass(frozen=True)
class Computed:
    """Per-seed values of one quantity (a claim's or a named value's), or why there are none."""

    per_seed: dict[int, float] = field(default_factory=dict)
    missing: str = ""

    def get(self, name: str, spec: str) -> str:
        if self.missing:
            return f"(not measured: {self.missing})"
        values = list(self.per_seed.values())

        def show(v: float) -> str:
            return format(v, spec) if spec and math.isfinite(v) else fmt(v)

        if name == "seeds":
            return format(len(values), spec)
        if name == "per_seed":
            return " / ".join(show(v) for v in values)
        if name in ("min", "max"):
            return show((min if name == "min" else max)(values))
        if any(math.isnan(v) for v in values):
            return "undefined"
        interval = mean_interval(values)
        mean = sum(values) / len(values)
        if name == "mean":
            return show(mean)
        if interval is None:
            return "(no interval from one seed)"
        if name == "ci":
            return f"[{show(interval.low)}, {show(interval.high)}]"
        return show(interval.low if name == "low" else interval.high)


def compute_values(
    values: Mapping[str, Mapping], runs: Seeded, seeds: Collection[int] = ()
) -> dict[str, Computed]:
    """Each named value per seed, with the calculators claims use; given the `seeds` its
    claim was judged on, at those alone, so that its list lines up seed by seed with the
    claim's (a run with seeds another claim added has more of them); where the value's runs
    share none of them, at all of its own."""
    out = {}
    for name, spec in values.items():
        fn = registered()[spec["calculator"]]
        read = seeds_read(spec["calculator"], spec.get("params") or {}, runs)
        try:
            per_seed = {
                seed: float(fn(at_seed(runs, seed), **(spec.get("params") or {})).value)
                for seed in [s for s in read if s in seeds] or read
            }
        except NotMeasurable as err:
            out[name] = Computed(missing=str(err))
            continue
        out[name] = Computed(per_seed)
    return out


def fill(text: str, own: str, computed: Mapping[str, Computed]) -> str:
    """`text` with every slot replaced; `own` is the finding's claim id."""

    def one(match: re.Match) -> str:
        ref, name, spec = match.group(1), match.group(2), match.group(3) or ""
        if not name and ref in FIELDS:
            ref, name = own, ref
        return computed[ref].get(name or "per_seed", spec)

    return SLOT.sub(one, text)
