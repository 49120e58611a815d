"""The package's layers, read from the source: what each part may import.

`CommRecord` is a leaf both the collectives and the cost model import; the collectives
import nothing of the cost model, the methods or the trainer, so `repro.netmodel` and
`repro.comm` form no cycle; the methods name the optimizers they are handed
(`repro.optim`) without importing the training loop's package; and no module imports
itself back through others when loaded.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import REPO

PACKAGE = REPO / "repro"


def _module(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")


def _imports(path: Path, loaded_only: bool) -> set[str]:
    """Every module `path` imports, anywhere in it; with `loaded_only`, only what loading
    it imports (module level, outside `if TYPE_CHECKING:`)."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)
            elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                if not loaded_only:
                    visit(node.body)
            elif isinstance(node, ast.If | ast.Try):
                visit(node.body)
                visit(node.orelse)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)

    if loaded_only:
        visit(tree.body)
    else:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)
    return found


def _under(part: str) -> dict[str, set[str]]:
    return {_module(p): _imports(p, False) for p in (PACKAGE / part).rglob("*.py")}


def _reaching(imports: dict[str, set[str]], forbidden: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{m} -> {i}"
        for m, found in imports.items()
        for i in found
        if any(i == f or i.startswith(f + ".") for f in forbidden)
    )


def test_the_comm_record_is_a_leaf():
    found = _imports(PACKAGE / "comm" / "record.py", False)
    assert {i for i in found if i.split(".")[0] in ("repro", "torch")} == set()


def test_the_collectives_import_no_cost_model_method_or_trainer():
    forbidden = ("repro.netmodel", "repro.strategies", "repro.compress", "repro.train")
    assert _reaching(_under("comm"), forbidden) == []


def test_the_methods_and_the_optimizers_import_nothing_of_the_training_loop():
    assert _reaching(_under("strategies"), ("repro.train",)) == []
    assert _reaching(_under("optim"), ("repro.train", "repro.strategies")) == []


def test_no_module_imports_itself_back_when_loaded():
    graph = {_module(p): _imports(p, True) for p in PACKAGE.rglob("*.py")}
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
