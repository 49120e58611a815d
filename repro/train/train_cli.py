"""`repro train [overrides] [--multirun]`: one run, or a Hydra multirun of several.

With `cluster=` other than local, each run is submitted as a job and the command returns
at once with the job ids (`repro jobs` follows them).

Every combination is composed and validated before anything runs, so a bad key or value
in any of them fails at once with one line, and nothing is written.
"""

from __future__ import annotations

import sys

from repro.cli import expand_sweep
from repro.config import CONFIG_DIR, compose, run_dir_of, to_config
from repro.train.entry import run_training


def describe(summary: dict) -> str:
    keys = ("step", "train/loss", "test/acc", "time/modeled_s", "time/wall_s")
    parts = [f"{k}={summary[k]:.4g}" for k in keys if isinstance(summary.get(k), int | float)]
    return " ".join(parts) + f" run_dir={summary.get('run_dir')}"


def main(argv: list[str]) -> int:
    multirun = any(a in ("--multirun", "-m") for a in argv)
    overrides = [a for a in argv if a not in ("--multirun", "-m")]
    combos = expand_sweep(overrides)
    if len(combos) > 1 and not multirun:
        combos = combos[:1]
        compose(overrides)  # Hydra's own message: sweep syntax needs --multirun
    configs = [compose(c) for c in combos]
    if configs[0].cluster.kind != "local":
        from repro.cluster.submit import submit_run

        for cfg in configs:
            job = submit_run(cfg)
            print(f"submitted {cfg.label}: job {job.job_id} run_dir={run_dir_of(cfg)}", flush=True)
        print(f"follow with `repro jobs --root {configs[0].runs_root} --watch`")
        return 0
    if not multirun:
        print(describe(run_training(configs[0])))
        return 0
    return _hydra_multirun(overrides, [str(run_dir_of(c)) for c in configs])


def _hydra_multirun(overrides: list[str], run_dirs: list[str]) -> int:
    """Hand the (validated) sweep to Hydra's own multirun launcher."""
    import hydra

    @hydra.main(config_path=str(CONFIG_DIR), config_name="config", version_base=None)
    def task(cfg) -> None:
        print(describe(run_training(to_config(cfg))))

    saved = sys.argv
    sys.argv = ["repro train", *overrides, "--multirun"]
    try:
        task()
    finally:
        sys.argv = saved
    print(f"{len(run_dirs)} runs: " + " ".join(run_dirs))
    return 0
