"""AdaComm's tau rule (Wang & Joshi 2018, Sec. 4) on losses and learning rates we choose."""

import math

import pytest
import torch

from repro.comm.axis_collectives import AxisCollectives
from repro.config import compose
from repro.errors import UserError
from repro.netmodel.compute import ComputeConfig
from repro.netmodel.cost import Link
from repro.netmodel.timekeeper import TimeKeeper
from repro.strategies.adacomm import AdaCommStrategy
from repro.strategies.base import StepInfo
from repro.strategies.tau_schedule import TauSchedule


def test_loss_rule_shrinks_tau_with_sqrt_of_loss_ratio():
    s = TauSchedule(tau0=20, interval=10.0)
    assert s.observe(now=1.0, loss=2.0, lr=0.1) == 20  # first period sets F(x_0) = 2.0
    for t in (4.0, 7.0):
        assert s.observe(now=t, loss=1.0, lr=0.1) == 20  # interval not over yet
    # interval over at t=10: F(x_1) = mean(2.0, 1.0, 1.0, 0.5) = 1.125
    tau = s.observe(now=10.0, loss=0.5, lr=0.1)
    assert tau == math.ceil(math.sqrt(1.125 / 2.0) * 20) == 15
    # next interval: losses 0.08 -> tau = ceil(sqrt(0.04) * 20) = 4
    s.observe(now=15.0, loss=0.08, lr=0.1)
    assert s.observe(now=20.0, loss=0.08, lr=0.1) == 4


def _decay_run(**kwargs) -> TauSchedule:
    """First interval at lr 0.1 and loss 2.0 (tau stays tau0 = 10); second interval at lr 0.01
    (a x0.1 decay) and loss 1.0, so F(x_l)/F(x_0) = 0.5 and lr_0/lr_l = 10."""
    s = TauSchedule(tau0=10, interval=1.0, rule="loss_lr", **kwargs)
    assert s.observe(now=0.0, loss=2.0, lr=0.1) == 10
    assert s.observe(now=1.0, loss=2.0, lr=0.1) == 10  # interval over: ratio 1, lr unchanged
    assert s.observe(now=1.5, loss=1.0, lr=0.01) == 10  # interval not over yet
    return s


def test_loss_lr_rule_grows_tau_after_lr_decay():
    # tau_l = ceil(sqrt((lr_0 / lr_l) * F(x_l) / F(x_0)) * tau_0) = ceil(sqrt(10 * 0.5) * 10)
    expected = math.ceil(math.sqrt(10 * 0.5) * 10)
    assert expected == 23
    assert _decay_run().observe(now=2.0, loss=1.0, lr=0.01) == expected
    # The loss rule ignores the learning rate: ceil(sqrt(0.5) * 10) = 8.
    s = TauSchedule(tau0=10, interval=1.0, rule="loss")
    for now, loss, lr in [(0.0, 2.0, 0.1), (1.0, 2.0, 0.1), (1.5, 1.0, 0.01)]:
        s.observe(now=now, loss=loss, lr=lr)
    assert s.observe(now=2.0, loss=1.0, lr=0.01) == math.ceil(math.sqrt(0.5) * 10) == 8


def test_a_warm_up_is_not_a_decay_of_the_rate():
    """lr_0 is the base rate: a warm-up's smaller first rates made lr_0 / lr_l < 1 once the
    rate had ramped up, and tau shrank at an unchanged loss (4 -> 2 here)."""
    s = TauSchedule(tau0=4, interval=4.0, rule="loss_lr")
    rates = [0.05 * min(step / 50, 1.0) for step in range(4, 201, 4)]  # 50 warm-up steps
    taus = [
        s.observe(now=float(step), loss=2.3, lr=lr)
        for step, lr in zip(range(4, 201, 4), rates, strict=True)
    ]
    assert set(taus) == {4}
    # a x0.1 decay after it raises tau by sqrt(10) at the same loss: ceil(sqrt(10) * 4) = 13
    s.observe(now=204.0, loss=2.3, lr=0.005)
    assert s.observe(now=208.0, loss=2.3, lr=0.005) == math.ceil(math.sqrt(10) * 4) == 13


def test_tau_max_caps_only_when_set():
    assert _decay_run(tau_max=15).observe(now=2.0, loss=1.0, lr=0.01) == 15
    assert _decay_run(tau_max=100).observe(now=2.0, loss=1.0, lr=0.01) == 23
    # A loss above F(x_0) raises tau under the loss rule too, unless capped.
    s = TauSchedule(tau0=10, interval=1.0)
    s.observe(now=0.0, loss=1.0, lr=0.1)
    assert s.observe(now=1.0, loss=3.0, lr=0.1) == math.ceil(math.sqrt(2.0) * 10) == 15


