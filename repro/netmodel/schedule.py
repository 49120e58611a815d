"""The modeled network as a config group, and its links over training time.

A network is a latency and a bandwidth, optionally a schedule of phases that change them by
epoch (the Flexible Top-k paper's experiments switch the network mid-training to test
adaptation, e.g. its C1 schedule). `NetworkSchedule.link_at(epoch)` gives the `Link` in force;
`phase_index(epoch)` changes exactly when the network does, so a strategy can re-plan then.

Epochs here are the trainer's fractional epoch count starting at 0: a phase with
`from_epoch: 12` applies from the start of the 13th epoch (the paper's "epochs 13-24").
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping
from dataclasses import dataclass, field

from hydra.core.config_store import ConfigStore

from repro.errors import UserError
from repro.netmodel.cost import Link


def gbps_to_Bps(gbps: float) -> float:
    """Gbit/s (network convention, 10^9 bits) to bytes/s."""
    return gbps * 1e9 / 8


@dataclass
class NetworkPhase:
    """Latency and bandwidth from `from_epoch` until the next phase starts. Every key is
    required: a phase missing one had taken a default (a link of 1 Gbit/s or 0 ms) that the
    user never wrote."""

    from_epoch: float
    latency_ms: float
    bandwidth_gbps: float


@dataclass
class NetworkConfig:
    """The `network` config group.

    `bytes_scale` multiplies every message's bytes in the model (never the real traffic), so
    that a tiny model trained on CPU can stand for a large one: to let a 6.5K-parameter
    MNIST-1D CNN communicate like ResNet-18 (11.2M parameters), set it to 11.2e6 / 6.5e3.
    Latency terms are unchanged, so the latency/bandwidth balance is that of the large model.

    `schedule` lists phases by increasing `from_epoch`, the first at epoch 0; when it is
    non-empty, the top-level `latency_ms` and `bandwidth_gbps` must equal the first phase's
    (they name the starting link, so an override of them alone is refused rather than
    silently ignored). `inject` makes each worker process sleep after every step until its
    measured time catches up with its modeled time (`TimeKeeper.advance`).
    """

    name: str = "loopback"
    latency_ms: float = 0.0
    bandwidth_gbps: float = 1.0e6
    bytes_scale: float = 1.0
    inject: bool = False
    schedule: list[NetworkPhase] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.schedule = [NetworkPhase(**p) if isinstance(p, Mapping) else p for p in self.schedule]
        _check_link("network", self.latency_ms, self.bandwidth_gbps)
        if not (self.bytes_scale > 0):
            raise UserError(f"network.bytes_scale={self.bytes_scale} must be > 0")
        for i, phase in enumerate(self.schedule):
            where = f"network.schedule[{i}]"
            _check_link(where, phase.latency_ms, phase.bandwidth_gbps)
            if i == 0 and phase.from_epoch != 0:
                raise UserError(f"{where}.from_epoch={phase.from_epoch} must be 0 (first phase)")
            if i > 0 and not (phase.from_epoch > self.schedule[i - 1].from_epoch):
                raise UserError(
                    f"{where}.from_epoch={phase.from_epoch} must be greater than "
                    f"network.schedule[{i - 1}].from_epoch={self.schedule[i - 1].from_epoch}"
                )
        if self.schedule:
            first = self.schedule[0]
            for key in ("latency_ms", "bandwidth_gbps"):
                if getattr(self, key) != getattr(first, key):
                    raise UserError(
                        f"network.{key}={getattr(self, key)} differs from "
                        f"network.schedule[0].{key}={getattr(first, key)}: with a schedule "
                        f"the top-level link is its first phase; set network.{key}="
                        f"{getattr(first, key)} with this schedule, or change its phases"
                    )


def _check_link(where: str, latency_ms: float, bandwidth_gbps: float) -> None:
    if not (bandwidth_gbps > 0):
        raise UserError(f"{where}.bandwidth_gbps={bandwidth_gbps} must be > 0")
    if not (latency_ms >= 0):
        raise UserError(f"{where}.latency_ms={latency_ms} must be >= 0")


class NetworkSchedule:
    """The links of a network over epochs."""

    def __init__(self, starts: list[float], links: list[Link]):
        if not links or len(starts) != len(links):
            raise ValueError("a schedule needs one start epoch per link, at least one link")
        self.starts = starts
        self.links = links

    @classmethod
    def from_config(cls, cfg: NetworkConfig) -> NetworkSchedule:
        phases = cfg.schedule or [NetworkPhase(0.0, cfg.latency_ms, cfg.bandwidth_gbps)]
        return cls(
            [p.from_epoch for p in phases],
            [Link(p.latency_ms / 1000, gbps_to_Bps(p.bandwidth_gbps)) for p in phases],
        )

    def phase_index(self, epoch: float) -> int:
        """Index of the phase in force at `epoch` (>= 0)."""
        if epoch < 0:
            raise ValueError(f"epoch={epoch} must be >= 0")
        return bisect_right(self.starts, epoch) - 1

    def link_at(self, epoch: float) -> Link:
        return self.links[self.phase_index(epoch)]


ConfigStore.instance().store(group="network", name="network_schema", node=NetworkConfig)
