"""A paper's reproduction as a wandb Report (`repro report PAPER --publish`).

The Report shows what the local report shows, over the reproduction's run group
(`<paper>_<scale>`) on the server: the setup and claims tables as Markdown, then one line
plot per curve figure of the claims file, and every plotted metric against both the modeled
clock and steps. Run colours are the local reports' colours (`colours.colour_for`), so a
method looks the same on both. Figures of one number per run (`points`) have no wandb
panel; the Report names them and they stay in the local report.

Building the Report needs no server (`build_wandb_report`); saving it needs an API key and a
reachable server (`publish` says which is missing instead of failing). Runs tracked offline
appear on the server after `wandb sync`.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlparse

import wandb_workspaces.reports.v2 as wr

from repro.report.claims import ClaimsFile, load_claims
from repro.report.colours import colour_for
from repro.report.page import CHECKS_TITLE, CLOCKS_TEXT, claims_table, setup_table
from repro.report.plots import FigureSpec, axis_label
from repro.report.render import markdown_table
from repro.report.seeds import ClaimResult, evaluate, model_checks, outcomes
from repro.report.series import Seeded, cfg, every_run, x_metric

TITLE_MAX = 128  # wandb refuses longer report titles
BOTH_CLOCKS = ("time/modeled_s", "step")


def _line(title: str, x: str, y: str, *, logx=False, logy=False, xlabel="", ylabel=""):
    return wr.LinePlot(
        title=title,
        x=x,
        y=[y],
        log_x=logx or None,
        log_y=logy or None,
        title_x=xlabel or axis_label(x),
        title_y=ylabel or axis_label(y),
    )


def panels(figures: Sequence[FigureSpec]) -> list[wr.LinePlot]:
    """One line plot per curve or step figure, then each of their metrics against the
    modeled clock and against steps where no figure already plots it so."""
    curves = [f for f in figures if f.kind in ("curves", "steps")]
    out, seen = [], set()
    for f in curves:
        x = x_metric(f.x)
        out.append(
            _line(f.title, x, f.y, logx=f.logx, logy=f.logy, xlabel=f.xlabel, ylabel=f.ylabel)
        )
        seen.add((x, f.y))
    logy = {f.y: f.logy for f in curves}
    for y in logy:
        for x in BOTH_CLOCKS:
            if (x, y) not in seen:
                title = f"{axis_label(y)} against {axis_label(x)}"
                out.append(_line(title, x, y, logy=logy[y]))
    return out


def runset(entity: str, project: str, group: str, runs: Seeded) -> wr.Runset:
    """The reproduction's run group (every seed), coloured as in the local reports."""
    return wr.Runset(
        entity=entity,
        project=project,
        name=group,
        filters=f"Group = '{group}'",
        custom_run_colors={run.run_id: colour_for(label) for label, _, run in every_run(runs)},
    )


def title_of(claims: ClaimsFile) -> str:
    title = f"Reproduction: {claims.title}"
    return title if len(title) <= TITLE_MAX else title[: TITLE_MAX - 1] + "…"


def build_wandb_report(
    claims: ClaimsFile,
    runs: Seeded,
    results: list[ClaimResult],
    scale: str,
    *,
    entity: str,
    project: str,
) -> wr.Report:
    """The Report of one reproduction, not saved (see module doc)."""
    group = f"{claims.paper}_{scale}"
    blocks: list = [
        wr.P(f"{claims.citation} Scale: {scale}; run group {group}."),
        wr.MarkdownBlock("\n".join(markdown_table(setup_table(runs, scale)))),
        wr.MarkdownBlock("\n".join(markdown_table(claims_table(outcomes(results), scale)))),
        wr.MarkdownBlock(
            "\n".join(markdown_table(claims_table(model_checks(results), scale, CHECKS_TITLE)))
        ),
        wr.H2("Curves"),
        wr.P(f"Clocks: {CLOCKS_TEXT}."),
        wr.PanelGrid(runsets=[runset(entity, project, group, runs)], panels=panels(claims.figures)),
    ]
    local_only = [f.title for f in claims.figures if f.kind == "points"]
    if local_only:
        note = "In the local report only (one number per run): " + "; ".join(local_only)
        blocks.append(wr.P(note))
    return wr.Report(
        project=project,
        entity=entity,
        title=title_of(claims),
        description=f"{claims.paper} at scale {scale}: published claims against our runs",
        blocks=blocks,
    )


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


def _api_or_missing():
    """(wandb.Api, "") when a key and a reachable server exist, else (None, what is missing).

    The key and the server are checked before wandb.Api() is built, because building it
    verifies the key with the server and can wait a long time for one that is not there."""
    import wandb

    base_url = wandb.Settings().base_url
    if not (os.environ.get("WANDB_API_KEY") or _stored_key(base_url)):
        return None, "no wandb API key (set WANDB_API_KEY or run `wandb login`)"
    if not _reachable(base_url):
        return None, f"wandb server {base_url} is not reachable (set WANDB_BASE_URL)"
    try:
        return wandb.Api(timeout=20), ""
    except wandb.errors.Error as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        return None, f"wandb server {base_url} refused the API key: {first}"


def publish(
    paper: str, runs_root: Path, scale: str | None, claims_dir: Path
) -> tuple[str | None, str]:
    """Save the Report of `paper`'s reproduction under `runs_root`: (its URL, "") or
    (None, what is missing)."""
    from repro.report.build import ordered, select_runs
    from repro.track.runs import find_runs

    api, missing = _api_or_missing()
    if api is None:
        return None, missing
    claims = load_claims(paper, claims_dir)
    chosen, runs, _ = select_runs(find_runs(runs_root), paper, scale, str(runs_root))
    runs = ordered(claims, runs)
    first = every_run(runs)[0][2]
    entity = cfg(first, "tracking.entity") or api.default_entity
    project = cfg(first, "tracking.project") or "repro"
    results = evaluate(claims.claims, runs, chosen)
    report = build_wandb_report(claims, runs, results, chosen, entity=entity, project=project)
    report.save()
    return report.url, ""
