"""The exchanges on the wire: how a compressor's payload crosses the workers, built only on
`Collectives` calls. Which one runs each step is the Exchange part's choice
(`repro.compress.exchange_parts`); the compressor shapes are `repro.compress.compressor`'s.

- Allgather (`allgather_exchange`): every worker sends its own payload; each worker
  combines all N (Top-k: sums the sparse vectors and divides by N, the paper's AG-Topk
  baseline; sign: the majority vote).
- Leader (`leader_exchange`, AR-Topk, Flexible Top-k Algorithm 1): a leader's positions
  are broadcast; every worker takes its own values of G there; the values are allreduced,
  divided by N and scattered into a dense vector. STAR-Topk picks the leader round robin
  (`star_leader`), VAR-Topk the worker with the largest norm statistic (`var_leader`).
- Allreduce (`allreduce_exchange`): a summable payload is summed round by round; the dense
  average (Top-k at CR = 1, `dense_exchange`) is one round, PowerSGD two.

Sparse payloads carry indices at the values' width (`repro.compress.topk.index_dtype`).
The Top-k exchanges also carry this worker's two squared norms ||g_c||^2 and ||G||^2 (two
extra entries in the allgather or allreduce message, no extra collective), so all workers
learn the same global compression gain and a ratio controller fed by it decides
identically everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import torch

from repro.comm.collectives import Collectives
from repro.comm.record import CommRecord
from repro.compress.compressor import DENSE, Gatherable, Sparsifier, Summable
from repro.compress.memory import gain_from_norms, sq_norms
from repro.compress.select import zero_selected
from repro.compress.topk import TopKAt, decompress, index_dtype


@dataclass
class ExchangeResult:
    """What one exchange gives this worker.

    `average` is the combined update, one row per held worker (identical rows), a tensor
    that nothing else holds or writes (the strategy takes it as the gradient). What left
    each held worker's G: `sent`, the positions sent whole (the residual keeps everything
    else; one row expanded over the workers where all sent the same positions), or
    `taken`, the dense part that went out (the residual is G - taken); both None means all
    of G went. `zeroed`: the exchange already zeroed `sent` in G itself (AR-Topk, as it
    took the values out), so G is the residual as it stands. `gain` is the global
    ||g_c||^2 / ||G||^2 summed over workers, or None where the exchange does not measure it.
    """

    average: torch.Tensor
    sent: torch.Tensor | None
    gain: float | None
    records: list[CommRecord]
    taken: torch.Tensor | None = None
    zeroed: bool = False


def allgather_exchange(
    comm: Collectives, compressor: Gatherable, compensated: torch.Tensor, with_gain: bool
) -> ExchangeResult:
    """Every worker's own payload by one allgather, combined alike on every worker.

    Every held worker gathers the same rows, so the update is formed once from the first
    held worker's copy and shared by all of them. `with_gain` appends the two norms of the
    compression gain to each message (the compressor must report ||g_c||^2).
    """
    encoded = compressor.encode(compensated)
    pieces = list(encoded.payload)
    width = sum(p.shape[1] for p in pieces)
    if with_gain:
        norms = torch.stack([encoded.sent_sq, sq_norms(compensated)], dim=1)
        pieces.append(norms.to(pieces[0].dtype))
    gathered, record = comm.allgather(torch.cat(pieces, dim=1))
    rows = gathered[0]
    combined = compressor.combine(rows[:, :width], comm.group_size, compensated.shape[1])
    gain = None
    if with_gain:
        gain = gain_from_norms(rows[:, width].sum().item(), rows[:, width + 1].sum().item())
    average = combined.expand_as(compensated)
    return ExchangeResult(average, encoded.sent, gain, [record], encoded.taken)


def leader_exchange(
    comm: Collectives,
    sparsifier: Sparsifier,
    compensated: torch.Tensor,
    leader: int,
    algo: str = "ring",
) -> ExchangeResult:
    """AR-Topk (Algorithm 1): average of every worker's G on the leader's positions.

    Only the leader's row is compressed (where this process holds it); the broadcast
    hands its positions to every worker. `algo` ("ring" or "tree") is the allreduce the
    policy chose; it is written into the allreduce's record so the modeled clock charges
    that algorithm.
    """
    n, k = compensated.shape[0], sparsifier.k
    indices = torch.empty(n, k, dtype=index_dtype(compensated), device=compensated.device)
    held = comm.local_index(leader)
    if held is not None:
        indices[held] = sparsifier.select(compensated[held : held + 1])[0]
    records = [comm.broadcast(indices, leader)]
    # every held row now holds the leader's positions: one row indexes them all (reading
    # and zeroing by a per-row index cost a STAR or VAR step at c = 0.1 0.6-0.7 ms more)
    chosen = indices[0].long()
    message = _leader_message(compensated, chosen)
    records.append(replace(comm.allreduce_first(message), algo=algo))
    # every worker's sums are the same, at the same indices: one dense row, shared
    numel = compensated.shape[1]
    first = decompress(message[:1, :k] / comm.group_size, chosen.view(1, -1), numel)
    average = first.expand_as(compensated)
    gain = gain_from_norms(message[0, k].item(), message[0, k + 1].item())
    return ExchangeResult(average, chosen.expand(n, k), gain, records, zeroed=True)


def _leader_message(compensated: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
    """Each held worker's AR-Topk message: its values of G at the leader's positions, then
    its ||g_c||^2 and ||G||^2, shape (workers, k + 2). G is left the residual: zero at
    those positions, as error feedback keeps it.

    The values are taken out and zeroed in one visit of each position (`zero_selected` with
    `taken`), where error feedback zeroed them afterwards: at c = 0.1 the positions fill
    about two in three of a row's 64-byte lines, so that read nearly all of G twice. Over
    8 rows of `cnn1d_wide` at c = 0.1, alone: 0.83 ms instead of 1.37 with G in cache,
    1.43 instead of 2.10 with it evicted; inside STAR- and VAR-Topk training steps at
    c = 0.1, the exchange and error feedback 0.3-0.5 ms shorter (at c = 0.01 and 0.001 no
    change beyond the noise). ||G||^2 is taken first, of G whole. Each row's values and
    norms are the bits of that row alone, as a worker process forms them (`sq_norms`).
    """
    n, k = compensated.shape[0], chosen.numel()
    message = compensated.new_empty(n, k + 2)
    message[:, k + 1] = sq_norms(compensated)
    zero_selected(compensated, chosen.view(1, -1), taken=message[:, :k])
    message[:, k] = sq_norms(message[:, :k])
    return message


def allreduce_exchange(
    comm: Collectives, compressor: Summable, compensated: torch.Tensor, algo: str = "ring"
) -> ExchangeResult:
    """The compressor's rounds, each message summed in place by one allreduce into its
    first row (all a round reads); a round with nothing to send (no tensor of that kind)
    is no collective at all."""
    rounds = compressor.rounds(compensated, comm.group_size)
    records: list[CommRecord] = []
    try:
        message = next(rounds)
        while True:
            if message.numel():
                records.append(replace(comm.allreduce_first(message), algo=algo))
            message = rounds.send(None)
    except StopIteration as done:
        average, taken = done.value
    gain = 1.0 if compressor.lossless else None
    return ExchangeResult(average, None, gain, records, taken)


def ag_topk_exchange(
    comm: Collectives,
    compensated: torch.Tensor,
    k: int,
    layer_sizes: Sequence[int] | None = None,
    shares: Sequence[int] | None = None,
) -> ExchangeResult:
    """Allgather Top-k: the sum of every worker's own Top-k of G, divided by N;
    `layer_sizes` and `shares` make it layer-wise (`repro.compress.topk.compress`)."""
    return allgather_exchange(comm, TopKAt(k, layer_sizes, shares), compensated, True)


def ar_topk_exchange(
    comm: Collectives,
    compensated: torch.Tensor,
    k: int,
    leader: int,
    algo: str = "ring",
    layer_sizes: Sequence[int] | None = None,
    shares: Sequence[int] | None = None,
) -> ExchangeResult:
    """AR-Topk on the leader's own Top-k of G (`leader_exchange`)."""
    return leader_exchange(comm, TopKAt(k, layer_sizes, shares), compensated, leader, algo)


