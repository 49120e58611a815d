"""`repro calibrate`: fit the alpha-beta model to this machine's real collectives.

Runs allreduce, allgather and broadcast through `Collectives` (gloo, local ranks) over a
sweep of message sizes, keeps the fastest of several timed repeats after warm-up, and fits
latency a and seconds-per-byte b by least squares on each op's own alpha-beta formula from
`repro.netmodel.cost` (the same formulas the modeled clock charges, Table I of the Flexible
Top-k paper): ring allreduce 2(n-1) a + 2(n-1)/n M b, allgather a log n + (n-1) M b,
broadcast a log n + log n M b. Every cost is linear in (a, b), so the fit is a non-negative
least-squares problem. Residuals are relative (each row divided by its measured time) so
that 1 KB and 64 MB messages weigh alike instead of the largest drowning out the latency.

The ops do not share one link here: gloo's allgather (into a freshly allocated buffer, as
`Collectives` runs it) moves bytes a few times slower than its allreduce on one machine, so
a single link that serves all three misses each of them.
A network preset holds one link, which the modeled clock charges for every op, so the preset
takes the allreduce fit by default (every dense method's traffic is allreduce);
`--link-from` picks another op's fit or the joint fit over all ops. All fits are printed
and kept as comments in the preset.
"""

from __future__ import annotations

import argparse
import math
import os
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from scipy.optimize import nnls
from tqdm import tqdm

from repro.dist.collectives import Collectives, CommRecord
from repro.dist.launch import init_process_group, spawn
from repro.errors import UserError
from repro.netmodel.cost import Link, record_cost

OPS = ("allreduce", "allgather", "broadcast")
DEFAULT_SIZES = tuple(1024 * 4**k for k in range(9))  # 1 KB .. 64 MB, as --sizes defaults
DEFAULT_OUT = Path(__file__).resolve().parents[2] / "configs" / "network" / "calibrated.yaml"
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


@dataclass(frozen=True)
class Sample:
    """Median seconds of one collective of `nbytes` per participant over `world` ranks."""

    op: str
    world: int
    nbytes: int
    seconds: float


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
    byte term is 0: the link then has infinite bandwidth, which `preset_text` refuses.
    """
    rows = np.array([coefficients(s.op, s.nbytes, s.world) for s in samples])
    times = np.array([s.seconds for s in samples])
    if len(samples) < 2 or np.linalg.matrix_rank(rows) < 2:
        raise UserError("calibrate: need at least two message sizes to fit latency and bandwidth")
    (a, b), _ = nnls(rows / times[:, None], np.ones(len(samples)))
    return Link(float(a), float(1 / b) if b > 0 else math.inf)


def relative_errors(link: Link, samples: Sequence[Sample]) -> np.ndarray:
    """(model - measured) / measured for each sample."""
    return np.array([predict(link, s) / s.seconds - 1 for s in samples])


def _run_op(comm: Collectives, op: str, t: torch.Tensor) -> CommRecord:
    if op == "allreduce":
        return comm.allreduce(t)
    if op == "allgather":
        return comm.allgather(t)[1]
    return comm.broadcast(t, 0)


def measure_worker(
    rank: int, world: int, ops: Sequence[str], sizes: Sequence[int], repeats: int, warmup: int
) -> list[Sample] | None:
    """One rank of a measurement run; rank 0 returns the samples.

    Each round times every (op, size) once, and rounds repeat: a burst of load from other
    processes then spoils one repeat of many sizes rather than every repeat of one size.
    Interference only ever adds time, so the fastest repeat is the best estimate of the
    collective's own cost (measured here: minimum 43% held-out error, median 58%, on a
    heavily shared machine).
    """
    init_process_group()
    torch.set_num_threads(1)
    comm = Collectives()
    # Zeros stay zeros under repeated in-place sums, so no overflow slows a repeat.
    tensors = [torch.zeros(max(n // 4, 1), dtype=torch.float32) for n in sizes]
    cells = [(op, t) for op in ops for t in tensors]
    secs = torch.zeros(repeats, len(cells), dtype=torch.float64)
    for i in tqdm(
        range(warmup + repeats),
        desc=f"calibrate {world} ranks",
        unit="round",
        disable=rank != 0,
        dynamic_ncols=True,
    ):
        for j, (op, t) in enumerate(cells):
            comm.barrier()
            rec = _run_op(comm, op, t)
            if i >= warmup:
                secs[i - warmup, j] = rec.seconds
    # A collective ends when its last participant does: the slowest rank in each repeat.
    slowest = comm.allgather_untracked(secs).max(dim=0).values.numpy()
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


def _parse_size(text: str) -> int:
    text = text.strip().upper().removesuffix("B")
    unit = text[-1] if text and text[-1] in _UNITS else ""
    try:
        value = float(text[: len(text) - len(unit)])
    except ValueError:
        raise UserError(f"calibrate: --sizes entry {text!r} is not a size like 1K or 64M") from None
    nbytes = int(value * _UNITS[unit])
    if nbytes < 4:
        raise UserError(f"calibrate: --sizes entry {text!r} must be at least 4 bytes")
    return nbytes


def _csv(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UserError(f"repro calibrate: {message}")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="repro calibrate", description=__doc__.splitlines()[0])
    p.add_argument("--ranks", default="2,4", help="rank counts, comma-separated (each >= 2)")
    p.add_argument("--sizes", default="1K,4K,16K,64K,256K,1M,4M,16M,64M", help="bytes, K/M")
    p.add_argument("--ops", default=",".join(OPS), help=f"collectives among {', '.join(OPS)}")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats per size (fastest kept)")
    p.add_argument("--warmup", type=int, default=2, help="untimed repeats before those")
    links = [*OPS, "joint"]
    p.add_argument("--link-from", default="allreduce", choices=links, help="fit the preset takes")
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
    ops = _csv(args.ops)
    if not ops or any(op not in OPS for op in ops):
        raise UserError(f"repro calibrate: --ops={args.ops} must be among {', '.join(OPS)}")
    sizes = sorted({_parse_size(s) for s in _csv(args.sizes)})
    if len(sizes) < 2:
        raise UserError(f"repro calibrate: --sizes={args.sizes} needs at least two sizes")
    if args.repeats < 1 or args.warmup < 0:
        raise UserError("repro calibrate: --repeats must be >= 1 and --warmup >= 0")
    if args.link_from != "joint" and args.link_from not in ops:
        raise UserError(f"repro calibrate: --link-from={args.link_from} is not among --ops")
    if args.out.suffix != ".yaml":
        raise UserError(f"repro calibrate: --out={args.out} must be a .yaml file")
    return ranks, ops, sizes, args


def load_note() -> str:
    """The machine's load now: other processes' work shows up as slower collectives."""
    return f"1-min load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"


def describe(link: Link) -> str:
    gbps = link.bandwidth_Bps * 8 / 1e9
    return f"latency {link.latency_s * 1e3:.4f} ms, bandwidth {gbps:.3f} Gbit/s"


def error_table(links: dict[str, Link], samples: Sequence[Sample]) -> list[str]:
    """Measured and modeled ms per sample, under the op's own fit and the joint fit."""
    lines = [
        f"{'op':<10}{'ranks':>6}{'bytes':>11}{'measured ms':>13}"
        f"{'op fit ms':>11}{'err':>8}{'joint ms':>10}{'err':>8}"
    ]
    for s in samples:
        own, joint = predict(links[s.op], s), predict(links["joint"], s)
        lines.append(
            f"{s.op:<10}{s.world:>6}{s.nbytes:>11}{s.seconds * 1e3:>13.3f}{own * 1e3:>11.3f}"
            f"{own / s.seconds - 1:>8.1%}{joint * 1e3:>10.3f}{joint / s.seconds - 1:>8.1%}"
        )
    return lines


