"""Sparse gradient exchanges of Flexible Top-k, built only on `Collectives` calls.

Three ways to average the workers' error-compensated gradients G (one flat row per worker
this process holds, on the leading worker axis):

- AG-Topk (the paper's baseline): every worker sends its own Top-k (values and indices) by
  one allgather; each worker sums all N sparse vectors into a dense one and divides by N.
- AR-Topk (Algorithm 1): a leader's Top-k indices are broadcast; every worker takes its own
  values of G at those indices; the values are allreduced, divided by N and scattered into
  a dense vector. STAR-Topk picks the leader round robin (`star_leader`), VAR-Topk the
  worker with the largest squared gradient norm (`var_leader`; the paper's ||g||^2, or
  optionally ||G||^2).
- Dense: an allreduce-average of the whole G, what AR-Topk becomes at CR = 1.

Wire format: indices travel at the same width as the values (int32 beside float32, int64
beside float64), the byte count the paper's cost formulas assume (values and indices the same
size). AG-Topk packs the indices' bits into the value dtype so (values, indices) is one
allgather, as in the paper's single-allgather cost. Every exchange also carries this
worker's two squared norms ||g_c||^2 and ||G||^2 (two extra entries in the allgather or
allreduce message, no extra collective), so all workers learn the same global compression
gain and a ratio controller fed by it decides identically everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from repro.comm.collectives import Collectives, CommRecord
from repro.compress.memory import gain_from_norms
from repro.compress.topk import compress, decompress

_INDEX_DTYPES = {4: torch.int32, 8: torch.int64}


@dataclass
class ExchangeResult:
    """What one exchange gives this worker.

    `average` is the dense averaged gradient, one row per held worker (identical rows);
    `sent` the indices of each held worker's G that went out (the residual keeps everything
    else; None means all of G was sent); `gain` the global ||g_c||^2 / ||G||^2 summed over
    workers.
    """

    average: torch.Tensor
    sent: torch.Tensor | None
    gain: float
    records: list[CommRecord]


def _index_dtype(x: torch.Tensor) -> torch.dtype:
    width = x.element_size()
    if width not in _INDEX_DTYPES or not x.is_floating_point():
        raise ValueError(f"Top-k exchange supports float32 or float64 gradients, got {x.dtype}")
    if x.numel() > torch.iinfo(_INDEX_DTYPES[width]).max:
        raise ValueError(f"{x.numel()} entries do not fit indices of {_INDEX_DTYPES[width]}")
    return _INDEX_DTYPES[width]


def _norms(sent_values: torch.Tensor, compensated: torch.Tensor) -> torch.Tensor:
    """Each row's (||g_c||^2, ||G||^2), shape (workers, 2)."""
    return torch.stack([sent_values.pow(2).sum(1), compensated.pow(2).sum(1)], dim=1)


def ag_topk_exchange(
    comm: Collectives,
    compensated: torch.Tensor,
    k: int,
    layer_sizes: Sequence[int] | None = None,
    shares: Sequence[int] | None = None,
) -> ExchangeResult:
    """Allgather Top-k: the sum of every worker's own Top-k of G, divided by N.

    Every held worker gathers the same rows, so the sum is formed once from the first
    held worker's copy and shared by all of them. `layer_sizes` and `shares` make it
    layer-wise (`repro.compress.topk.compress`).
    """
    idx_dtype = _index_dtype(compensated)
    values, indices = compress(compensated, k, layer_sizes, shares)
    packed = torch.cat(
        [values, indices.to(idx_dtype).view(values.dtype), _norms(values, compensated)], dim=1
    )
    gathered, record = comm.allgather(packed)
    rows = gathered[0]
    all_indices = rows[:, k : 2 * k].contiguous().view(idx_dtype).long()
    total = torch.zeros_like(compensated[0])
    total.index_add_(0, all_indices.reshape(-1), rows[:, :k].reshape(-1))
    gain = gain_from_norms(rows[:, 2 * k].sum().item(), rows[:, 2 * k + 1].sum().item())
    average = (total / comm.group_size).expand_as(compensated)
    return ExchangeResult(average, indices, gain, [record])


def ar_topk_exchange(
    comm: Collectives,
    compensated: torch.Tensor,
    k: int,
    leader: int,
    algo: str = "ring",
    layer_sizes: Sequence[int] | None = None,
    shares: Sequence[int] | None = None,
) -> ExchangeResult:
    """AR-Topk (Algorithm 1): average of every worker's G on the leader's Top-k indices.

    Only the leader's row is compressed (where this process holds it); the broadcast
    hands its indices to every worker. `algo` ("ring" or "tree") is the allreduce the
    policy chose; it is written into the allreduce's record so the modeled clock charges
    that algorithm.
    """
    n = compensated.shape[0]
    indices = torch.empty(n, k, dtype=_index_dtype(compensated), device=compensated.device)
    held = comm.local_index(leader)
    if held is not None:
        indices[held] = compress(compensated[held : held + 1], k, layer_sizes, shares)[1][0]
    records = [comm.broadcast(indices, leader)]
    chosen = indices.long()
    values = compensated.gather(1, chosen)
    message = torch.cat([values, _norms(values, compensated)], dim=1)
    records.append(replace(comm.allreduce(message), algo=algo))
    # every held row holds the same sums at the same indices: one dense row, shared
    first = decompress(message[:1, :k] / comm.group_size, chosen[:1], compensated.shape[1])
    average = first.expand_as(compensated)
    gain = gain_from_norms(message[0, k].item(), message[0, k + 1].item())
    return ExchangeResult(average, chosen, gain, records)


def dense_exchange(comm: Collectives, compensated: torch.Tensor, algo: str) -> ExchangeResult:
    """Allreduce-average of the whole G (CR = 1): nothing is dropped, the gain is 1."""
    average = compensated.clone()
    record = replace(comm.allreduce(average, average=True), algo=algo)
    return ExchangeResult(average, None, 1.0, [record])


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


def var_sq_norms(var_norm: str, grads: dict[str, torch.Tensor], compensated: torch.Tensor):
    """Each held worker's squared norm that VAR-Topk ranks by (`method.var_norm`): of the
    gradient g ("grad", the paper's ||g||^2, and what "ewma_grad" smooths), or of the flat
    compensated G = g + residual ("grad_plus_residual")."""
    if var_norm == "grad_plus_residual":
        return compensated.pow(2).sum(1)
    return sum(g.pow(2).sum(1) for g in grads.values())
