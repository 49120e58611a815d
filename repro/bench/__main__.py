"""`python -m repro.bench [NAME ...]`: run the benchmarks (all, or those named) and print
their result lines; also written to bench-results/latest.txt (all of them) or
bench-results/NAME.txt (those named: the whole suite's last results are kept). A benchmark
that fails says so in one line in its place; the others run, and the exit code is 1."""

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
    failed = []
    for name in chosen:
        started = time.perf_counter()
        short = name.rsplit(".", 1)[1]
        print(f"== {short}", flush=True)
        try:
            out = importlib.import_module(name).run()
        except Exception as err:  # one bench's failure costs neither the others nor the file
            said = str(err).strip().splitlines()
            out = [f"FAILED: {type(err).__name__}: {said[-1] if said else 'no message'}"]
            failed.append(short)
        out.append(f"({time.perf_counter() - started:.0f} s)")
        for line in out:
            print("  " + line, flush=True)
        lines += [f"== {name}", *out]
    Path("bench-results").mkdir(exist_ok=True)
    name = "+".join(argv) if argv else "latest"
    Path(f"bench-results/{name}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    if failed:
        print(f"error: benchmark(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
