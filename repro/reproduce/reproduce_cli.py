"""`repro reproduce PAPER [scale=small|paper|tiny] [seeds=N] [overrides]`: a paper's run set,
then its report.

The set's runs are composed up front (`repro.reproduce.run_sets`): a bad setting in any of
them stops the command before a run starts. Before starting, the command prints the set's
expected time from `experiment.expected_minutes` (one seed's runs one after another,
measured on a 2-core machine) and the most that seeds added for undecided claims can take;
each round of added seeds is timed from what the same runs took here at their earlier seeds.
The runs go where the `cluster` group says (`repro.cluster.launcher`): here, after which the
claims are evaluated, seeds are added to the runs of each claim whose interval straddles a
band edge, up to its seed cap (`repro.reproduce.more_seeds`), and the report is built; or as
job arrays, after which `repro report PAPER` builds it once they end (and a repeated `repro
reproduce` adds seeds). A set whose `experiment.search` names a sweep spec runs that search
once, here, after its runs and before the report (`repro.reproduce.set_search`: the Top-k
set's Pareto search).

Extra overrides that change what the runs compute, not where or how, make runs that are not
the set's (`repro.claims.set_regime`): the command says so before they start, adds no seeds
for them, and the report judges no claim on them while it reads the set's own where they exist.
"""

from __future__ import annotations

import argparse
import functools
from pathlib import Path

from repro.claims.fixed_terms import record
from repro.claims.set_regime import changed_by
from repro.cluster.launcher import launch_runs, runs_here
from repro.comm.capacity import usable_cores
from repro.config import compose, papers
from repro.errors import CommandParser, UserError, override_key, say_stopped, sigterm_stops
from repro.report.missing_runs import report_command
from repro.reproduce.run_sets import run_set
from repro.reproduce.set_search import run_search, search_minutes, search_spec, set_dir_of
from repro.storage import check_creatable


def parse_seeds(text: str) -> int:
    """The `seeds=N` of the command line; UserError unless N is an integer >= 1."""
    if not text.strip().isdigit() or int(text) < 1:
        raise UserError(
            f"seeds={text} must be an integer >= 1 (how many seeds each run of the set runs; "
            "e.g. seeds=3)"
        )
    return int(text)


def parse(argv: list[str]) -> tuple[argparse.Namespace, str, int | None, list[str]]:
    p = CommandParser(prog="repro reproduce", description=__doc__)
    p.add_argument("paper", help=f"one of {papers()}")
    p.add_argument("--no-report", action="store_true", help="run the set, skip the report")
    p.add_argument("--reports", default="reports", help="where reports are written")
    p.add_argument("--claims", help="the claims directory (default: reports/claims)")
    # a default keeps argparse from listing the optional overrides as required
    p.add_argument(
        "overrides",
        nargs="*",
        default=[],
        help="scale=small|paper|tiny, seeds=N and Hydra overrides",
    )
    args = p.parse_intermixed_args(argv)
    scale, seeds, extra = "small", None, []
    for ov in args.overrides:
        if ov.startswith("scale="):
            scale = ov.split("=", 1)[1]
        elif ov.startswith("seeds="):
            seeds = parse_seeds(ov.split("=", 1)[1])
        elif override_key(ov) == "experiment":
            paper, named, scale_of = ov.partition("=")[2].rpartition("_")
            if not named:
                paper, scale_of = "PAPER", "SCALE"
            raise UserError(
                f"{ov}: the run set is chosen by PAPER and scale=, not overridden; drop it "
                f"(`repro reproduce {paper} scale={scale_of}` runs "
                "configs/experiment/PAPER_SCALE.yaml)"
            )
        else:
            extra.append(ov)
    return args, scale, seeds, extra


def main(argv: list[str]) -> int:
    args, scale, seeds, extra = parse(argv)
    runs = run_set(args.paper, scale, extra, seeds)
    experiment = runs[0][1].experiment
    minutes = experiment.expected_minutes / len(experiment.runs)
    claims, claims_dir, also = None, Path(args.claims or "."), ""
    reports = Path(args.reports)  # the paper's page goes to its report_subdir there
    name = f"{args.paper}_{scale}"
    # runs the set does not make judge no claim (`repro.claims.set_regime`): no seeds
    away = changed_by(name, [cfg for _, cfg in runs]) if extra else []
    if not args.no_report:
        from repro.claims.claims_file import load_claims
        from repro.claims.reads import check_labels_made
        from repro.claims.seed_caps import check_seed_caps
        from repro.report.build import default_claims_dir, report_subdir
        from repro.reproduce.more_seeds import most_added

        claims_dir = Path(args.claims) if args.claims else default_claims_dir()
        # a bad claims file stops us before any run
        claims = load_claims(args.paper, claims_dir)
        base = [f"experiment={name}", *extra]
        default = experiment if seeds is None else compose(base).experiment
        path = str(claims_dir / f"{args.paper}.yaml")
        check_seed_caps(claims, default.seeds, name, path)
        # the set as its file makes it: runs a command line drops are the user's choice
        made = compose([f"experiment={name}"]).experiment.runs
        check_labels_made(claims.claims, scale, made, name, path)
        also = most_added(claims, runs, scale, minutes) if seeds is None and not away else ""
    if away:
        print(
            f"{args.paper} {scale} with {'; '.join(away[:3])}{' ...' if len(away) > 3 else ''}"
            f": not the {name} run set's runs, so a report assesses no claim on them (it "
            "reads the set's own where they exist)"
            + ("" if args.no_report else " and no seeds are added"),
            flush=True,
        )
    root = Path(runs[0][1].runs_root)
    search, here = None, runs_here(runs[0][1].cluster)
    if experiment.search:  # a bad search spec stops us before any run
        search = search_spec(experiment, set_dir_of(runs[0][1]), extra)
        workers = max(1, min(usable_cores(), search.n_trials))
        if here:
            also += f"; then {search_minutes(search, experiment, workers)}"
    report = report_command(args.paper, scale, str(root), args.reports, claims=args.claims)
    if claims is not None:  # a report that cannot be written stops us before any run
        check_creatable(reports / report_subdir(args.paper, scale), "--reports")
    if claims is not None and not away:  # the terms its runs are judged by, as they begin
        record(claims.claims, root / name)
    try:
        with sigterm_stops():
            launched = launch_runs(
                runs,
                f"{args.paper} {scale}",
                then=f"`{report}` builds the report",
                minutes_per_run=minutes,
                also=also,
            )
            if launched.jobs:
                return 0
            # `seeds=N` on the command line is the user's choice of seeds (a quick look at one
            # seed, say): the report then says which claims stay undecided at N
            if claims is not None and seeds is None and not away:
                from repro.reproduce.more_seeds import extend

                make = functools.partial(run_set, args.paper, scale, extra)
                extend(args.paper, scale, claims, make, root, minutes)
            if search is not None and here:
                run_search(search, experiment, workers)
            elif search is not None:
                print(
                    f"search: {experiment.search} runs only here, not on cluster="
                    f"{runs[0][1].cluster.name}; this command again with cluster=local runs it "
                    "(finished runs are skipped)",
                    flush=True,
                )
    except KeyboardInterrupt as stop:
        return say_stopped(
            stop,
            f"run set {args.paper} {scale} stopped; run the same command again to resume its "
            "runs from their last checkpoints (finished runs are kept)",
        )
    if claims is None:
        return 0
    from repro.report.build import build_report

    out = build_report(
        args.paper, root, reports, scale=scale, claims_dir=claims_dir, command=report
    )
    print(f"report: {out}")
    return 0
