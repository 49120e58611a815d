"""`repro train [overrides] [--multirun] [--cfg job] [--help]`: one run, or a Hydra
multirun of several.

With `cluster=` other than local, the runs are submitted as one job array and the command returns
at once with the job ids (`repro jobs` follows them). The command lives with the launcher
because that is what it drives: the training package runs one config and knows nothing of
where runs go.

Every combination is composed and validated before anything runs, so a bad key or value
in any of them fails at once with one line, and nothing is written. The flags are read
here rather than by Hydra's app runner, which would treat them as overrides and fail.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from omegaconf import OmegaConf

from repro import config_keys, hydra_overrides
from repro.cluster.slurm_env import join_srun_step
from repro.config import (
    CONFIG_DIR,
    GROUPS,
    Config,
    compose,
    compose_dict,
    identity,
    parse_overrides,
    run_dir_of,
    to_config,
)
from repro.errors import UserError, override_key, say_stopped, sigterm_stops

FLAGS = "--multirun/-m, --cfg job|hydra|all, --help/-h"
# The settings most runs change, with what each does; `--cfg job` shows all the others.
MOST_USED = (
    ("trainer.world_size", "workers of the run"),
    ("trainer.engine", "simulated (all workers in this process), processes, or auto"),
    ("trainer.steps", "training steps"),
    ("trainer.batch_size", "mini-batch per worker"),
    ("trainer.eval_every", "steps between test evaluations"),
    ("trainer.checkpoint_every", "steps between checkpoints (resume restarts from the last)"),
    ("trainer.time_budget_s", "stop once the modeled clock passes this (0 = none)"),
    ("optim.name", "sgd, adam or lamb"),
    ("optim.lr", "learning rate"),
    ("method.tau", "local steps between model averages"),
    ("compute.mode", "measured or sampled compute time on the modeled clock"),
    ("seed", "seed of data order, initialization and sampled compute times"),
    ("data.root", "where data sets are read or generated"),
    ("runs_root", "where run directories go"),
    ("run_dir", "this run's directory (default runs_root/<experiment>/<label>-<hash>)"),
)


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        _, _, overrides = _flags([a for a in argv if a not in ("-h", "--help")])
        parse_overrides(overrides)  # a bad one is its one line, before the sweep's parser
        print(help_text(hydra_overrides.expand_sweep(overrides, CONFIG_DIR)[0]))
        return 0
    multirun, show, overrides = _flags(argv)
    join_srun_step()  # before composing: under srun's several tasks, auto is processes
    parsed = parse_overrides(overrides)
    sweeps = [ov.input_line for ov in parsed if ov.is_sweep_override()]
    if sweeps and not multirun:
        raise UserError(hydra_overrides.several_values(sweeps[0], CONFIG_DIR))
    combos = hydra_overrides.expand_sweep(overrides, CONFIG_DIR)
    if show:  # one YAML document per combination
        print("---\n".join(_show(combo, show) for combo in combos), end="")
        return 0
    configs = [compose(c) for c in combos]
    from repro.cluster.launcher import launch_runs  # submitit loads once the configs are valid

    # a multirun's runs share their label: each line names the values that set it apart
    several = {override_key(s) for s in sweeps}
    runs = []
    for combo, cfg in zip(combos, configs, strict=True):
        values = [o for o in combo if override_key(o) in several]
        runs.append((f"{cfg.label} ({', '.join(values)})" if values else cfg.label, cfg))
    runs = _one_run_per_directory(runs, several)
    # Here, one after another, or as one job array: the `cluster` group decides, in one place.
    try:
        with sigterm_stops():
            launch_runs(runs, "train")
    except KeyboardInterrupt as stop:
        return say_stopped(
            stop,
            "train stopped; run the same command again to resume (from each run's last "
            "checkpoint, where it wrote one; finished runs are kept)",
        )
    return 0


def _one_run_per_directory(
    runs: list[tuple[str, Config]], swept: set[str]
) -> list[tuple[str, Config]]:
    """A multirun's runs, one per run directory. Runs that would share a directory and
    compute the same (their configs differ in no setting of the run's identity, such as
    `trainer.keep_checkpoints`, or not at all) are one run, said once; runs of different
    configs in one directory (a fixed `run_dir`) are refused before any runs: the second
    would find the first's run and stop, or both would write it at once."""
    from repro.train.checkpoint import changed_keys

    first: dict[Path, tuple[str, Config]] = {}
    kept = []
    for label, cfg in runs:
        where = run_dir_of(cfg)
        if where not in first:
            first[where] = (label, cfg)
            kept.append((label, cfg))
            continue
        other, seen = first[where]
        changed = changed_keys(identity(seen), identity(cfg))
        if changed:
            raise UserError(
                f"run_dir={where}: runs {other} and {label} of this multirun would share it; "
                "leave run_dir unset (each run then gets runs_root/<experiment>/<label>-<hash>) "
                f"or make it differ by run, e.g. run_dir={where}/${{{_telling(changed, swept)}}}"
            )
        print(f"train: {label} is the same run as {other} ({where}): run once", flush=True)
    return kept


