"""What every Adasum path agrees on, without torch: the zero-norm guard, the worker count and
the algorithm its statistics allreduce is charged as.

The reference operator (`repro.strategies.adasum_op`), the gathering path
(`adasum_gather`), the halving allreduce (`adasum_allreduce`) and `AdasumConfig` all read
these. They live apart from the tensor code so that validating `method=adasum` settings does
not load torch.
"""

from __future__ import annotations

import sys

from repro.errors import UserError

# sqrt of the smallest normal float64 (sqrt(DBL_MIN), about 1.5e-154): Horovod's released C++
# Adasum (ops/adasum/adasum.h) keeps a coefficient at 1 below it, so only a numerically zero
# vector is left out of the weighting; dividing by less would overflow or lose all precision.
ZERO_NORM_SQ = sys.float_info.min**0.5
# The squared norm below which a coefficient stays 1, by `method.zero_norm_guard`:
# "horovod" is Horovod's bound above (the default); "fixed_1e-8" is a fixed 1e-8, an earlier
# choice of this suite and no published rule, under which a small but real tensor (a bias
# whose delta is 1e-5 per entry) is summed rather than Adasum-combined.
ZERO_NORM_GUARDS = {"horovod": ZERO_NORM_SQ, "fixed_1e-8": 1e-8}


def check_world_size(world_size: int) -> None:
    """Refuse worker counts the halving tree cannot serve: it pairs rank r with r XOR 2^j,
    which has no partner unless the count is a power of two (as in Horovod)."""
    if world_size < 1 or world_size & (world_size - 1):
        raise UserError(
            f"Adasum needs a power-of-two number of workers (1, 2, 4, 8, ...), got "
            f"trainer.world_size={world_size}; set trainer.world_size to a power of two, or "
            "method.combiner=sum|mean"
        )


# The allreduce of Adasum's per-level scalars (3 float64 per tensor) is tiny, so it is
# charged as the latency-optimal tree (MPI serves messages this small by recursive doubling
# or a tree; a ring would pay 2(g-1) latencies for 24 bytes). The allreduce stamps this on
# its records and `repro.netmodel.cost.adasum_vhdd` charges it, so the modeled clock and
# `repro cost` agree.
ADASUM_STATS_ALGO = "tree"
