"""`method=topk`'s config: the MOO settings' defaults, the checks on bad input, composition
with the network's byte scale, and the NCCL environment of a fixed allreduce choice."""

import math
import re

import pytest

from repro.config import compose
from repro.errors import UserError
from repro.strategies.topk import TopKConfig, TopKStrategy


def test_moo_settings_default_to_the_paper_and_reach_the_controller():
    cfg = TopKConfig(cr_controller="moo")
    assert cfg.candidates == [0.1, 0.033, 0.011, 0.004, 0.001]
    assert cfg.weights == [0.6, 0.4]
    assert cfg.ratio_bounds == [0.001, 0.1]
    assert cfg.reprobe_change == 0.1
    assert cfg.var_norm == "grad"  # the paper's; the authors' smoothing is an option
    assert (cfg.var_window, cfg.var_smoothing) == (25, 0.001)  # the authors' defaults
    assert cfg.layer_split == "per_tensor"
    custom = TopKConfig(
        cr_controller="moo",
        candidates=[0.2, 0.05, 0.01],
        weights=[0.5, 0.5],
        ratio_bounds=[0.01, 0.2],
        reprobe_change=0.25,
    )
    controller = TopKStrategy(custom, 4).controller
    assert controller.candidates == (0.2, 0.05, 0.01)
    assert controller.weights == (0.5, 0.5)
    assert controller.bounds == (0.01, 0.2)
    assert controller.reprobe_change == 0.25
    probes = {c: (min(1.0, 0.95 + 0.12 * math.log(c / 0.1)), 0.01 + c) for c in (0.2, 0.05, 0.01)}
    assert 0.01 <= controller.solve(probes) <= 0.2
    assert not controller.needs_probe(0.5)
    assert not controller.needs_probe(0.62)  # 24%: under this threshold
    assert controller.needs_probe(0.625)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"cr": 0.0}, "method.cr=0.0"),
        ({"cr": 1.5}, "method.cr=1.5"),
        ({"collective": "ring"}, "method.collective='ring'"),
        ({"leader": "max"}, "method.leader='max'"),
        ({"cr_controller": "pid"}, "method.cr_controller='pid'"),
        ({"cr": 1.0, "collective": "allgather"}, "method.collective=allgather"),
        ({"candidates": [0.1, 2.0]}, "method.candidates"),
        ({"weights": [0.7, 0.4]}, "method.weights"),
        ({"probe_steps": 0}, "method.probe_steps=0"),
        ({"gain_window": 0}, "method.gain_window=0"),
        ({"bytes_scale": 0.0}, "method.bytes_scale=0.0"),
        ({"var_norm": "residual"}, "method.var_norm='residual'"),
        ({"var_window": 0}, "method.var_window=0 must be at least 1"),
        ({"var_smoothing": 1.0}, "method.var_smoothing=1.0 must be in [0, 1)"),
        ({"var_smoothing": -0.1}, "method.var_smoothing=-0.1"),
        ({"layer_split": "remainder"}, "method.layer_split='remainder'"),
        ({"layer_split": "exact_budget"}, "method.layerwise=true as well"),
        ({"ratio_bounds": [0.1, 0.001]}, "method.ratio_bounds=[0.1, 0.001] must be two ratios"),
        ({"ratio_bounds": [0.0, 0.1]}, "method.ratio_bounds=[0.0, 0.1]"),
        ({"ratio_bounds": [0.01, 1.5]}, "method.ratio_bounds=[0.01, 1.5]"),
        ({"ratio_bounds": [0.01]}, "method.ratio_bounds=[0.01]"),
        ({"reprobe_change": 0.0}, "method.reprobe_change=0.0 must be a positive fraction"),
        ({"reprobe_change": -0.1}, "method.reprobe_change=-0.1"),
        ({"reprobe_change": math.inf}, "method.reprobe_change=inf"),
        (
            {"cr_controller": "moo", "collective": "allgather", "candidates": [1.0, 0.1]},
            "method.candidates < 1",
        ),
    ],
)
def test_topk_config_rejects_bad_input(overrides, message):
    with pytest.raises(UserError, match=re.escape(message)):
        TopKConfig(**overrides)


def test_a_bad_network_byte_scale_is_named_where_the_method_follows_it():
    """The method's copy is checked first, so the setting the user wrote must be named."""
    with pytest.raises(UserError) as err:
        compose(["method=topk", "network.bytes_scale=-1"])
    assert "network.bytes_scale" in str(err.value)
    # the copy set apart from the network's would size messages unlike the modeled clock
    with pytest.raises(UserError) as err:
        compose(["method=topk", "method.bytes_scale=5"])
    assert str(err.value) == (
        "method.bytes_scale=5.0 mirrors network.bytes_scale=1.0; set network.bytes_scale instead"
    )


def test_method_topk_composes_and_follows_the_network_byte_scale():
    cfg = compose(["method=topk", "network=flex_c1", "network.bytes_scale=64"]).method
    assert isinstance(cfg, TopKConfig)
    assert (cfg.cr, cfg.collective, cfg.leader, cfg.weights) == (0.01, "auto", "star", [0.6, 0.4])
    assert cfg.bytes_scale == 64.0
    with pytest.raises(UserError, match="method.leader='max'"):
        compose(["method=topk", "method.leader=max"])


def test_nccl_env_for_fixed_allreduce_choices():
    assert TopKConfig(collective="ar_tree").process_env() == {"NCCL_ALGO": "allreduce:tree"}
    assert TopKConfig(collective="ar_ring").process_env() == {"NCCL_ALGO": "allreduce:ring"}
    assert TopKConfig(collective="auto").process_env() == {}
