"""Device choice and device-correct collectives, on a machine without a GPU.

`choose_device` decides from what a machine reports (`CudaFacts`), so a node with two GPUs
is described by its numbers rather than needed. The collectives' checks run against a real
gloo group of one process whose workers declare `cuda:0` as their compute device: the
check compares each tensor's device with the traffic it carries, which is all a GPU would
add, so each of the three ways a CPU tensor could reach NCCL fails here if reintroduced.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist

from repro.comm import launch
from repro.comm.collectives import DeviceMismatch
from repro.comm.devices import (
    CudaFacts,
    backend_for,
    choose_device,
    cuda_problem,
    fix_kernel_order,
)
from repro.comm.process_collectives import ProcessCollectives, backend_map
from repro.comm.record import CommRecord
from repro.comm.stopwatch import Stopwatch
from repro.errors import UserError
from repro.netmodel.compute import ComputeConfig
from repro.netmodel.cost import Link
from repro.netmodel.timekeeper import TimeKeeper
from repro.strategies.flat import flatten
from repro.train import evaluate
from repro.workload.config import WorkloadConfig
from repro.workload.data import synthetic
from repro.workload.workload import Workload

NO_CUDA = CudaFacts("Found no NVIDIA driver on your system", 0)
TWO_GPUS = CudaFacts(None, 2)


def test_backend_per_device_keeps_a_cpu_backend_on_gpus():
    assert backend_for("cuda:3") == "cpu:gloo,cuda:nccl"
    assert backend_for("cpu") == "gloo"
    assert backend_map("cpu:gloo,cuda:nccl") == {"cpu": "gloo", "cuda": "nccl"}
    assert backend_map("gloo") == {"cpu": "gloo", "cuda": "gloo"}
    assert backend_map("nccl") == {"cuda": "nccl"}


def test_auto_picks_the_local_ranks_gpu_or_the_cpu():
    assert choose_device("auto", 0, "auto", NO_CUDA) == "cpu"
    assert choose_device("auto", 0, "auto", CudaFacts(None, 2, local_rank=1)) == "cuda:1"
    assert choose_device("cuda", 2, "nccl", CudaFacts(None, 2, local_rank=0)) == "cuda:0"
    assert choose_device("cuda:1", 0, "auto", TWO_GPUS) == "cuda:1"
    assert choose_device("cpu", 0, "auto", TWO_GPUS) == "cpu"


@pytest.mark.parametrize(
    "requested,gpus,backend,facts,words",
    [
        # GPUs asked for where CUDA is unusable: never a quiet CPU run
        ("auto", 4, "auto", NO_CUDA, ("cluster.gpus_per_node=4", "NVIDIA driver", "make install")),
        ("cuda:0", 0, "auto", NO_CUDA, ("trainer.device=cuda:0", "TORCH_INDEX_URL")),
        ("auto", 0, "nccl", NO_CUDA, ("cluster.backend=nccl", "asks for CUDA")),
        # more GPUs per node than the node has
        ("auto", 4, "auto", TWO_GPUS, ("cluster.gpus_per_node=4", "shows 2 CUDA device")),
        # a device index out of range
        ("cuda:2", 0, "auto", TWO_GPUS, ("trainer.device=cuda:2", "out of range", "cuda:1")),
        # more local workers than GPUs: two ranks on one GPU would fail inside NCCL
        ("auto", 0, "auto", CudaFacts(None, 2, local_rank=2), ("LOCAL_RANK=2", "workers")),
        # GPUs billed, then left idle
        ("cpu", 2, "auto", TWO_GPUS, ("trainer.device=cpu", "cluster.gpus_per_node=2")),
        ("gpu", 0, "auto", TWO_GPUS, ("trainer.device=gpu", "cuda:N")),
        ("cpu:1", 0, "auto", TWO_GPUS, ("trainer.device=cpu:1",)),
    ],
)
def test_bad_device_requests_are_one_line(requested, gpus, backend, facts, words):
    with pytest.raises(UserError) as err:
        choose_device(requested, gpus, backend, facts)
    message = str(err.value)
    assert "\n" not in message
    assert all(w in message for w in words), message


def test_this_machine_reports_why_cuda_is_unusable():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    problem = cuda_problem()
    assert problem and "\n" not in problem


@pytest.fixture
def kernel_settings(monkeypatch):
    """torch's process-wide kernel settings, off at the start and put back afterwards."""
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
    )
    torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.deterministic = False
    yield
    torch.use_deterministic_algorithms(before[0])
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before[1:]


