"""Published claims as data (`reports/claims/<paper>.yaml`) and their evaluation on our runs.

A claims file names the paper, its citation, how its methods are called (label -> name),
each claim (where the paper makes it, what it says, the calculator that computes our number,
the published value, the scales it applies to, and the tolerance rules that turn our number
into a verdict) and the figures of the report. Verdicts: "reproduced" when the `reproduced`
rule holds, else "partly" when the `partly` rule holds, else "not reproduced"; "not run"
when a run the claim needs is absent, "not measured" when the runs lack a metric or setting,
"not assessed" when the claim does not apply to the report's scale.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from repro.errors import UserError
from repro.report import comparisons  # noqa: F401  (registers its calculators)
from repro.report.calculators import CALCULATORS, check_params
from repro.report.plots import FigureSpec
from repro.report.published import PublishedTable
from repro.report.series import MissingRun, NotMeasurable, Run, natural_key
from repro.report.sweep_front import SweepFrontSpec

# `tiny` is the seconds-long smoke scale of the tests: claims rarely apply to it, but its
# reports are built like any other.
SCALES = ("tiny", "small", "paper")


def build(cls: type, data: Any, where: str) -> Any:
    """Construct dataclass `cls` from a YAML mapping, naming `where` on any mistake."""
    if not isinstance(data, dict):
        raise UserError(f"{where} must be a mapping, got {type(data).__name__}")
    fields = [f for f in dataclasses.fields(cls) if f.init]
    names = {f.name for f in fields}
    unknown = sorted(set(data) - names)
    if unknown:
        raise UserError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {sorted(names)}")
    required = [
        f.name
        for f in fields
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    missing = [name for name in required if name not in data]
    if missing:
        raise UserError(f"{where}: missing key(s) {', '.join(missing)}")
    try:
        return cls(**data)
    except UserError as err:
        raise UserError(f"{where}: {err}") from None


@dataclass(frozen=True)
class Rule:
    """Conditions on our value that must all hold (bounds, closeness to published, equality)."""

    at_least: float | None = None
    at_most: float | None = None
    within_rel: float | None = None
    within_abs: float | None = None
    equals: Any = None

    def __post_init__(self) -> None:
        if all(getattr(self, f.name) is None for f in dataclasses.fields(self)):
            raise UserError(
                "a verdict rule needs at least one of at_least, at_most, "
                "within_rel, within_abs, equals"
            )
        for name in ("at_least", "at_most", "within_rel", "within_abs"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float)
            ):
                raise UserError(f"{name}={value!r} must be a number")
        for name in ("within_rel", "within_abs"):
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise UserError(f"{name}={value} must be >= 0")

    def holds(self, ours: float | bool, published: Any) -> bool:
        """Whether `ours` meets every condition (NaN meets none)."""
        if self.equals is not None and ours != self.equals:
            return False
        x = float(ours)
        if math.isnan(x):
            return False
        checks = [
            self.at_least is None or x >= self.at_least,
            self.at_most is None or x <= self.at_most,
            self.within_abs is None or abs(x - published) <= self.within_abs,
            self.within_rel is None or abs(x - published) <= self.within_rel * abs(published),
        ]
        return all(checks)


@dataclass(frozen=True)
class Claim:
    """One published claim and how to check it on our runs."""

    id: str
    source: str
    statement: str
    metric: dict
    published: Any
    unit: str
    scales: list
    verdict: dict
    reproduced: Rule = field(init=False)
    partly: Rule | None = field(init=False)

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z0-9_]+", str(self.id)):
            raise UserError(f"id '{self.id}' must be lower-case letters, digits and _")
        for name in ("metric", "verdict"):
            if not isinstance(getattr(self, name), dict):
                raise UserError(f"{name} must be a mapping, got {getattr(self, name)!r}")
        bad = [s for s in self.scales if s not in SCALES]
        if not isinstance(self.scales, list) or not self.scales or bad:
            raise UserError(f"scales {self.scales} must be a non-empty subset of {list(SCALES)}")
        self._check_metric()
        rules = dict(self.verdict)
        if "reproduced" not in rules or set(rules) - {"reproduced", "partly"}:
            raise UserError(f"verdict keys {sorted(rules)} must be 'reproduced' [+ 'partly']")
        built = {k: build(Rule, v, f"verdict.{k}") for k, v in rules.items()}
        for key, rule in built.items():
            numeric = isinstance(self.published, int | float) and not isinstance(
                self.published, bool
            )
            if (rule.within_rel is not None or rule.within_abs is not None) and not numeric:
                raise UserError(f"verdict.{key}: within_* needs a numeric published value")
        object.__setattr__(self, "reproduced", built["reproduced"])
        object.__setattr__(self, "partly", built.get("partly"))

    def _check_metric(self) -> None:
        extra = set(self.metric) - {"calculator", "params"}
        if extra:
            raise UserError(f"metric: unknown key(s) {sorted(extra)}; use calculator, params")
        try:
            check_params(self.metric.get("calculator"), self.metric.get("params") or {})
        except UserError as err:
            raise UserError(f"metric: {err}") from None

    def measure(self, runs: Mapping[str, Run]) -> Any:
        """Run the claim's calculator on runs keyed by label."""
        return CALCULATORS[self.metric["calculator"]](runs, **(self.metric.get("params") or {}))

    def judge(self, ours: float | bool) -> str:
        if self.reproduced.holds(ours, self.published):
            return "reproduced"
        if self.partly is not None and self.partly.holds(ours, self.published):
            return "partly"
        return "not reproduced"


