"""numba's compiled CPU loops, cached on disk and compiled again where that cache is damaged.

Top-k's radix select and its writes at the selected positions
(`repro.compress.select_kernels`, `repro.compress.position_kernels`) and Adasum's fused
passes (`repro.comm.adasum_kernels`) are numba loops whose machine code numba keeps beside their
source (`__pycache__/<module>.<function>-<line>.py311.nbi` and `.nbc`), so a run loads them
in milliseconds instead of compiling them for seconds. That cache is derived data, yet
numba reads it without a guard: a file cut short (a copy interrupted, a disk that filled
while numba wrote it) or a stray byte ended every Top-k and Adasum run in numba's
traceback (`_pickle.UnpicklingError: pickle data was truncated`), with no hint that the
file is only a cache. Here a cache that cannot be read is emptied, the loop compiled
again (and cached anew), with one note per cache folder and process.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numba
from numba.core.caching import FunctionCache

_NOTED: set[str] = set()  # the cache folders noted as damaged, and _NO_FOLDER
_NO_FOLDER = ""


class _RebuiltWhereDamaged(FunctionCache):
    """numba's own per-function cache, whose load treats a file that cannot be read as no
    file: numba then compiles the loop and saves it over the emptied index."""

    def load_overload(self, sig, target_context):
        try:
            return super().load_overload(sig, target_context)
        except Exception as err:  # reading the cache is all this call does: the error is its
            if self.cache_path not in _NOTED:
                _NOTED.add(self.cache_path)
                why = f"{type(err).__name__}: {err}".splitlines()[0].rstrip(": ")
                print(
                    f"note: numba's cache of compiled loops in {self.cache_path} was damaged "
                    f"({why}); compiling them again",
                    file=sys.stderr,
                )
            try:
                self.flush()
            except OSError:  # a folder no longer writable: compile for this process alone
                self.disable()
            return None


def njit(**options: Any) -> Callable[[Callable], Any]:
    """`numba.njit` with the GIL released (these loops run on the calling thread) and the
    machine code cached on disk, read back as `_RebuiltWhereDamaged` reads it.

    Where numba finds no folder it may write (the source tree read-only, as an installed
    package or a container's, and neither NUMBA_CACHE_DIR nor the home folder writable),
    `numba.njit(cache=True)` raised at import, ending every Top-k and Adasum run in a
    traceback: the loops are then compiled in each process instead, said once."""

    def compiled(fn: Callable) -> Any:
        dispatcher = numba.njit(nogil=True, **options)(fn)
        try:
            dispatcher._cache = _RebuiltWhereDamaged(fn)  # what cache=True sets, guarded
        except RuntimeError as err:  # "cannot cache function ...: no locator available"
            if "no locator" not in str(err):
                raise
            if _NO_FOLDER not in _NOTED:
                _NOTED.add(_NO_FOLDER)
                print(
                    "note: numba finds no writable folder for its cache of compiled loops "
                    "(beside repro's source, NUMBA_CACHE_DIR or the user's cache folder); they are "
                    "compiled in every process, seconds each: set NUMBA_CACHE_DIR to a "
                    "writable folder to keep them",
                    file=sys.stderr,
                )
        return dispatcher

    return compiled
