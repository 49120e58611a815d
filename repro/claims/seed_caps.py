"""A claims file's seed caps against the experiment that runs its claims.

A seed cap is written before any result (the most seeds a claim's runs get while its
confidence interval straddles a band edge); it may not lie below the seeds the experiment
runs by default, which would make it no limit at all. The claims file alone cannot say so:
the default lives in the experiment's config, so this is checked where a report or a
reproduction knows the experiment.
"""

from __future__ import annotations

from pathlib import Path

from repro.claims.claims_file import ClaimsFile
from repro.errors import UserError


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