@dataclass(frozen=True)
class ClaimResult:
    """A claim with our value (None when not computed), its verdict and how we got there."""

    claim: Claim
    ours: float | bool | None
    verdict: str
    note: str


def evaluate(claims: list[Claim], runs: Mapping[str, Run], scale: str) -> list[ClaimResult]:
    """Evaluate every claim on the runs of one reproduction at `scale` (never raises)."""
    results = []
    for claim in claims:
        try:
            m = claim.measure(runs)
        except MissingRun as err:
            results.append(ClaimResult(claim, None, "not run", str(err)))
            continue
        except NotMeasurable as err:
            results.append(ClaimResult(claim, None, "not measured", str(err)))
            continue
        if scale in claim.scales:
            results.append(ClaimResult(claim, m.value, claim.judge(m.value), m.note))
        else:
            note = f"applies to scale {', '.join(claim.scales)}, not {scale}; {m.note}"
            results.append(ClaimResult(claim, m.value, "not assessed", note))
    return results


@dataclass(frozen=True)
class ClaimsFile:
    """A parsed, validated `reports/claims/<paper>.yaml`."""

    paper: str
    title: str
    citation: str
    claims: list
    figures: list = field(default_factory=list)
    methods: dict = field(default_factory=dict)
    tables: list = field(default_factory=list)
    sweep_fronts: list = field(default_factory=list)

    def __post_init__(self) -> None:
        claims = [build(Claim, c, f"claims[{i}]") for i, c in enumerate(self.claims)]
        figures = [build(FigureSpec, f, f"figures[{i}]") for i, f in enumerate(self.figures)]
        tables = [build(PublishedTable, t, f"tables[{i}]") for i, t in enumerate(self.tables)]
        fronts = [
            build(SweepFrontSpec, f, f"sweep_fronts[{i}]") for i, f in enumerate(self.sweep_fronts)
        ]
        for kind, items in (("claim", claims), ("figure", figures)):
            ids = [item.id for item in items]
            dupes = sorted({i for i in ids if ids.count(i) > 1})
            if dupes:
                raise UserError(f"duplicate {kind} id(s) {', '.join(dupes)}")
        for pattern in self.methods:
            try:
                re.compile(pattern)
            except re.error as err:
                raise UserError(f"methods: pattern '{pattern}' is not a regex: {err}") from None
        object.__setattr__(self, "claims", claims)
        object.__setattr__(self, "figures", figures)
        object.__setattr__(self, "tables", tables)
        object.__setattr__(self, "sweep_fronts", fronts)

    def order_key(self, label: str) -> tuple[int, list]:
        """Runs in the order the `methods` list names them (baseline first), then by label."""
        index = next(
            (i for i, pattern in enumerate(self.methods) if re.fullmatch(pattern, label)),
            len(self.methods),
        )
        return index, natural_key(label)

    def display_name(self, label: str) -> str:
        """The method's name as the paper writes it, from the first `methods` pattern matching
        the whole label (`{1}` in the name is the first regex group); else the label."""
        for pattern, name in self.methods.items():
            match = re.fullmatch(pattern, label)
            if match:
                return str(name).format(match.group(0), *match.groups())
        return label


def known_papers(claims_dir: Path) -> list[str]:
    """The papers that have a claims file."""
    return sorted(p.stem for p in claims_dir.glob("*.yaml"))


def load_claims(paper: str, claims_dir: Path) -> ClaimsFile:
    """Load and validate `<claims_dir>/<paper>.yaml`; UserError naming the mistake."""
    path = claims_dir / f"{paper}.yaml"
    if not path.is_file():
        known = ", ".join(known_papers(claims_dir)) or "none"
        raise UserError(f"unknown paper '{paper}': no {path}; known papers: {known}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise UserError(f"{path} is not valid YAML: {err}") from None
    parsed = build(ClaimsFile, data, str(path))
    if parsed.paper != paper:
        raise UserError(f"{path}: paper '{parsed.paper}' must match the file name '{paper}'")
    return parsed
