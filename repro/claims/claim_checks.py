"""Checks of a claims file that span claims or need the experiment: seed caps and magnitudes.

A seed cap is written before any result (the most seeds a claim's runs get while its
confidence interval straddles a band edge); it may not lie below the seeds the experiment
runs by default, which would make it no limit at all. A direction-only claim may name the
banded outcome claims on the same runs (`magnitude`), so that its row says when the
direction holds while the size the paper reports does not.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from repro.errors import UserError

if TYPE_CHECKING:
    from repro.claims.claims_file import Claim, ClaimsFile


def check_cap(cap: Any, where: str) -> None:
    if cap is None:
        raise UserError(
            f"{where} is missing; add {where.rsplit(' ', 1)[-1]}: N (e.g. 10), the most seeds a "
            "claim's runs get before an undecided verdict is called inconclusive, written "
            "before any result"
        )
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
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


def check_seed_caps(claims: ClaimsFile, default_seeds: int, experiment: str, path: str) -> None:
    """Refuse a seed cap below the experiment's default seeds: the default run would
    already pass it, so the cap could never have been the limit it was written as."""
    for claim in claims.claims:
        if claim.cap < default_seeds:
            whose = "the file's" if claim.seed_cap is None else "the claim's"
            raise UserError(
                f"{path}: claim '{claim.id}': seed_cap {claim.cap} is below experiment "
                f"{experiment}'s default seeds ({default_seeds}); raise {whose} seed_cap to "
                f"at least {default_seeds}"
            )


def check_caps_for_scale(claims: ClaimsFile, scale: str, claims_path: Path) -> None:
    """`check_seed_caps` against the default seeds of experiment `<paper>_<scale>`, where
    that experiment exists (a report can be built from runs of any group)."""
    from repro.config import CONFIG_DIR, compose

    name = f"{claims.paper}_{scale}"
    if (CONFIG_DIR / "experiment" / f"{name}.yaml").exists():
        seeds = compose([f"experiment={name}"]).experiment.seeds
        check_seed_caps(claims, seeds, name, str(claims_path))
