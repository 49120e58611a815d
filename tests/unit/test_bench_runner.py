"""`make bench` as a whole: a benchmark that fails costs neither the others nor the results
file, and the Adasum benchmark names the crossover its own small-message table shows."""

import sys

from repro.bench import __main__ as bench_main
from repro.bench.adasum_allreduce import crossover_line


def test_a_failing_benchmark_is_one_line_in_its_place_and_the_rest_still_run(
    tmp_path, monkeypatch, capsys
):
    package = tmp_path / "fakebench"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "broken.py").write_text(
        "def run():\n    raise RuntimeError('Traceback ...\\nthe processes run failed: no gloo')\n"
    )
    (package / "fine.py").write_text("def run():\n    return ['ratio 1.20x']\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(bench_main, "BENCHMARKS", ("fakebench.broken", "fakebench.fine"))
    assert bench_main.main([]) == 1
    captured = capsys.readouterr()
    assert captured.err == "error: benchmark(s) failed: broken\n"
    written = (tmp_path / "bench-results" / "latest.txt").read_text().splitlines()
    assert written[0] == "== fakebench.broken"
    assert written[1] == "FAILED: RuntimeError: the processes run failed: no gloo"
    assert written[3:5] == ["== fakebench.fine", "ratio 1.20x"]
    assert "  ratio 1.20x" in captured.out.splitlines()
    for name in ("fakebench", "fakebench.broken", "fakebench.fine"):
        sys.modules.pop(name)


def _small(*gather_faster: bool) -> list[tuple[int, float, float, float]]:
    sizes = (16, 64, 256, 1024, 2048, 4096)
    return [
        (kib, 1.0, 2.0, 1.0 if faster else 3.0)
        for kib, faster in zip(sizes, gather_faster, strict=True)
    ]


def test_the_adasum_crossover_line_reads_the_table():
    said = crossover_line(_small(True, True, True, True, False, False))
    assert said == "the gather path is the faster up to 1024 KiB, the halving allreduce at 2048 KiB"
    assert crossover_line(_small(*[True] * 6)).endswith("at every size up to 4096 KiB")
    assert crossover_line(_small(*[False] * 6)).endswith("at every size from 16 KiB")
