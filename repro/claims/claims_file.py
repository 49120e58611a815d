"""Published claims as data (`reports/claims/<paper>.yaml`) and how one value is judged.

A claims file names the paper, its citation, the seed cap, how its methods are called
(label -> name), each claim (where the paper makes it, what it says, its `kind`, the
calculator that computes our number, the published value, the scales it applies to, and the
rules that turn our number into a verdict) and the figures of the report.

A claim whose published value is a number is judged on a `band` around it, fixed from the
paper's numbers before any result is seen; a claim the paper states only qualitatively keeps
a direction rule in `verdict.reproduced`. Either may have a wider `verdict.partly`. The file
is refused when loaded if a band is missing, has no reason, a bound that is not finite, or
is inverted (`repro.claims.verdict_rules`). `seed_cap` (per file, optionally per claim) is
the most seeds a claim's runs get while its interval straddles a band edge; how seeds
combine into a verdict is `repro.claims.verdicts`. A direction-only claim may name the
banded outcome claims on the same runs (`magnitude`), so that its row says when the
direction holds while the size the paper reports does not.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repro.claims.calculators.registry import check_params, registered
from repro.claims.choices import Choice
from repro.claims.figure_specs import FigureSpec, SweepFrontSpec
from repro.claims.findings import Finding, check_findings
from repro.claims.published import PublishedTable
from repro.claims.verdict_rules import Rule, band_rule
from repro.config import SCALES, papers
from repro.errors import UserError
from repro.spec_loader import build, load, read_yaml
from repro.track.series import Run, natural_key

# `tiny` is the seconds-long smoke scale of the tests: claims rarely apply to it, but its
# reports are built like any other.


# outcome: a training result that could have come out otherwise, judged on the seeds'
# confidence interval; model_check: follows from the modeled clock or the rule itself, so it
# checks our implementation against the paper's formula and is never counted as a
# reproduction.
KINDS = ("outcome", "model_check")


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
    kind: str = ""  # required: refused below, naming the choices, when missing
    verdict: dict = field(default_factory=dict)
    band: dict | None = None
    magnitude: list = field(default_factory=list)
    seed_cap: int | None = None
    reproduced: Rule = field(init=False)
    partly: Rule | None = field(init=False)
    cap: int = field(init=False, default=0)  # seed_cap, else the file's (set by ClaimsFile)

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z0-9_]+", str(self.id)):
            raise UserError(f"id '{self.id}' must be lower-case letters, digits and _")
        bad = [s for s in self.scales if s not in SCALES]
        if not self.scales or bad:
            raise UserError(f"scales {self.scales} must be a non-empty subset of {list(SCALES)}")
        self._check_metric()
        self._check_kind()
        band = band_rule(self.band, self.published, f"claim '{self.id}'")
        rules = dict(self.verdict)
        if band is not None:
            if "reproduced" in rules:
                raise UserError(
                    f"claim '{self.id}': verdict.reproduced is not allowed beside a band (the "
                    "band is the reproduced rule); remove it"
                )
            if set(rules) - {"partly"}:
                raise UserError(f"verdict keys {sorted(rules)} must be 'partly' beside a band")
        elif "reproduced" not in rules or set(rules) - {"reproduced", "partly"}:
            raise UserError(f"verdict keys {sorted(rules)} must be 'reproduced' [+ 'partly']")
        built = {k: build(Rule, v, f"verdict.{k}") for k, v in rules.items()}
        reproduced = band if band is not None else built["reproduced"]
        partly = built.get("partly")
        if band is not None and partly is not None and not partly.contains(band):
            raise UserError(
                f"claim '{self.id}': verdict.partly ({partly.text()}) must be wider than the "
                f"band ({band.text()})"
            )
        object.__setattr__(self, "reproduced", reproduced)
        object.__setattr__(self, "partly", partly)

    def _check_kind(self) -> None:
        if self.kind not in KINDS:
            said = "has no kind" if self.kind == "" else f"kind={self.kind!r} is not one of "
            raise UserError(
                f"claim '{self.id}': {said}{', '.join(KINDS) if self.kind else ''}; set "
                "kind: outcome (a training result that could have come out otherwise) or "
                "kind: model_check (follows from the modeled clock or the rule itself)"
            )
        if self.seed_cap is not None:
            check_cap(self.seed_cap, f"claim '{self.id}': seed_cap")
        if not all(isinstance(m, str) for m in self.magnitude):
            raise UserError(f"claim '{self.id}': magnitude must be a list of claim ids")

    def _check_metric(self) -> None:
        extra = set(self.metric) - {"calculator", "params"}
        if extra:
            raise UserError(f"metric: unknown key(s) {sorted(extra)}; use calculator, params")
        try:
            check_params(self.metric.get("calculator"), self.metric.get("params") or {})
        except UserError as err:
            raise UserError(f"metric: {err}") from None

    def measure(self, runs: Mapping[str, Run]) -> Any:
        """Run the claim's calculator on one seed's runs keyed by label."""
        return registered()[self.metric["calculator"]](runs, **(self.metric.get("params") or {}))

    def judge(self, ours: float | bool) -> str:
        """The verdict of one value: inside the band (or reproduced rule), the partly rule, or
        neither."""
        if self.reproduced.holds(ours):
            return "reproduced"
        if self.partly is not None and self.partly.holds(ours):
            return "partly"
        return "not reproduced"

    def criterion(self) -> str:
        """What "reproduced" (and "partly") mean for this claim, with the band's reason."""
        if self.band is not None:
            text = f"band {self.reproduced.text()}: {self.band['reason'].strip()}"
        else:
            text = f"direction: {self.reproduced.text()}"
        return text + (f"; partly: {self.partly.text()}" if self.partly is not None else "")


