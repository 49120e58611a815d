"""Bad input is refused before the heavy libraries load.

Each case runs the CLI entry in a fresh interpreter, as `repro` does, and reads back which
modules it imported: a config error (an unknown method, a bad value of any group, including
the settings each method validates itself) must load none of torch, torch.distributed,
numpy, scipy, wandb, optuna, matplotlib or submitit, each a tenth of a second of CPU or more
(torch about two seconds). Every case imports every strategy module first (methods are
discovered by importing them), so each of those modules is held to it too. The time itself
is `make bench`'s (`repro.bench.startup`), not asserted here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers import REPO

HEAVY = ("torch", "numpy", "scipy", "wandb", "optuna", "matplotlib", "submitit")
# The CLI entry, then the heavy modules it left loaded, as one JSON line on stdout.
PROBE = f"""
import json, sys
from repro.cli import main
code = main(sys.argv[1:])
heavy = {HEAVY!r}
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in heavy)))
sys.exit(code)
"""


def probe_run(
    tmp_path, *args: str, code: str = PROBE, timeout: float = 300
) -> tuple[subprocess.CompletedProcess, list[str]]:
    """(the finished process of `repro ARGS` run in `tmp_path`, its stdout without the probe's
    line; the heavy modules it loaded, as `code` lists them)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "WANDB_SILENT": "true"}
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    *out, last = proc.stdout.strip().splitlines()
    proc.stdout = "\n".join(out)
    return proc, json.loads(last)


def probe(tmp_path, *args: str, code: str = PROBE) -> tuple[int, str, list[str]]:
    """(exit code, stderr, heavy modules loaded) of `repro ARGS` run in `tmp_path`."""
    proc, loaded = probe_run(tmp_path, *args, code=code)
    return proc.returncode, proc.stderr, loaded


CONFIG_ERRORS = [
    (["method=foo"], "method=foo is not a known method"),
    (["trainer.world_size=-1"], "trainer.world_size=-1 must be at least 1"),
    (["workload.model=nope"], "workload.model='nope' is unknown"),
    (["optim.name=rmsprop"], "optim.name='rmsprop' is unknown"),
    (["compute.mode=guessed"], "compute.mode='guessed' must be one of"),
    (["trainer.vectorize=jit"], "trainer.vectorize='jit' is unknown"),
    (["method=topk", "method.cr=2"], "method.cr=2.0 must be in (0, 1]"),
    (["method=adasum", "method.combiner=max"], "method.combiner='max' must be one of"),
    (["method=adasum", "trainer.world_size=3"], "Adasum needs a power-of-two number"),
    (["method=local_sgd", "method.tau=0"], "method.tau=0 must be at least 1"),
    (["trainer.checkpoint_every=0"], "trainer.checkpoint_every=0 must be at least 1"),
    (["seed=-1"], "seed=-1 must be in 0 .. 4294967295"),
    (["method=powersgd", "method.seed=-1"], "method.seed=-1 must be in 0 .. 4294967295"),
    (["method=topk", "method.seed=-1"], "method.seed=-1 must be in 0 .. 4294967295"),
    (["optim.betas=[0.9]"], "optim.betas=[0.9] must be two values in [0, 1)"),
    (["optim.eps=-1"], "optim.eps=-1.0 must be >= 0"),
    # Adam's and LAMB's denominator: nan at step 2 ("lower optim.lr"), or LAMB's own line
    (["optim.eps=0"], "optim.eps=0 must be > 0 for optim.name=adam"),
    (["optim.name=lamb", "optim.eps=0"], "optim.eps=0 must be > 0 for optim.name=lamb"),
    (["optim.momentum=nan"], "optim.momentum=nan must be a finite number"),
    # settings nothing honours, which ran as plain Adam / plain local SGD under their names
    (["optim.nesterov=true"], "optim.nesterov=true needs SGD's momentum (optim.name=adam"),
    (
        ["method=local_sgd", "method.momentum=average", "optim.name=sgd"],
        "method.momentum=average averages the optimizer's momentum buffers, and "
        "optim.momentum=0 keeps none",
    ),
    (["network.bandwidth_gbps=inf"], "network.bandwidth_gbps=inf must be a finite number"),
    (["cluster=slurm", "cluster.cpus_per_task=0"], "cluster.cpus_per_task=0 must be at least 1"),
    (["optim.milestones=[-0.5]"], "optim.milestones=[-0.5] must be epochs above 0"),
]


@pytest.mark.parametrize(("overrides", "line"), CONFIG_ERRORS)
def test_config_error_loads_no_heavy_library(tmp_path, overrides, line):
    code, stderr, loaded = probe(tmp_path, "train", *overrides)
    assert code == 2
    assert stderr.splitlines() == [stderr.strip()] and stderr.startswith(f"error: {line}")
    assert loaded == []
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_help_loads_no_heavy_library(tmp_path):
    code, _, loaded = probe(tmp_path, "train", "--help")
    assert code == 0
    assert loaded == []


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["reproduce", "nopaper"], "unknown paper 'nopaper'"),
        (["report", "nopaper"], "unknown paper 'nopaper'"),
        (["sweep", "sweeps/nope.yaml"], "sweeps/nope.yaml does not exist"),
    ],
)
def test_other_commands_refuse_before_torch(tmp_path, args, line):
    """The other commands' bad input: no torch, and no library of a step not reached
    (`reproduce` keeps submitit, its launcher's)."""
    code, stderr, loaded = probe(tmp_path, *args)
    assert code == 2
    assert line in stderr and len(stderr.strip().splitlines()) == 1
    assert {m.split(".")[0] for m in loaded} <= {"submitit"}


# torch's compiler stack: about 2 s of CPU per process (torch._dynamo, and sympy beneath it),
# pulled in by torch.optim's first step, torch.func's grad transform, meta-device kernels
# and batched decompositions; a run compiles nothing, so none of them may load.
COMPILER = ("torch._dynamo", "sympy")
RUN_PROBE = f"""
import json, sys
from repro.cli import main
code = main(sys.argv[1:])
print(json.dumps(sorted(m for m in {COMPILER!r} if m in sys.modules)))
sys.exit(code)
"""


@pytest.mark.parametrize(
    "overrides",
    [
        ["experiment=adacomm_tiny", "optim.name=sgd"],
        ["experiment=adasum_tiny", "optim.name=adam", "trainer.world_size=4"],
        ["experiment=adasum_tiny", "optim.name=lamb", "trainer.world_size=2"],
        ["experiment=topk_tiny", "method.cr_controller=moo", "method.probe_steps=2"],
    ],
)
def test_a_simulated_run_loads_no_compiler(tmp_path, overrides):
    """A whole simulated run (vectorized forward/backward, the optimizer's steps, the
    memory estimate, a checkpoint, Top-k's rehearsed probes) without torch's compiler."""
    args = [
        "train",
        *overrides,
        "trainer.steps=6",
        "trainer.eval_every=3",
        "trainer.progress=false",
        "tracking=disabled",
        f"run_dir={tmp_path / 'run'}",
        f"data.root={tmp_path / 'data'}",
    ]
    code, stderr, loaded = probe(tmp_path, *args, code=RUN_PROBE)
    assert code == 0, stderr[-2000:]
    assert loaded == []
