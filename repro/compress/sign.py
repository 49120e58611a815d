"""Sign compression: one bit per value on the wire; pure tensor code.

signSGD with majority vote (Bernstein et al., ICLR 2019): each worker sends the signs of
its gradient, the update is the sign of their sum, the majority's sign (0 where the vote
ties, which only an even number of workers can give). EF-signSGD (Karimireddy et al., ICML
2019) sends the scaled sign (||G||_1 / d) sign(G) of the error-compensated G = g + residual
and keeps G minus it; across workers the scaled signs are averaged, since a vote would drop
the scale that error feedback compensates against (the paper states the single-worker
algorithm; the mean is this suite's reading of it for several workers).

One bit per value: bit j of byte i holds the sign of value 8i + j, set for a value >= 0, so
a zero travels as +1 (a bit has no third state). The scaled sign adds one float32 per
worker, the scale. Either payload is each worker's own, so an allgather carries it
(`repro.compress.pairing`): the workers' sign sums would need log2(N + 1) bits per value.
"""

from __future__ import annotations

import torch

from repro.compress.compressor import Encoded, Stateless

_BITS = 8


def pack_signs(x: torch.Tensor) -> torch.Tensor:
    """Each row's signs, 8 to a byte: (rows, ceil(n / 8)) uint8; bit set for x >= 0."""
    rows, n = x.shape
    bits = torch.zeros(rows, -(-n // _BITS) * _BITS, dtype=torch.uint8, device=x.device)
    bits[:, :n] = x >= 0
    weights = torch.tensor([1 << j for j in range(_BITS)], dtype=torch.uint8, device=x.device)
    return (bits.view(rows, -1, _BITS) * weights).sum(2, dtype=torch.uint8)


def unpack_signs(packed: torch.Tensor, n: int) -> torch.Tensor:
    """The +1 / -1 of the first `n` signs packed in `packed` (bytes, last axis), float32."""
    shifts = torch.arange(_BITS, dtype=torch.uint8, device=packed.device)
    bits = (packed.unsqueeze(-1) >> shifts) & 1
    return bits.flatten(-2)[..., :n].to(torch.float32) * 2 - 1


def signs(x: torch.Tensor) -> torch.Tensor:
    """The +1 / -1 each value travels as (zero as +1), in x's dtype."""
    return torch.where(x >= 0, 1.0, -1.0).to(x.dtype)


class MajorityVote(Stateless):
    """signSGD with majority vote: each worker's signs; the update is the majority's sign."""

    def encode(self, x: torch.Tensor) -> Encoded:
        return Encoded([pack_signs(x)])

    def combine(self, rows: torch.Tensor, workers: int, numel: int) -> torch.Tensor:
        votes = torch.zeros(numel, dtype=torch.float32, device=rows.device)
        for row in rows:  # one worker at a time: a model's size in flight, not N of them
            votes += unpack_signs(row, numel)
        return torch.sign(votes)


class ScaledSign(Stateless):
    """EF-signSGD's scaled sign (||G||_1 / d) sign(G); the workers' scaled signs averaged.

    The scale travels as float32 and is rounded to it before G - scale sign(G) is kept, so
    what a worker remembers is exactly what the others applied of it.
    """

    def encode(self, x: torch.Tensor) -> Encoded:
        scale = (x.abs().sum(1) / x.shape[1]).to(torch.float32)
        payload = [pack_signs(x), scale.view(-1, 1).view(torch.uint8)]
        taken = scale.to(x.dtype).view(-1, 1) * signs(x)
        return Encoded(payload, taken=taken)

    def combine(self, rows: torch.Tensor, workers: int, numel: int) -> torch.Tensor:
        width = rows.shape[1] - 4  # the float32 scale closes each row
        # a copy of its own: a lone row's scale sits at an offset a float32 view refuses
        scales = rows[:, width:].clone(memory_format=torch.contiguous_format).view(torch.float32)
        total = torch.zeros(numel, dtype=torch.float32, device=rows.device)
        for row, scale in zip(rows, scales, strict=True):
            total += unpack_signs(row[:width], numel) * scale
        return total / workers
