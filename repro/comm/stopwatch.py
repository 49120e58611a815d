"""Measured seconds of work on a device: what `compute.mode=measured` and every CommRecord
report.

On the CPU, work is done when the call returns, so the wall clock (`perf_counter`) between
two points is the work's time. On CUDA a call returns once its kernels are queued, so the
wall clock would record little more than launch time, overstating communication's share of
a step. There two CUDA events are recorded on the current stream around the work and the
time between them is read once the end event has passed (`Event.synchronize`): the
device's own time for the segment, including any idle time the host left inside it.

The cost, stated because a measurement must not change what it measures much: one
host-device synchronisation per measured segment (forward/backward, the optimizer step,
each of the method's collectives: three to six a step). At each the host waits for the
device to drain before it queues the next segment's kernels, so the overlap of the host's
launch work with the device's execution is lost once per segment, about one kernel's
launch latency plus the Python time to issue the next segment's first kernel (tens of
microseconds, against step times of milliseconds). No figure has been measured on a GPU
yet. The trainer already waits for the step's losses (to check them for divergence), so
the compute segment's synchronisation costs nothing extra.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import torch

T = TypeVar("T")


class Stopwatch:
    """`start()` then `stop() -> seconds` of the work queued on `device` in between."""

    def __init__(self, device: torch.device | str):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self._t0 = 0.0
        self._event: torch.cuda.Event | None = None

    def _record(self) -> torch.cuda.Event:
        # The device's current stream, not device 0's: a worker may compute on cuda:3.
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        return event

    def start(self) -> None:
        if self.cuda:
            self._event = self._record()
        else:
            self._t0 = time.perf_counter()

    def stop(self) -> float:
        if self._event is None:
            return time.perf_counter() - self._t0
        ended = self._record()
        ended.synchronize()
        return self._event.elapsed_time(ended) / 1000.0

    def time(self, fn: Callable[..., T], *args: Any) -> tuple[T, float]:
        """`fn(*args)`'s result and the seconds of its work on the device."""
        self.start()
        out = fn(*args)
        return out, self.stop()
