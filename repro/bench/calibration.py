"""How well the calibrated alpha-beta model predicts this machine's gloo collectives.

Two measurement sweeps of allreduce and allgather (2 and 4 ranks, 1 KB to 64 MB), one after
the other in the same workers: latency and bandwidth are fitted on the first exactly as
`repro calibrate` does (per op and rank count, see `repro.netmodel.calibrate_fit`), and the
model's relative error is evaluated on the second, so the number is an out-of-sample
prediction error, not a fitting residual. Goal: median |error| <= 25%.
Printed beside it: the in-sample error of the first sweep (a large gap means run-to-run
noise on a loaded machine, not a wrong formula; the load average is printed for the same
reason) and the held-out error of one link per op over both rank counts, which a host with
fewer cores than ranks cannot serve.
"""

from __future__ import annotations

from repro.comm.launch import spawn
from repro.netmodel.calibrate import DEFAULT_SIZES, describe, load_note, measure_worker
from repro.netmodel.calibrate_fit import FitKey, Sample, fit_all, median_error, pooled_key

OPS = ("allreduce", "allgather")
RANKS = (2, 4)
REPEATS, WARMUP = 3, 1
GOAL = 0.25


def _two_runs(rank: int, world: int) -> list[list[Sample]] | None:
    """Both measurement runs in one process group (starting workers is the slow part here)."""
    runs = [measure_worker(rank, world, OPS, DEFAULT_SIZES, REPEATS, WARMUP) for _ in range(2)]
    return runs if rank == 0 else None


def run() -> list[str]:
    fit_run: list[Sample] = []
    eval_run: list[Sample] = []
    for world in RANKS:
        first, second = spawn(_two_runs, world)[0]
        fit_run += first
        eval_run += second
    load = load_note()
    links = fit_all(fit_run)
    lines = [
        f"sweep: {', '.join(OPS)}; ranks {list(RANKS)}; {len(DEFAULT_SIZES)} sizes "
        f"{DEFAULT_SIZES[0]} B..{DEFAULT_SIZES[-1] >> 20} MB; fastest of {REPEATS}+ repeats; "
        f"{load}",
    ]
    for op in OPS:
        for world in RANKS:
            cell = FitKey(op, world)
            lines.append(
                f"{op} at {world} ranks: {describe(links[cell])}; median |error| "
                f"held-out {median_error(links, eval_run, cell):.1%} "
                f"(in-sample {median_error(links, fit_run, cell):.1%})"
            )
    pooled_err = median_error(links, eval_run, key_of=pooled_key)
    lines.append(f"one link per op over both rank counts: held-out median |error| {pooled_err:.1%}")
    overall = median_error(links, eval_run)
    verdict = "meets" if overall <= GOAL else "misses"
    lines.append(
        f"median |prediction error| on the second run (link per op and rank count): "
        f"{overall:.1%} ({verdict} the goal of at most {GOAL:.0%})"
    )
    return lines


if __name__ == "__main__":
    print("\n".join(run()))
