"""`repro sweep` and `repro tune`: the command lines of the one search pipeline.

    repro sweep SPEC [--workers K]      run the study, or continue it where it stopped
    repro sweep SPEC --workers K --cluster NAME
                                        the workers where configs/cluster/NAME says (a job
                                        array on SLURM: the spec needs a database storage)
    repro sweep show SPEC               Pareto front table + knee; writes front.csv, pareto.png,
                                        an interactive pareto.html and hypervolume plots
    repro sweep dashboard SPEC [--port P]
                                        optuna-dashboard on 127.0.0.1 on the study's storage
                                        (a search with arms: every arm's study)
    repro tune PAPER [scale=small|tiny] [--workers K] [--spec PATH] [--out DIR]

The dashboard gets the storage object, never the URL on a command line, so a database password
does not show up in the process list either.

What `repro tune PAPER` does:

Runs the search `sweeps/tune/<paper>_<scale>.yaml` defines (one Optuna study per arm, the
same space, trials, seeds and design for every arm; `repro.sweep.spec`) and writes the
chosen values to `configs/tuned/<paper>_<scale>.yaml`, which a run set with
`experiment.tuned: true` applies and the repository commits, so `repro reproduce` never
tunes. Trials are ordinary simulated runs under `runs/tune/<paper>_<scale>/`; stopped (Ctrl-C,
a kill), the same command continues the search, and on a finished search it runs nothing.
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys
from pathlib import Path

from repro.errors import CommandParser, UserError, say_stopped, sigterm_stops
from repro.storage import check_creatable
from repro.sweep.tuned import REPO, TUNED_DIR

USAGE = """repro sweep SPEC [--workers K] [--cluster NAME]
       repro sweep show SPEC
       repro sweep dashboard SPEC [--port P]"""
TUNE_USAGE = "repro tune PAPER [scale=small|tiny] [--workers K] [--spec PATH] [--out DIR]"
SPEC_DIR = REPO / "sweeps" / "tune"
ACTIONS = ("run", "show", "dashboard")
# the options each action reads (another given would be ignored without a word)
OPTIONS = {"run": ("--workers", "--cluster"), "show": (), "dashboard": ("--port",)}


def _parser() -> argparse.ArgumentParser:
    about = "`repro sweep`: run, continue, show and browse an Optuna sweep."
    p = CommandParser(prog="repro sweep", usage=USAGE, description=about)
    p.add_argument("action", nargs="?", choices=ACTIONS, default="run", help=argparse.SUPPRESS)
    # optional here so that `repro sweep show` alone is a missing spec, not a spec named show
    p.add_argument("spec", nargs="?", help="sweep spec YAML, e.g. sweeps/topk_cr_pareto.yaml")
    p.add_argument("--workers", type=int, default=1, help="trials in parallel (processes)")
    p.add_argument("--cluster", help="run the workers where configs/cluster/NAME says")
    p.add_argument("--port", type=int, default=8080, help="dashboard port on 127.0.0.1")
    return p


def _check_port_free(port: int) -> None:
    """The dashboard's port, refused in one line when taken (the server's own bind failed
    after its start line, in a traceback)."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as err:
            raise UserError(
                f"--port={port}: 127.0.0.1:{port} cannot be used ({err.strerror}; another "
                "dashboard?); pass another --port (make dashboard PORT=...)"
            ) from None


def _dashboard(spec_path: str, port: int) -> None:
    import optuna_dashboard

    from repro.sweep.results import load_study
    from repro.sweep.spec import load_spec
    from repro.sweep.storage import open_storage

    spec = load_spec(spec_path)
    # a clear error when the search has not run yet; a search with arms keeps one study per
    # arm in its journal, and the dashboard lists them all
    if not spec.arms:
        load_study(spec)
    elif not (spec.study_dir / "journal.log").exists():
        raise UserError(
            f"no studies of {spec.name} yet in {spec.storage_label}; run the search first"
        )
    studies = f"the studies of arms {', '.join(spec.arms)}" if spec.arms else f"study {spec.name}"
    _check_port_free(port)
    print(
        f"optuna-dashboard for {studies} ({spec.storage_label}) on "
        f"http://127.0.0.1:{port}/  (Ctrl-C stops it)",
        flush=True,
    )
    optuna_dashboard.run_server(open_storage(spec), host="127.0.0.1", port=port)


