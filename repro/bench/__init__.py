"""Benchmarks behind `make bench`: each prints a ratio against a baseline measured in the
same run (never an absolute speed asserted in a test). Each module has `run() -> list[str]`
returning its result lines, and is listed in `BENCHMARKS` in the order they run."""

BENCHMARKS = (
    "repro.bench.sync_vs_ddp",
    "repro.bench.calibration",
    "repro.bench.local_sgd_traffic",
    "repro.bench.topk_exchange",
    "repro.bench.adasum_allreduce",
    "repro.bench.engines",
    "repro.bench.step_floor",
    "repro.bench.startup",
)
