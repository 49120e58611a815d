"""The compiled loops that write at a selection's positions, numba on the CPU.

Two writes follow a Top-k selection (`repro.compress.select`): error feedback zeroes the
entries that went out, leaving the residual, and AG-Topk adds every worker's values at its
positions. Torch's `scatter_` and `index_add_` do both, but copy and widen their index
arguments first and write through a general strided kernel; these loops read the
positions where they lie (the gathered message's columns, in the values' width) and write
one entry each. AR-Topk takes each worker's values at the leader's positions and zeroes
them in the same visit (`zero_rows_at` with `taken`), where gathering them and zeroing them
afterwards read the 8.7 MB of 8 workers' G twice.

A position outside the rows raises IndexError, as torch's ops refuse it, rather than
writing past the end (a damaged message).
"""

from __future__ import annotations

import numpy as np

from repro.compiled_loops import njit


@njit()
def _zero_at(rows, positions, taken):
    shared = positions.shape[0] == 1
    take = taken.shape[0] > 0
    width = rows.shape[1]
    for r in range(rows.shape[0]):
        row = rows[r]
        at = positions[0 if shared else r]
        for j in range(at.shape[0]):
            if not 0 <= at[j] < width:
                raise IndexError("a position lies outside the rows")
            if take:
                taken[r, j] = row[at[j]]
            row[at[j]] = 0


@njit()
def _add_at(total, positions, values):
    n = total.shape[0]
    for r in range(positions.shape[0]):
        for j in range(positions.shape[1]):
            if not 0 <= positions[r, j] < n:
                raise IndexError("a position lies outside the vector")
            total[positions[r, j]] += values[r, j]


def add_rows_at(total: np.ndarray, positions: np.ndarray, values: np.ndarray) -> None:
    """total[positions[r, j]] += values[r, j] for every row r, then every j, in that order
    (the order of `index_add_` over the flattened rows, so the sums have its bits)."""
    _add_at(total, positions, values)


def zero_rows_at(rows: np.ndarray, positions: np.ndarray, taken: np.ndarray) -> None:
    """Zero row r of `rows` (n, width) at positions[r] (n, k), or every row at positions[0]
    when `positions` has one row; where `taken` (n, k) has rows, each entry is first
    copied to taken[r, j]."""
    _zero_at(rows, positions, taken)


def _load_all() -> None:
    """Compile each loop, or load it from the cache, with the types a float32 run passes it
    (see `repro.compress.select_kernels._load_all` for why at import): zeroes alone, zeroes
    taking into AR-Topk's message (a view of several workers' rows, or one worker's), and
    the sum of a gathered message."""
    rows = np.ones((2, 8), dtype=np.float32)
    positions = np.zeros((2, 1), dtype=np.int64)
    zero_rows_at(rows, positions, rows[:0])
    for taken in (np.empty((2, 3), dtype=np.float32)[:, :1], np.empty((1, 1), np.float32)):
        zero_rows_at(rows[: len(taken)], positions[:1], taken)  # a view; one worker's row
    message = np.zeros((2, 4), dtype=np.float32)  # values and indices side by side
    add_rows_at(np.zeros(8, dtype=np.float32), message.view(np.int32)[:, 2:3], message[:, :1])


_load_all()
