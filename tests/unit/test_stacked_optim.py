"""The stacked SGD and Adam against torch.optim's own, bit for bit; their state dicts in
torch's layout; a stacked step equal to each worker's own optimizer, also when identical
rows are stepped as one; and no torch._dynamo."""

import subprocess
import sys

import pytest
import torch

from repro.optim.lamb import Lamb
from repro.optim.stacked import SGD, Adam

STEPS = 6


def _grads(shapes, seed):
    g = torch.Generator().manual_seed(seed)
    return [[torch.randn(s, generator=g) for s in shapes] for _ in range(STEPS)]


def _params(shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g).requires_grad_() for s in shapes]


def _run(opt_cls, kw, shapes=((3, 4), (4,)), seed=1):
    params = _params(shapes)
    opt = opt_cls(params, **kw)
    for grads in _grads(shapes, seed):
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()
        opt.step()
    return [p.detach() for p in params], opt


SGD_CASES = [
    dict(lr=0.1),
    dict(lr=0.1, momentum=0.9),
    dict(lr=0.05, momentum=0.9, nesterov=True),
    dict(lr=0.1, momentum=0.5, weight_decay=0.01),
]
ADAM_CASES = [
    dict(lr=0.01),
    dict(lr=0.003, betas=(0.8, 0.99), eps=1e-6),
    dict(lr=0.01, weight_decay=0.1),
]


@pytest.mark.parametrize("kw", SGD_CASES)
def test_sgd_steps_as_torch_sgd_bit_for_bit(kw):
    ours, _ = _run(SGD, kw)
    theirs, _ = _run(torch.optim.SGD, kw)
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))


@pytest.mark.parametrize("kw", ADAM_CASES)
def test_adam_steps_as_torch_adam_bit_for_bit(kw):
    ours, _ = _run(Adam, kw)
    theirs, _ = _run(torch.optim.Adam, kw)
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))


LAMB_PER_WORKER = dict(lr=0.01, weight_decay=0.01, clamp=(0.1, 5.0))


@pytest.mark.parametrize(
    ("cls", "kw", "alone_kw"),
    [
        (SGD, SGD_CASES[2], SGD_CASES[2]),
        (Adam, ADAM_CASES[2], ADAM_CASES[2]),
        # LAMB's trust ratio per worker: each row's norms, as a lone worker's whole tensor's
        (Lamb, {**LAMB_PER_WORKER, "worker_axis": True}, LAMB_PER_WORKER),
    ],
)
def test_stacked_rows_step_as_each_workers_own_optimizer(cls, kw, alone_kw):
    workers = 3
    stacked, _ = _run(cls, kw, shapes=((workers, 5),))
    for w in range(workers):
        # worker w alone: its row of the start and of every gradient, its own optimizer
        p = _params(((workers, 5),))[0].detach()[w].clone().requires_grad_()
        opt = cls([p], **alone_kw)
        for (g,) in _grads(((workers, 5),), 1):
            p.grad = g[w].clone()
            opt.step()
        assert torch.equal(stacked[0][w], p.detach())


@pytest.mark.parametrize(
    ("cls", "kw"),
    [
        (SGD, SGD_CASES[3]),
        (SGD, SGD_CASES[2]),
        (Adam, ADAM_CASES[2]),
        (Lamb, dict(lr=0.01, weight_decay=0.01, worker_axis=True)),
    ],
)
def test_a_shared_row_stepped_once_equals_every_row_stepped(cls, kw):
    # workers holding one model and one gradient (a common update): their one shared row,
    # stepped once on row 0, must end where stepping every row of their own copies leaves
    # them, bit for bit, with slots of one row
    workers, shapes = 4, ((4, 3, 5), (4, 5))
    g = torch.Generator().manual_seed(3)
    start = [torch.randn(s[1:], generator=g).expand(s).clone() for s in shapes]
    grads = [[torch.randn(s[1:], generator=g).expand(s).clone() for s in shapes] for _ in range(4)]
    results = []
    for shared in (False, True):
        params = [t[:1].clone().expand_as(t) if shared else t.clone() for t in start]
        params = [p.requires_grad_() for p in params]
        opt = cls(params, **kw)
        for step_grads in grads:
            for p, grad in zip(params, step_grads, strict=True):
                p.grad = grad.clone()
            opt.step()
        results.append([p.detach().clone() for p in params])
        slots = [v for state in opt.state.values() for v in state.values()]
        rows = {v.shape[0] for v in slots if isinstance(v, torch.Tensor) and v.dim()}
        assert rows == ({1} if shared else {workers})
        assert all(p.stride(0) == 0 for p in params) == shared
    for own, one in zip(*results, strict=True):
        assert torch.equal(own, one)
        assert all(torch.equal(own[w], own[0]) for w in range(workers))


