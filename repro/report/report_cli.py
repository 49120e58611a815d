"""`repro report PAPER [--runs ROOT] [--out DIR] [--scale S]`: one paper's reproduction report.

Reads the runs of group `<PAPER>_<scale>` under ROOT back from disk, evaluates the claims of
`reports/claims/<PAPER>.yaml` and writes `DIR/<PAPER>/report.md`, `report.html` and the
figures beside them.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from repro.errors import UserError
from repro.report.build import build_report, default_claims_dir
from repro.report.claims import SCALES, known_papers


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UserError(f"repro report: {message}")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="repro report", description=__doc__.splitlines()[0])
    p.add_argument("paper", help="a paper with a claims file, e.g. adacomm")
    p.add_argument("--runs", default="runs", help="root the runs are read from (default runs)")
    p.add_argument("--out", default="reports", help="reports directory (default reports)")
    p.add_argument("--scale", choices=SCALES, help="which reproduction, when several exist")
    p.add_argument("--claims", help="directory of claims files (default reports/claims)")
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    claims_dir = Path(args.claims) if args.claims else default_claims_dir()
    if args.paper not in known_papers(claims_dir):
        known = ", ".join(known_papers(claims_dir)) or f"none (no *.yaml in {claims_dir})"
        raise UserError(f"repro report: unknown paper '{args.paper}'; known papers: {known}")
    out_dir = Path(args.out) / args.paper
    html = build_report(
        args.paper,
        Path(args.runs),
        out_dir,
        scale=args.scale,
        claims_dir=claims_dir,
        command=shlex.join(["repro", "report", *argv]),
    )
    print(f"wrote {out_dir / 'report.md'} and {html}")
    return 0
