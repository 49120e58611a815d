"""`repro report`: reports from runs read back from disk.

repro report PAPER [--runs ROOT] [--out DIR | --dir DIR] [--scale S] [--publish]
    one paper's report: DIR/PAPER/report.md (DIR/PAPER/SCALE/ for a scale other than small),
    report.html and the figures beside them;
    --publish also saves the W&B Report's spec there (wandb_report.json) and publishes it
    when a key and a server exist, else says how to publish it later (exit 0 either way)
repro report publish PATH
    publishes a saved Report spec (PATH: the spec or its report directory); exit 2 and one
    line saying what is missing without a key or a server
repro report all [--runs ROOT] [--out DIR]
    every paper's report, then DIR/index.html and index.md over all of them
repro report compare RUN_OR_GROUP ... [--metric M] [--x X] [--out DIR]
    overlays one metric of any runs (run ids, run directories or group names)
repro report check [DIR] [--screenshots SHOTS]
    checks every HTML page under DIR in headless Chromium (`repro.checks.browser`)
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from repro.claims.claims_file import SCALES, known_papers
from repro.errors import CommandParser, UserError
from repro.report.build import build_report, default_claims_dir
from repro.storage import check_creatable, staged_folder


def _paper_parser() -> argparse.ArgumentParser:
    p = CommandParser(
        prog="repro report",
        description="one paper's reproduction report",
        epilog="the other forms, each with its --help: repro report all | compare RUN_OR_GROUP "
        "... | check [DIR] | publish PATH",
    )
    p.add_argument("paper", help="a paper with a claims file, e.g. adacomm")
    p.add_argument("--runs", default="runs", help="root the runs are read from (default runs)")
    p.add_argument("--out", default="reports", help="reports directory (default reports)")
    p.add_argument("--dir", help="write into exactly this directory (default OUT/PAPER[/SCALE])")
    p.add_argument("--scale", choices=SCALES, help="which reproduction, when several exist")
    p.add_argument("--claims", help="directory of claims files (default reports/claims)")
    p.add_argument("--publish", action="store_true", help="also publish a W&B Report")
    return p


def _paper(argv: list[str]) -> int:
    args = _paper_parser().parse_args(argv)
    given = Path(args.claims) if args.claims else None
    claims_dir = given or default_claims_dir()
    if args.paper not in known_papers(claims_dir):
        known = ", ".join(known_papers(claims_dir))
        raise UserError(f"repro report: unknown paper '{args.paper}'; known papers: {known}")
    into = Path(args.dir) if args.dir else None
    if into:  # the folder named on purpose is the setting a refusal names
        check_creatable(into, "--dir")
    html = build_report(
        args.paper, Path(args.runs), Path(args.out), into=into, scale=args.scale, claims_dir=given
    )
    print(f"wrote {html.with_name('report.md')} and {html}")
    if args.publish:
        from repro.report.wandb_spec import publish

        print(publish(args.paper, Path(args.runs), args.scale, claims_dir, html.parent))
    return 0


def _all(argv: list[str]) -> int:
    p = CommandParser(prog="repro report all", description="every paper's report and an index")
    p.add_argument("--runs", help="root the runs are read from (default runs)")
    p.add_argument("--out", default="reports", help="reports directory (default reports)")
    p.add_argument("--claims", help="directory of claims files (default reports/claims)")
    args = p.parse_args(argv)
    # Before any run the default root is absent and the index lists every paper as not run;
    # a root named on purpose that is absent is a typo that would say the same.
    if args.runs is not None and not Path(args.runs).is_dir():
        raise UserError(
            f"repro report all: --runs {args.runs} is not a directory; give the folder the "
            "runs were written to (runs_root, default runs)"
        )
    from repro.report.index import collect_runs
    from repro.report.index_page import to_html, to_markdown
    from repro.track.provenance import environment_rows
    from repro.track.runs import find_runs

    out, root = Path(args.out), Path(args.runs or "runs")
    claims_dir = Path(args.claims) if args.claims else default_claims_dir()
    command = shlex.join(["repro", "report", "all", *argv])
    found = find_runs(root) if root.is_dir() else []
    index = collect_runs(found, str(root), out, claims_dir, command)
    env = environment_rows(Path(__file__).resolve().parents[2])
    with staged_folder(out, "--out") as stage:
        (stage / "index.md").write_text(to_markdown(index, env), encoding="utf-8")
        (stage / "index.html").write_text(to_html(index, env), encoding="utf-8")
    for s in index.sections:
        if s.refused:
            print(f"{s.paper} at scale {s.scale} not reported: {s.refused}", file=sys.stderr)
        for fig in s.figures:
            if not fig.file:
                print(
                    f"{s.paper} ({s.scale}): figure {fig.id} not drawn: {fig.missing}",
                    file=sys.stderr,
                )
        if not s.refused:
            print(f"wrote {out / s.where}")
    for paper in index.not_run:
        print(f"{paper.paper}: not run; run it with `{paper.command}`")
    print(f"wrote {out / 'index.md'} and {out / 'index.html'}")
    return 0


def _compare(argv: list[str]) -> int:
    from repro.report.compare import main

    return main(argv)


def _publish(argv: list[str]) -> int:
    p = CommandParser(prog="repro report publish", description="publish a saved W&B Report spec")
    p.add_argument("path", help="wandb_report.json, or the report directory holding it")
    from repro.track.wandb_publish import publish_saved

    print(f"wandb report: {publish_saved(Path(p.parse_args(argv).path))}")
    return 0


def _check(argv: list[str]) -> int:
    from repro.checks.browser import main

    return main(argv)


SUBCOMMANDS = {"all": _all, "compare": _compare, "check": _check, "publish": _publish}


def main(argv: list[str]) -> int:
    if argv and argv[0] in SUBCOMMANDS:
        return SUBCOMMANDS[argv[0]](argv[1:])
    return _paper(argv)
