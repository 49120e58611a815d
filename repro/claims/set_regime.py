"""The run set a claims file was written for, and where a run departs from it.

A claim's band, seed cap and baseline were fixed for the runs `repro reproduce PAPER scale=S`
makes: each label of `configs/experiment/<paper>_<scale>.yaml`'s `experiment.runs` with its
own overrides and, in a tuned set, the values `repro tune` chose (`label_configs`, which
`repro.reproduce.run_sets` composes the set's runs from). A run of that group and label made
any other way (the reproduction with extra overrides such as `trainer.steps=300`, or `repro
train` by hand) is another experiment, however close: its numbers are shown, but a verdict
read from it would judge the paper on a regime nobody fixed in advance, so the claims that
read it are not assessed (`departures`, which `repro.report.build.select_runs` finds for
every run a report reads and `repro.claims.verdicts.evaluate` is given), and the page names
the settings that depart.

Settings that say where or how a run was computed, not what (`HOW_IT_RAN`), may differ: the
engine and its vectorization, the device, how often checkpoints are written and the
evaluation's batch. The engines are held to the same decisions and
parameters by the equivalence tests, a resume from a checkpoint ends as the uninterrupted
run, and evaluation sums in float64. Unless the label itself sets the engine
(`PINNED_BY_LABEL`): a run whose claim reads what only that engine measures (Adasum's cost
pair, gloo's seconds between worker processes) departs when it ran on another. The seed is
each run's own (seeds are added one by one), and the settings no run's identity holds
(`repro.config.NON_IDENTITY_KEYS`: tracking, cluster, the data's folder, the set's seed
count) never count.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence

from repro.config import CONFIG_DIR, Config, as_dict, compose, flat, identity
from repro.errors import override_key
from repro.pages.writer import fmt
from repro.sweep.tuned import run_overrides

HOW_IT_RAN = (
    "trainer.engine",
    "trainer.vectorize",
    "trainer.device",
    "trainer.checkpoint_every",
    "workload.eval_batch_size",
    "seed",
)
# Of those, what a label may pin because a claim reads what only that way of running
# measures (the engine: gloo's seconds between worker processes); a label's checkpoint
# interval, say, stays how it ran.
PINNED_BY_LABEL = ("trainer.engine",)


def label_configs(experiment: str, extra: Sequence[str] = ()) -> dict[str, Config]:
    """Label -> the composed config of that label's run in the set `experiment` (seed as the
    set's first), `extra` overrides applied last; the command line's, after the label's own
    and its tuned ones."""
    base = compose([f"experiment={experiment}", *extra])
    configs = {}
    for label, overrides in base.experiment.runs.items():
        tuned = run_overrides(base.experiment, label)  # [] unless experiment.tuned
        configs[label] = compose(
            [f"experiment={experiment}", f"experiment.label={label}", *overrides, *tuned, *extra]
        )
    return configs


def _plain(settings: dict) -> dict:
    """Settings as a run's record holds them: through JSON, as the tracker stores a config
    (a tuple comes back a list), so that equal settings compare equal."""
    return json.loads(json.dumps(flat(settings), default=str))


@functools.cache
def set_settings(experiment: str) -> dict[str, dict]:
    """Label -> the settings (dotted keys) that make that label's run in the set; empty
    when `experiment` names no run set."""
    if not (CONFIG_DIR / "experiment" / f"{experiment}.yaml").is_file():
        return {}
    return {
        label: {
            k: v
            for k, v in _plain(identity(cfg)).items()
            if k not in HOW_IT_RAN
            or (k in PINNED_BY_LABEL and k in map(override_key, cfg.experiment.runs[label]))
        }
        for label, cfg in label_configs(experiment).items()
    }


def changed_by(experiment: str, configs: Iterable[Config]) -> list[str]:
    """`key=value (set: value)` for each setting where the composed runs `configs` (the
    set's, with a command line's overrides) are not the set's, each once: empty when the
    overrides only say where or how the runs are computed."""
    settings = set_settings(experiment)
    found = [d for cfg in configs for d in departures(as_dict(cfg), settings[cfg.experiment.label])]
    return list(dict.fromkeys(found))


def departures(config: dict, settings: dict) -> list[str]:
    """`key=ours (set: theirs)` for every setting where a run of `config` (as its record
    holds it) is not the set's run."""
    have = _plain(config)
    return [
        f"{key}={fmt(have.get(key))} (set: {fmt(want)})"
        for key, want in settings.items()
        if have.get(key) != want
    ]
