"""SGD and Adam for stacked worker parameters, without torch.optim.

The update rules are torch's own single-tensor algorithms (`torch.optim.sgd.
_single_tensor_sgd`, `torch.optim.adam._single_tensor_adam`, the path torch takes on a CPU),
operation for operation, so every parameter steps bit for bit as `torch.optim.SGD` /
`torch.optim.Adam` would step it (tests/unit/test_stacked_optim.py holds that). Both rules
are elementwise, so one call steps every worker row of a stacked tensor exactly as that
worker's own optimizer would.

A step runs each operation of the rule once over all of a group's tensors (torch's
`_foreach_*` ops) instead of once per tensor: on a CPU a foreach op calls each tensor's own
kernel in turn, so the bits are the single-tensor rule's, without a Python-level call per
tensor and operation (Adasum's LAMB step over the MNIST-1D CNN's 8 stacked parameters was
22 operations each).

Why not torch.optim itself: every `torch.optim.Optimizer` imports `torch._dynamo` the first
time it adds a parameter group or steps (its methods are wrapped to keep the compiler out),
which costs about 1.7 s of CPU per process here, as much again as `import torch`. A
simulated run pays it once, a run of the process engine once per worker; neither compiles
anything. The state dict keeps torch's layout ({"state": {index: slots}, "param_groups":
[{..., "params": [index, ...]}]}), so checkpoints written by torch's optimizers still load.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable

import torch


class StackedOptimizer(ABC):
    """Parameter groups, per-parameter state and torch's state-dict layout; a subclass
    supplies `_update(params, grads, group, states)` for one group's tensors.

    A parameter whose workers share one row (stride 0 on the worker axis: workers that
    apply one common update, `repro.train.replicas`) is stepped once, on row 0 with row 0's
    gradient, which moves every worker: each ends exactly where its own update would have
    put it (the rules are elementwise, or per row for LAMB), at a worker's cost instead of
    every held worker's, and its slots hold one row."""

    def __init__(self, params: Iterable[torch.Tensor] | Iterable[dict], defaults: dict):
        params = list(params)
        if not params:
            raise ValueError("an optimizer needs at least one parameter")
        groups = params if isinstance(params[0], dict) else [{"params": params}]
        self.param_groups = [{**defaults, **g, "params": list(g["params"])} for g in groups]
        self.state: dict[torch.Tensor, dict] = {}

    @abstractmethod
    def _update(
        self, params: list[torch.Tensor], grads: list[torch.Tensor], group: dict, states: list
    ) -> None:
        """Step each of `params` by its gradient in `grads` under `group`'s
        hyperparameters, keeping its slots in its dict of `states`."""

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            params, grads, states = [], [], []
            for p in group["params"]:
                if p.grad is None:
                    continue
                states.append(self.state.setdefault(p, {}))
                shared = p.shape[0] > 1 and p.stride(0) == 0
                params.append(p[:1] if shared else p)
                grads.append(p.grad[:1] if shared else p.grad)
            if params:
                self._update(params, grads, group, states)

    @staticmethod
    def _moments(params: list, states: list) -> tuple[list, list, list[int]]:
        """Adam's and LAMB's slots, made on a tensor's first step: each tensor's first and
        second moment and its step count, the count advanced by this step."""
        for p, state in zip(params, states, strict=True):
            if not state:
                state["step"] = 0
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            # int(): a checkpoint of torch's Adam holds the count as a tensor
            state["step"] = int(state["step"]) + 1
        return (
            [state["exp_avg"] for state in states],
            [state["exp_avg_sq"] for state in states],
            [state["step"] for state in states],
        )

    def _params(self) -> list[torch.Tensor]:
        return [p for group in self.param_groups for p in group["params"]]

    def state_dict(self) -> dict:
        index = {p: i for i, p in enumerate(self._params())}
        groups = []
        for group in self.param_groups:
            hyper = {k: v for k, v in group.items() if k != "params"}
            groups.append({**hyper, "params": [index[p] for p in group["params"]]})
        state = {index[p]: dict(slots) for p, slots in self.state.items() if slots}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, saved: dict) -> None:
        """Hyperparameters and state from `saved`, each slot copied onto its parameter's
        device (a checkpoint written on one device resumes on another; the copy also keeps
        a snapshot that is loaded twice from being stepped through)."""
        sizes = [len(g["params"]) for g in saved["param_groups"]]
        if sizes != [len(g["params"]) for g in self.param_groups]:
            raise ValueError(f"saved optimizer has parameter groups of sizes {sizes}")
        for group, stored in zip(self.param_groups, saved["param_groups"], strict=True):
            group.update({k: v for k, v in stored.items() if k != "params"})
        params = self._params()
        self.state = {}
        for i, slots in saved["state"].items():
            p = params[int(i)]
            self.state[p] = {
                k: v.to(p.device, copy=True) if isinstance(v, torch.Tensor) else v
                for k, v in slots.items()
            }


class SGD(StackedOptimizer):
    """Stochastic gradient descent with heavy-ball or Nesterov momentum (no dampening) and
    L2 weight decay added to the gradient, as torch.optim.SGD."""

    def __init__(self, params, lr: float, momentum=0.0, nesterov=False, weight_decay=0.0):
        defaults = dict(lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay)
        super().__init__(params, defaults)

    def _update(self, params, grads, group, states):
        if group["weight_decay"]:
            grads = torch._foreach_add(grads, params, alpha=group["weight_decay"])
        momentum = group["momentum"]
        if momentum:
            bufs, old_bufs, old_grads = [], [], []
            for grad, state in zip(grads, states, strict=True):
                buf = state.get("momentum_buffer")
                if buf is None:
                    buf = state["momentum_buffer"] = grad.detach().clone()
                else:
                    old_bufs.append(buf)
                    old_grads.append(grad)
                bufs.append(buf)
            if old_bufs:
                torch._foreach_mul_(old_bufs, momentum)
                torch._foreach_add_(old_bufs, old_grads)
            grads = torch._foreach_add(grads, bufs, alpha=momentum) if group["nesterov"] else bufs
        torch._foreach_add_(params, grads, alpha=-group["lr"])


class Adam(StackedOptimizer):
    """Adam (Kingma & Ba, Algorithm 1) with bias correction and L2 weight decay added to the
    gradient, as torch.optim.Adam (amsgrad off)."""

    def __init__(self, params, lr: float, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay)
        super().__init__(params, defaults)

    def _update(self, params, grads, group, states):
        exp_avgs, exp_avg_sqs, counts = self._moments(params, states)
        steps = [float(t) for t in counts]
        b1, b2 = group["betas"]
        if group["weight_decay"]:
            grads = torch._foreach_add(grads, params, alpha=group["weight_decay"])
        torch._foreach_lerp_(exp_avgs, grads, 1 - b1)
        torch._foreach_mul_(exp_avg_sqs, b2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - b2)
        denoms = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_div_(denoms, [(1 - b2**t) ** 0.5 for t in steps])
        torch._foreach_add_(denoms, group["eps"])
        step_sizes = [-(group["lr"] / (1 - b1**t)) for t in steps]
        torch._foreach_addcdiv_(params, exp_avgs, denoms, step_sizes)
