"""The models of the workers one process holds, stacked on a leading worker axis.

Every parameter and floating buffer is one tensor of shape (workers, *shape): row i is
worker i's copy. Methods, optimizers and checkpoints see only the stacked tensors, so the
same code serves one worker per process (the process engine, 1 row) and a whole simulated
cluster (all rows). SGD and Adam are elementwise, so the optimizers stepping the stacked
tensors (`repro.optim.stacked`, torch's own rules) step every worker exactly as its
own optimizer would.

Shared rows (`shared=True`, set from the strategy's `identical_workers`): when every worker
applies one common update, the workers' parameters stay equal, so they are held as one row
viewed n times (stride 0 on the worker axis). A forward or backward then reads one copy of
the weights for all workers (the stacked linear layers take one product over all workers'
samples: the same bits as over n equal copies, tested), and the optimizer steps row 0 alone,
which moves every worker (`repro.optim.stacked`). Gradients are still one row per worker,
and checkpoints hold n rows as always. Buffers (BatchNorm's running statistics, one per
worker's data) stay rows of their own.

Forward/backward, `trainer.vectorize`:
- `loop`: worker by worker, each through its own module whose parameters and buffers are
  views of its rows: the very kernels a lone worker runs, so results match the process
  engine bit for bit. The process engine always loops (over its one row).
- `stacked`: all workers at once through the model's own `forward_workers`, written over
  the worker axis (`repro.workload.worker_layers`: channels-last activations, each layer
  one batched matrix product); the small workloads' CNN has one.
- `vmap`: all workers at once through torch.func `vmap(functional_call)` over the stacked
  rows, for any model (BatchNorm buffers batched, so each worker keeps its own running
  statistics); convolutions become grouped convolutions.
- `auto`: `stacked` where the model has `forward_workers`, else `vmap`.
Vectorized, each worker's loss is its own call on its outputs and the backward is plain
autograd from the sum of the workers' losses into the stacked leaves. A worker's loss
depends on its own row only, so the sum's gradient is each worker's own gradient, row by
row. (torch.func's `grad` transform would do the same but imports torch._dynamo, 1.7 s of
CPU per run, and took about 1.4x as long per step here.) Vectorized kernels sum in another
order, so results agree with a lone worker's to float rounding (parameters about 1e-8 relative
after a step, both ways), not bit for bit. Rounding can be amplified where an activation sits at
a ReLU's kink: a ResNet with BatchNorm at a batch of 4 per worker moved its BatchNorm biases by
up to 1e-2 after one step under vmap, and matched under `loop`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn
from torch.func import functional_call, vmap

from repro.compress.memory import GradientTargets
from repro.errors import UserError
from repro.schemas.trainer import VECTORIZE
from repro.workload import worker_layers

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _view_module(template: nn.Module, params: list, buffers: list, row: int) -> nn.Module:
    """A copy of `template` whose parameters and buffers are views of row `row`."""
    module = copy.deepcopy(template)
    for (name, _), stacked in zip(template.named_parameters(), params, strict=True):
        owner, leaf = _owner(module, name)
        owner._parameters[leaf] = nn.Parameter(stacked.detach()[row])
    for (name, _), stacked in zip(template.named_buffers(), buffers, strict=True):
        owner, leaf = _owner(module, name)
        owner._buffers[leaf] = stacked[row]
    return module


def _owner(module: nn.Module, name: str) -> tuple[nn.Module, str]:
    path, _, leaf = name.rpartition(".")
    return (module.get_submodule(path) if path else module), leaf


def has_workers_forward(model: nn.Module) -> bool:
    """Whether `model`'s all-workers forward computes its `forward`: both written by one
    class. A subclass that rewrites `forward` alone (a dropout added, say) inherits a
    `forward_workers` that skips the change; it runs under vmap."""

    def definer(name: str) -> type | None:
        return next((c for c in type(model).__mro__ if name in vars(c)), None)

    own = definer("forward_workers")
    return own is not None and definer("forward") is own


def _check_trainable(template: nn.Module) -> None:
    """Refuse, in one line, what the worker axis cannot hold as the model means it: each
    parameter is stacked once per worker under its name, trained and sent by the methods."""
    model = type(template).__name__
    first: dict[int, str] = {}
    for name, p in template.named_parameters(remove_duplicate=False):
        if id(p) in first:
            raise UserError(
                f"model {model}: {name} is the same tensor as {first[id(p)]} (tied weights), "
                "which each worker's copy would hold apart; register the shared module once "
                "and call it twice, or untie them"
            )
        first[id(p)] = name
        if not p.requires_grad:
            raise UserError(
                f"model {model}: parameter {name} has requires_grad=False, but every "
                "parameter is trained and sent here; keep a fixed tensor as a buffer "
                "(register_buffer)"
            )


class Replicas:
    """`n` workers' copies of `template`, all starting from its weights."""

    def __init__(self, template: nn.Module, n: int, vectorize: str = "loop", shared: bool = False):
        if vectorize not in VECTORIZE:
            raise ValueError(f"vectorize={vectorize!r} must be one of {VECTORIZE}")
        _check_trainable(template)
        own = has_workers_forward(template)
        if vectorize == "stacked" and not own:
            # the config refuses this by model name before anything runs (engine_checks)
            raise ValueError(
                f"vectorize=stacked: {type(template).__name__} has no forward_workers of its own"
            )
        if vectorize == "auto":
            vectorize = "stacked" if own else "vmap"
        self.n, self.vectorize = n, vectorize
        self.template = template
        self.names = [name for name, _ in template.named_parameters()]
        self.buffer_names = [name for name, _ in template.named_buffers()]
        self.shared = shared and n > 1
        self.params = [self._stack(p) for p in template.parameters()]
        for p in self.params:
            p.grad = torch.zeros_like(p)
        self.buffers = [
            b.detach().unsqueeze(0).repeat(n, *[1] * b.dim()) for b in template.buffers()
        ]
        self.workers = [_view_module(template, self.params, self.buffers, i) for i in range(n)]
        self._vmapped = None

    def _stack(self, p: torch.Tensor) -> torch.Tensor:
        """`p` as the (n, *shape) leaf of every worker's copy: n rows, or one row shared."""
        row = p.detach().unsqueeze(0)
        if self.shared:
            return row.clone().expand(self.n, *p.shape).requires_grad_()
        return row.repeat(self.n, *[1] * p.dim()).requires_grad_()

    # ------------------------------------------------------------ what methods see
    def parameters(self) -> list[torch.Tensor]:
        return list(self.params)

    def named_parameters(self) -> list[tuple[str, torch.Tensor]]:
        return list(zip(self.names, self.params, strict=True))

    def float_tensors(self) -> list[torch.Tensor]:
        """Parameters and floating buffers: what a model average covers."""
        return [*self.params, *(b for b in self.buffers if b.is_floating_point())]

    # ------------------------------------------------------------ forward/backward
    def forward_backward(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        loss_fn: LossFn,
        into: GradientTargets | None = None,
    ) -> torch.Tensor:
        """Each worker's loss on its batch (x[i], y[i]), a CPU tensor under every
        vectorization (a metric, beside CPU sums); gradients into `p.grad` rows.

        `into` (the strategy's `gradient_targets`): under `stacked`, a weight the model's
        layers can take it for gets its gradient added into, or written to, its target by
        the gradient's own product, and `p.grad` is that target
        (`repro.workload.worker_layers.weight_grads_into`); every other parameter, and
        every other vectorization, gets fresh gradients and leaves its target untouched.
        `into.sq_norms` are filled for the gradients put in place, and for those alone."""
        if self.vectorize == "loop":
            return self._loop(x, y, loss_fn)
        params = dict(zip(self.names, self.params, strict=True))
        targets, norms = {}, {}
        if into and self.vectorize == "stacked":
            targets = {params[n]: t.view(params[n].shape) for n, t in into.tensors.items()}
            norms = {params[n]: t for n, t in (into.sq_norms or {}).items()}
        with worker_layers.weight_grads_into(targets, bool(into and into.add), norms):
            if self.vectorize == "stacked":
                outputs = self.template.forward_workers(params, x)
            else:
                outputs = self._vmap(params, x)
            # the loss worker by worker: batched under vmap, cross-entropy runs as a Python
            # decomposition that imports sympy (0.5 s) and costs ms per step; unbatched it
            # is the lone worker's own kernel
            losses = torch.stack([loss_fn(outputs[i], y[i]) for i in range(self.n)])
            grads = torch.autograd.grad(losses.sum(), self.params, allow_unused=bool(targets))
        for stacked, g in zip(self.params, grads, strict=True):
            # autograd's own fresh tensor, taken rather than copied; None: put in its target
            stacked.grad = targets[stacked] if g is None else g
        return losses.detach().float().cpu()

    def _loop(self, x: torch.Tensor, y: torch.Tensor, loss_fn: LossFn) -> torch.Tensor:
        """Fresh gradient tensors every step, as the vectorized backward gives: a method may
        have left `p.grad` a view of its update (shared rows), which is not written into."""
        losses = torch.empty(self.n, dtype=torch.float32)
        grads = [[] for _ in self.params]
        for i, module in enumerate(self.workers):
            loss = loss_fn(module(x[i]), y[i])
            worker_grads = torch.autograd.grad(loss, list(module.parameters()))
            for rows, g in zip(grads, worker_grads, strict=True):
                rows.append(g)
            losses[i] = loss.detach()
        for stacked, rows in zip(self.params, grads, strict=True):
            # one worker (a process of its own): its gradient as the single row, uncopied
            stacked.grad = rows[0].unsqueeze(0) if self.n == 1 else torch.stack(rows)
        return losses

    def _vmap(self, params: dict, x: torch.Tensor) -> torch.Tensor:
        if self._vmapped is None:
            template = self.template

            def one(params, buffers, xi):
                return functional_call(template, (params, buffers), (xi,))

            self._vmapped = vmap(one, randomness="different")
        buffers = dict(zip(self.buffer_names, self.buffers, strict=True))
        try:
            return self._vmapped(params, buffers, x)
        except RuntimeError as e:
            # torch.func refuses some operations (data-dependent control flow, in-place
            # writes into unbatched tensors); that surfaces at the first step.
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise UserError(
                f"this model cannot be vectorized over workers ({reason}); use "
                "trainer.vectorize=loop or trainer.engine=processes"
            ) from None

    # ------------------------------------------------------------ evaluation
    def module_with(self, flat: torch.Tensor) -> nn.Module:
        """A plain module holding `flat` (one worker's float tensors end to end) and worker
        0's other buffers: the model a log point evaluates."""
        module = copy.deepcopy(self.workers[0])
        tensors = [*module.parameters(), *(b for b in module.buffers() if b.is_floating_point())]
        with torch.no_grad():
            offset = 0
            for t in tensors:
                t.copy_(flat[offset : offset + t.numel()].view_as(t))
                offset += t.numel()
        return module

    # ------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """n rows per parameter whether or not they are shared (a shared row's clone is
        contiguous), so a checkpoint does not depend on how the rows are held."""
        return {
            "params": [p.detach().clone() for p in self.params],
            "buffers": [b.clone() for b in self.buffers],
        }

    @torch.no_grad()
    def load_state_dict(self, state: dict) -> None:
        """In place: the worker modules' views and the optimizer's references stay valid.
        Shared rows take the first saved row (a run whose workers apply one update saved
        n equal rows)."""
        for p, saved in zip(self.params, state["params"], strict=True):
            if self.shared:
                p[0].copy_(saved[0])
            else:
                p.copy_(saved)
        for b, saved in zip(self.buffers, state["buffers"], strict=True):
            b.copy_(saved)
