"""Per-rank Adasum inputs shared by the halving and the gathering tests, per worker
(`_inputs`) and on the worker axis the collectives take (`axis_inputs`)."""

import torch

# Odd sizes so that tensor boundaries fall inside halved slices; 78 elements pad to 80.
LAYERS = [(5, 3), (1,), (7,), (2, 3, 3), (33,), (4,)]
TINY = [(1,), (2,)]  # fewer elements than 8 ranks: most slices hold only padding
DTYPES = (torch.float32, torch.float64)


def _inputs(rank: int, shapes, dtype) -> list[torch.Tensor]:
    """Rank `rank`'s tensors: random layers plus the special cases the operator must keep.

    Layer 0 is zero on every rank, layer 1 zero on rank 0 only, layer 2 the same direction
    on every rank with a random magnitude and sign (so Adasum gives the plain mean), layer 3
    near the smallest normal float32 (its squares underflow unless taken in float64).
    """
    g = torch.Generator().manual_seed(1000 + rank)
    out = [torch.randn(s, generator=g, dtype=torch.float64) for s in shapes]
    if len(out) > 3:
        out[0].zero_()
        if rank == 0:
            out[1].zero_()
        direction = torch.randn(shapes[2], generator=torch.Generator().manual_seed(7))
        out[2] = direction.double() * (torch.rand(1, generator=g).item() + 0.2) * (-1) ** rank
        out[3] *= 4 * torch.finfo(torch.float32).tiny
    # Layers of different directions and scales, so a whole-model coefficient differs.
    return [t.mul_(1.0 + 3.0 * i).to(dtype) for i, t in enumerate(out)]


def axis_inputs(ranks, shapes, dtype) -> list[torch.Tensor]:
    """The inputs of workers `ranks` stacked on a leading worker axis, one tensor per layer:
    what a process holding those workers hands the collectives ([rank] under the process
    engine, every rank under the axis engine)."""
    per_rank = [_inputs(r, shapes, dtype) for r in ranks]
    return [torch.stack(layer) for layer in zip(*per_rank, strict=True)]
