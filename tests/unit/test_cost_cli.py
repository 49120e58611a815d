"""`repro cost` through its main(): JSON numbers, the table, and one-line errors."""

import json

import pytest

from repro.errors import UserError
from repro.netmodel.cost_cli import main

# 1e6 float32 parameters = 4e6 bytes; 8 Gbit/s = 1e9 B/s; a = 1 ms; 4 workers.
BASE = ["--params", "1000000", "--latency-ms", "1", "--bandwidth-gbps", "8", "--workers", "4"]


def run_json(capsys, argv):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_numbers_match_hand_computation(capsys):
    out = run_json(capsys, [*BASE, "--cr", "0.01", "--tensors", "10"])
    assert out["nbytes"] == 4_000_000
    ms = out["costs_ms"]
    # M b = 4 ms, c M b = 0.04 ms, log2 4 = 2.
    assert ms["dense_ring"] == pytest.approx(6 + 1.5 * 4)
    assert ms["dense_tree"] == pytest.approx(4 + 4 * 4)
    assert ms["ag_topk"] == pytest.approx(2 + 2 * 0.04 * 3)
    assert ms["art_ring"] == pytest.approx(8 + 0.04 * 3.5)
    assert ms["art_tree"] == pytest.approx(6 + 3 * 0.04 * 2)
    # 2La + 2(n-1)/n Mb + L(L+1)(a + 240 B b): 4 + 6 + 6 * (1 + 240e-6) ms.
    assert ms["adasum"] == pytest.approx(4 + 6 + 6 * (1 + 240e-6))
    assert out["cheapest"] == {"name": "ag_topk", "ms": pytest.approx(2.24)}


def test_dtype_bytes_and_cr_change_the_message(capsys):
    half = run_json(capsys, [*BASE, "--dtype-bytes", "2", "--cr", "0.1"])
    assert half["nbytes"] == 2_000_000
    assert half["costs_ms"]["art_tree"] == pytest.approx(6 + 3 * 0.2 * 2)


def test_a_parameter_count_is_read_as_papers_write_it(capsys):
    plain = run_json(capsys, BASE)
    for written in ("1e6", "1_000_000", "1.0e6"):
        argv = [written if a == "1000000" else a for a in BASE]
        assert run_json(capsys, argv) == plain, written


def test_adasum_needs_power_of_two_workers(capsys):
    out = run_json(capsys, ["--params", "1000", "--workers", "6"])
    assert out["costs_ms"]["adasum"] is None
    assert out["costs_ms"]["dense_ring"] is not None


def test_a_zoo_model_too_large_to_allocate_is_counted_without_allocating(capsys):
    # the repro zoo's ResNet-18: 11,168,832 parameters before its classifier, whose 512
    # weights and one bias per class make 10^8 classes 191 GiB of float32, never allocated
    out = run_json(capsys, ["--model", "resnet18", "--num-classes", "100000000"])
    assert out["params"] == 11_168_832 + 513 * 100_000_000
    assert out["tensors"] == 62
    small = run_json(capsys, ["--model", "resnet18"])
    assert (small["params"], small["tensors"]) == (11_168_832 + 513 * 10, 62)


def test_model_from_torchvision_counts_its_parameters(capsys):
    # mobilenet_v2 with 10 classes (not in the repro zoo): 2,236,682 parameters in 158 tensors.
    out = run_json(capsys, ["--model", "mobilenet_v2", "--workers", "8"])
    assert out["params"] == 2_236_682
    assert out["tensors"] == 158
    assert out["nbytes"] == 4 * 2_236_682


def test_model_from_the_repro_zoo_comes_first(capsys):
    # The CIFAR ResNet-20 of He et al. has 272,474 parameters with 10 classes.
    out = run_json(capsys, ["--model", "resnet20", "--workers", "8"])
    assert out["params"] == 272_474


def test_table_names_every_exchange_and_the_cheapest(capsys):
    assert main([*BASE, "--cr", "0.01"]) == 0
    text = capsys.readouterr().out
    for name in ("dense_ring", "dense_tree", "ag_topk", "art_ring", "art_tree", "adasum"):
        assert name in text
    assert "cheapest compressed exchange: ag_topk (2.2400 ms)" in text


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        ([*BASE, "--bandwidth-gbps", "0"], "--bandwidth-gbps"),
        ([*BASE, "--bandwidth-gbps", "-2"], "--bandwidth-gbps"),
        ([*BASE, "--latency-ms", "-1"], "--latency-ms"),
        ([*BASE, "--latency-ms", "inf"], "--latency-ms=inf must be a finite number"),
        ([*BASE, "--bandwidth-gbps", "inf"], "--bandwidth-gbps=inf must be a finite number"),
        ([*BASE, "--cr", "0"], "--cr"),
        ([*BASE, "--cr", "1.5"], "--cr"),
        ([*BASE, "--workers", "0"], "--workers"),
        (
            [*BASE, "--dtype-bytes", "3"],
            r"--dtype-bytes: invalid choice: 3 \(choose from 1, 2, 4, 8\)",
        ),
        ([*BASE, "--dtype-bytes", "0"], "--dtype-bytes: invalid choice: 0"),
        ([*BASE, "--cr", "abc"], "--cr"),
        (["--model", "no_such_net"], "--model"),
        # a workload's name: repro's model names listed
        (["--model", "mnist1d_cnn"], r"repro's are cnn1d, cnn1d_wide, mlp, .* e\.g\. cnn1d for"),
        (["--workers", "4"], "--model"),
        (["--params", "10", "--model", "resnet18"], "--model"),
        (["--params", "0"], "--params"),
        (["--params", "1.5"], "'1.5' is not a whole count"),
        (["--params", "nan"], "'nan' is not a whole count"),
        (["--params", "10", "--tensors", "11"], "--tensors=11 is more than the 10 parameters"),
        (["--model", "cnn1d", "--tensors", "6461"], "--tensors=6461 is more than the 6,460"),
        # a typo is named, not a required option it hides nor the arguments after it
        (["--modle", "resnet18"], r"unknown option --modle \(did you mean --model\?\)"),
        (["--model", "cnn1d", "--wrkers=4"], r"unknown option --wrkers \(did you mean --workers"),
        (["--model", "cnn1d", "--zzz"], r"repro cost: unknown option --zzz; `repro cost --help`"),
    ],
)
def test_bad_flags_raise_one_line_user_errors(argv, flag):
    with pytest.raises(UserError, match=flag) as err:
        main(argv)
    assert "\n" not in str(err.value)
