"""`make gpu-check`: every method for a few steps on a GPU, under both engines, checked.

On a machine with CUDA it runs every registered method in every variant its config
declares (`repro.conformance`), on two workloads (the small scales' MNIST-1D CNN, and
ResNet-18 at the Top-k paper's size: CIFAR-100 images, batch 32 per worker, BatchNorm;
random images of that shape when CIFAR-100 is not under `data.root`):
1. the process engine, one process per GPU here (at most 8; one on a one-GPU machine),
   NCCL carrying the method's traffic and gloo the metrics, as on a cluster;
2. the simulated engine with as many workers on one axis on `cuda:0`, looping over its
   workers with a lone worker's kernels;
and checks them against each other as `tests/comm/test_engine_equivalence.py` does on the
CPU: each step's decisions and modeled clock equal, parameters within 1e-6 relative after
the first step and 1e-3 after the last (NCCL may sum in another order across GPUs), both
under fixed-order kernels (`trainer.deterministic=true`, as runs take by default: under
cuDNN's default convolution and BatchNorm kernels, which sum with atomics, one engine run
twice on ResNet-18 differs by 6e-10 relative after the first step and 2e-3 after the
fourth, the same gap as between the engines; under fixed-order kernels both are 0). Then
the simulated engine with 8 workers on one GPU runs each method, in its first variant, on
each workload, vectorized as it runs by default (`trainer.vectorize=auto`: the CNN through
its own all-workers forward, ResNet-18 under vmap): the paper's 8-worker cluster on one
device.
Step times (the device's, `Stopwatch`) and peak GPU memory are printed for both engines.

A variant that fails under either engine is reported (its error in one line) and the
others still run; any failure or mismatch makes the exit status 1. Without a GPU it says
so and exits 0. `python -m repro.bench.gpu_check [DATA_ROOT]` (default: `data.root`).
`check(device="cpu", ...)` runs the same code on the CPU with gloo, which is how the tests
cover it.
"""

from __future__ import annotations

import re
import statistics
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from repro.comm.axis_collectives import AxisCollectives
from repro.comm.devices import cuda_problem, pick_device
from repro.comm.launch import init_process_group, spawn
from repro.comm.process_collectives import ProcessCollectives
from repro.comm.stopwatch import Stopwatch
from repro.config import compose
from repro.conformance import Variant, variants
from repro.errors import UserError
from repro.train.trainer import Trainer
from repro.workload import data as data_mod

SGD = ["optim.name=sgd", "optim.lr=0.05", "optim.momentum=0.9"]
DECISIONS = ("method/tau", "method/cr", "method/collective", "method/k", "method/leader")
FIRST_STEP_TOL, LAST_STEP_TOL = 1e-6, 1e-3
SCALE_WORKERS = 8
MAX_PROCESSES = 8
SYNTHETIC = "synthetic_images"


@dataclass
class Trace:
    """One run of a few steps: per-step decisions and modeled time, the parameters after
    the first and the last step (every held worker's, on the CPU), the device's step
    seconds and the peak memory (bytes; None on the CPU)."""

    decisions: list[dict] = field(default_factory=list)
    modeled_s: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    params: list[torch.Tensor] = field(default_factory=list)
    peak_bytes: int | None = None
    vectorize: str = ""


def workloads(data_root: Path, names: tuple[str, ...]) -> dict[str, list[str]]:
    """The overrides of each named workload; ResNet-18 reads CIFAR-100 from `data_root`
    when it is there, else random images of its shape (a GPU machine may not reach the
    network to download it)."""
    chosen = {
        "mnist1d_cnn": ["workload=mnist1d_cnn", "workload.num_samples=2000"],
        "resnet18": ["workload=cifar100_resnet18"],
    }
    if "resnet18" in names and not _has_cifar100(data_root):
        chosen["resnet18"] += [f"workload.dataset={SYNTHETIC}", "workload.num_samples=2560"]
    batch = {"mnist1d_cnn": 16, "resnet18": 32}
    return {
        n: [*chosen[n], f"trainer.batch_size={batch[n]}", f"data.root={data_root}"] for n in names
    }


