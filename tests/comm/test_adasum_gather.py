"""The small-message Adasum path (one allgather, the tree applied locally): bit for bit the
single-process reference, on every worker, for 2, 4 and 8 workers, under both engines
(gloo processes holding one row each, and every worker on one axis in this process)."""

import pytest
import torch

from repro.comm.adasum_allreduce import adasum_pair_
from repro.comm.adasum_gather import adasum_gather_, tree_reduce_rows_
from repro.comm.axis_collectives import AxisCollectives
from repro.comm.flat_layout import FlatLayout
from repro.comm.launch import init_process_group, spawn
from repro.comm.process_collectives import ProcessCollectives
from repro.strategies.adasum import adasum_per_tensor
from tests.comm.adasum_inputs import DTYPES, LAYERS, TINY, _inputs, axis_inputs

CASES = [(2, [LAYERS]), (4, [LAYERS]), (8, [LAYERS, TINY])]


def _gather(comm, world, shapes, dtype):
    """Each held worker's combined tensors, the records' summary and each row's padding."""
    tensors = axis_inputs(comm.ranks, shapes, dtype)
    layout = FlatLayout([t[0] for t in tensors], world)
    buf = layout.flatten(tensors)
    records = adasum_gather_(buf, layout, comm)
    summary = [(r.op, r.nbytes, r.group_size) for r in records]
    combined = [t.clone() for t in layout.unflatten(buf)]
    return [
        ([t[row] for t in combined], summary, buf[row, layout.total :].clone())
        for row in range(len(comm.ranks))
    ]


def _gather_worker(rank, world, shape_lists):
    init_process_group()
    comm = ProcessCollectives()
    return [_gather(comm, world, shapes, dtype)[0] for shapes in shape_lists for dtype in DTYPES]


def _check(per_rank, world, shape_lists):
    """per_rank[r][case] = (combined tensors, records summary, padding) of worker r."""
    cases = [(shapes, dtype) for shapes in shape_lists for dtype in DTYPES]
    for case, (shapes, dtype) in enumerate(cases):
        reference = adasum_per_tensor([_inputs(r, shapes, dtype) for r in range(world)])
        for r in range(world):
            combined, summary, padding = per_rank[r][case]
            assert all(torch.equal(a, b) for a, b in zip(combined, reference, strict=True))
            assert not padding.any()
            # one collective: every rank's unpadded buffer, gathered
            total = sum(t.numel() for t in reference) * torch.finfo(dtype).bits // 8
            assert summary == [("allgather", total, world)]


@pytest.mark.parametrize("world, shape_lists", CASES)
def test_gather_path_is_the_reference_bit_for_bit(world, shape_lists):
    _check(spawn(_gather_worker, world, shape_lists), world, shape_lists)


@pytest.mark.parametrize("world, shape_lists", CASES)
def test_gather_path_on_the_axis_engine_is_the_reference_bit_for_bit(world, shape_lists):
    comm = AxisCollectives(world)
    per_case = [_gather(comm, world, shapes, dtype) for shapes in shape_lists for dtype in DTYPES]
    per_rank = [[rows[r] for rows in per_case] for r in range(world)]
    _check(per_rank, world, shape_lists)


def test_tree_pairs_neighbours_first():
    # Rows along e0, e0, e1, e1: (0,1) and (2,3) are parallel pairs (their means), and those
    # two results orthogonal (their sum): [3, 3]. Pairing (0,2), (1,3) first would sum
    # orthogonal pairs to [2, 1] and [4, 5], whose Adasum is about [2.77, 3.91].
    rows = torch.tensor([[2.0, 0.0], [4.0, 0.0], [0.0, 1.0], [0.0, 5.0]], dtype=torch.float64)
    out = tree_reduce_rows_(rows, FlatLayout([torch.empty(2)], 1))
    assert out.tolist() == [3.0, 3.0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_compiled_tree_is_the_pairwise_operator_bit_for_bit(dtype):
    # The one compiled call against adasum_pair_ applied pair by pair in the tree's order
    # (neighbours first, then pairs of results): 32 workers of uneven tensors, a zero
    # tensor on one worker (its weight stays 1), two workers' nearly cancelling tensor.
    gen = torch.Generator().manual_seed(3)
    sizes = [125, 25, 1875, 1, 2500, 10]
    rows = torch.randn(32, sum(sizes), generator=gen, dtype=dtype) * 3
    rows[5, :125] = 0
    rows[9, -10:] = -rows[8, -10:] * (1 + 1e-6)
    layout = FlatLayout([torch.empty(s) for s in sizes], 1)
    pairwise = rows.clone()
    for d in (1, 2, 4, 8, 16):
        for i in range(0, 32, 2 * d):
            for s, e in zip(layout.offsets[:-1], layout.offsets[1:], strict=True):
                adasum_pair_(pairwise[i, s:e], pairwise[i + d, s:e])
    compiled = tree_reduce_rows_(rows.clone(), layout)
    assert torch.equal(compiled, pairwise[0])
    assert not torch.equal(compiled, rows.sum(0))  # the tree did weigh the rows
