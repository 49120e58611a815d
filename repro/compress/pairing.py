"""Which exchange can carry which compressor's payload: refused at config time, torch-free.

An allreduce sums the workers' messages entry by entry, so it carries only a payload at the
same coordinates on every worker: a dense vector, PowerSGD's factors (Vogels et al. 2019,
Algorithm 1: P and Q are summed between the rounds), or Top-k's values on a leader's
positions (AR-Topk, Algorithm 1 of Flexible Top-k). Per-worker positions (Top-k without a
leader) would sum unrelated entries, and sign bits (signSGD, Bernstein et al. 2019) sum to
counts that no longer fit one bit per value: those ride an allgather, which hands every
worker every payload to combine. Each method's config names its compressor's payload and
the exchanges that carry it; this module words the refusal.
"""

from __future__ import annotations

from repro.errors import UserError, require_choice

EXCHANGES = ("allgather", "allreduce")


def require_exchange(method: str, exchange: str, payload: str, carriers: tuple[str, ...]):
    """Refuse `method.exchange=exchange` unless it is one of `carriers`, the exchanges that
    can carry `method`'s `payload` (one line naming the setting and the fix)."""
    require_choice("method.exchange", exchange, EXCHANGES)
    if exchange not in carriers:
        raise UserError(
            f"method.exchange={exchange} cannot carry {method}'s {payload}; "
            f"use method.exchange={' or '.join(carriers)}"
        )
