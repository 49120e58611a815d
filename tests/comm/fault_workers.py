"""Worker functions for the worker-fault tests: real gloo workers that loop on all_reduce.

They live in their own module because `spawn` imports a worker function by name in each
new process.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from repro.comm.launch import init_process_group

# All-reduces before the fault: every worker is then past start-up and inside the loop.
FAULT_AT = 20
# Rendezvous of 4 processes on 2 busy cores can take far longer than the short collective
# timeouts the tests use, so the loop runs in a group of its own with that timeout.
RENDEZVOUS_S = 120.0


def _loop(rank: int, world: int, out: str, group_timeout_s: float, fault) -> None:
    init_process_group(timeout_s=RENDEZVOUS_S)
    pids: list[int | None] = [None] * world
    dist.all_gather_object(pids, os.getpid())
    Path(out, f"pid{rank}").write_text(str(os.getpid()))
    group = dist.new_group(timeout=timedelta(seconds=group_timeout_s))
    t = torch.ones(256)
    i = 0
    while True:
        dist.all_reduce(t, group=group)
        t.fill_(1.0)
        i += 1
        if i == FAULT_AT:
            fault(rank, pids)
        time.sleep(0.01)  # the machine's 2 cores are shared; a tight loop would hog them


def signal_one(
    rank: int, world: int, victim: int, sig: int, out: str, group_timeout_s: float
) -> None:
    """Loop on all_reduce; the victim's next rank sends `sig` to the victim, noting when."""

    def fault(rank: int, pids: list[int | None]) -> None:
        if rank == (victim + 1) % world:
            Path(out, "signalled").write_text(repr(time.monotonic()))
            os.kill(pids[victim], sig)

    _loop(rank, world, out, group_timeout_s, fault)


def raise_in_one(rank: int, world: int, culprit: int, out: str) -> None:
    """Loop on all_reduce; `culprit` raises a RuntimeError, and its peers then lose it."""

    def fault(rank: int, pids: list[int | None]) -> None:
        if rank == culprit:
            raise RuntimeError(f"boom in rank {rank}")

    _loop(rank, world, out, 60.0, fault)


def count_to(rank: int, world: int, n: int, out: str) -> int:
    """All-reduce `n` times at about 100 a second, then return `n`; no fault of its own."""
    init_process_group(timeout_s=RENDEZVOUS_S)
    Path(out, f"pid{rank}").write_text(str(os.getpid()))
    t = torch.ones(256)
    for _ in range(n):
        dist.all_reduce(t)
        t.fill_(1.0)
        time.sleep(0.01)
    return n


def loop_forever(rank: int, world: int, out: str) -> None:
    """Loop on all_reduce until ended from outside (its launcher's death must end it)."""
    _loop(rank, world, out, RENDEZVOUS_S, lambda rank, pids: None)
