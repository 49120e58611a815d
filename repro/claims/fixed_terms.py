"""Each claim's terms as they stood when its run set's runs began, and what has moved since.

A claim is judged by terms fixed before its results were seen: its band and partly band, the
published number they sit around, the metric and its calculator's parameters, its seed cap,
its scales and its kind. Moved after the runs had begun, the same runs would be judged by
terms chosen with their results in view: the verdict would be a goal, not a measurement.
So `repro reproduce` records every claim's terms in the set's folder before it starts a run
(`record`: a claim the file gains later is recorded at the next reproduction), and every
reading of the verdicts compares the claims file with that record (`moved`). A claim whose
terms differ is not assessed on those runs; its page names what moved, from what to what,
and the way to judge the new terms: on runs made afresh. Its statement, source, unit and a
band's reason are words about the claim, not terms of its verdict, and may be edited.

Runs made without `repro reproduce` (by hand, or before this record existed) have none:
their claims are judged by the file as it stands, as before.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from repro.errors import StorageError, UserError
from repro.storage import atomic_write
from repro.track.series import Seeded, every_run

TERMS_FILE = "claims_terms.json"


def terms(claim: Any) -> dict:
    """What a claim's verdict is computed from (see the module doc), as plain JSON values."""
    band = {k: v for k, v in (claim.band or {}).items() if k != "reason"}
    fixed = {
        "kind": claim.kind,
        "metric": claim.metric,
        "published": claim.published,
        "band": band or None,
        "verdict": claim.verdict,
        "seed_cap": claim.cap,
        "scales": sorted(claim.scales),
    }
    return json.loads(json.dumps(fixed))


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or not isinstance(data.get("claims"), dict):
            raise ValueError("no 'claims' record")
    except FileNotFoundError:
        return {"claims": {}}
    except (OSError, ValueError) as err:
        raise UserError(
            f"{path} cannot be read ({err}): it records the terms each claim had when the "
            "set's runs began; restore it, or remove it and the set's runs to start afresh"
        ) from None
    return data


def record(claims: list[Any], set_dir: Path) -> None:
    """Record the terms of each claim not yet recorded for the runs in `set_dir` (those
    recorded keep the terms they had: a later change is what `moved` reports); where
    `set_dir` cannot be written, nothing."""
    path = set_dir / TERMS_FILE
    data = _read(path)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    new = {
        c.id: {"recorded": when, "terms": terms(c)} for c in claims if c.id not in data["claims"]
    }
    if new:
        data["claims"].update(new)
        text = json.dumps(data, indent=1, sort_keys=True) + "\n"
        try:
            atomic_write(path, lambda f: f.write(text.encode()), "runs_root", prefix=".terms-")
        except StorageError:
            # a runs root that cannot be written (an archive, a colleague's) is only read: a
            # run still to make there stops at its own folder, in its own line
            return


def _shown(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(", ", ": "))


def moved(claims: list[Any], set_dir: Path) -> dict[str, str]:
    """Claim id -> what of its terms differs from the record in `set_dir` ("band was {...},
    now {...}; recorded DATE"), for each claim whose terms moved; {} without a record."""
    recorded = _read(set_dir / TERMS_FILE)["claims"]
    out = {}
    for claim in claims:
        entry = recorded.get(claim.id)
        if not isinstance(entry, dict) or not isinstance(entry.get("terms"), dict):
            continue
        now, then = terms(claim), entry["terms"]
        changed = [
            f"{key} was {_shown(then.get(key))}, now {_shown(now[key])}"
            for key in now
            if then.get(key) != now[key]
        ]
        if changed:
            out[claim.id] = f"{'; '.join(changed)}; recorded {entry.get('recorded')}"
    return out


def moved_for(claims: list[Any], runs: Seeded) -> dict[str, str]:
    """`moved` by the record in each folder holding a run the verdicts read (where `repro
    reproduce` wrote it, beside the set's runs), however `--runs` named those runs."""
    out: dict[str, str] = {}
    for folder in dict.fromkeys(run.path.parent for _, _, run in every_run(runs)):
        for claim_id, shift in moved(claims, folder).items():
            out.setdefault(claim_id, shift)
    return out
