"""PowerSGD's parts on their own: orthogonal factors, an exact approximation of a matrix of
the compressed rank, a resumed run continuing exactly, and the settings refused before
anything runs (a rank of 0, a rank above a matrix's smaller side, an exchange that cannot
sum the factors). The comparison with PyTorch's own hook is tests/comm/test_powersgd_torch.py.
"""

import re

import pytest
import torch

from repro.comm.axis_collectives import AxisCollectives
from repro.compress.exchange import allreduce_exchange
from repro.compress.powersgd import PowerSGD, orthogonalize
from repro.config import compose
from repro.errors import UserError
from repro.netmodel.cost import Link
from repro.strategies.base import StepInfo
from repro.strategies.powersgd import PowerSGDConfig, PowerSGDStrategy
from repro.train.replicas import Replicas
from tests.helpers import train


@pytest.mark.parametrize("rank", [1, 2, 3, 5])
def test_orthogonalized_columns_are_orthonormal(rank):
    x = torch.randn(3, 12, rank, generator=torch.Generator().manual_seed(rank), dtype=torch.float64)
    original = x.clone()
    orthogonalize(x)
    eye = torch.eye(rank, dtype=torch.float64).expand(3, rank, rank)
    torch.testing.assert_close(x.transpose(1, 2) @ x, eye, rtol=0, atol=1e-12)
    # the same column space: projecting the originals onto the new columns keeps them
    torch.testing.assert_close(x @ (x.transpose(1, 2) @ original), original)


def test_a_matrix_of_the_compressed_rank_comes_back_exactly():
    """One power iteration recovers a rank-2 matrix at rank 2 (P spans its columns); the
    bias, too small to compress, travels whole."""
    gen = torch.Generator().manual_seed(3)
    matrix = torch.randn(20, 2, generator=gen) @ torch.randn(2, 30, generator=gen)
    bias = torch.randn(1, 20, generator=gen)
    compressor = PowerSGD(rank=2, min_compression_rate=1.0)
    compressor.bind([(20, 30), (20,)])
    flat = torch.cat([matrix.reshape(1, -1), bias], dim=1)
    result = allreduce_exchange(AxisCollectives(1), compressor.for_exchange(None), flat)
    torch.testing.assert_close(result.average[0, :600].view(20, 30), matrix)
    assert torch.equal(result.average[:, 600:], bias)
    # three allreduces: the uncompressed bias, P (20 x 2), Q (30 x 2), float32 each
    assert [r.nbytes for r in result.records] == [20 * 4, 40 * 4, 60 * 4]
    assert torch.equal(result.taken, result.average)  # feedback keeps G less what went out


def test_a_layer_whose_gradient_is_all_zero_gets_a_zero_update_at_the_default_epsilon():
    """At epsilon 0 (PyTorch's default) the zero layer's P is divided by its zero norm: its
    update was NaN, and through error feedback stayed NaN."""
    epsilon = PowerSGDConfig().epsilon
    compressor = PowerSGD(rank=2, min_compression_rate=1.0, epsilon=epsilon)
    compressor.bind([(20, 30), (20, 30)])
    live = torch.randn(2, 600, generator=torch.Generator().manual_seed(7))
    flat = torch.cat([torch.zeros(2, 600), live], dim=1)
    result = allreduce_exchange(AxisCollectives(2), compressor.for_exchange(None), flat)
    assert torch.equal(result.average[:, :600], torch.zeros(2, 600))
    assert torch.isfinite(result.average).all()


def test_a_model_of_vectors_alone_is_averaged_uncompressed():
    x = torch.randn(2, 7, generator=torch.Generator().manual_seed(5))
    compressor = PowerSGD(rank=1)
    compressor.bind([(4,), (3,)])
    result = allreduce_exchange(AxisCollectives(2), compressor.for_exchange(None), x.clone())
    assert torch.equal(result.average, ((x[0] + x[1]) / 2).expand(2, 7))
    assert [r.nbytes for r in result.records] == [7 * 4]  # no factor to send


