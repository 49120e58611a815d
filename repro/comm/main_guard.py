"""Whether worker processes would run the caller's script again as they start.

Spawned workers (the processes engine's forkserver) begin by importing the parent's main
module again, as `__mp_main__`, so that functions defined there can be found: every
top-level statement of a script runs again in each worker, except under
`if __name__ == "__main__":`. A script that calls `run_training` at its top level thus
started the run again inside each worker, which met the parent's lock on the run directory
and ended in a traceback from every worker. Said here in one line before any worker starts.
"""

from __future__ import annotations

import ast
import sys
import tokenize


def unguarded_main_line() -> tuple[str, int] | None:
    """(script, line) of the statement at the main script's top level that is running now
    where a spawned worker would run it again; None where it would not (a notebook, the
    `repro` command, `python -m package`, a call under the `__main__` guard)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if path is None or (name is not None and name.split(".")[-1] == "__main__"):
        return None  # multiprocessing imports nothing again for these
    frame = sys._getframe()
    while frame is not None and not (
        frame.f_globals is main.__dict__ and frame.f_code.co_name == "<module>"
    ):
        frame = frame.f_back
    if frame is None:
        return None
    try:
        with tokenize.open(path) as source:  # the script's own declared encoding
            guarded = under_main_guard(source.read(), frame.f_lineno)
    except (OSError, SyntaxError, ValueError):
        return None
    return None if guarded else (path, frame.f_lineno)


def under_main_guard(source: str, line: int) -> bool:
    """Whether `line` of a script lies where a worker importing it would not run it: in the
    body of an `if` whose test holds `__name__ == "__main__"` (`and`-ed with others, or
    `__name__ in ("__main__",)`), at any depth (under a `try`, a `with`); not in such an
    `if`'s `else`."""
    return _guarded(ast.parse(source).body, line)


def _guarded(body: list, line: int) -> bool:
    for node in body:
        if not node.lineno <= line <= (node.end_lineno or node.lineno):
            continue
        if isinstance(node, ast.If) and _tests_main(node.test) and _guarded_body(node.body, line):
            return True
        inner = ("body", "orelse", "finalbody", "handlers")
        return any(_guarded(getattr(node, field, []), line) for field in inner)
    return False


def _guarded_body(body: list, line: int) -> bool:
    return any(s.lineno <= line <= (s.end_lineno or s.lineno) for s in body)


def _tests_main(test: ast.expr) -> bool:
    """The test compares `__name__` with "__main__" somewhere (`and`-ed with others too)."""
    for node in ast.walk(test):
        if isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.Eq | ast.In):
            sides = [node.left, *node.comparators]
            names = {s.id for s in sides if isinstance(s, ast.Name)}
            constants = {c.value for s in sides for c in ast.walk(s) if isinstance(c, ast.Constant)}
            if names == {"__name__"} and "__main__" in constants:
                return True
    return False