def fit_all(samples: Sequence[Sample]) -> dict[str, Link]:
    """One link per op present, and the joint link over all of them ("joint")."""
    ops = sorted({s.op for s in samples})
    links = {op: fit([s for s in samples if s.op == op]) for op in ops}
    links["joint"] = fit(samples)
    return links


def median_error(link: Link, samples: Sequence[Sample]) -> float:
    """Median |relative error| of `link` over `samples`."""
    return float(np.median(np.abs(relative_errors(link, samples))))


def preset_text(
    name: str, links: dict[str, Link], samples: Sequence[Sample], link_from: str
) -> str:
    """The preset's YAML: the `link_from` fit as the link, every fit in the header."""
    chosen = links[link_from]
    if not math.isfinite(chosen.bandwidth_Bps):
        raise UserError(
            f"calibrate: the {link_from} times do not grow with message size, so no bandwidth "
            "can be fitted; widen --sizes or add --repeats"
        )
    ranks = sorted({s.world for s in samples})
    sizes = sorted({s.nbytes for s in samples})
    own = [s for s in samples if link_from == "joint" or s.op == link_from]
    header = [
        f"Fitted by `repro calibrate` on {socket.gethostname()} at "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: gloo, ranks {ranks},",
        f"{len(sizes)} sizes {sizes[0]}..{sizes[-1]} bytes per rank, fastest of repeats;",
        f"{load_note()} after measuring.",
        f"The link is the {link_from} fit (median |error| on its samples "
        f"{median_error(chosen, own):.1%}); the",
        "modeled clock charges it for every op. Fits (relative least squares):",
        *(
            f"  {op}: {describe(link)}, median |error| "
            f"{median_error(link, [s for s in samples if op == 'joint' or s.op == op]):.1%}"
            for op, link in links.items()
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
    for op, link in links.items():
        print(f"{op + ' fit:':<16}{describe(link)}")
    try:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(preset_text(args.out.stem, links, samples, args.link_from))
    except OSError as e:
        raise UserError(f"repro calibrate: cannot write --out={args.out}: {e.strerror}") from None
    print(
        f"wrote {args.out} with the {args.link_from} fit; "
        f"use it as network={args.out.stem} from configs/network/"
    )
    return 0
