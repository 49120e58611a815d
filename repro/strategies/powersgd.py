"""PowerSGD (Vogels et al., NeurIPS 2019): rank-r compression with error feedback and warm
start, its factors P and Q summed by allreduce.

Compressed SGD (`repro.strategies.compressed_sgd`) with the PowerSGD compressor
(`repro.compress.powersgd`), an allreduce exchange and, with `error_feedback`, the residual
memory. Settings are PyTorch's `PowerSGDState`'s, under this suite's names: `rank`
(matrix_approximation_rank), `start_iter` (start_powerSGD_iter: plain averages before),
`error_feedback` (use_error_feedback), `warm_start`, `min_compression_rate`, `epsilon`
(orthogonalization_epsilon), `seed` (random_seed). The paper compresses from the first
step, so `start_iter` is 0 here where PyTorch's DDP hook defaults to 1,000 (and needs at
least 2 with error feedback or warm start, for DDP's own bucket rebuild). `epsilon` is
1e-8, as in the paper's own code, where PyTorch's is 0: at 0 a layer whose gradient is all
zero (its units dead, or unused by the loss) divides by a zero norm, its update turns NaN
and, with error feedback, stays NaN, ending the run as "diverged".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from repro.compress.pairing import require_exchange
from repro.errors import UserError, require_seed
from repro.strategies.base import MethodConfig, register
from repro.strategies.compressed_sgd import CompressedSGD, Parts


@dataclass
class PowerSGDConfig(MethodConfig):
    """`method=powersgd` (module doc for each setting). The rank must fit every matrix that
    is compressed: a tensor of two or more axes, viewed as its first axis by the rest, is
    approximated at `rank`, which cannot exceed its smaller side (`validate_model`); a
    matrix too small to gain from compression is sent whole, whatever the rank."""

    name: str = "powersgd"
    rank: int = 2
    start_iter: int = 0
    error_feedback: bool = True
    warm_start: bool = True
    min_compression_rate: float = 2.0
    epsilon: float = 1e-8
    seed: int = 0
    exchange: str = "allreduce"

    def __post_init__(self):
        if self.rank < 1:
            raise UserError(f"method.rank={self.rank} must be at least 1 (the paper uses 1 to 4)")
        if self.start_iter < 0:
            raise UserError(f"method.start_iter={self.start_iter} must be 0 or more")
        if not self.min_compression_rate >= 0:
            raise UserError(f"method.min_compression_rate={self.min_compression_rate} must be >= 0")
        if not self.epsilon >= 0:
            raise UserError(f"method.epsilon={self.epsilon} must be >= 0 (0, or e.g. 1e-8)")
        require_seed("method.seed", self.seed)
        require_exchange(
            "powersgd", self.exchange, "factors P and Q, summed between its rounds", ("allreduce",)
        )

    def validate_model(self, shapes: dict[str, tuple[int, ...]]) -> None:
        from repro.compress.powersgd import compressed_rank

        for name, shape in shapes.items():
            if len(shape) < 2:
                continue
            n, m = shape[0], math.prod(shape[1:])
            compressed = compressed_rank(n, m, self.rank, self.min_compression_rate) is not None
            if self.rank > min(n, m) and compressed:
                raise UserError(
                    f"method.rank={self.rank} is larger than {name}'s smaller side "
                    f"({min(n, m)}, of its {n} x {m} matrix, which is compressed); lower "
                    f"method.rank to {min(n, m)}"
                )

    def parts(self) -> Parts:
        from repro.compress.exchange_parts import AllreduceExchange
        from repro.compress.memory import ErrorFeedback, NoMemory
        from repro.compress.powersgd import PowerSGD

        compressor = PowerSGD(
            self.rank,
            self.start_iter,
            self.warm_start,
            self.min_compression_rate,
            self.epsilon,
            self.seed,
        )
        memory = ErrorFeedback() if self.error_feedback else NoMemory()
        return Parts(compressor, memory, AllreduceExchange())


PowerSGDStrategy = register(PowerSGDConfig)(CompressedSGD)
