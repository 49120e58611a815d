"""The Compressor part: a tensor in, a payload and what it left out; pure tensor code.

Compressed SGD (GRACE's decomposition: compressor, memory, communicator) is three parts
joined in a short step (`repro.strategies.compressed_sgd`): the memory adds what earlier
steps left out (G = g + residual), the compressor turns G into a payload, the exchange
(`repro.compress.exchange_parts`) carries the payload over a collective and hands back the
combined update, and the memory keeps what did not go out. A compressor never
communicates; it says what it can be carried by, through the shape of its payload:

- `Gatherable`: each worker's payload is its own (Top-k's own indices, sign bits); only an
  allgather carries it, and every worker combines all of them (`combine`).
- `Sparsifier`: a gatherable whose entries can also be taken at positions another worker
  chose (`select`): AR-Topk's leader picks them, and the values, now at the same positions
  on every worker, sum by an allreduce (Flexible Top-k, Algorithm 1).
- `Summable`: the payload is at the same coordinates on every worker, so an allreduce sums
  it; it may take several rounds, each round's sum feeding the next (PowerSGD's P, then Q).
  `rounds` is a generator: it yields each message, the exchange sums it in place over the
  workers (into the first row only), and the generator's return value is the combined
  update and what left G.

A `Compressor` is the configured part the strategy holds: bound once to the model's tensor
shapes, it hands the compressor for each exchange (`for_exchange`: Top-k at the ratio the
controller chose, PowerSGD's dense warm-up steps, ...), reports its own metrics and keeps
whatever state it carries across steps (PowerSGD's warm-started factors).

Rows carry the leading worker axis: x is (workers held, numel), one row per worker.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch


@dataclass
class Encoded:
    """One step's compression of each held worker's G.

    `payload` is what each worker puts on the wire: (workers, width) pieces of one dtype,
    sent end to end as one message (the exchange appends its own entries, such as the
    gain's norms, in the same concatenation, so the message is formed once). What left G is either
    `sent`, the positions a sparsifier sent whole (the memory zeroes them, bit for bit), or
    `taken`, the dense part of G the payload stands for (the memory keeps G - taken); both
    None means nothing is remembered. `sent_sq` is each row's ||g_c||^2, the numerator of
    the compression gain (`repro.compress.memory.gain_from_norms`), when the compressor
    knows it.
    """

    payload: list[torch.Tensor]
    sent: torch.Tensor | None = None
    taken: torch.Tensor | None = None
    sent_sq: torch.Tensor | None = None


@runtime_checkable
class Gatherable(Protocol):
    def encode(self, x: torch.Tensor) -> Encoded: ...

    def combine(self, rows: torch.Tensor, workers: int, numel: int) -> torch.Tensor:
        """The update every worker applies, (numel,), from all `workers` payloads `rows`
        (workers, width) as one allgather delivers them."""
        ...


@runtime_checkable
class Sparsifier(Gatherable, Protocol):
    k: int

    def select(self, x: torch.Tensor) -> torch.Tensor:
        """Each row's positions to send, (rows, k), ascending."""
        ...


Rounds = Generator[torch.Tensor, None, tuple[torch.Tensor, torch.Tensor | None]]


@runtime_checkable
class Summable(Protocol):
    lossless: bool  # True: nothing is dropped, the compression gain is 1

    def rounds(self, x: torch.Tensor, workers: int) -> Rounds:
        """Yield each message to be summed over the workers into its first row, in place
        (the other rows are left undefined: every worker's sum is the same, so one row is
        all a round reads, `Collectives.allreduce_first`); return the combined
        update (rows, numel) and what left G (rows, numel), or None when all of G did (then
        x itself may be a message: the memory keeps nothing of it)."""
        ...


class Compressor(Protocol):
    def bind(self, shapes: list[tuple[int, ...]]) -> None:
        """The model's parameter shapes (one worker's), in the flat vector's order."""
        ...

    def for_exchange(self, ratio: float | None) -> Gatherable | Summable:
        """The compressor of the next exchange at `ratio` (None: the method has no ratio);
        called once per exchange."""
        ...

    def metrics(self, ratio: float | None) -> dict[str, float]: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


class Stateless:
    """A compressor that is its own per-exchange compressor: no shapes to bind, no ratio,
    nothing kept across steps (signSGD's)."""

    def bind(self, shapes: list[tuple[int, ...]]) -> None:
        """A stateless compressor sees the flat gradient as one vector."""

    def for_exchange(self, ratio: float | None) -> Stateless:
        return self

    def metrics(self, ratio: float | None) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Nothing is kept across steps (a residual is the memory's)."""


class Dense:
    """No compression: one round, the whole G averaged. What Top-k is at c = 1.

    G itself is the message: all of it goes, so no residual is kept from it and the sum
    may overwrite it. Every worker's sum is the same, so only the first row is summed into,
    divided and shared by all (the same bits as dividing each)."""

    lossless = True

    def rounds(self, x: torch.Tensor, workers: int) -> Rounds:
        yield x
        return x[:1].div(workers).expand_as(x), None


DENSE = Dense()