def test_trainer_deterministic_fixes_the_kernel_order_on_a_gpu_only(kernel_settings):
    """The CPU's settings stay as they are (its results bit for bit as before); a CUDA
    device gets torch's deterministic mode, cuDNN's deterministic kernels and cuBLAS's
    fixed workspace, which must be in the environment before its first handle."""
    fix_kernel_order("cpu", True)
    assert not torch.are_deterministic_algorithms_enabled()
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ
    fix_kernel_order("cuda:1", True)
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    fix_kernel_order("cuda:1", False)
    assert not torch.are_deterministic_algorithms_enabled()
    assert not torch.backends.cudnn.deterministic


def test_nccl_without_cuda_is_refused_before_torch_fails(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(launch.free_port()))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    with pytest.raises(UserError) as err:
        launch.init_process_group("cuda:0")
    assert "NCCL" in str(err.value) and "\n" not in str(err.value)
    assert not dist.is_initialized()


@pytest.fixture
def one_process_group(monkeypatch):
    """A real gloo group of this process alone."""
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(launch.free_port()))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    launch.init_process_group("cpu")
    yield
    launch.shutdown()


def test_method_traffic_must_be_on_the_workers_device(one_process_group):
    comm = ProcessCollectives(device="cuda:0")
    cpu = torch.ones(1, 4)
    for op in (
        lambda: comm.allreduce(cpu),
        lambda: comm.allgather(cpu),
        lambda: comm.broadcast(cpu, 0),
        lambda: comm.reduce_scatter(cpu),
        lambda: comm.sendrecv(cpu, [0]),
    ):
        with pytest.raises(DeviceMismatch, match="on cpu; the method's traffic travels on cuda:0"):
            op()
    # on the CPU the same call goes through
    assert ProcessCollectives().allreduce(cpu).op == "allreduce"


def test_instrumentation_must_be_a_cpu_tensor(one_process_group):
    comm = ProcessCollectives(device="cuda:0")
    meta = torch.ones(1, 4, device="meta")  # where a GPU tensor would be
    with pytest.raises(DeviceMismatch, match="instrumentation"):
        comm.allreduce_untracked(meta)
    with pytest.raises(DeviceMismatch, match="instrumentation"):
        comm.allgather_untracked(meta)


def test_a_group_without_a_cpu_backend_is_refused(one_process_group):
    gpu_only = dist.new_group([0], backend="cuda:gloo")  # what a bare NCCL group would be
    with pytest.raises(DeviceMismatch, match="no backend for cpu tensors"):
        ProcessCollectives(gpu_only, device="cuda:0")


def test_measured_clock_exchange_travels_as_cpu_instrumentation(one_process_group):
    """Case 1: the measured-compute allgather on every communicating step."""
    comm = ProcessCollectives(device="cuda:0")
    keeper = TimeKeeper(ComputeConfig(mode="measured"), comm, seed=0, bytes_scale=1.0)
    record = CommRecord("allreduce", 1000, 0.0, 1, "ring")
    keeper.advance(1, 0.25, [record], Link(0.0, 1e9))  # a communicating step: exchange
    assert keeper.now() >= 0.25
    assert keeper.pending_s.sum().item() == 0.0


def test_loss_sum_travels_as_cpu_instrumentation(one_process_group):
    """Case 2: the loss sums of every log point (the evaluation sums are a CPU tensor too,
    `Workload.evaluate_shard`)."""
    comm = ProcessCollectives(device="cuda:0")
    assert evaluate.train_loss([3.0], 4, comm) == 0.75


def test_evaluation_sums_travel_as_cpu_instrumentation(one_process_group):
    """Case 2, the evaluation half: every worker's (loss sum, correct, count)."""
    arrays = synthetic(200, seed=0)
    workload = Workload(WorkloadConfig(dataset="synthetic", model="mlp"), arrays, "cpu")
    torch.manual_seed(0)
    comm = ProcessCollectives(device="cuda:0")
    sums = evaluate.test_sums(workload.model_factory(), workload, comm)
    assert sums.device.type == "cpu"
    assert sums[2].item() == len(arrays.y_test)


def test_flatten_moves_a_cpu_extra_to_the_parameters_device():
    """Case 3: local SGD's CPU loss scalar joins the parameters on their device (the meta
    device stands in for a GPU: anything but the CPU)."""
    params = [torch.zeros(2, 3, device="meta"), torch.zeros(2, 5, device="meta")]
    flat = flatten(params, extra=torch.ones(2, dtype=torch.float64))
    assert flat.device.type == "meta"
    assert flat.shape == (2, 9) and flat.dtype == torch.float32


def test_stopwatch_on_the_cpu_measures_the_work():
    watch = Stopwatch("cpu")
    out, seconds = watch.time(sum, range(100_000))
    assert out == 4_999_950_000
    assert seconds > 0
    assert Stopwatch("cuda:0").cuda and not watch.cuda
