"""What the modules of `repro/` import, read from their source without importing them: the
one walk the layer and cycle tests share."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import REPO

PACKAGE = REPO / "repro"


def module_name(path: Path, package: Path = PACKAGE) -> str:
    """`repro/train/entry.py` -> `repro.train.entry`; a package's `__init__` is the package."""
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts).removesuffix(".__init__")


def _named(node: ast.stmt) -> set[str]:
    """The modules one import statement names; `from a import b` names `a` and `a.b`, since
    `b` may be a module (`from repro import hydra_overrides`)."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names}
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        return {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return set()


def imports(path: Path, loaded_only: bool) -> set[str]:
    """Every module `path` imports, anywhere in it (in functions and under `if
    TYPE_CHECKING:` too); with `loaded_only`, only what loading it imports (module level,
    outside `if TYPE_CHECKING:`)."""
    tree = ast.parse(path.read_text())
    if not loaded_only:
        return {name for node in ast.walk(tree) for name in _named(node)}
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            found.update(_named(node))
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, ast.If | ast.Try):
                visit(node.body)
                visit(node.orelse)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)

    visit(tree.body)
    return found
