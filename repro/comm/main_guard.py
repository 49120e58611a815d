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
from pathlib import Path


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
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    line = frame.f_lineno
    for statement in tree.body:
        if statement.lineno <= line <= (statement.end_lineno or statement.lineno):
            return None if _is_main_guard(statement) else (path, line)
    return None


def _is_main_guard(statement: ast.stmt) -> bool:
    """`if __name__ == "__main__":` (either way round)."""
    if not isinstance(statement, ast.If) or not isinstance(statement.test, ast.Compare):
        return False
    test = statement.test
    sides = [test.left, *test.comparators]
    names = {s.id for s in sides if isinstance(s, ast.Name)}
    values = {s.value for s in sides if isinstance(s, ast.Constant)}
    return isinstance(test.ops[0], ast.Eq) and names == {"__name__"} and values == {"__main__"}
