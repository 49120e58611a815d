"""The package's layers, read from the source: what each part may import.

`CommRecord` is a leaf both the collectives and the cost model import; the collectives
import nothing of the cost model, the methods or the trainer, so `repro.netmodel` and
`repro.comm` form no cycle; the methods name the optimizers they are handed
(`repro.optim`) without importing the training loop's package; the compressors and their
error feedback import nothing of the models, the methods or the trainer (they are pure
objects over (workers, width) tensors, the trainer takes what they offer); and no module
imports itself back through others when loaded.
"""

from __future__ import annotations

from tests.source_imports import PACKAGE, imports, module_name


def _under(part: str) -> dict[str, set[str]]:
    return {module_name(p): imports(p, False) for p in (PACKAGE / part).rglob("*.py")}


def _reaching(by_module: dict[str, set[str]], forbidden: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{m} -> {i}"
        for m, found in by_module.items()
        for i in found
        if any(i == f or i.startswith(f + ".") for f in forbidden)
    )


def test_the_comm_record_is_a_leaf():
    found = imports(PACKAGE / "comm" / "record.py", False)
    assert {i for i in found if i.split(".")[0] in ("repro", "torch")} == set()


def test_the_collectives_import_no_cost_model_method_or_trainer():
    forbidden = ("repro.netmodel", "repro.strategies", "repro.compress", "repro.train")
    assert _reaching(_under("comm"), forbidden) == []


def test_the_methods_and_the_optimizers_import_nothing_of_the_training_loop():
    assert _reaching(_under("strategies"), ("repro.train",)) == []
    assert _reaching(_under("optim"), ("repro.train", "repro.strategies")) == []


def test_the_compressors_import_no_model_method_or_trainer():
    forbidden = ("repro.workload", "repro.strategies", "repro.train")
    assert _reaching(_under("compress"), forbidden) == []


def test_no_module_imports_itself_back_when_loaded():
    graph = {module_name(p): imports(p, True) for p in PACKAGE.rglob("*.py")}
    cycles: list[list[str]] = []

    def walk(module: str, path: list[str], done: set[str]) -> None:
        for target in sorted(graph.get(module, ())):
            if target in path:
                cycles.append([*path[path.index(target) :], target])
            elif target in graph and target not in done:
                walk(target, [*path, target], done)
        done.add(module)

    done: set[str] = set()
    for module in sorted(graph):
        if module not in done:
            walk(module, [module], done)
    assert cycles == []
