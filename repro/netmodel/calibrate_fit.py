"""Fitting the alpha-beta model to measured collectives (the numerics of `repro calibrate`).

Each op is charged by its own formula from `repro.netmodel.cost`, the same one the modeled
clock charges (Table I of the Flexible Top-k paper): ring allreduce 2(n-1) a + 2(n-1)/n M b,
allgather a log n + (n-1) M b, broadcast a log n + log n M b. Every cost is linear in the
latency a and the seconds per byte b, so a fit is a non-negative least-squares problem.
Residuals are relative (each row divided by its measured time) so that 1 KB and 64 MB
messages weigh alike instead of the largest drowning out the latency.

A link is fitted per op and per rank count. The alpha-beta model assumes every rank has a
processor of its own; on one host with fewer cores than ranks (4 ranks on 2 cores here) each
hop also waits for the scheduler to run the receiving rank, and the ranks' copies share the
cores, so the per-hop latency measured at 4 ranks is about twice that at 2 ranks and no
single (a, b) serves both (measured: median held-out error 32% for one link per op over 2
and 4 ranks, 18% for one link per op and rank count). A preset is used by runs of one world
size, so it takes the fit at that size. The fits over all rank counts are kept for
comparison (`world` None), and "joint" fits every op at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

from repro.comm.record import CommRecord
from repro.errors import UserError
from repro.netmodel.cost import Link, record_cost

JOINT = "joint"


@dataclass(frozen=True)
class Sample:
    """Seconds of one collective of `nbytes` per participant over `world` ranks."""

    op: str
    world: int
    nbytes: int
    seconds: float


@dataclass(frozen=True)
class FitKey:
    """Which samples a link was fitted on: one op (or JOINT = all) at one rank count (or all)."""

    op: str
    world: int | None = None

    def covers(self, sample: Sample) -> bool:
        return self.op in (JOINT, sample.op) and self.world in (None, sample.world)

    def __str__(self) -> str:
        return f"{self.op}, {'all' if self.world is None else self.world} ranks"


def _record(op: str, nbytes: float, world: int) -> CommRecord:
    # Collectives records allreduces as "ring"; the fit must use the formula the clock charges.
    return CommRecord(op, int(nbytes), 0.0, world, "ring" if op == "allreduce" else None)


def coefficients(op: str, nbytes: float, world: int) -> tuple[float, float]:
    """(x_a, x_b) with cost = x_a a + x_b b, read off the cost model itself."""
    rec = _record(op, nbytes, world)
    return record_cost(rec, Link(1.0, math.inf)), record_cost(rec, Link(0.0, 1.0))


def predict(link: Link, sample: Sample) -> float:
    """Modeled seconds of `sample` on `link`."""
    return record_cost(_record(sample.op, sample.nbytes, sample.world), link)


def fit(samples: Sequence[Sample]) -> Link:
    """Latency and bandwidth minimising the summed squared relative error over `samples`.

    When the times do not grow with size (noise on a narrow sweep), the best non-negative
    byte term is 0: the link then has infinite bandwidth, which a preset refuses.
    """
    rows = np.array([coefficients(s.op, s.nbytes, s.world) for s in samples])
    times = np.array([s.seconds for s in samples])
    if len(samples) < 2 or np.linalg.matrix_rank(rows) < 2:
        raise UserError("calibrate: need at least two message sizes to fit latency and bandwidth")
    (a, b), _ = nnls(rows / times[:, None], np.ones(len(samples)))
    return Link(float(a), float(1 / b) if b > 0 else math.inf)


def fit_all(samples: Sequence[Sample]) -> dict[FitKey, Link]:
    """A link for every op and JOINT, at each rank count and over all of them."""
    ops = sorted({s.op for s in samples}) + [JOINT]
    worlds: list[int | None] = [*sorted({s.world for s in samples}), None]
    keys = [FitKey(op, world) for op in ops for world in worlds]
    return {k: fit([s for s in samples if k.covers(s)]) for k in keys}


def own_key(sample: Sample) -> FitKey:
    """The calibrated model's fit for `sample`: its op's at its rank count."""
    return FitKey(sample.op, sample.world)


def pooled_key(sample: Sample) -> FitKey:
    """Its op's fit over every rank count (what one link per op would predict)."""
    return FitKey(sample.op)


def median_error(
    links: dict[FitKey, Link],
    samples: Sequence[Sample],
    where: FitKey = FitKey(JOINT),
    key_of: Callable[[Sample], FitKey] = own_key,
) -> float:
    """Median |model / measured - 1| over the samples `where` covers, each sample predicted
    by the link `key_of` names for it."""
    covered = [s for s in samples if where.covers(s)]
    errors = [predict(links[key_of(s)], s) / s.seconds - 1 for s in covered]
    return float(np.median(np.abs(errors)))


def fit_error(links: dict[FitKey, Link], samples: Sequence[Sample], key: FitKey) -> float:
    """Median |error| of the link fitted on `key` over the samples it covers."""
    return median_error(links, samples, key, lambda _: key)