def run(cfg: PowerSGDConfig, steps: int, state: dict | None = None):
    """Two simulated workers of a small MLP under the strategy; parameters and state."""
    torch.manual_seed(0)
    template = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.ReLU(), torch.nn.Linear(24, 6))
    replicas = Replicas(template, 2, "loop")
    strategy = PowerSGDStrategy(cfg, 2)
    strategy.setup(replicas, None, AxisCollectives(2), None)
    first = 1
    if state is not None:
        replicas.load_state_dict(state["replicas"])
        strategy.load_state_dict(state["strategy"])
        first = state["step"] + 1
    for step in range(first, first + steps):
        gen = torch.Generator().manual_seed(step)
        x, y = torch.randn(2, 8, 12, generator=gen), torch.randint(0, 6, (2, 8), generator=gen)
        replicas.forward_backward(x, y, torch.nn.functional.cross_entropy)
        strategy.after_backward(StepInfo(step, 0.0, torch.zeros(2), 0.1, 0.0, Link(1e-3, 1e9)))
        with torch.no_grad():
            for p in replicas.parameters():
                p.add_(p.grad, alpha=-0.1)
    saved = {"replicas": replicas.state_dict(), "strategy": strategy.state_dict(), "step": step}
    return [p.detach().clone() for p in replicas.parameters()], saved


@pytest.mark.parametrize("warm_start", [True, False])
def test_a_resumed_run_continues_exactly(warm_start):
    cfg = dict(rank=2, start_iter=2, warm_start=warm_start, min_compression_rate=1.0)
    straight, _ = run(PowerSGDConfig(**cfg), 12)
    _, halfway = run(PowerSGDConfig(**cfg), 6)
    resumed, _ = run(PowerSGDConfig(**cfg), 6, halfway)
    for a, b in zip(straight, resumed, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("method.rank=0", "method.rank=0 must be at least 1"),
        ("method.rank=-2", "method.rank=-2 must be at least 1"),
        ("method.start_iter=-1", "method.start_iter=-1 must be 0 or more"),
        ("method.epsilon=-1e-8", "method.epsilon=-1e-08 must be >= 0"),
        (
            "method.exchange=allgather",
            "method.exchange=allgather cannot carry powersgd's factors P and Q, summed "
            "between its rounds; use method.exchange=allreduce",
        ),
    ],
)
def test_bad_settings_are_refused_when_composed(override, message):
    with pytest.raises(UserError, match=re.escape(message)):
        compose(["method=powersgd", override])


def test_a_rank_above_a_compressed_matrix_side_is_refused_before_anything_is_written(tmp_path):
    # synthetic_mlp's classifier weight is 4 x 32 (4 classes): rank 4 fits, 5 does not where
    # every matrix is compressed (min_compression_rate=0)
    with pytest.raises(UserError) as err:
        train(
            tmp_path,
            "method=powersgd",
            "method.rank=5",
            "method.min_compression_rate=0",
            "trainer.steps=2",
        )
    assert str(err.value) == (
        "method.rank=5 is larger than net.2.weight's smaller side (4, of its 4 x 32 "
        "matrix, which is compressed); lower method.rank to 4"
    )
    assert not (tmp_path / "runs").exists()
    # vectors are never compressed: the biases' single side does not bound the rank
    PowerSGDConfig(rank=4).validate_model({"net.2.weight": (4, 32), "net.2.bias": (4,)})


def test_a_matrix_sent_whole_does_not_bound_the_rank():
    """At the default rate a 25 x 5 matrix gains nothing at rank 5 or more ((25 + 5) x 5 x 2 >
    125) and is sent whole, so rank 8 runs with it: only the larger matrices are compressed
    (`cnn1d`'s first convolution once refused every rank above 5)."""
    shapes = {"conv1.weight": (25, 1, 5), "conv2.weight": (25, 25, 3)}
    PowerSGDConfig(rank=8).validate_model(shapes)
    compressor = PowerSGD(rank=8)
    compressor.bind(list(shapes.values()))
    assert [(n, m, r) for _, n, m, r in compressor.matrices] == [(25, 75, 8)]