def _has_cifar100(data_root: Path) -> bool:
    try:
        data_mod.load("cifar100", str(data_root), False, 0, 0)
    except UserError:
        return False
    return True


def _config(root: Path, workload: list[str], variant: Variant, world: int, engine: str, vectorize):
    """`variant`'s overrides after SGD's, so a variant naming another optimizer takes it."""
    run = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{engine}-{vectorize}-{world}-{variant.id}")
    return compose(
        [
            *workload,
            *SGD,
            *variant.overrides,
            "tracking=disabled",
            "compute.mode=sampled",
            f"trainer.world_size={world}",
            "trainer.steps=1000",
            "trainer.progress=false",
            "trainer.deterministic=true",  # see the module docstring
            f"trainer.engine={engine}",
            f"trainer.vectorize={vectorize}",
            f"run_dir={root / run}",
        ]
    )


def trace(trainer: Trainer, steps: int, device: str) -> Trace:
    out = Trace(vectorize=trainer.replicas.vectorize)
    watch = Stopwatch(device)
    for step in range(1, steps + 1):
        out.seconds.append(watch.time(trainer.train_step, step)[1])
        metrics = trainer.strategy.metrics()
        out.decisions.append({k: metrics[k] for k in DECISIONS if k in metrics})
        out.modeled_s.append(trainer.time.now())
        if step in (1, steps):
            rows = [p.detach().reshape(p.shape[0], -1) for p in trainer.replicas.params]
            out.params.append(torch.cat(rows, 1).cpu())
    if device.startswith("cuda"):
        out.peak_bytes = torch.cuda.max_memory_allocated(device)
    return out


def _reset_peak(device: str) -> None:
    # before CUDA's first use there is no peak to reset (and torch refuses the device)
    if device.startswith("cuda") and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def _process_worker(
    rank: int, world: int, kind: str, root: str, chosen, compared: Sequence[Variant], steps: int
) -> dict:
    """One process engine worker: every (workload, variant) in turn on its own device. A
    variant that fails is reported as its error (every rank fails alike: same code, same
    collectives) and the next one runs."""
    torch.set_num_threads(1)
    device = pick_device("auto" if kind == "cuda" else "cpu")
    init_process_group(device)
    comm = ProcessCollectives(device=device)
    out: dict[tuple[str, str], Trace | str] = {}
    for name, workload in chosen.items():
        for variant in compared:
            _reset_peak(device)
            cfg = _config(Path(root), workload, variant, world, "processes", "loop")
            out[name, variant.id] = _attempt(
                lambda c=cfg: trace(Trainer(c, comm, device), steps, device)
            )
    return out


def _attempt(run: Callable[[], Trace]) -> Trace | str:
    """The run's trace, or its error in one line: a first GPU run reports every variant."""
    try:
        return run()
    except Exception as e:  # noqa: BLE001  (reported as the variant's FAIL line)
        first = str(e).splitlines()[0] if str(e) else ""
        return f"{type(e).__name__}: {first}"


def _simulated(root: Path, workload, variant: Variant, world, device, vectorize, steps) -> Trace:
    _reset_peak(device)
    cfg = _config(root, workload, variant, world, "simulated", vectorize)
    return trace(Trainer(cfg, AxisCollectives(world), device, vectorize), steps, device)


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def compare(processes: Trace, simulated: Trace) -> tuple[bool, str]:
    """Decisions and modeled clock equal, parameters within tolerance: (ok, summary)."""
    if simulated.decisions != processes.decisions:
        return False, f"decisions differ: {processes.decisions} vs {simulated.decisions}"
    if simulated.modeled_s != processes.modeled_s:
        return False, f"modeled clock differs: {processes.modeled_s} vs {simulated.modeled_s}"
    first, last = (_relative(s, p) for s, p in zip(simulated.params, processes.params, strict=True))
    ok = first <= FIRST_STEP_TOL and last <= LAST_STEP_TOL
    return ok, f"params rel. diff first step {first:.1e}, last {last:.1e}"


