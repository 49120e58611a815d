"""`repro tune PAPER [scale=small|tiny]`: tune every compared arm of a paper's run set alike.

Runs the search `sweeps/tune/<paper>_<scale>.yaml` defines (one Optuna study per arm, the
same space, trials, seeds and design for every arm; `repro.sweep.tune_spec`) and writes the
chosen values to `configs/tuned/<paper>_<scale>.yaml`, which a run set with
`experiment.tuned: true` applies and the repository commits, so `repro reproduce` never
tunes. Trials are ordinary simulated runs under `runs/tune/<paper>_<scale>/`; stopped (Ctrl-C,
a kill), the same command continues the search, and on a finished search it runs nothing.

    repro tune PAPER [scale=small|tiny] [--workers K] [--spec PATH] [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from repro.errors import UserError
from repro.sweep.tuned import REPO

SPEC_DIR = REPO / "sweeps" / "tune"


def papers() -> list[str]:
    """The papers with a run set (configs/experiment/<paper>_<scale>.yaml)."""
    return sorted(
        {p.stem.rsplit("_", 1)[0] for p in (REPO / "configs" / "experiment").glob("*_*.yaml")}
    )


def spec_path(paper: str, scale: str) -> Path:
    """The paper's tuning spec at `scale`; an unknown scale is one line."""
    path = SPEC_DIR / f"{paper}_{scale}.yaml"
    if not path.is_file():
        scales = sorted(p.stem.rsplit("_", 1)[1] for p in SPEC_DIR.glob(f"{paper}_*.yaml"))
        raise UserError(
            f"scale={scale}: {paper} has no tuning spec {path.relative_to(REPO)}; "
            f"tuned scales: {scales}"
        )
    return path


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="repro tune",
        usage="repro tune PAPER [scale=small|tiny] [--workers K] [--spec PATH] [--out DIR]",
        description=(__doc__ or "").split("\n\n")[1],
    )
    p.add_argument("paper", help="the paper whose run set to tune, e.g. adacomm")
    p.add_argument("scale", nargs="?", default="scale=small", help="scale=small (default) or tiny")
    p.add_argument("--workers", type=int, help="trials run side by side (default: one per core)")
    p.add_argument(
        "--spec", type=Path, help="the search spec (default sweeps/tune/PAPER_SCALE.yaml)"
    )
    p.add_argument("--out", type=Path, help="where the tuned file goes (default configs/tuned)")
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if not args.scale.startswith("scale="):
        raise UserError(f"{args.scale!r}: repro tune takes scale=small or scale=tiny after PAPER")
    scale = args.scale.split("=", 1)[1]
    if args.paper not in papers():
        raise UserError(f"unknown paper {args.paper!r}; choose one of {papers()}")
    path = args.spec or spec_path(args.paper, scale)
    from repro.sweep.tune_run import run_tune
    from repro.sweep.tune_spec import load_tune_spec
    from repro.sweep.tuned import TUNED_DIR

    spec = load_tune_spec(path)
    if spec.experiment != f"{args.paper}_{scale}":
        raise UserError(
            f"{spec.source} tunes experiment={spec.experiment}, not {args.paper}_{scale}; "
            "pass the spec of this paper and scale"
        )
    try:
        run_tune(spec, args.workers, args.out or TUNED_DIR)
    except KeyboardInterrupt:
        print(
            f"interrupted: tune {args.paper} {scale} stopped, its running trials marked "
            "interrupted; run the same command again to continue the search",
            file=sys.stderr,
            flush=True,
        )
        return 130
    return 0