def _telling(changed: dict[str, tuple], swept: set[str]) -> str:
    """A setting both runs have that tells them apart, to interpolate into run_dir: a swept
    one first (a swept group by its `name`), else any that neither run leaves unset."""
    both = {k for k, (a, b) in changed.items() if a is not None and b is not None}
    for key in sorted(swept):
        for candidate in (key, f"{key}.name"):
            if candidate in both:
                return candidate
    return min(both) if both else "seed"


def _flags(argv: list[str]) -> tuple[bool, str, list[str]]:
    """(--multirun given, the part --cfg asks for or "", the overrides)."""
    multirun, show, overrides = False, "", []
    args = iter(argv)
    for arg in args:
        if arg in ("--multirun", "-m"):
            multirun = True
        elif arg == "--cfg" or arg.startswith("--cfg="):
            show = arg.partition("=")[2] or next(args, "")
            if show not in ("job", "hydra", "all"):
                raise UserError(f"--cfg {show}: give --cfg job (the run's config), hydra or all")
        elif arg.startswith("-"):
            raise UserError(f"unknown option {arg}; repro train takes key=value overrides, {FLAGS}")
        else:
            overrides.append(arg)
    return multirun, show, overrides


def _show(overrides: list[str], part: str) -> str:
    """The composed config, as Hydra's `--cfg` prints it, after the same validation a run
    gets (so a config printed here is one that runs)."""
    cfg = compose_dict(overrides)
    to_config(cfg, overrides)
    if part == "job":
        return OmegaConf.to_yaml(cfg)
    full = config_keys.compose_at(CONFIG_DIR, overrides, hydra=True)
    return OmegaConf.to_yaml(full if part == "all" else OmegaConf.masked_copy(full, ["hydra"]))


def help_text(overrides: list[str] | None = None) -> str:
    """Usage, each config group with its choices (the chosen one marked), the settings most
    runs change with their values, and the flags: of the config the overrides compose (a
    multirun's first), so `repro train experiment=adacomm_small --help` shows that
    experiment's batch and steps, not the bare defaults."""
    overrides = overrides or []
    compose_dict(overrides)  # a bad override is its one line here too
    cfg = config_keys.compose_at(CONFIG_DIR, overrides, hydra=True)
    chosen = cfg.hydra.runtime.choices
    lines = [
        "usage: repro train [KEY=VALUE ...] [--multirun] [--cfg job] [-h]",
        "",
        "One training run composed by Hydra from configs/config.yaml and the overrides;",
        "a comma list (method.tau=1,4) with --multirun runs one per value.",
        "",
        f"config groups (GROUP=CHOICE; * = {'chosen' if overrides else 'default'}):",
    ]
    for group in GROUPS:
        names = config_keys.group_options(group, CONFIG_DIR)
        marked = [f"{n}*" if n == chosen.get(group) else n for n in names]
        lines += textwrap.wrap(
            ", ".join(marked), 90, initial_indent=f"  {group:<11} ", subsequent_indent=" " * 14
        )
    lines += ["", f"most used settings (KEY={'VALUE' if overrides else 'DEFAULT'}):"]
    for key, what in MOST_USED:
        node = config_keys.node_at(cfg, key)
        if node is None:  # a setting of some choices of its group only, e.g. method.tau
            group = key.split(".")[0]
            # the chosen config lacks the key, so only the other choices are composed
            owners = config_keys.choices_with(group, CONFIG_DIR, skip=chosen.get(group))
            owners = owners.get(key, {})
            node = next(iter(owners.values()), None)
            what += f" ({', '.join(f'{group}={c}' for c in owners)})"
        value = "" if node is None or node._value() is None else node._value()
        lines.append(f"  {f'{key}={value}':<30} {what}")
    lines += [
        "",
        "flags:",
        "  --multirun, -m   run every combination of the comma lists",
        "  --cfg job        print the composed config and exit (hydra, all: with Hydra's own)",
        "  -h, --help       this help",
        "",
        "Every key of the composed config can be set; `repro train [overrides] --cfg job`",
        "prints them all for a given selection.",
    ]
    return "\n".join(lines)