def test_config_default_is_uncapped_and_reaches_the_schedule():
    cfg = compose(["method=adacomm", "method.rule=loss_lr", "method.tau0=10"]).method
    assert cfg.tau_max is None
    assert AdaCommStrategy(cfg, world_size=2).schedule.tau_max is None
    capped = compose(["method=adacomm", "method.tau0=10", "method.tau_max=10"]).method
    assert AdaCommStrategy(capped, world_size=2).schedule.tau_max == 10


def test_tau_never_below_one():
    s = TauSchedule(tau0=8, interval=1.0)
    s.observe(now=0.0, loss=1.0, lr=0.1)
    assert s.observe(now=1.0, loss=1e-12, lr=0.1) == math.ceil(math.sqrt(0.5) * 8)
    assert s.observe(now=2.0, loss=1e-12, lr=0.1) == 1


def test_tau0_search_picks_fastest_candidate():
    s = TauSchedule(tau0=1, interval=5.0, candidates=[32, 8, 2], search_window=1.0)
    # window for 32: loss 2.0 -> 1.0 in 1 s (rate 1.0); 8: 1.0 -> 0.5 in 1 s (0.5); 2: 0.5->0.4
    assert s.observe(0.0, 2.0, 0.1) == 32
    assert s.observe(1.0, 1.0, 0.1) == 8
    assert s.observe(2.0, 0.5, 0.1) == 2
    assert s.observe(3.0, 0.4, 0.1) == 32
    assert not s.searching and s.tau0 == 32


def test_state_round_trip():
    s = TauSchedule(tau0=16, interval=2.0)
    for i in range(5):
        s.observe(float(i), 1.0 / (i + 1), 0.1)
    t = TauSchedule(tau0=16, interval=2.0)
    t.load_state_dict(s.state_dict())
    assert [t.observe(9.0, 0.05, 0.1)] == [s.observe(9.0, 0.05, 0.1)]


@pytest.mark.parametrize(
    "overrides,needle",
    [
        (["method.tau0=0"], "method.tau0"),
        (["method.interval_s=0"], "method.interval_s"),
        (["method.interval_s=-1"], "method.interval_s"),
        (["method.tau0_search=true", "method.tau0_candidates=[]"], "tau0_candidates"),
        (["method.rule=magic"], "method.rule"),
        # local SGD's fixed period, which the schedule replaces: a run of it would be the
        # default's, under another run directory
        (["method.tau=64"], r"^method.tau=64 is local_sgd's .* set method.tau0=64$"),
        (["method.tau=0"], r"^method.tau=0 is local_sgd's fixed period"),
        (["method.tau0=20", "method.tau_max=0"], r"method.tau_max=0 must be >= method.tau0 \(20\)"),
        (["method.tau0=20", "method.tau_max=19"], "method.tau_max=19"),
        (
            ["method.tau0_search=true", "method.tau0_candidates=[32,8]", "method.tau_max=16"],
            "largest tau0_candidates",
        ),
    ],
)
def test_bad_adacomm_settings(overrides, needle):
    with pytest.raises(UserError, match=needle):
        compose(["method=adacomm", *overrides])


def test_the_interval_is_judged_on_every_workers_compute_under_measured_compute():
    """A period's local steps exchange no compute seconds under compute.mode=measured, so the
    clock as the averaging step began had stood at the previous averaging (0 s at the
    first): AdaComm's T0 intervals ended one period late there, not under sampled compute."""
    ends = {}
    for mode in ("measured", "sampled"):
        compute = ComputeConfig(mode=mode, dist="constant", mean_ms=10.0)
        keeper = TimeKeeper(compute, AxisCollectives(2), seed=0, bytes_scale=1.0)
        link = Link(1e-3, 1e9)
        for step in (1, 2, 3):  # three local steps of 10 ms on each worker
            keeper.advance(step, 0.01, [], link)
        cfg = compose(["method=adacomm", "method.tau0=4", "method.interval_s=0.025"]).method
        strategy = AdaCommStrategy(cfg, world_size=2)
        info = StepInfo(4, 0.0, torch.ones(2), 0.1, keeper.now(), link, keeper.synced_now)
        strategy.on_average(info, avg_loss=1.0, steps=4)
        ends[mode] = strategy.schedule.interval_start  # 0.03 s >= T0: a new interval began
    assert ends == {"measured": pytest.approx(0.03), "sampled": pytest.approx(0.03)}