@pytest.mark.parametrize(
    ("cls", "kw"),
    [
        (SGD, SGD_CASES[3]),
        (SGD, SGD_CASES[2]),
        (Adam, ADAM_CASES[2]),
        (Lamb, dict(lr=0.01, weight_decay=0.01, worker_axis=True, clamp=(0.1, 5.0))),
        (Lamb, dict(lr=0.01, weight_decay=0.01)),
    ],
)
def test_a_group_steps_each_parameter_as_an_optimizer_of_its_own(cls, kw):
    # a step runs each operation over the whole group at once: every parameter, a shared
    # row among them, must still end exactly where an optimizer holding it alone puts it
    shapes = ((4, 3, 5), (4, 5), (4, 2, 2, 3))
    g = torch.Generator().manual_seed(5)
    start = [torch.randn(s, generator=g) for s in shapes]
    start[1] = start[1][:1].clone().expand(shapes[1])  # one row shared by every worker
    start[2].zero_()  # a zero norm: LAMB's ratio-1 branch beside the others
    grads = [[torch.randn(s, generator=g) for s in shapes] for _ in range(4)]
    for step_grads in grads:
        step_grads[1] = step_grads[1][:1].expand(shapes[1]).clone()

    def trained(groups):
        params = [t.clone() if t.stride(0) else t[:1].clone().expand_as(t) for t in start]
        params = [p.requires_grad_() for p in params]
        optimizers = [cls([params[i] for i in group], **kw) for group in groups]
        for step_grads in grads:
            for p, grad in zip(params, step_grads, strict=True):
                p.grad = grad.clone()
            for opt in optimizers:
                opt.step()
        return [p.detach() for p in params]

    together, alone = trained([[0, 1, 2]]), trained([[0], [1], [2]])
    assert all(torch.equal(a, b) for a, b in zip(together, alone, strict=True))


@pytest.mark.parametrize(("cls", "kw"), [(SGD, SGD_CASES[1]), (Adam, ADAM_CASES[0])])
def test_state_dict_round_trip_continues_as_an_uninterrupted_run(cls, kw):
    shapes = ((3, 4), (4,))
    uninterrupted, _ = _run(cls, kw, shapes)
    params = _params(shapes)
    opt = cls(params, **kw)
    grads = _grads(shapes, 1)
    for step, step_grads in enumerate(grads):
        if step == STEPS // 2:
            saved = opt.state_dict()
            params = [p.detach().clone().requires_grad_() for p in params]
            opt = cls(params, **{**kw, "lr": 123.0})  # the saved lr must win
            opt.load_state_dict(saved)
        for p, g in zip(params, step_grads, strict=True):
            p.grad = g.clone()
        opt.step()
    assert all(torch.equal(p.detach(), u) for p, u in zip(params, uninterrupted, strict=True))


def test_state_dict_has_torchs_layout_and_resumes_from_torchs():
    kw = ADAM_CASES[0]
    _, ours = _run(Adam, kw)
    theirs_params, theirs = _run(torch.optim.Adam, kw)
    a, b = ours.state_dict(), theirs.state_dict()
    assert a["state"].keys() == b["state"].keys() == {0, 1}
    assert [g["params"] for g in a["param_groups"]] == [g["params"] for g in b["param_groups"]]
    assert all(
        torch.equal(a["state"][i][k], b["state"][i][k])
        for i in (0, 1)
        for k in ("exp_avg", "exp_avg_sq")
    )
    # a checkpoint of torch's Adam (its step count a tensor) resumes in ours exactly as
    # torch's own optimizer goes on, and ours holds copies, not torch's tensors
    params = [p.clone().requires_grad_() for p in theirs_params]
    resumed = Adam(params, **kw)
    resumed.load_state_dict(b)
    assert all(
        resumed.state[p]["exp_avg"].data_ptr() != theirs.state[q]["exp_avg"].data_ptr()
        for p, q in zip(params, theirs.param_groups[0]["params"], strict=True)
    )
    for p, q in zip(params, theirs.param_groups[0]["params"], strict=True):
        p.grad = q.grad = torch.full_like(p, 0.5)
    resumed.step()
    theirs.step()
    assert all(
        torch.equal(p.detach(), q.detach())
        for p, q in zip(params, theirs.param_groups[0]["params"], strict=True)
    )
    assert resumed.state[params[0]]["step"] == STEPS + 1


def test_building_and_stepping_imports_no_dynamo():
    code = (
        "import sys, torch\n"
        "from repro.optim.stacked import SGD, Adam\n"
        "from repro.optim.lamb import Lamb\n"
        "for cls in (SGD, Adam, Lamb):\n"
        "    p = torch.zeros(3, requires_grad=True); p.grad = torch.ones(3)\n"
        "    opt = cls([p], lr=0.1); opt.step(); opt.load_state_dict(opt.state_dict())\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
