"""`repro reproduce PAPER [scale=small|paper|tiny] [overrides]`: a paper's run set, then its report.

The run set is data: `experiment.runs` in `configs/experiment/<paper>_<scale>.yaml` maps each
run's label to the overrides that make it. Every run is an ordinary training run in its own
directory (runs/<paper>_<scale>/<label>-<hash>), so a repeated command skips finished runs,
resumes interrupted ones, and a changed setting gets a fresh directory. The runs go where the
`cluster` group says (`repro.cluster.launcher`): one after another here, after which the report
is built, or as job arrays, after which `repro report PAPER` builds it once they end.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from repro.cluster.launcher import launch_runs
from repro.config import CONFIG_DIR, Config, compose
from repro.errors import UserError


def papers() -> list[str]:
    return sorted({p.stem.rsplit("_", 1)[0] for p in (CONFIG_DIR / "experiment").glob("*_*.yaml")})


def run_set(paper: str, scale: str, extra: list[str]) -> list[tuple[str, Config]]:
    """(label, config) of every run of `paper` at `scale`, composed and validated up front."""
    if paper not in papers():
        raise UserError(f"unknown paper {paper!r}; choose one of {papers()}")
    experiment = f"{paper}_{scale}"
    if not (CONFIG_DIR / "experiment" / f"{experiment}.yaml").exists():
        scales = sorted(
            p.stem.rsplit("_", 1)[1] for p in (CONFIG_DIR / "experiment").glob(f"{paper}_*.yaml")
        )
        raise UserError(f"scale={scale} does not exist for {paper}; choose one of {scales}")
    base = compose([f"experiment={experiment}", *extra])
    if not base.experiment.runs:
        raise UserError(f"experiment={experiment} lists no runs (experiment.runs is empty)")
    return [
        (label, compose([f"experiment={experiment}", f"experiment.label={label}", *ovs, *extra]))
        for label, ovs in base.experiment.runs.items()
    ]


def parse(argv: list[str]) -> tuple[argparse.Namespace, str, list[str]]:
    p = argparse.ArgumentParser(prog="repro reproduce", description=__doc__)
    p.add_argument("paper", help=f"one of {papers()}")
    p.add_argument("--no-report", action="store_true", help="run the set, skip the report")
    p.add_argument("--reports", default="reports", help="where reports are written")
    p.add_argument("overrides", nargs="*", help="scale=small|paper|tiny and Hydra overrides")
    args = p.parse_intermixed_args(argv)
    scale, extra = "small", []
    for ov in args.overrides:
        if ov.startswith("scale="):
            scale = ov.split("=", 1)[1]
        else:
            extra.append(ov)
    return args, scale, extra


def main(argv: list[str]) -> int:
    args, scale, extra = parse(argv)
    runs = run_set(args.paper, scale, extra)
    launched = launch_runs(
        runs, f"{args.paper} {scale}", then=f"`repro report {args.paper}` builds the report"
    )
    if launched.jobs or args.no_report:
        return 0
    from repro.report.build import build_report

    root = Path(runs[0][1].runs_root)
    out = build_report(args.paper, root, Path(args.reports) / args.paper, scale=scale)
    print(f"report: {out}")
    return 0
