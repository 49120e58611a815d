"""`repro calibrate`: fit the alpha-beta model to this machine's real collectives.

Runs allreduce, allgather and broadcast through `ProcessCollectives` (gloo, local ranks, one
worker a process, so every message is a one-row axis tensor) over a sweep of message sizes
and rank counts, keeps the fastest of several timed repeats after
warm-up, and fits latency and bandwidth per op and rank count on each op's own formula
(`repro.netmodel.calibrate_fit`, which says why one link per rank count).

The ops do not share one link here either: gloo's allgather (into a freshly allocated
buffer, as `ProcessCollectives` runs it) moves bytes a few times slower than its allreduce on one
machine. A network preset holds one link, which the modeled clock charges for every op, so
the preset takes the allreduce fit at the largest rank count by default (every dense
method's traffic is allreduce); `--link-from` and `--link-ranks` pick another fit. All fits
are printed and kept as comments in the preset.
"""

from __future__ import annotations

import argparse
import math
import os
import socket
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from repro.comm.capacity import PROCESS_BYTES, refuse_past_per_core
from repro.comm.devices import require_free_memory
from repro.comm.launch import init_process_group, spawn
from repro.comm.process_collectives import ProcessCollectives
from repro.comm.record import CommRecord
from repro.errors import CommandParser, UserError
from repro.netmodel.calibrate_fit import (
    JOINT,
    FitKey,
    Sample,
    fit_all,
    fit_error,
    own_key,
    pooled_key,
    predict,
)
from repro.netmodel.cost import Link
from repro.storage import atomic_write, check_creatable

OPS = ("allreduce", "allgather", "broadcast")
DEFAULT_SIZES = tuple(1024 * 4**k for k in range(9))  # 1 KB .. 64 MB, as --sizes defaults
DEFAULT_OUT = Path(__file__).resolve().parents[2] / "configs" / "network" / "calibrated.yaml"
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}
_SMALL_BYTES = 1 << 20  # below this a repeat costs little and noise is most of the time
_MAX_EXTRA = 8


