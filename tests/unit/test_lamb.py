"""LAMB against a hand-written scalar reference of You et al.'s Algorithm 2."""

import math

import pytest
import torch

from repro.errors import UserError
from repro.optim.lamb import Lamb


def _reference(w, grads, lr, b1, b2, eps, wd, clamp=None, bias_correction=True):
    """Plain-float LAMB for one tensor: every step written out element by element."""
    w = list(w)
    m = [0.0] * len(w)
    v = [0.0] * len(w)
    for t, g in enumerate(grads, start=1):
        m = [b1 * mi + (1 - b1) * gi for mi, gi in zip(m, g, strict=True)]
        v = [b2 * vi + (1 - b2) * gi * gi for vi, gi in zip(v, g, strict=True)]
        c1, c2 = (1 - b1**t, 1 - b2**t) if bias_correction else (1.0, 1.0)
        u = [
            (mi / c1) / (math.sqrt(vi / c2) + eps) + wd * wi
            for mi, vi, wi in zip(m, v, w, strict=True)
        ]
        w_norm = math.sqrt(sum(x * x for x in w))
        u_norm = math.sqrt(sum(x * x for x in u))
        phi = w_norm if clamp is None else min(max(w_norm, clamp[0]), clamp[1])
        ratio = phi / u_norm if w_norm > 0 and u_norm > 0 else 1.0
        w = [wi - lr * ratio * ui for wi, ui in zip(w, u, strict=True)]
    return w


GRADS_W = [[0.5, -1.0, 2.0], [0.1, 0.3, -0.2], [-1.5, 0.0, 0.7]]
GRADS_B = [[1.0, -2.0], [0.5, 0.5], [0.25, -1.0]]


def _run(w0, b0, **kw):
    w = torch.tensor(w0, dtype=torch.float64, requires_grad=True)
    b = torch.tensor(b0, dtype=torch.float64, requires_grad=True)
    opt = Lamb([w, b], **kw)
    for gw, gb in zip(GRADS_W, GRADS_B, strict=True):
        w.grad = torch.tensor(gw, dtype=torch.float64)
        b.grad = torch.tensor(gb, dtype=torch.float64)
        opt.step()
    return w.detach(), b.detach()


@pytest.mark.parametrize(
    "kw",
    [
        dict(lr=0.1, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01),
        dict(lr=0.05, betas=(0.8, 0.99), eps=1e-8, weight_decay=0.0, bias_correction=False),
        dict(lr=0.1, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.1, clamp=(0.5, 1.0)),
    ],
)
def test_three_steps_match_the_hand_reference(kw):
    w0, b0 = [1.0, -2.0, 0.5], [0.0, 0.0]  # a zero bias takes the ratio-1 branch first
    w, b = _run(w0, b0, **kw)
    ref = dict(
        lr=kw["lr"],
        b1=kw["betas"][0],
        b2=kw["betas"][1],
        eps=kw["eps"],
        wd=kw["weight_decay"],
        clamp=kw.get("clamp"),
        bias_correction=kw.get("bias_correction", True),
    )
    expected_w = torch.tensor(_reference(w0, GRADS_W, **ref), dtype=torch.float64)
    expected_b = torch.tensor(_reference(b0, GRADS_B, **ref), dtype=torch.float64)
    torch.testing.assert_close(w, expected_w, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(b, expected_b, rtol=1e-12, atol=1e-14)


def test_first_step_moves_each_layer_by_lr_times_its_norm():
    # Step 1 with bias correction: m_hat/sqrt(v_hat) = sign(g) elementwise (up to eps), so
    # with no decay |u| = sqrt(n) and the layer moves by exactly lr * |w| in norm.
    w = torch.tensor([3.0, 4.0], dtype=torch.float64, requires_grad=True)
    opt = Lamb([w], lr=0.1, eps=1e-12)
    w.grad = torch.tensor([2.0, -0.5], dtype=torch.float64)
    opt.step()
    step = torch.tensor([3.0, 4.0], dtype=torch.float64) - w.detach()
    torch.testing.assert_close(step.norm(), torch.tensor(0.5, dtype=torch.float64))
    # u = [1, -1], |u| = sqrt(2), |w| = 5: step = 0.1 * 5 / sqrt(2) * [1, -1].
    expected = 0.1 * 5.0 / math.sqrt(2) * torch.tensor([1.0, -1.0], dtype=torch.float64)
    torch.testing.assert_close(step, expected)


def test_trust_ratio_is_one_when_a_norm_is_zero():
    zero, two = torch.tensor(0.0), torch.tensor(2.0)
    assert Lamb.trust_ratio(zero, two, None).item() == 1.0
    assert Lamb.trust_ratio(two, zero, None).item() == 1.0
    assert Lamb.trust_ratio(zero, two, (0.5, 1.0)).item() == 1.0
    assert Lamb.trust_ratio(two, torch.tensor(4.0), (0.5, 1.0)).item() == 0.25


def test_parameters_without_gradients_are_left_alone():
    w = torch.ones(3, requires_grad=True)
    Lamb([w], lr=1.0).step()
    assert torch.equal(w.detach(), torch.ones(3))


@pytest.mark.parametrize(
    "kw, setting",
    [
        (dict(lr=-1.0), "lr"),
        (dict(betas=(0.9, 1.0)), "betas"),
        (dict(eps=0.0), "eps"),
        (dict(weight_decay=-0.1), "weight_decay"),
        (dict(clamp=(2.0, 1.0)), "clamp"),
    ],
)
def test_bad_hyperparameters_are_refused(kw, setting):
    with pytest.raises(UserError, match=setting):
        Lamb([torch.zeros(1, requires_grad=True)], **kw)
