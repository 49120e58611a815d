"""No two parts of the package import each other, directly or through others.

A part is a subpackage of `repro` (`cluster`, `train`, `reproduce`, ...) or a top-level
module (`repro/config.py`, `repro/cli.py`, ...). Part A depends on part B when any module of
A imports anything of B: at module level, inside a function or under `if TYPE_CHECKING:`,
since each of these says that A's code is written against B's. A cycle among parts means
neither can be read, tested or moved without the other; the fix is to move the shared
piece to the part that owns it (or to a leaf both import), not to hide the import.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from tests.source_imports import PACKAGE, imports, module_name

# part -> part it imports -> the files (relative to the repository) that do
Graph = dict[str, dict[str, set[str]]]


def _part(module: str) -> str | None:
    """The part a dotted module name belongs to; None outside `repro` or for `repro` itself."""
    names = module.split(".")
    return names[1] if names[0] == "repro" and len(names) > 1 else None


def package_graph(package: Path = PACKAGE) -> Graph:
    graph: Graph = defaultdict(lambda: defaultdict(set))
    for path in sorted(package.rglob("*.py")):
        source = _part(module_name(path, package))
        where = str(path.relative_to(package.parent))
        for target in {_part(m) for m in imports(path, False)} - {None, source}:
            graph[source][target].add(where)
    return graph


def tangles(graph: Graph) -> list[list[str]]:
    """The groups of parts that import each other, directly or through others: the strongly
    connected groups of more than one part (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def connect(part: str) -> None:
        index[part] = low[part] = len(index)
        stack.append(part)
        for target in sorted(graph.get(part, {})):
            if target not in index:
                connect(target)
                low[part] = min(low[part], low[target])
            elif target in stack:
                low[part] = min(low[part], index[target])
        if low[part] == index[part]:
            group = stack[stack.index(part) :]
            del stack[stack.index(part) :]
            if len(group) > 1:
                groups.append(sorted(group))

    for part in sorted(graph):
        if part not in index:
            connect(part)
    return groups


def describe(graph: Graph, group: list[str]) -> str:
    """The group and each import inside it (every one lies on a cycle), with its files."""
    edges = [
        f"  {a} -> {b}: {', '.join(sorted(graph[a][b]))}"
        for a in group
        for b in sorted(graph[a])
        if b in group
    ]
    return " <-> ".join(group) + "\n" + "\n".join(edges)


def test_no_package_imports_itself_back_through_others():
    graph = package_graph()
    found = tangles(graph)
    assert not found, "package import cycles:\n" + "\n".join(describe(graph, g) for g in found)


def test_nothing_imports_the_command_line():
    """The command line imports every part to dispatch to it, so it must be imported by
    none (`repro.__main__` only runs it)."""
    graph = package_graph()
    users = {a: graph[a]["cli"] for a in graph if "cli" in graph[a] and a != "__main__"}
    assert users == {}
