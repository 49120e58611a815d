"""Per-worker compute time of one local step: measured, or sampled as in AdaComm's runtime model.

AdaComm (Wang & Joshi 2019, Sec. 3) models the time Y of one local gradient step as i.i.d.
across workers and steps, e.g. exponential or shifted exponential; fully synchronous SGD then
waits E[Y_{m:m}] per step for the slowest of m workers. On one machine the real step times
barely vary, so `sampled` mode draws Y from the configured distribution instead, optionally
with stragglers: a worker-step is slowed by `straggler_factor` with probability
`straggler_prob`. In `measured` mode the trainer feeds each worker's real step time to the
clock and this model draws nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from repro.errors import UserError

if TYPE_CHECKING:
    import numpy as np

MODES = ("measured", "sampled")
DISTS = ("exponential", "shifted_exponential", "constant")


@dataclass
class ComputeConfig:
    """How each worker's per-step compute time is obtained.

    `mean_ms` is the mean of the base distribution before stragglers. For
    `shifted_exponential`, Y = shift_ms + Exp(mean_ms - shift_ms), so the mean stays
    `mean_ms` and `shift_ms` is the minimum step time. `seed_offset` is mixed into the run
    seed so compute noise can be varied without changing data order or initialisation.
    """

    mode: str = "measured"
    dist: str = "exponential"
    mean_ms: float = 10.0
    shift_ms: float = 0.0
    straggler_prob: float = 0.0
    straggler_factor: float = 1.0
    seed_offset: int = 0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise UserError(f"compute.mode={self.mode!r} must be one of {', '.join(MODES)}")
        if self.dist not in DISTS:
            raise UserError(f"compute.dist={self.dist!r} must be one of {', '.join(DISTS)}")
        if not (self.mean_ms > 0):
            raise UserError(f"compute.mean_ms={self.mean_ms} must be > 0")
        if self.dist == "shifted_exponential" and not (0 <= self.shift_ms < self.mean_ms):
            raise UserError(
                f"compute.shift_ms={self.shift_ms} must be in [0, compute.mean_ms={self.mean_ms})"
            )
        if not (0 <= self.straggler_prob <= 1):
            raise UserError(f"compute.straggler_prob={self.straggler_prob} must be in [0, 1]")
        if not (self.straggler_factor >= 1):
            raise UserError(f"compute.straggler_factor={self.straggler_factor} must be >= 1")
        if self.seed_offset < 0:
            raise UserError(f"compute.seed_offset={self.seed_offset} must be >= 0")


class ComputeModel:
    """Sampled per-worker step times in seconds, reproducible per (seed, step).

    Each step's times for all workers come from one generator seeded by
    (seed, seed_offset, step), so a step's draw does not depend on which steps were drawn
    before it (resume and out-of-order calls give the same numbers), and every rank, drawing
    the same vector, agrees on every worker's time without communicating.

    The draws are made `BLOCK` steps at a time, each step still from its own generator: a
    generator made between a training step's large tensor operations finds numpy's code
    and tables out of cache and took 0.14-0.23 ms, against 15 us for one made right after
    another.
    """

    BLOCK = 256

    def __init__(self, cfg: ComputeConfig, world_size: int, seed: int):
        if world_size < 1:
            raise UserError(f"world_size={world_size} must be >= 1")
        if seed < 0:
            raise UserError(f"seed={seed} must be >= 0")
        self.cfg = cfg
        self.world_size = world_size
        self.seed = seed
        self._first = -1  # the first step of the block drawn, none yet
        self._block: np.ndarray | tuple = ()  # one row per step from _first

    def times(self, step: int) -> np.ndarray:
        """Compute seconds of every worker at `step` (sampled mode only), read-only."""
        if self.cfg.mode != "sampled":
            raise ValueError("compute.mode=measured: the trainer supplies measured step times")
        if not 0 <= step - self._first < len(self._block):
            import numpy as np

            self._first = step - step % self.BLOCK
            block = np.stack([self._draw(s) for s in range(self._first, self._first + self.BLOCK)])
            # its rows are handed out uncopied (the time keeper scales them into a new array
            # anyway), so a caller's write must fail rather than reach a later call
            block.flags.writeable = False
            self._block = block
        return self._block[step - self._first]

    def _draw(self, step: int) -> np.ndarray:
        # numpy and scipy load where they are used: `ComputeConfig` is read while a config
        # is validated, which must not pay for them.
        import numpy as np

        cfg = self.cfg
        mean_s = cfg.mean_ms / 1000
        shift_s = cfg.shift_ms / 1000
        drawn = cfg.dist != "constant" or cfg.straggler_prob > 0
        rng = np.random.default_rng([self.seed, cfg.seed_offset, step]) if drawn else None
        if cfg.dist == "constant":
            base = np.full(self.world_size, mean_s)
        elif cfg.dist == "exponential":
            base = rng.exponential(mean_s, self.world_size)
        else:
            base = shift_s + rng.exponential(mean_s - shift_s, self.world_size)
        if cfg.straggler_prob == 0:
            return base  # no worker-step is slowed: the draw below would change nothing
        slow = rng.random(self.world_size) < cfg.straggler_prob
        return np.where(slow, base * cfg.straggler_factor, base)

    def mean(self) -> float:
        """E[Y] in seconds, stragglers included: mean * (1 + p (factor - 1))."""
        cfg = self.cfg
        return cfg.mean_ms / 1000 * (1 + cfg.straggler_prob * (cfg.straggler_factor - 1))

    def expected_max(self, world: int) -> float:
        """E[max of `world` i.i.d. step times] in seconds: what synchronous SGD waits per step.

        Closed forms without stragglers: exponential mu H_n, shifted exponential
        s + (mu - s) H_n, constant mu; with stragglers a constant step is slow when any
        worker straggles, mu (1 + (f - 1)(1 - (1-p)^n)). Otherwise the integral
        E[max] = int_0^inf 1 - G(y)^n dy over the mixture CDF
        G(y) = (1-p) F(y) + p F(y / f) is evaluated numerically.
        """
        if world < 1:
            raise UserError(f"world={world} must be >= 1")
        cfg = self.cfg
        mean_s = cfg.mean_ms / 1000
        shift_s = cfg.shift_ms / 1000 if cfg.dist == "shifted_exponential" else 0.0
        p, f = cfg.straggler_prob, cfg.straggler_factor
        if cfg.dist == "constant":
            return mean_s * (1 + (f - 1) * (1 - (1 - p) ** world))
        harmonic = math.fsum(1 / k for k in range(1, world + 1))
        if p == 0 or f == 1:
            return shift_s + (mean_s - shift_s) * harmonic
        scale = mean_s - shift_s

        def base_cdf(y: float) -> float:
            return 0.0 if y <= shift_s else -math.expm1(-(y - shift_s) / scale)

        def tail(y: float) -> float:
            g = (1 - p) * base_cdf(y) + p * base_cdf(y / f)
            return 1 - g**world

        from scipy import integrate

        # Below the shift no worker has finished (tail = 1); the kink at f * shift splits the rest.
        knee = f * shift_s
        middle = integrate.quad(tail, shift_s, knee)[0] if knee > shift_s else 0.0
        upper = integrate.quad(tail, knee, math.inf)[0]
        return shift_s + middle + upper