def run(args: argparse.Namespace) -> int:
    from repro.sweep.spec import load_spec

    if args.action == "dashboard":
        if not 1 <= args.port <= 65535:
            raise UserError(f"--port={args.port} must be a TCP port, 1 to 65535")
        _dashboard(args.spec, args.port)
        return 0
    spec = load_spec(args.spec)
    if spec.arms:
        if args.action != "run":
            raise UserError(
                f"{args.spec} is a search with arms, one study per arm and no front to show: "
                f"its result is the tuned file `repro sweep {args.spec}` writes "
                "(configs/tuned/), and `repro sweep dashboard` shows its studies"
            )
        if args.cluster:
            raise UserError(
                f"{args.spec} is a search with arms, which runs only here: drop --cluster"
            )
        from repro.sweep.launch import run_tune

        with sigterm_stops():
            run_tune(spec, args.workers)
        return 0
    if args.action == "show":
        from repro.sweep.results import show_sweep

        show_sweep(spec)
        return 0
    from repro.sweep.front import result_words
    from repro.sweep.launch import run_sweep
    from repro.sweep.storage import open_storage
    from repro.sweep.study import finished_words, open_study, tally

    with sigterm_stops():
        queued = run_sweep(spec, workers=args.workers, cluster=args.cluster)
    if queued:
        return 0  # the launcher said where to follow the jobs
    done, running = tally(open_study(spec, open_storage(spec)))
    why = ""
    if done < spec.n_trials and spec.timeout_s is not None:  # the workers' only early end
        why = f" (timeout_s={spec.timeout_s:g} reached; the same command runs the rest)"
    print(
        f"sweep {spec.name}: {finished_words(done, spec.n_trials)}, {running} running{why}; "
        f"`repro sweep show {args.spec}` prints the {result_words(spec)[0]}",
        flush=True,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    """`repro sweep ...`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    if argv and argv[0] not in ACTIONS and not argv[0].startswith("-"):
        valued = ("--workers", "--cluster", "--port")
        words = [
            a
            for a, before in zip(argv, ["", *argv[:-1]], strict=True)
            if a[:1] != "-" and before not in valued
        ]
        if len(words) > 1:  # an action and a spec: the action is misspelt, not a spec
            parser.error(f"unknown action {argv[0]!r}; choose one of {', '.join(ACTIONS)}")
        argv.insert(0, "run")  # `repro sweep SPEC` is the run action
    args = parser.parse_args(argv)
    if args.spec is None:
        parser.error("the following arguments are required: spec")
    given = [a.split("=")[0] for a in argv if a.startswith("--")]
    stray = [flag for flag in given if flag not in OPTIONS[args.action]]
    if stray:
        takes = ", ".join(OPTIONS[args.action]) or "no option"
        parser.error(
            f"{stray[0]} does not apply to `repro sweep {args.action}`, which takes {takes}"
        )
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        return run(args)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:
        if args.action != "run":
            return say_stopped(stop, f"sweep {args.action} stopped")
        return say_stopped(
            stop,
            f"sweep {args.spec} stopped, its running trials marked stopped; run the same "
            "command again to continue the study",
        )


def tune_spec_path(paper: str, scale: str) -> Path:
    """The paper's tuning spec at `scale`; an unknown scale is one line."""
    path = SPEC_DIR / f"{paper}_{scale}.yaml"
    if not path.is_file():
        scales = sorted(p.stem.rsplit("_", 1)[1] for p in SPEC_DIR.glob(f"{paper}_*.yaml"))
        raise UserError(
            f"scale={scale}: {paper} has no tuning spec {path.relative_to(REPO)}; "
            f"tuned scales: {scales}"
        )
    return path


def _tune_parser() -> argparse.ArgumentParser:
    p = CommandParser(
        prog="repro tune",
        usage=TUNE_USAGE,
        description=(__doc__ or "").split("\n\n")[-1],
    )
    p.add_argument("paper", help="the paper whose run set to tune, e.g. adacomm")
    p.add_argument("scale", nargs="?", default="scale=small", help="scale=small (default) or tiny")
    p.add_argument("--workers", type=int, help="trials run side by side (default: one per core)")
    p.add_argument(
        "--spec", type=Path, help="the search spec (default sweeps/tune/PAPER_SCALE.yaml)"
    )
    p.add_argument("--out", type=Path, help="where the tuned file goes (default configs/tuned)")
    return p


def tune(argv: list[str]) -> int:
    """`repro tune PAPER ...`; a `UserError` is the dispatcher's one line."""
    args = _tune_parser().parse_args(argv)
    if not args.scale.startswith("scale="):
        raise UserError(f"{args.scale!r}: repro tune takes scale=small or scale=tiny after PAPER")
    scale = args.scale.split("=", 1)[1]
    from repro.config import papers  # hydra loads only when a search is run

    if args.paper not in papers():
        raise UserError(f"unknown paper {args.paper!r}; choose one of {papers()}")
    path = args.spec or tune_spec_path(args.paper, scale)
    from repro.sweep.launch import run_tune
    from repro.sweep.spec import load_spec

    spec = load_spec(path)
    if not spec.arms:  # the export the next check asks for belongs to a search with arms
        raise UserError(
            f"{spec.source} is a plain sweep, with no arms: run it with repro sweep, or pass "
            "--spec a tuning search with arms and export (as "
            f"sweeps/tune/{args.paper}_{scale}.yaml)"
        )
    if spec.export is None:
        raise UserError(f"{spec.source}: repro tune writes the tuned file `export` says; add one")
    if spec.experiment != f"{args.paper}_{scale}":
        raise UserError(
            f"{spec.source} tunes experiment={spec.experiment}, not {args.paper}_{scale}; "
            "pass the spec of this paper and scale"
        )
    out = args.out or TUNED_DIR
    check_creatable(out, "--out")  # before the search's trials, not after them
    try:
        with sigterm_stops():
            run_tune(spec, args.workers, out)
    except KeyboardInterrupt as stop:
        return say_stopped(
            stop,
            f"tune {args.paper} {scale} stopped, its running trials marked stopped; run the "
            "same command again to continue the search",
        )
    return 0
