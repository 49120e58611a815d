"""One truth for Adasum's modeled cost: what the modeled clock charges for the records of a
real Adasum allreduce is what `repro cost` prints for the same setting. (The process engine
emits the same records: `test_adasum_dist._check_records` checks them there, algorithm
included.)"""

import json

import pytest
import torch

from repro.comm.adasum_allreduce import adasum_allreduce
from repro.comm.axis_collectives import AxisCollectives
from repro.comm.record import CommRecord
from repro.netmodel.cost import Link, adasum_vhdd_steps, record_cost
from repro.netmodel.cost_cli import main as cost_main
from repro.netmodel.schedule import gbps_to_Bps

# 8,000 float32 parameters in 5 tensors: divisible by every power-of-two world up to 8, so
# no padding separates the records' bytes from the formula's M / 2^k.
SHAPES = [(40, 50), (1000,), (30, 100), (500,), (1500,)]
PARAMS = sum(torch.Size(s).numel() for s in SHAPES)
LATENCY_MS, GBPS = 1.0, 10.0


def _axis_tensors(ranks):
    g = torch.Generator().manual_seed(3)
    per_rank = {r: [torch.randn(s, generator=g) for s in SHAPES] for r in range(max(ranks) + 1)}
    return [torch.stack([per_rank[r][i] for r in ranks]) for i in range(len(SHAPES))]


def _records(comm):
    _, records = adasum_allreduce(_axis_tensors(comm.ranks), comm)
    return [(r.op, r.nbytes, r.group_size, r.algo) for r in records]


def _cost_ms(capsys, workers: int) -> float:
    argv = ["--params", str(PARAMS), "--tensors", str(len(SHAPES)), "--workers", str(workers)]
    argv += ["--latency-ms", str(LATENCY_MS), "--bandwidth-gbps", str(GBPS), "--json"]
    assert cost_main(argv) == 0
    return json.loads(capsys.readouterr().out)["costs_ms"]["adasum"]


def _charged_ms(records) -> float:
    link = Link(LATENCY_MS / 1000, gbps_to_Bps(GBPS))
    return 1000 * sum(record_cost(CommRecord(op, b, 0.0, g, a), link) for op, b, g, a in records)


@pytest.mark.parametrize("world", [2, 4, 8])
def test_axis_records_charge_what_repro_cost_prints(capsys, world):
    records = _records(AxisCollectives(world))
    assert records == adasum_vhdd_steps(4 * PARAMS, world, len(SHAPES))
    assert _charged_ms(records) == pytest.approx(_cost_ms(capsys, world), rel=1e-12)


def test_the_issue_setting_charges_the_tree_scalar_allreduce(capsys):
    """8 workers, 1 ms, 10 Gbit/s: the statistics allreduces cost 2k a each (tree), 12 ms in
    all; a ring would have charged 2(2^k - 1) a, 22 ms."""
    records = _records(AxisCollectives(8))
    scalars = [r for r in records if r[0] == "allreduce"]
    assert [r[3] for r in scalars] == ["tree"] * 3
    link = Link(LATENCY_MS / 1000, gbps_to_Bps(GBPS))
    swaps_s = sum(link.latency_s + b * link.beta for op, b, _, _ in records if op == "sendrecv")
    stats_bytes = 3 * 8 * len(SHAPES)
    tree_s = sum(2 * k * (link.latency_s + stats_bytes * link.beta) for k in (1, 2, 3))
    assert _cost_ms(capsys, 8) == pytest.approx(1000 * (swaps_s + tree_s), rel=1e-12)