def repeats_for(nbytes: int, repeats: int) -> int:
    """Timed repeats of one message size: more for small messages, up to 8x `repeats`.

    A sub-megabyte collective takes well under a millisecond, so one scheduler hiccup doubles
    it; extra repeats there cost almost nothing and make the fastest repeat the floor.
    """
    return repeats * max(1, min(_MAX_EXTRA, _SMALL_BYTES // max(nbytes, 1)))


def _run_op(comm: ProcessCollectives, op: str, t: torch.Tensor) -> CommRecord:
    if op == "allreduce":
        return comm.allreduce(t)
    if op == "allgather":
        return comm.allgather(t)[1]
    return comm.broadcast(t, 0)


def measure_worker(
    rank: int, world: int, ops: Sequence[str], sizes: Sequence[int], repeats: int, warmup: int
) -> list[Sample] | None:
    """One rank of a measurement run; rank 0 returns the samples.

    Each round times every (op, size) still owed repeats (`repeats_for`), and rounds repeat:
    a burst of load from other processes then spoils one repeat of many sizes rather than
    every repeat of one size. Interference only ever adds time, so the fastest repeat is the
    best estimate of the collective's own cost.
    """
    init_process_group()
    torch.set_num_threads(1)
    comm = ProcessCollectives()
    # One row (this process's worker) of n bytes each. Zeros stay zeros under repeated
    # in-place sums, so no overflow slows a repeat.
    tensors = [torch.zeros(1, max(n // 4, 1), dtype=torch.float32) for n in sizes]
    cells = [(op, t) for op in ops for t in tensors]
    owed = [repeats_for(t.numel() * 4, repeats) for _, t in cells]
    secs = torch.full((max(owed), len(cells)), math.inf, dtype=torch.float64)
    for i in tqdm(
        range(warmup + max(owed)),
        desc=f"calibrate {world} ranks",
        unit="round",
        disable=rank != 0,
        dynamic_ncols=True,
    ):
        for j, (op, t) in enumerate(cells):
            if i >= warmup + owed[j]:
                continue
            comm.barrier()
            rec = _run_op(comm, op, t)
            if i >= warmup:
                secs[i - warmup, j] = rec.seconds
    # A collective ends when its last participant does: the slowest rank in each repeat.
    slowest = comm.allgather_untracked(secs.unsqueeze(0))[0].max(dim=0).values.numpy()
    if rank != 0:
        return None
    return [
        Sample(op, world, t.numel() * 4, float(np.min(slowest[:, j])))
        for j, (op, t) in enumerate(cells)
    ]


def measure(
    ranks: Sequence[int], ops: Sequence[str], sizes: Sequence[int], repeats: int, warmup: int
) -> list[Sample]:
    """Samples for every rank count (a fresh local gloo group each)."""
    out: list[Sample] = []
    for world in ranks:
        out += spawn(measure_worker, world, tuple(ops), tuple(sizes), repeats, warmup)[0]
    return out


def _parse_size(entry: str) -> int:
    text = entry.strip().upper().removesuffix("B")
    unit = text[-1] if text and text[-1] in _UNITS else ""
    try:
        value = float(text[: len(text) - len(unit)])
    except ValueError:
        raise UserError(
            f"repro calibrate: --sizes entry {entry!r} is not a size like 1K or 64M"
        ) from None
    nbytes = int(value * _UNITS[unit])
    if nbytes < 4 or nbytes % 4:
        raise UserError(
            f"repro calibrate: --sizes entry {entry!r} must be a whole number of float32 "
            "values: 4 bytes or more, a multiple of 4"
        )
    return nbytes


def _csv(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _parser() -> argparse.ArgumentParser:
    p = CommandParser(prog="repro calibrate", description=__doc__.splitlines()[0])
    p.add_argument("--ranks", default="2,4", help="rank counts, comma-separated (each >= 2)")
    p.add_argument("--sizes", default="1K,4K,16K,64K,256K,1M,4M,16M,64M", help="bytes, K/M")
    p.add_argument("--ops", default=",".join(OPS), help=f"collectives among {', '.join(OPS)}")
    p.add_argument(
        "--repeats", type=int, default=5, help="timed repeats per size, up to 8x below 1 MB"
    )
    p.add_argument("--warmup", type=int, default=2, help="untimed repeats before those")
    links = [*OPS, JOINT]
    p.add_argument("--link-from", default="allreduce", choices=links, help="op the preset takes")
    p.add_argument(
        "--link-ranks", default="", help="rank count whose fit the preset takes (default largest)"
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="network preset to write")
    return p


def _args(argv: list[str]) -> tuple[list[int], list[str], list[int], argparse.Namespace]:
    args = _parser().parse_args(argv)
    try:
        ranks = [int(r) for r in _csv(args.ranks)]
    except ValueError:
        raise UserError(f"repro calibrate: --ranks={args.ranks} must be integers") from None
    if not ranks or min(ranks) < 2:
        raise UserError(f"repro calibrate: --ranks={args.ranks} must be >= 2 each")
    # past that, gloo's times would be mostly each rank waiting for its turn on a core
    refuse_past_per_core(
        f"repro calibrate: --ranks={args.ranks} ({max(ranks)} ranks)",
        max(ranks),
        "give rank counts up to {limit}",
    )
    if not args.link_ranks:
        args.link_ranks = str(max(ranks))
    if not args.link_ranks.isdigit() or int(args.link_ranks) not in ranks:
        raise UserError(f"repro calibrate: --link-ranks={args.link_ranks} is not among --ranks")
    args.link_ranks = int(args.link_ranks)
    ops = _csv(args.ops)
    if not ops or any(op not in OPS for op in ops):
        raise UserError(f"repro calibrate: --ops={args.ops} must be among {', '.join(OPS)}")
    sizes = sorted({_parse_size(s) for s in _csv(args.sizes)})
    if len(sizes) < 2:
        raise UserError(f"repro calibrate: --sizes={args.sizes} needs at least two sizes")
    check_buffer_memory(ranks, sizes, args.sizes)
    if args.repeats < 1 or args.warmup < 0:
        raise UserError("repro calibrate: --repeats must be >= 1 and --warmup >= 0")
    if args.link_from != JOINT and args.link_from not in ops:
        raise UserError(f"repro calibrate: --link-from={args.link_from} is not among --ops")
    if args.out.suffix != ".yaml":
        raise UserError(f"repro calibrate: --out={args.out} must be a .yaml file")
    check_creatable(args.out.parent, "--out")  # before minutes of measuring, not after
    return ranks, ops, sizes, args


def check_buffer_memory(ranks: Sequence[int], sizes: Sequence[int], given: str) -> None:
    """Refuse sizes whose buffers the machine cannot hold, before any rank starts: each of
    the largest run's ranks holds one tensor of every size (`measure_worker`) and an
    allgather's output of the largest, `world` times its size, beside its process's own
    `PROCESS_BYTES`; torch's allocator would otherwise fail inside every rank, each with
    its traceback."""
    world = max(ranks)
    require_free_memory(
        f"repro calibrate: --sizes={given} at {world} ranks needs",
        world * (PROCESS_BYTES + sum(sizes) + world * max(sizes)),
        " (each rank holds every size and an allgather of the largest)",
        "give smaller sizes or fewer --ranks",
    )


def load_note() -> str:
    """The machine's load now, over 1, 5 and 15 minutes: other processes' work shows up as
    slower collectives and steps (printed by `repro calibrate` and every benchmark)."""
    averages = "/".join(f"{x:.1f}" for x in os.getloadavg())
    return f"load average {averages} (1, 5, 15 min) on {os.cpu_count()} cores"


def describe(link: Link) -> str:
    gbps = link.bandwidth_Bps * 8 / 1e9
    return f"latency {link.latency_s * 1e3:.4f} ms, bandwidth {gbps:.3f} Gbit/s"


def error_table(links: dict[FitKey, Link], samples: Sequence[Sample]) -> list[str]:
    """Measured and modeled ms per sample, under its rank count's fit and the all-ranks fit."""
    lines = [
        f"{'op':<10}{'ranks':>6}{'bytes':>11}{'measured ms':>13}"
        f"{'fit ms':>9}{'err':>8}{'all-ranks ms':>14}{'err':>8}"
    ]
    for s in samples:
        own, pooled = predict(links[own_key(s)], s), predict(links[pooled_key(s)], s)
        lines.append(
            f"{s.op:<10}{s.world:>6}{s.nbytes:>11}{s.seconds * 1e3:>13.3f}{own * 1e3:>9.3f}"
            f"{own / s.seconds - 1:>8.1%}{pooled * 1e3:>14.3f}{pooled / s.seconds - 1:>8.1%}"
        )
    return lines


def preset_text(
    name: str, links: dict[FitKey, Link], samples: Sequence[Sample], chosen_key: FitKey
) -> str:
    """The preset's YAML: the `chosen_key` fit as the link, every fit in the header."""
    chosen = links[chosen_key]
    if not math.isfinite(chosen.bandwidth_Bps):
        raise UserError(
            f"calibrate: the {chosen_key} times do not grow with message size, so no "
            "bandwidth can be fitted; widen --sizes or add --repeats"
        )
    ranks = sorted({s.world for s in samples})
    sizes = sorted({s.nbytes for s in samples})
    header = [
        f"Fitted by `repro calibrate` on {socket.gethostname()} at "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: gloo, ranks {ranks},",
        f"{len(sizes)} sizes {sizes[0]}..{sizes[-1]} bytes per rank, fastest of repeats;",
        f"{load_note()} after measuring.",
        f"The link is the {chosen_key} fit (median |error| on its samples "
        f"{fit_error(links, samples, chosen_key):.1%}), for runs of that many",
        "workers on this host; the modeled clock charges it for every op.",
        "Fits (relative least squares):",
        *(
            f"  {key}: {describe(link)}, median |error| {fit_error(links, samples, key):.1%}"
            for key, link in links.items()
        ),
    ]
    body = [
        "defaults: [network_schema, _self_]",
        f"name: {name}",
        f"latency_ms: {chosen.latency_s * 1e3!r}",
        f"bandwidth_gbps: {chosen.bandwidth_Bps * 8 / 1e9!r}",
        "bytes_scale: 1.0",
        "inject: false",
        "schedule: []",
    ]
    return "\n".join([*(f"# {h}" for h in header), *body]) + "\n"


def main(argv: list[str]) -> int:
    ranks, ops, sizes, args = _args(argv)
    samples = measure(ranks, ops, sizes, args.repeats, args.warmup)
    load = load_note()
    links = fit_all(samples)
    print("\n".join(error_table(links, samples)))
    print(f"measured with a {load}")
    for key, link in links.items():
        print(f"{f'{key}:':<24}{describe(link)}")
    chosen = FitKey(args.link_from, args.link_ranks)
    text = preset_text(args.out.stem, links, samples, chosen)
    atomic_write(args.out, lambda f: f.write(text.encode()), "--out")
    # Hydra finds a network preset in the package's configs/network/ alone
    home = DEFAULT_OUT.parent
    where = "" if args.out.resolve().parent == home else f" once copied into {home}"
    print(f"wrote {args.out} with the {chosen} fit; use it as network={args.out.stem}{where}")
    return 0
