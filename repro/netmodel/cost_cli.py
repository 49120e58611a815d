"""`repro cost`: the modeled cost of each gradient exchange, to check a switching decision by hand.

Given a model (or a parameter count), a link and a worker count, prints the alpha-beta cost of
dense ring and tree allreduce, the Flexible Top-k paper's three compressed exchanges at the
given compression ratio, and Adasum's halving allreduce (`cost.adasum_vhdd`, the very
charge the modeled clock puts on that allreduce's records), and names the compressed
exchange that the paper's switch would pick. The defaults are that paper's Table IV setting
(8 workers, 4 ms, 20 Gbit/s, 4-byte floats).
"""

from __future__ import annotations

import argparse
import json
import math

from repro.errors import CommandParser, UserError
from repro.netmodel.cost import COMPRESSED, EXCHANGES, Link, adasum_vhdd, cheapest
from repro.netmodel.schedule import gbps_to_Bps


def _count(text: str) -> int:
    """A parameter count as papers write it: 271224, 25_557_032 or 2.5e7."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole count (e.g. 271224 or 2.5e7)")
    return int(value)


def _parser() -> argparse.ArgumentParser:
    p = CommandParser(prog="repro cost", description=__doc__.splitlines()[0])
    size = p.add_mutually_exclusive_group(required=True)
    size.add_argument("--model", help="model name: the repro zoo first, then torchvision")
    size.add_argument("--params", type=_count, help="parameter count instead of a model")
    p.add_argument("--num-classes", type=int, default=10, help="classes when building --model")
    p.add_argument("--tensors", type=int, help="parameter tensors (Adasum); default from model")
    p.add_argument("--latency-ms", type=float, default=4.0)
    p.add_argument("--bandwidth-gbps", type=float, default=20.0, help="Gbit/s")
    p.add_argument("--cr", type=float, default=0.01, help="fraction of entries kept, (0, 1]")
    p.add_argument("--workers", type=int, default=8)
    # a value's width on the wire: float64 / float32 / half / 8-bit, the widths tensors have
    p.add_argument("--dtype-bytes", type=int, default=4, choices=(1, 2, 4, 8))
    p.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    return p


def _validate(args: argparse.Namespace) -> None:
    checks = [
        (args.params is None or args.params >= 1, f"--params={args.params} must be >= 1"),
        (args.num_classes >= 1, f"--num-classes={args.num_classes} must be >= 1"),
        (args.tensors is None or args.tensors >= 1, f"--tensors={args.tensors} must be >= 1"),
        (
            math.isfinite(args.latency_ms) and args.latency_ms >= 0,
            f"--latency-ms={args.latency_ms} must be a finite number >= 0",
        ),
        (
            math.isfinite(args.bandwidth_gbps) and args.bandwidth_gbps > 0,
            f"--bandwidth-gbps={args.bandwidth_gbps} must be a finite number > 0",
        ),
        (0 < args.cr <= 1, f"--cr={args.cr} must be in (0, 1]"),
        (args.workers >= 1, f"--workers={args.workers} must be >= 1"),
    ]
    for ok, message in checks:
        if not ok:
            raise UserError(f"repro cost: {message}")


def _build(name: str, num_classes: int):
    """The model named `name`: the repro zoo when it knows it, else torchvision. Only the
    parameter shapes matter: built on the meta device, no weight is allocated or initialised
    (a ResNet-18 with 10^8 classes had asked the allocator for 191 GiB)."""
    import torch

    try:
        from repro.workload.models import build_model
    except ImportError:
        build_model = None
    if build_model is not None:
        try:
            with torch.device("meta"):
                return build_model(name, num_classes)
        except (UserError, KeyError, ValueError):
            pass
    import torchvision

    if name not in torchvision.models.list_models():
        from repro.workload.config import MODELS

        raise UserError(
            f"repro cost: --model={name} is not a repro or torchvision model; repro's are "
            f"{', '.join(MODELS)} (a workload's model, e.g. cnn1d for mnist1d_cnn)"
        )
    with torch.device("meta"):
        return torchvision.models.get_model(name, num_classes=num_classes)


def _size(args: argparse.Namespace) -> tuple[int, int]:
    """(parameter count, parameter tensor count)."""
    if args.params is not None:
        n_params, n_tensors = args.params, args.tensors or 1
    else:
        params = list(_build(args.model, args.num_classes).parameters())
        n_params, n_tensors = sum(p.numel() for p in params), args.tensors or len(params)
    if n_tensors > n_params:  # every tensor holds at least one parameter
        raise UserError(
            f"repro cost: --tensors={n_tensors} is more than the {n_params:,} parameters; "
            "give at most one tensor per parameter"
        )
    return n_params, n_tensors


def costs(args: argparse.Namespace) -> dict:
    """Every exchange's modeled cost for the parsed flags, in milliseconds."""
    n_params, n_tensors = _size(args)
    link = Link(args.latency_ms / 1000, gbps_to_Bps(args.bandwidth_gbps))
    nbytes = n_params * args.dtype_bytes
    n = args.workers
    ms = {name: 1000 * fn(link, nbytes, args.cr, n) for name, fn in EXCHANGES.items()}
    power_of_two = n & (n - 1) == 0
    ms["adasum"] = 1000 * adasum_vhdd(link, nbytes, n, n_tensors) if power_of_two else None
    best, best_s = cheapest(link, nbytes, args.cr, n)
    return {
        "model": args.model,
        "params": n_params,
        "tensors": n_tensors,
        "nbytes": nbytes,
        "workers": n,
        "latency_ms": args.latency_ms,
        "bandwidth_gbps": args.bandwidth_gbps,
        "cr": args.cr,
        "costs_ms": ms,
        "cheapest": {"name": best, "ms": 1000 * best_s},
    }


def _table(result: dict) -> str:
    what = result["model"] or "model"
    lines = [
        f"{what}: {result['params']:,} parameters in {result['tensors']} tensors, "
        f"{result['nbytes'] / 1e6:.3f} MB; {result['workers']} workers, "
        f"{result['latency_ms']:g} ms, {result['bandwidth_gbps']:g} Gbit/s, cr {result['cr']:g}",
        f"{'exchange':<12}{'ms':>14}",
    ]
    for name, ms in result["costs_ms"].items():
        mark = "  (compressed)" if name in COMPRESSED else ""
        shown = f"{ms:14.4f}" if ms is not None else f"{'n/a':>14}  (power-of-two workers only)"
        lines.append(f"{name:<12}{shown}{mark if ms is not None else ''}")
    best = result["cheapest"]
    lines.append(f"cheapest compressed exchange: {best['name']} ({best['ms']:.4f} ms)")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    _validate(args)
    result = costs(args)
    print(json.dumps(result) if args.json else _table(result))
    return 0
