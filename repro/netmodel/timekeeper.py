"""Modeled time of a run: compute seconds and CommRecords in, every worker's time out.

Per step the trainer hands over the step's measured compute seconds, how many extra
(rehearsal) steps ran inside it, its CommRecords and the link in force; the keeper
advances the `ModeledClock`:
- `compute.mode=sampled`: every worker's step time comes from the `ComputeModel`, known
  to every process without communicating, so all engines see the same clock;
- `compute.mode=measured`: each worker's own measured seconds, accumulated locally and
  exchanged only at barriers (the first record of a communicating step, or a log point),
  so workers between synchronisations never wait for the clock. The seconds travel as a
  CPU tensor, over the process group's CPU backend: on a GPU cluster NCCL would refuse it.
  They are the device's own (`repro.comm.stopwatch`: CUDA events on a GPU), not the time
  the host took to queue the kernels.
Then each record is charged as a barrier on the link (`ModeledClock.charge`).

With `network.inject`, each process sleeps until the wall clock has caught up with its
worker's modeled time, so real training feels the modeled network.
"""

from __future__ import annotations

import time

import torch

from repro.comm.collectives import Collectives
from repro.comm.record import CommRecord
from repro.netmodel.clock import ModeledClock
from repro.netmodel.compute import ComputeConfig, ComputeModel
from repro.netmodel.cost import Link


class TimeKeeper:
    def __init__(
        self,
        compute: ComputeConfig,
        comm: Collectives,
        seed: int,
        bytes_scale: float,
        inject: bool = False,
    ):
        self.cfg, self.comm, self.inject = compute, comm, inject
        self.model = ComputeModel(compute, comm.world_size, seed)
        self.clock = ModeledClock(comm.world_size, bytes_scale=bytes_scale)
        self.pending_s = torch.zeros(len(comm.ranks), 1, dtype=torch.float64)
        self.wall_earlier = 0.0  # measured seconds of a resumed run's earlier segments
        self.wall_start = time.perf_counter()

    def now(self) -> float:
        """Modeled time of the slowest worker (identical in every process)."""
        return self.clock.now()

    def synced_now(self) -> float:
        """Modeled time with every worker's compute so far, its measured seconds exchanged
        first (a collective: every process calls it at the same step). In sampled mode
        `now()` has them already."""
        self.flush()
        return self.clock.now()

    def wall_s(self) -> float:
        """Measured seconds of the run so far, earlier segments of a resumed run included."""
        return time.perf_counter() - self.wall_start

    def start_wall(self) -> None:
        """Start the measured clock at the first step: what comes before it (the tracker's
        start, a second or more for the first run a process makes, where wandb starts its
        service) would be charged to whichever runs of a run set come first."""
        self.wall_start = time.perf_counter() - self.wall_earlier

    def advance(
        self,
        step: int,
        compute_s: float,
        records: list[CommRecord],
        link: Link,
        extra_steps: int = 0,
    ) -> None:
        """One training step: its compute (with `extra_steps` rehearsal steps inside it,
        whose measured time is part of `compute_s`), then its records."""
        if self.cfg.mode == "sampled":
            self.clock.advance_compute(self.model.times(step) * (1 + extra_steps))
        else:
            self.pending_s += compute_s
            if records:
                self.flush()
        self.clock.charge(records, link)
        if self.inject:
            lag = self.clock.worker(self.comm.ranks[0]) - self.wall_s()
            if lag > 0:
                time.sleep(lag)

    def flush(self) -> None:
        """Exchange the measured compute seconds accumulated since the last barrier."""
        if self.cfg.mode == "sampled":
            return
        times = self.comm.allgather_untracked(self.pending_s)[0].view(-1).numpy()
        self.clock.advance_compute(times)
        self.pending_s.zero_()

    def state_dict(self) -> dict:
        return {
            "clock": self.clock.state_dict(),
            "pending_s": self.pending_s.clone(),
            "wall_s": self.wall_s(),
        }

    def load_state_dict(self, state: dict) -> None:
        self.clock.load_state_dict(state["clock"])
        self.pending_s.copy_(state["pending_s"])
        self.wall_earlier = state["wall_s"]
        self.wall_start = time.perf_counter() - self.wall_earlier
