"""Network configs, the C1 schedule, and the network presets as Hydra composes them."""

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from repro.config import compose as compose_run
from repro.errors import UserError
from repro.netmodel.cost import Link
from repro.netmodel.schedule import NetworkConfig, NetworkPhase, NetworkSchedule, gbps_to_Bps

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
PRESETS = ["loopback", "eth1g", "eth10g", "ib100g", "wan", "flex_c1"]

C1 = [
    {"from_epoch": 0, "latency_ms": 1.0, "bandwidth_gbps": 25.0},
    {"from_epoch": 12, "latency_ms": 1.0, "bandwidth_gbps": 1.0},
    {"from_epoch": 24, "latency_ms": 50.0, "bandwidth_gbps": 1.0},
    {"from_epoch": 36, "latency_ms": 50.0, "bandwidth_gbps": 25.0},
]


def c1() -> NetworkConfig:
    return NetworkConfig(name="c1", latency_ms=1.0, bandwidth_gbps=25.0, schedule=C1)


def test_gbps_is_bits():
    assert gbps_to_Bps(1.0) == 125e6
    assert gbps_to_Bps(25.0) == 3.125e9


@pytest.mark.parametrize(
    ("epoch", "phase", "link"),
    [
        (0.0, 0, Link(1e-3, 3.125e9)),  # paper epoch 1
        (11.99, 0, Link(1e-3, 3.125e9)),  # paper epoch 12
        (12.0, 1, Link(1e-3, 125e6)),  # paper epoch 13
        (23.5, 1, Link(1e-3, 125e6)),
        (24.0, 2, Link(50e-3, 125e6)),  # paper epoch 25
        (35.9, 2, Link(50e-3, 125e6)),
        (36.0, 3, Link(50e-3, 3.125e9)),  # paper epoch 37 on
        (400.0, 3, Link(50e-3, 3.125e9)),
    ],
)
def test_c1_link_at_epochs(epoch, phase, link):
    schedule = NetworkSchedule.from_config(c1())
    assert schedule.phase_index(epoch) == phase
    assert schedule.link_at(epoch) == link


def test_constant_network_has_one_phase():
    schedule = NetworkSchedule.from_config(NetworkConfig(latency_ms=0.1, bandwidth_gbps=10.0))
    assert schedule.phase_index(0.0) == schedule.phase_index(99.0) == 0
    assert schedule.link_at(50.0) == Link(1e-4, 1.25e9)
    with pytest.raises(ValueError, match="epoch"):
        schedule.link_at(-1.0)


def test_phases_accept_dicts_and_dataclasses():
    as_objects = [NetworkPhase(**p) for p in C1]
    cfg = NetworkConfig(latency_ms=1.0, bandwidth_gbps=25.0, schedule=as_objects)
    assert cfg.schedule == c1().schedule


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"bandwidth_gbps": 0.0}, "network.bandwidth_gbps=0.0 must be > 0"),
        ({"bandwidth_gbps": -3.0}, "network.bandwidth_gbps"),
        ({"latency_ms": -1.0}, "network.latency_ms=-1.0 must be >= 0"),
        ({"bytes_scale": 0.0}, "network.bytes_scale"),
    ],
)
def test_bad_link_values(kw, message):
    with pytest.raises(UserError, match=message):
        NetworkConfig(**kw)


def test_schedule_validation_names_the_phase():
    def with_schedule(phases):
        first = phases[0]
        return NetworkConfig(
            latency_ms=first["latency_ms"], bandwidth_gbps=first["bandwidth_gbps"], schedule=phases
        )

    not_increasing = [dict(p) for p in C1]
    not_increasing[2]["from_epoch"] = 12
    with pytest.raises(UserError, match=r"network.schedule\[2\].from_epoch=12 must be greater"):
        with_schedule(not_increasing)
    late_start = [dict(p) for p in C1]
    late_start[0]["from_epoch"] = 1
    with pytest.raises(UserError, match=r"network.schedule\[0\].from_epoch=1 must be 0"):
        with_schedule(late_start)
    zero_bw = [dict(p) for p in C1]
    zero_bw[3]["bandwidth_gbps"] = 0
    with pytest.raises(UserError, match=r"network.schedule\[3\].bandwidth_gbps=0 must be > 0"):
        with_schedule(zero_bw)


def test_top_level_link_must_match_the_first_phase():
    with pytest.raises(UserError, match="network.latency_ms=5.0 differs"):
        NetworkConfig(latency_ms=5.0, bandwidth_gbps=25.0, schedule=C1)


@pytest.mark.parametrize("preset", PRESETS)
def test_presets_compose_and_validate(preset):
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        composed = compose(overrides=[f"+network={preset}"])
    cfg = OmegaConf.to_object(composed.network)
    assert isinstance(cfg, NetworkConfig)
    assert cfg.name == preset
    schedule = NetworkSchedule.from_config(cfg)
    assert schedule.link_at(0.0) == Link(cfg.latency_ms / 1000, gbps_to_Bps(cfg.bandwidth_gbps))


def test_flex_c1_preset_is_the_papers_schedule():
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        composed = compose(overrides=["+network=flex_c1"])
    preset = NetworkSchedule.from_config(OmegaConf.to_object(composed.network))
    expected = NetworkSchedule.from_config(c1())
    assert preset.starts == expected.starts
    assert preset.links == expected.links


def test_preset_rejects_a_bad_override():
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        composed = compose(overrides=["+network=eth1g", "network.bandwidth_gbps=0"])
    with pytest.raises(UserError, match="network.bandwidth_gbps=0.0"):
        OmegaConf.to_object(composed.network)


@pytest.mark.parametrize(
    ("phase", "missing"),
    [
        ("{from_epoch:12,latency_ms:1}", "bandwidth_gbps"),
        ("{from_epoch:12,bandwidth_gbps:1}", "latency_ms"),
        ("{latency_ms:50,bandwidth_gbps:1}", "from_epoch"),
    ],
)
def test_a_phase_missing_a_key_is_refused(phase, missing):
    # each had run on a default the user never wrote: 1 Gbit/s, 0 ms, or epoch 0 (refused
    # then only as "from_epoch=0.0 must be greater", a value nobody had given)
    schedule = f"network.schedule=[{{from_epoch:0,latency_ms:1,bandwidth_gbps:25}},{phase}]"
    with pytest.raises(UserError) as refused:
        compose_run(["network=flex_c1", schedule])
    assert str(refused.value) == (
        f"network.schedule[1].{missing} is not set: each entry of network.schedule names "
        "from_epoch, latency_ms and bandwidth_gbps"
    )


def test_a_schedule_on_a_plain_preset_names_the_top_level_fix():
    schedule = "network.schedule=[{from_epoch:0,latency_ms:1,bandwidth_gbps:25}]"
    with pytest.raises(UserError, match=r"set network.latency_ms=1.0 with this schedule"):
        compose_run(["network=eth1g", schedule])
    link = ["network.latency_ms=1", "network.bandwidth_gbps=25"]
    net = compose_run(["network=eth1g", schedule, *link])
    assert NetworkSchedule.from_config(net.network).link_at(3.0) == Link(1e-3, 3.125e9)
