"""What one collective cost: the record every collective returns and the cost model charges.

A leaf: it imports nothing of `repro` and no torch, so the collectives (`repro.comm`), the
cost model and the modeled clock (`repro.netmodel`) and the methods all import it without
importing each other, and a config check or a cost query never loads torch.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CommRecord:
    """One collective as the cost model sees it.

    `nbytes` is the message size M each participant contributes (the M of the alpha-beta
    formulas, `repro.netmodel.cost`), not the total traffic. `seconds` is what the call
    measured on the device (the simulated engine's tensor operation, not a network);
    `group_size` the participants. `algo` is the allreduce algorithm the modeled clock
    charges ("ring" or "tree"); gloo picks its own algorithm, so this is a modeling choice.
    """

    op: str
    nbytes: int
    seconds: float
    group_size: int
    algo: str | None = None
