"""method=adasum: Adasum and Horovod's own baselines, `op=Average` and `op=Sum`.

Maleki et al., "Scaling Distributed Training with Adaptive Summation" (MLSys 2021, Sec. 3 and
5), as run by Horovod's DistributedOptimizer:

- `combiner=adasum` (op=Adasum) takes the delta flow: each worker remembers its parameters,
  takes a local optimizer step on its own gradient (momentum, Adam or LAMB state never
  leaves the worker), and the per-tensor deltas p - start are Adasum-combined; every worker
  then sets p = start + combined. The learning rate is not scaled with the worker count
  (Horovod's docs suggest about 2-2.5x the best single-worker rate instead).
- `combiner=mean` (op=Average, the paper's baselines) and `combiner=sum` (op=Sum) take the
  gradient flow: the workers' gradients are averaged (summed) by one allreduce and every
  worker takes one optimizer step on the result, exactly as synchronous SGD does.

`flow=delta` with sum or mean is this suite's own arm, not Horovod's: the local steps'
deltas averaged (summed) by a plain allreduce, the Adasum flow with only the operator
changed. For momentum SGD it equals the gradient flow (the step is linear in the gradient);
for Adam and LAMB it does not.

The pure reference operator lives in `adasum_op` and is re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from repro.comm.adasum_rules import ZERO_NORM_GUARDS, check_world_size
from repro.errors import UserError
from repro.strategies.adasum_op import adasum_pair, adasum_per_tensor, adasum_reduce
from repro.strategies.base import MethodConfig, Metrics, StepInfo, Strategy, no_grad, register
from repro.strategies.sync import allreduce_gradients

if TYPE_CHECKING:
    import torch

    from repro.comm.collectives import Collectives
    from repro.comm.flat_layout import FlatLayout
    from repro.comm.record import CommRecord
    from repro.optim.stacked import StackedOptimizer

__all__ = [
    "AdasumConfig",
    "AdasumStrategy",
    "adasum_pair",
    "adasum_per_tensor",
    "adasum_reduce",
]

COMBINERS = ("adasum", "sum", "mean")
FLOWS = ("delta", "gradient")


@dataclass
class AdasumConfig(MethodConfig):
    """`combiner`: how the workers' contributions are merged (adasum, sum, or mean).

    `flow`: what is combined. null (the default) is Horovod's: the deltas of local optimizer
    steps for adasum, the gradients (then one optimizer step) for sum and mean. "delta" with
    sum or mean is this suite's averaged-/summed-delta arm; "gradient" with adasum is
    refused (Adasum weighs each worker's update, which for Adam and LAMB is the delta).

    `gather_below_kb`: an Adasum combination of at most this many KiB per worker gathers
    every worker's deltas once and applies the tree locally (`repro.comm.adasum_gather`,
    fewer steps); larger ones take the vector-halving distance-doubling allreduce (fewer
    bytes). Both give the reference result (the gather bit for bit, the halving up to float64
    summation order); 0 always halves. On gloo over loopback the two paths meet between
    1 and 2 MiB (`make bench`, adasum_allreduce, prints where), so between the 256 KiB
    default and 1 MiB the halving allreduce is taken where the gather is faster; the default
    stays where an earlier measurement put the crossover, since moving it changes the path,
    and so the summation order, of runs already reported.

    `zero_norm_guard`: below which squared norm a tensor's Adasum coefficient stays 1 (the
    operator is undefined at a zero vector). "horovod": Horovod's released C++ rule,
    sqrt(DBL_MIN) (about 1.5e-154), so only a numerically zero delta is left out of the
    weighting; "fixed_1e-8": a fixed 1e-8, this suite's earlier choice, under which a small
    real delta is also summed plainly (and two such deltas give their sum). Both paths apply
    it alike.
    """

    name: str = "adasum"
    combiner: str = "adasum"
    flow: str | None = None
    gather_below_kb: int = 256
    zero_norm_guard: str = "horovod"

    def __post_init__(self) -> None:
        if self.combiner not in COMBINERS:
            raise UserError(
                f"method.combiner={self.combiner!r} must be one of {', '.join(COMBINERS)}"
            )
        if self.flow is not None and self.flow not in FLOWS:
            raise UserError(
                f"method.flow={self.flow!r} must be one of {', '.join(FLOWS)} (or null: "
                "delta for adasum, gradient for sum and mean)"
            )
        if self.combiner == "adasum" and self.flow == "gradient":
            raise UserError(
                "method.flow=gradient does not apply to method.combiner=adasum (Adasum "
                "combines each worker's optimizer delta); drop method.flow or use "
                "method.combiner=sum|mean"
            )
        if self.gather_below_kb < 0:
            raise UserError(
                f"method.gather_below_kb={self.gather_below_kb} must be >= 0 "
                "(0: always the vector-halving allreduce)"
            )
        if self.zero_norm_guard not in ZERO_NORM_GUARDS:
            raise UserError(
                f"method.zero_norm_guard={self.zero_norm_guard!r} must be one of "
                f"{', '.join(ZERO_NORM_GUARDS)}"
            )

    @property
    def combines(self) -> str:
        """The flow in force: "delta" or "gradient"."""
        if self.flow is not None:
            return self.flow
        return "delta" if self.combiner == "adasum" else "gradient"

    def validate_world_size(self, world_size: int) -> None:
        """Refuse, before any worker starts, a worker count the combiner cannot serve.

        The Adasum tree pairs rank r with r XOR 2^j, so it needs a power of two, as in
        Horovod; sum and mean take any count.
        """
        if self.combiner == "adasum":
            check_world_size(world_size)


@register(AdasumConfig)
class AdasumStrategy(Strategy):
    """Delta flow: local optimizer step, then per-tensor combination of the parameter
    deltas. Gradient flow: one allreduce of the gradients before the optimizer step.

    The delta flow's start copy and flat delta buffer are allocated once in `setup`: the
    deltas are written straight into the buffer the allreduce works on, so a step allocates
    nothing of the model's size. Between steps it holds nothing a resumed run needs (the
    start copy and the deltas matter only from after_backward to after_step, and optimizer
    state is the trainer's), so its state is the base's empty one.
    """

    cfg: AdasumConfig

    def __init__(self, cfg: AdasumConfig, world_size: int):
        # torch and the Adasum paths are imported in the methods that run: discovery
        # imports this module to compose a config (`repro.strategies.base`).
        import torch

        from repro.comm.adasum_allreduce import adasum_allreduce_

        cfg.validate_world_size(world_size)
        super().__init__(cfg, world_size)
        # the gradient flow's one optimizer step on the combined gradient is common to all
        self.identical_workers = cfg.combines == "gradient"
        self._params: list[torch.Tensor] = []
        self._start: list[torch.Tensor] = []
        self._layout: FlatLayout | None = None
        self._flat = torch.empty(0)
        self._adasum = adasum_allreduce_  # setup picks by the model's size
        self._deltas: list[torch.Tensor] = []
        self._pending = False
        self._comm: Collectives | None = None
        self._last_bytes = 0

    def setup(self, model, optimizer: StackedOptimizer, comm: Collectives, rehearsal) -> None:
        import torch

        from repro.comm.adasum_allreduce import adasum_allreduce_
        from repro.comm.adasum_gather import adasum_gather_
        from repro.comm.flat_layout import FlatLayout
        from repro.comm.stopwatch import Stopwatch

        if comm.world_size != self.world_size:
            raise ValueError(
                f"strategy built for {self.world_size} workers, group has {comm.world_size}"
            )
        self._params = model.parameters()
        if len({(p.dtype, p.device) for p in self._params}) > 1:
            raise ValueError("method=adasum needs every parameter in one dtype on one device")
        self._comm = comm
        if self.cfg.combines == "gradient":
            return
        self._start = [torch.empty_like(p) for p in self._params]
        if self.world_size > 1 and self._params:
            first = self._params[0]
            self._layout = FlatLayout([p[0] for p in self._params], self.world_size)
            self._flat = self._layout.new_buffer(len(comm.ranks), first.dtype, first.device)
            self._deltas = self._layout.unflatten(self._flat)
            nbytes = self._layout.total * self._flat.element_size()
            small = nbytes <= self.cfg.gather_below_kb * 1024
            self._adasum = adasum_gather_ if small else adasum_allreduce_
            self._watch = Stopwatch(first.device)  # times the whole combination each step

    @no_grad
    def after_backward(self, info: StepInfo) -> list[CommRecord]:
        """Gradient flow: sum or average the gradients. Delta flow: remember where this step
        starts; gradients stay local."""
        if self.cfg.combines == "gradient":
            if self._comm is None:
                raise RuntimeError("after_backward needs setup() first")
            if self.world_size == 1:
                # as the delta flow: a lone worker's combination is the identity
                return []
            records = [allreduce_gradients(self._params, self._comm, self.cfg.combiner == "mean")]
            self._last_bytes = records[0].nbytes
            return records
        for s, p in zip(self._start, self._params, strict=True):
            s.copy_(p)
        self._pending = True
        return []

    @no_grad
    def after_step(self, info: StepInfo) -> list[CommRecord]:
        """Delta flow: combine the local deltas and move every worker to start + combined."""
        import torch

        if self.cfg.combines == "gradient":
            return []
        if not self._pending or self._comm is None:
            raise RuntimeError("after_step needs setup() and after_backward() first")
        self._pending = False
        if self._layout is None:
            # One worker: every combiner returns a lone delta unchanged, and start + (p -
            # start) would only round p, so the plain optimizer's parameters stay bit for bit.
            return []
        for p, s, d in zip(self._params, self._start, self._deltas, strict=True):
            torch.sub(p, s, out=d)
        records = self._combine(self._layout, self._comm)
        for p, s, d in zip(self._params, self._start, self._deltas, strict=True):
            torch.add(s, d, out=p)
        self._last_bytes = sum(r.nbytes for r in records)
        return records

    def _combine(self, layout: FlatLayout, comm: Collectives) -> list[CommRecord]:
        if self.cfg.combiner == "adasum":
            guard = ZERO_NORM_GUARDS[self.cfg.zero_norm_guard]
            records, seconds = self._watch.time(self._adasum, self._flat, layout, comm, guard)
            return whole_operation(records, seconds)
        deltas = self._flat[:, : layout.total]
        return [comm.allreduce(deltas, average=self.cfg.combiner == "mean")]

    def metrics(self) -> Metrics:
        """`method/bytes`: payload bytes this worker contributed to the last combination."""
        return {
            "method/combiner": self.cfg.combiner,
            "method/flow": self.cfg.combines,
            "method/bytes": float(self._last_bytes),
        }


def whole_operation(records: list[CommRecord], seconds: float) -> list[CommRecord]:
    """`records` with the measured seconds of the whole Adasum operation: its dot products,
    norms and weighted sums between (or after) the collectives added to the last record.

    Horovod's Adasum allreduce does that arithmetic inside the operation, and the paper's
    "almost as efficient as simply summing gradients" compares the whole operation with an
    allreduce whose summing is inside gloo's timed call; counting the collectives alone
    left Adasum's arithmetic out of `comm/measured_s` (the one-allgather path's whole local
    tree). Bytes, algorithms and so the modeled clock are unchanged."""
    arithmetic = max(0.0, seconds - sum(r.seconds for r in records))
    last = records[-1]
    return [*records[:-1], replace(last, seconds=last.seconds + arithmetic)]