def dense_exchange(comm: Collectives, compensated: torch.Tensor, algo: str) -> ExchangeResult:
    """Allreduce-average of the whole G (CR = 1): nothing is dropped, the gain is 1."""
    return allreduce_exchange(comm, DENSE, compensated, algo)


def star_leader(step: int, world_size: int) -> int:
    """STAR-Topk: the leader goes round robin over the ranks from rank 0, as in the authors'
    code (its global step counts from 0). The trainer counts steps from 1, so step s is led
    by rank (s - 1) mod N."""
    return (step - 1) % world_size


def var_leader(comm: Collectives, grad_sq_norms: torch.Tensor) -> tuple[int, CommRecord]:
    """VAR-Topk: allgather each worker's norm statistic (N floats); the largest leads.

    `grad_sq_norms` holds the held workers' values (`method.var_norm`): the paper's ||g||^2
    of the gradient, ||G||^2 of the error-compensated one, or the authors' smoothed ||g||
    (`repro.compress.smoothed_norm`). Every worker sees the same gathered vector, and argmax
    breaks ties toward the lowest rank, so all workers agree.
    """
    gathered, record = comm.allgather(grad_sq_norms.to(torch.float32).view(-1, 1))
    return int(torch.argmax(gathered[0].view(-1)).item()), record


def var_sq_norms(
    var_norm: str,
    grads: dict[str, torch.Tensor],
    compensated: torch.Tensor,
    known: Mapping[str, torch.Tensor],
):
    """Each held worker's squared norm that VAR-Topk ranks by (`method.var_norm`): of the
    gradient g ("grad", the paper's ||g||^2, and what "ewma_grad" smooths), or of the flat
    compensated G = g + residual ("grad_plus_residual"). `known`: the per-tensor values the
    backward measured (of gradients it added into G), summed in the same order."""
    if var_norm == "grad_plus_residual":
        return sq_norms(compensated)
    return sum(known[n] if n in known else sq_norms(g) for n, g in grads.items())
