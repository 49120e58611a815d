"""signSGD with majority vote (Bernstein et al., ICLR 2019), and EF-signSGD as an option.

Compressed SGD (`repro.strategies.compressed_sgd`) with the sign compressor
(`repro.compress.sign`), carried by an allgather: each worker sends one bit per value and
applies the majority's sign. With `error_feedback`, Karimireddy et al.'s (ICML 2019) scaled
sign of G = g + residual, its residual kept, the workers' scaled signs averaged. The step
size is the optimizer's learning rate (`optim.lr`); the paper's signSGD is plain SGD on the
vote (`optim.momentum=0`).
"""

from __future__ import annotations

from dataclasses import dataclass

from repro.compress.pairing import require_exchange
from repro.strategies.base import MethodConfig, register
from repro.strategies.compressed_sgd import CompressedSGD, Parts


@dataclass
class SignSGDConfig(MethodConfig):
    """`method=signsgd`: `error_feedback` (EF-signSGD's scaled sign and residual) and the
    `exchange` that carries the signs (allgather: sign bits do not sum in one bit)."""

    name: str = "signsgd"
    error_feedback: bool = False
    exchange: str = "allgather"

    def __post_init__(self):
        require_exchange("signsgd", self.exchange, "per-worker sign bits", ("allgather",))

    def parts(self) -> Parts:
        from repro.compress.exchange_parts import AllgatherExchange
        from repro.compress.memory import ErrorFeedback, NoMemory
        from repro.compress.sign import MajorityVote, ScaledSign

        if self.error_feedback:
            return Parts(ScaledSign(), ErrorFeedback(), AllgatherExchange())
        return Parts(MajorityVote(), NoMemory(), AllgatherExchange())


SignSGDStrategy = register(SignSGDConfig)(CompressedSGD)