def _ms(t: Trace) -> str:
    timed = t.seconds[1:] or t.seconds  # the first step warms the kernels up
    return f"{statistics.median(timed) * 1e3:7.1f} ms/step"


def _mem(t: Trace) -> str:
    return "" if t.peak_bytes is None else f", peak {t.peak_bytes / 2**30:.2f} GiB"


def check(
    device: str,
    world: int,
    data_root: Path,
    say: Callable[[str], None],
    names: tuple[str, ...] = ("mnist1d_cnn", "resnet18"),
    scale_workers: int = SCALE_WORKERS,
    steps: int = 4,
    compared: Sequence[Variant] | None = None,
) -> bool:
    """Both engines at `world` workers on `device` ("cuda" or "cpu") in each of `compared`
    (every registered method's every declared variant by default), then the simulated
    engine at `scale_workers` on one device in the first variant of each method among
    them, each of `names` in turn; each result line goes to `say`. Returns whether every
    variant ran and the engines agreed."""
    compared = tuple(variants() if compared is None else compared)
    if steps < 2:
        raise ValueError(f"steps={steps}: the check compares a first and a later step")
    kind = "cuda" if device.startswith("cuda") else "cpu"
    if kind == "cpu":
        torch.set_num_threads(1)  # as each worker process: the same kernels, the same sums
    one = "cuda:0" if kind == "cuda" else "cpu"
    backend = "NCCL" if kind == "cuda" else "gloo"
    ok = True
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        root = Path(tmp)
        chosen = workloads(data_root, names)
        if f"workload.dataset={SYNTHETIC}" in chosen.get("resnet18", []):
            say(f"data: no CIFAR-100 under {data_root}; ResNet-18 on random images")
        say(
            f"engines at {world} worker(s), {steps} steps, deterministic kernels: processes "
            f"({backend}, one per device) vs simulated on {one}"
        )
        ranks = spawn(_process_worker, world, kind, str(root), chosen, compared, steps)
        for name, workload in chosen.items():
            for variant in compared:
                held = [r[name, variant.id] for r in ranks]
                sim = _attempt(
                    lambda w=workload, v=variant: _simulated(root, w, v, world, one, "loop", steps)
                )
                failed = [t for t in (*held[:1], sim) if isinstance(t, str)]
                if failed:
                    ok = False
                    say(f"  {name:<11} {variant.id} FAIL {'; '.join(failed)}")
                    continue
                processes = held[0]
                processes.params = [torch.cat([h.params[i] for h in held]) for i in range(2)]
                same, summary = compare(processes, sim)
                ok &= same
                say(
                    f"  {name:<11} {variant.id} {'ok  ' if same else 'FAIL'} {summary}; "
                    f"processes {_ms(processes)}{_mem(processes)}; simulated {_ms(sim)}{_mem(sim)}"
                )
        for name, workload in chosen.items():
            say(f"simulated engine, {scale_workers} workers on {one}, {name}:")
            for variant in (v for v in compared if v.first):
                t = _attempt(
                    lambda w=workload, v=variant: _simulated(
                        root, w, v, scale_workers, one, "auto", steps + 1
                    )
                )
                ok &= not isinstance(t, str)
                say(
                    f"  {variant.id} "
                    + (f"FAIL {t}" if isinstance(t, str) else f"{_ms(t)}{_mem(t)} ({t.vectorize})")
                )
    return ok


def main(argv: list[str]) -> int:
    problem = cuda_problem()
    if problem is not None:
        print(f"gpu-check: no GPU here ({problem}); nothing to check, nothing run")
        return 0
    count = torch.cuda.device_count()
    names = ", ".join(torch.cuda.get_device_name(i) for i in range(count))
    print(
        f"gpu-check: {count} GPU(s) ({names}), torch {torch.__version__}, CUDA {torch.version.cuda}"
    )
    data_root = Path(argv[0]) if argv else Path(compose([]).data.root)
    ok = check("cuda", min(count, MAX_PROCESSES), data_root, lambda line: print(line, flush=True))
    print("gpu-check: " + ("every check passed" if ok else "some checks FAILED (see above)"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
