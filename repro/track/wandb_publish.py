"""Publishing a reproduction's W&B Report now, or saving it to publish later.

`repro report PAPER --publish` writes the local report, then saves the Report's spec
(`repro.report.wandb_spec.build_spec`) beside it as `wandb_report.json` and publishes it
when a key and a reachable server exist. Without either (a laptop offline, a cluster node
with no key) the local report still stands: the command says in one line what it saved and
the one command that publishes it later, `repro report publish PATH`, and exits 0.

`repro report publish PATH` (PATH: the spec, or the report directory holding it) publishes a
saved spec. Publishing is all it does, so without a key or a server it ends with one line
saying what is missing and exits non-zero (2, as every refused command), and the spec stays
where it is for the next try.

The runs must be on the server for the Report's panels to show them: runs tracked offline
get there with `wandb sync` (README, "Tracking").
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from repro.errors import UserError
from repro.storage import atomic_write
from repro.track.wandb_report import SPEC_FORMAT, to_report

SPEC_FILE = "wandb_report.json"


def _reachable(url: str, timeout_s: float = 5.0) -> bool:
    parsed = urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((parsed.hostname or "", port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _stored_key(base_url: str) -> str | None:
    """The API key `wandb login` stored for `base_url` (~/.netrc), if any."""
    try:
        from wandb.sdk.lib.wbauth.wbnetrc import read_netrc_auth

        return read_netrc_auth(host=base_url)
    except (ImportError, OSError, ValueError):
        return None


def api_or_missing():
    """(wandb.Api, "") when a key and a reachable server exist, else (None, what is missing).

    The key and the server are checked before wandb.Api() is built, because building it
    verifies the key with the server and can wait a long time for one that is not there."""
    import wandb
    from wandb import env
    from wandb.sdk import wandb_setup

    # as wandb.Api resolves it: WANDB_BASE_URL, else the settings files, else wandb's default
    base_url = env.get_base_url(wandb_setup.singleton().settings.base_url).rstrip("/")
    if not (os.environ.get("WANDB_API_KEY") or _stored_key(base_url)):
        return None, "no wandb API key (set WANDB_API_KEY or run `wandb login`)"
    if not _reachable(base_url):
        return None, f"wandb server {base_url} is not reachable (set WANDB_BASE_URL)"
    try:
        return wandb.Api(timeout=20), ""
    except wandb.errors.Error as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        return None, f"wandb server {base_url} refused the API key: {first}"


def save_spec(spec: dict[str, Any], out_dir: Path) -> Path:
    """Write the spec into `out_dir` whole or not at all (`atomic_write`)."""
    path = Path(out_dir) / SPEC_FILE
    atomic_write(path, lambda f: f.write((json.dumps(spec, indent=1) + "\n").encode()), "--out")
    return path


def load_spec(path: Path) -> tuple[Path, dict[str, Any]]:
    """The spec at `path` (a spec file or the report directory holding one)."""
    path = Path(path)
    if path.is_dir():
        path = path / SPEC_FILE
    if not path.is_file():
        raise UserError(
            f"repro report publish: no Report spec at {path}; "
            "write one with `repro report PAPER --publish`"
        )
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(f"repro report publish: {path} is not a Report spec ({err})") from None
    if not isinstance(spec, dict) or spec.get("format") != SPEC_FORMAT:
        raise UserError(
            f"repro report publish: {path} is not a Report spec of this version "
            f"(format {SPEC_FORMAT!r}); write it again with `repro report PAPER --publish`"
        )
    return path, spec


def _publish(api: Any, spec: dict[str, Any]) -> str:
    """Save the Report on the server; its URL."""
    import requests
    import wandb

    report = to_report(spec, spec["entity"] or api.default_entity)
    try:
        report.save()
    except (wandb.errors.Error, requests.RequestException, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"wandb refused the Report: {first}") from None
    return report.url


def publish_spec(spec: dict[str, Any], out_dir: Path) -> str:
    """Save `spec` in `out_dir` and publish it when a key and a server exist; the one line
    that says which happened."""
    path = save_spec(spec, out_dir)
    api, missing = api_or_missing()
    if api is not None:
        try:
            return f"wandb report: {_publish(api, spec)} (spec in {path})"
        except UserError as err:
            missing = str(err)
    return (
        f"wandb report not published ({missing}): saved its spec to {path}; "
        f"publish it later with `repro report publish {path}`"
    )


def publish_saved(path: Path) -> str:
    """Publish a saved spec: the Report's URL, or UserError saying what is missing."""
    path, spec = load_spec(path)
    api, missing = api_or_missing()
    if api is None:
        raise UserError(
            f"wandb report in {path} not published: {missing}; the spec stays there for "
            "the next try"
        )
    return _publish(api, spec)
