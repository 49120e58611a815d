"""The simulated engine's allreduce into the first row: the bits and record of a full one."""

from dataclasses import replace

import pytest
import torch

from repro.comm.axis_collectives import AxisCollectives


@pytest.mark.parametrize("parts", [None, [[0, 2, 4, 6], [1, 3, 5, 7]]])
def test_allreduce_first_is_row_zero_of_the_full_allreduce(parts):
    comm = AxisCollectives(8) if parts is None else AxisCollectives(8).split(parts)
    rows = torch.randn(8, 1001, generator=torch.Generator().manual_seed(3)) * 1e3
    full, first = rows.clone(), rows.clone()
    full_record = comm.allreduce(full)
    first_record = comm.allreduce_first(first)
    assert torch.equal(first[0], full[0])
    # the sum in rank order, as gloo's arriving messages would be added
    expected = rows[0].clone()
    for r in (parts or [list(range(8))])[0][1:]:
        expected += rows[r]
    assert torch.equal(first[0], expected)
    assert replace(first_record, seconds=0) == replace(full_record, seconds=0)
