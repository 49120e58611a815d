"""`repro sweep`: run, continue, show and browse an Optuna sweep.

    repro sweep SPEC [--workers K]      run the study, or continue it where it stopped
    repro sweep SPEC --workers K --cluster NAME
                                        the workers where configs/cluster/NAME says (a job
                                        array on SLURM: the spec needs a database storage)
    repro sweep show SPEC               Pareto front table + knee; writes front.csv, pareto.png,
                                        an interactive pareto.html and hypervolume plots
    repro sweep dashboard SPEC [--port P]
                                        optuna-dashboard on 127.0.0.1 on the study's storage

The dashboard gets the storage object, never the URL on a command line, so a database password
does not show up in the process list either.
"""

from __future__ import annotations

import argparse
import logging
import sys

from repro.errors import UserError

USAGE = """repro sweep SPEC [--workers K] [--cluster NAME]
       repro sweep show SPEC
       repro sweep dashboard SPEC [--port P]"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="repro sweep", usage=USAGE, description=__doc__.split("\n")[0])
    p.add_argument(
        "action",
        nargs="?",
        choices=("run", "show", "dashboard"),
        default="run",
        help=argparse.SUPPRESS,
    )
    p.add_argument("spec", help="sweep spec YAML, e.g. sweeps/topk_cr_pareto.yaml")
    p.add_argument("--workers", type=int, default=1, help="trials in parallel (processes)")
    p.add_argument("--cluster", help="run the workers where configs/cluster/NAME says")
    p.add_argument("--port", type=int, default=8080, help="dashboard port on 127.0.0.1")
    return p


def _dashboard(spec_path: str, port: int) -> None:
    import optuna_dashboard

    from repro.sweep.results import load_study
    from repro.sweep.spec import load_spec
    from repro.sweep.storage import open_storage

    spec = load_spec(spec_path)
    load_study(spec)  # a clear error when the sweep has not run yet
    print(
        f"optuna-dashboard for study {spec.name} ({spec.storage_label}) on "
        f"http://127.0.0.1:{port}/  (Ctrl-C stops it)",
        flush=True,
    )
    optuna_dashboard.run_server(open_storage(spec), host="127.0.0.1", port=port)


def run(args: argparse.Namespace) -> int:
    from repro.sweep.spec import load_spec

    if args.action == "dashboard":
        _dashboard(args.spec, args.port)
        return 0
    spec = load_spec(args.spec)
    if args.action == "show":
        from repro.sweep.results import show_sweep

        show_sweep(spec)
        return 0
    from repro.sweep.launch import run_sweep
    from repro.sweep.storage import open_storage
    from repro.sweep.study import open_study, tally

    if run_sweep(spec, workers=args.workers, cluster=args.cluster):
        return 0  # queued: the launcher said where to follow the jobs
    done, running = tally(open_study(spec, open_storage(spec)))
    print(
        f"sweep {spec.name}: {done} of {spec.n_trials} trials finished, {running} running; "
        f"`repro sweep show {args.spec}` prints the Pareto front",
        flush=True,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in ("show", "dashboard", "run") and not argv[0].startswith("-"):
        argv.insert(0, "run")  # `repro sweep SPEC` is the run action
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        return run(args)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if args.action != "run":
            print("interrupted", file=sys.stderr)
            return 130
        print(
            f"interrupted: sweep {args.spec} stopped, its running trials marked interrupted; "
            "run the same command again to continue the study",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