@dataclass(frozen=True)
class ClaimsFile:
    """A parsed, validated `reports/claims/<paper>.yaml`."""

    paper: str
    title: str
    citation: str
    claims: list
    seed_cap: int | None = None  # required: refused below, saying what it is, when missing
    figures: list = field(default_factory=list)
    methods: dict = field(default_factory=dict)
    tables: list = field(default_factory=list)
    sweep_fronts: list = field(default_factory=list)
    choices: list = field(default_factory=list)
    findings: list = field(default_factory=list)

    def __post_init__(self) -> None:
        check_cap(self.seed_cap, "seed_cap")
        claims = [build(Claim, c, claim_where(i, c)) for i, c in enumerate(self.claims)]
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
        check_magnitudes(claims)
        for claim in claims:
            object.__setattr__(claim, "cap", claim.seed_cap or self.seed_cap)
        for pattern in self.methods:
            try:
                re.compile(pattern)
            except re.error as err:
                raise UserError(f"methods: pattern '{pattern}' is not a regex: {err}") from None
        object.__setattr__(self, "claims", claims)
        object.__setattr__(self, "figures", figures)
        object.__setattr__(self, "tables", tables)
        object.__setattr__(self, "sweep_fronts", fronts)
        stated = [build(Choice, c, f"choices[{i}]") for i, c in enumerate(self.choices)]
        for i, choice in enumerate(stated):
            if any(s not in SCALES for s in choice.scales):
                raise UserError(
                    f"choices[{i}]: scales {choice.scales} must be a subset of {list(SCALES)} "
                    "(or absent: every scale)"
                )
        object.__setattr__(self, "choices", stated)
        found = [build(Finding, f, f"findings[{i}]") for i, f in enumerate(self.findings)]
        check_findings(found, [c.id for c in claims])
        stated_at = {c.id: c.scales for c in claims}
        for i, f in enumerate(found):
            if f.scale not in stated_at[f.claim]:  # its page would never show it
                raise UserError(
                    f"findings[{i}]: scale {f.scale!r} is not one claim '{f.claim}' is stated "
                    f"at ({', '.join(stated_at[f.claim])})"
                )
        object.__setattr__(self, "findings", found)

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


def check_cap(cap: int | None, where: str) -> None:
    if cap is None:
        raise UserError(
            f"{where} is missing; add {where.rsplit(' ', 1)[-1]}: N (e.g. 10), the most seeds a "
            "claim's runs get before an undecided verdict is called inconclusive, written "
            "before any result"
        )
    if cap < 1:
        raise UserError(
            f"{where}={cap!r} must be an integer >= 1: the most seeds a claim's runs get "
            "before an undecided verdict is called inconclusive (e.g. 10)"
        )


def check_magnitudes(claims: list[Claim]) -> None:
    """A claim's `magnitude` names other outcome claims of the file, with a band."""
    by_id = {c.id: c for c in claims}
    for claim in claims:
        for other in claim.magnitude:
            target = by_id.get(other)
            if target is None or other == claim.id:
                raise UserError(
                    f"claim '{claim.id}': magnitude names '{other}', which is not another "
                    f"claim of this file; name claims among {', '.join(sorted(by_id))}"
                )
            if target.band is None or target.kind != "outcome":
                raise UserError(
                    f"claim '{claim.id}': magnitude names '{other}', which is not an outcome "
                    "claim with a band; name the banded claims on the same runs"
                )


def claim_where(i: int, data: Any) -> str:
    """How a claims-file mistake names the claim: its id when it has one."""
    name = data.get("id") if isinstance(data, dict) else None
    return f"claim '{name}'" if isinstance(name, str) else f"claims[{i}]"


def known_papers(claims_dir: Path) -> list[str]:
    """The papers that have a claims file; a directory that is not there, or holds none, is
    refused (a report of no paper is a mistyped --claims)."""
    if not claims_dir.is_dir():
        raise UserError(f"claims directory {claims_dir} does not exist; --claims names one")
    papers = sorted(p.stem for p in claims_dir.glob("*.yaml"))
    if not papers:
        raise UserError(
            f"claims directory {claims_dir} holds no claims file (*.yaml); --claims names one"
        )
    return papers


def load_claims(paper: str, claims_dir: Path) -> ClaimsFile:
    """Load and validate `<claims_dir>/<paper>.yaml`; UserError naming the mistake. A file
    for a paper with no run set is refused: its report could only tell the reader to run
    `repro reproduce PAPER`, which refuses the paper."""
    path = claims_dir / f"{paper}.yaml"
    if not path.is_file():
        known = ", ".join(known_papers(claims_dir))
        raise UserError(f"unknown paper '{paper}': no {path}; known papers: {known}")
    if paper not in papers():
        raise UserError(
            f"{path}: paper '{paper}' has no run set (configs/experiment/{paper}_<scale>.yaml); "
            f"name one of {', '.join(papers())} or add its run set"
        )
    parsed = load(ClaimsFile, read_yaml(path, "claims file"), str(path))
    if parsed.paper != paper:
        raise UserError(f"{path}: paper '{parsed.paper}' must match the file name '{paper}'")
    return parsed
