"""The modeled clock: every worker's time under the modeled network and compute model.

Each worker's modeled time advances by its own compute time; a collective is a barrier,
after which every worker's time is the slowest arrival plus the collective's alpha-beta cost
(AdaComm's runtime model: a synchronous step costs E[max_i Y_i] + D).

Every rank keeps the full vector (the trainer hands every rank all workers' compute times),
so all ranks hold identical clocks and any rank can log or checkpoint it.

Every record is charged as a barrier over all workers. That is exact for the lockstep
exchanges used here: every worker issues the same sequence of collectives with the same
sizes, so a world collective waits for the slowest worker by definition; collectives over
disjoint sub-groups that run side by side (Adasum's pairwise levels, a split group per part)
have equal costs, and once the sequence has connected all workers (the butterfly of
distance-doubling reaches every rank after log2 n levels) each worker's time is the global
maximum plus the summed costs, which is what charging each level as a world barrier gives.
Only the intermediate times inside such a sequence differ, and those are never logged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from repro.comm.record import CommRecord
from repro.netmodel.cost import Link, record_cost

if TYPE_CHECKING:
    import numpy as np


class ModeledClock:
    """Modeled seconds per worker.

    `link_fn()` returns the link in force now (e.g. the schedule's link for the current
    epoch); `charge` uses it when no link is passed. `bytes_scale` multiplies every record's
    bytes (see `NetworkConfig.bytes_scale`).

    The times are Python floats, not an array: the clock advances once a step between the
    step's large tensor operations, where numpy's code is out of cache: the time keeper's
    advance took 0.13-0.15 ms of an 8-worker STAR-Topk step with the times in an array,
    0.07-0.08 ms in floats (the same IEEE sums and maxima).
    """

    def __init__(
        self,
        world_size: int,
        link_fn: Callable[[], Link] | None = None,
        bytes_scale: float = 1.0,
    ):
        if world_size < 1:
            raise ValueError(f"world_size={world_size} must be >= 1")
        if not (bytes_scale > 0):
            raise ValueError(f"bytes_scale={bytes_scale} must be > 0")
        self.world_size = world_size
        self.link_fn = link_fn
        self.bytes_scale = bytes_scale
        self._times = [0.0] * world_size
        self._now = 0.0  # the slowest worker's time, kept as the times change (read every step)
        self.comm_seconds = 0.0

    def advance_compute(self, times: Sequence[float] | np.ndarray) -> None:
        """Add each worker's compute seconds for this step."""
        step = times.tolist() if hasattr(times, "tolist") else [float(t) for t in times]
        if len(step) != self.world_size:
            raise ValueError(f"need {self.world_size} compute times, got {len(step)}")
        if not all(t >= 0 for t in step):
            raise ValueError("compute times must be >= 0")
        self._times = [t + s for t, s in zip(self._times, step, strict=True)]
        self._now = max(self._times)

    def charge(self, records: Sequence[CommRecord], link: Link | None = None) -> float:
        """Charge each record as a barrier; returns the modeled seconds charged in total.

        Records are charged in order: waiting for the slowest worker happens at the first
        one, and each later one adds its own cost to every worker.
        """
        if link is None:
            if self.link_fn is None:
                raise ValueError("charge needs a link: pass one or give the clock a link_fn")
            link = self.link_fn()
        charged = 0.0
        for record in records:
            cost = record_cost(record, link, self.bytes_scale)
            self._now = max(self._times) + cost
            self._times = [self._now] * self.world_size
            charged += cost
        self.comm_seconds += charged
        return charged

    def now(self) -> float:
        """Modeled time of the slowest worker."""
        return self._now

    def worker(self, i: int) -> float:
        return self._times[i]

    def state_dict(self) -> dict:
        return {"times": list(self._times), "comm_seconds": self.comm_seconds}

    def load_state_dict(self, state: dict) -> None:
        times = [float(t) for t in state["times"]]
        if len(times) != self.world_size:
            raise ValueError(
                f"clock state holds {len(times)} workers, this run has {self.world_size}"
            )
        self._times = times
        self._now = max(times)
        self.comm_seconds = float(state["comm_seconds"])
