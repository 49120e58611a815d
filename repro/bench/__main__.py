"""`python -m repro.bench [NAME ...]`: run the benchmarks (all, or those named) and print
their result lines; also written to bench-results/latest.txt (all of them) or
bench-results/NAME.txt (those named: the whole suite's last results are kept)."""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path

from repro.bench import BENCHMARKS


def main(argv: list[str]) -> int:
    known = [b.rsplit(".", 1)[1] for b in BENCHMARKS]
    if {"-h", "--help"} & set(argv):
        print(f"{__doc__.strip()}\nbenchmarks: {', '.join(known)}")
        return 0
    unknown = [a for a in argv if a not in known]
    if unknown:  # before anything runs or a results file is replaced
        print(
            f"error: no benchmark {unknown[0]!r}; choose from {', '.join(known)}", file=sys.stderr
        )
        return 2
    chosen = [b for b in BENCHMARKS if not argv or b.rsplit(".", 1)[1] in argv]
    lines: list[str] = []
    for name in chosen:
        started = time.perf_counter()
        print(f"== {name.rsplit('.', 1)[1]}", flush=True)
        out = importlib.import_module(name).run()
        out.append(f"({time.perf_counter() - started:.0f} s)")
        for line in out:
            print("  " + line, flush=True)
        lines += [f"== {name}", *out]
    Path("bench-results").mkdir(exist_ok=True)
    name = "+".join(argv) if argv else "latest"
    Path(f"bench-results/{name}.txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
