"""Hydra overrides as a user types them, and composition errors as one line each.

Hydra and OmegaConf report a bad override as a chain of exceptions whose outer message
("Error merging override ...", "Could not override ...", a parser traceback) leaves out
why; the reason and the config node involved sit on the cause. The functions here read
that node to say which setting is wrong, what it expects (its type and an example value),
and the fix (the closest known key, the group choice that has the key, `--multirun`).
`expand_sweep` turns the comma lists of a `--multirun` into the runs they stand for.
Composition lives in `repro.config` and the config tree's keys in `repro.config_keys`;
this module only explains, so it never imports the first.
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import os
import re
from collections.abc import Iterable
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.errors import HydraException
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    ConfigTypeError,
    MissingMandatoryValue,
    OmegaConfBaseException,
    ValidationError,
)
from omegaconf.nodes import BooleanNode, BytesNode, EnumNode, FloatNode, IntegerNode, PathNode

from repro.config_keys import (
    choices_with,
    compose_quietly,
    group_choices,
    group_options,
    known_keys,
    node_at,
    unread_keys,
)
from repro.errors import UserError, override_key
from repro.override_quoting import command_line, quoted

GRAMMAR_URL = "https://hydra.cc/docs/advanced/override_grammar/basic"
LISTS_KEYS = "`repro train --cfg job` lists every key"
# Hydra's text for a config file that sets a key the schema chosen for its group lacks; the
# exception carries no cause, only this text.
SET_BY_FILE = re.compile(
    r"In '(?P<file>[^']+)': ConfigKeyError raised while composing config:\s*"
    r"Key '[^']+' not in '[^']+'\s*full_key: (?P<key>\S+)"
)
# What a value node of each OmegaConf type accepts, as a user would write it.
EXPECTS = {
    IntegerNode: "an int (a whole number)",
    FloatNode: "a float (a number)",
    BooleanNode: "a bool (true or false)",
    BytesNode: "bytes",
    PathNode: "a path",
}


_HYDRA_PLACES = ("hydra.run", "hydra.sweep", "hydra.job.chdir", "hydra.output_subdir")
"""Hydra's settings of where an app's outputs go: runs are placed by `run_dir` and
`runs_root`, and the app runner that would read these is not used."""


def parse(overrides: Iterable[str], config_dir: Path) -> list[Override]:
    """Parse every override before composing, so that a syntax error names its override
    (Hydra's parser raises a traceback that names neither the setting nor the fix)."""
    overrides = list(overrides)
    parser = OverridesParser.create()
    parsed = []
    for raw in overrides:
        try:
            parsed.append(parser.parse_override(raw))
        except HydraException as e:
            if "=" not in raw and not raw.startswith("~"):
                others = [o for o in overrides if o != raw and "=" in o]
                raise UserError(_missing_value(raw, others, config_dir)) from None
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise UserError(
                f"cannot read the override {raw!r} ({reason}); {_readable(parser, raw, reason)}"
            ) from None
    for override in parsed:
        key = override.key_or_group
        if key.startswith(_HYDRA_PLACES):
            raise UserError(
                f"{override.input_line}: repro places a run by run_dir=DIR, or runs_root=DIR "
                "(each run in runs_root/<experiment>/<label>-<hash>; with --multirun one "
                "directory per run), not by Hydra's output directories"
            )
        if override.is_delete() and "." not in key and key != "experiment":
            refusal = _undeletable(key, [o for o in overrides if o[:1] != "~"], config_dir)
            if refusal:
                raise UserError(refusal)
    return parsed


def _undeletable(key: str, others: list[str], config_dir: Path) -> str | None:
    """Why `~key` of a group or a top-level setting is refused, with the fix; None for a key
    the config does not have (the unknown key's own line follows). Hydra deletes it, and
    the typed config then either fills in its schema's default without a word (`~seed` ran
    the schema's seed, `~trainer` the schema's trainer in place of config.yaml's) or misses
    a mandatory value (`~method`), said without a fix. A nested setting's deletion is
    refused by its typed node (`explain`); an experiment is optional: `~experiment` drops
    the one chosen."""
    typed = "of a typed config cannot be deleted"
    if (config_dir / key).is_dir():
        choices = ", ".join(group_options(key, config_dir))
        return f"~{key}: every run has a {key}; choose one instead: {key}=CHOICE, one of {choices}"
    cfg = compose_quietly(config_dir, others)
    node = node_at(cfg, key) if cfg is not None else None
    if isinstance(node, DictConfig) and len(node):
        first = next(iter(node))
        example = _example(f"{key}.{first}", node._get_node(first))
        return f"~{key}: a section {typed}; set its settings instead, e.g. {example}"
    if node is not None:
        return f"~{key}: a setting {typed}; set a value instead, e.g. {_example(key, node)}"
    return None


def _readable(parser: OverridesParser, raw: str, reason: str) -> str:
    """The fix for an override Hydra's grammar cannot read. Its unquoted values take no
    `~`, `#`, `&` or non-ASCII letter (a character its lexer does not know), so a path
    holding one (`data.root=~/data`, whose `~` the shell leaves alone after `data.root=`)
    is written out (`~` as the home folder: Hydra never expands it) and quoted where that
    is what it needs; so is a path holding a character the grammar gives a meaning (`(`,
    `[`, `=`). Other syntax errors (a bracket left open, `1,` or `choice(0.1`: typos in a
    number or a sweep, which quoting would turn into a string) get the grammar's page."""
    key, _, value = raw.partition("=")
    path = "/" in value or value.startswith(("~", "."))
    if not reason.startswith("token recognition error") and not path:
        return f"write key=value, see {GRAMMAR_URL}"
    value = os.path.expanduser(value)
    for written in (f"{key}={value}", quoted(key, value)):
        try:
            parser.parse_override(written)
        except HydraException:
            continue
        if written == raw:
            break
        if written.endswith(f"={value}"):
            return f"write it out: {written}"
        return f"quote the value inside the shell's quotes: {command_line([written])}"
    return f"write key=value, see {GRAMMAR_URL}"


def explain(e: Exception, overrides: list[str], config_dir: Path) -> str:
    """One line for an exception raised while composing `overrides`."""
    text = str(e)
    if text.startswith("Ambiguous value for argument"):
        return several_values(text.split("'")[1], config_dir)
    appended = re.match(r"Could not append to config\. An item is already at '([^']+)'", text)
    if appended:
        key = appended[1]
        given = next((o for o in overrides if override_key(o) == key), f"+{key}=...")
        return f"{given}: {key} exists already; `+` adds a new key: set it as {given.lstrip('+')}"
    set_by_file = SET_BY_FILE.match(text)
    if set_by_file:
        return _set_by_file(set_by_file["key"], set_by_file["file"], overrides, config_dir)
    cause = e if isinstance(e, OmegaConfBaseException) else e.__cause__
    if isinstance(cause, OmegaConfBaseException) and getattr(cause, "full_key", None):
        if isinstance(cause, ConfigAttributeError | ConfigKeyError) and cause.child_node is None:
            parent, key = cause.parent_node, cause.full_key
            known = known_keys(parent._get_root() if parent is not None else None)
            new = _new_map_key(parent, key, known, overrides)
            return new or unknown_key(key, known, overrides, config_dir)
        if isinstance(cause, ValidationError) and cause.child_node is not None:
            root = cause.child_node._get_root()
            if cause.full_key in unread_keys(root):  # `method.tau=` under AdaComm
                return unknown_key(cause.full_key, known_keys(root), overrides, config_dir)
            return _wrong_value(cause)
        if isinstance(cause, MissingMandatoryValue):
            return _missing(cause)
        if isinstance(cause, ConfigTypeError) and "deletion" in str(cause):
            key = cause.full_key
            return (
                f"~{key}: a setting of a typed config cannot be deleted; "
                f"set a value instead, e.g. {_example(key, cause.child_node)}"
            )
        return _one_line(cause)  # the reason, which the outer message leaves out
    return _one_line(e)


def several_values(override: str, config_dir: Path) -> str:
    """A comma list outside `--multirun`: Hydra's fix spans three lines, this keeps all."""
    key, _, values = override.partition("=")
    if (config_dir / key.lstrip("+")).is_dir():
        return f"{override} gives several choices: add --multirun to run one per choice"
    return (
        f"{override} gives several values: add --multirun to run one per value, "
        f"write {key}=[{values}] for one list value, or quote it ({key}='{values}') for a string"
    )


def _new_map_key(parent, key: str, known: list[str], overrides: list[str]) -> str | None:
    """A new key of a free map (cluster.sbatch_args), not a typo of one: Hydra adds it with +."""
    if parent is None or OmegaConf.get_type(parent) is not dict or _closest(key, known):
        return None
    given = next((o for o in overrides if o.split("=", 1)[0] == key), f"{key}=VALUE")
    return f"{key} is a new key of the map {key.rpartition('.')[0]}: add it with +{given}"


def unknown_key(key: str, known: list[str], overrides: list[str], config_dir: Path) -> str:
    """`key` is in no schema: suggest the closest of the `known` keys, or the group choice
    that has it."""
    group = key.split(".")[0]
    is_group = group != "experiment" and (config_dir / group).is_dir()
    chosen = group_choices(overrides, config_dir).get(group) if is_group else None
    elsewhere = choices_with(group, config_dir, skip=chosen) if chosen else {}
    if key in elsewhere:
        owners = list(elsewhere[key])
        return (
            f"{key} is not a setting of {group}={chosen}; it belongs to "
            f"{' and '.join(f'{group}={c}' for c in owners)}: add one, e.g. {group}={owners[0]}"
        )
    close = _closest(key, known)
    if close:
        return f"{key} is not a setting; did you mean {close}? ({LISTS_KEYS})"
    close = _closest(key, list(elsewhere))
    if close:
        owner = next(iter(elsewhere[close]))
        return f"{key} is not a setting; did you mean {close} (with {group}={owner})?"
    section = key.rpartition(".")[0]
    siblings = [k.rpartition(".")[2] for k in known if k.rpartition(".")[0] == section]
    where = f"{section} has {', '.join(siblings)}" if section and siblings else LISTS_KEYS
    return f"{key} is not a setting; {where}"


def _set_by_file(key: str, file: str, overrides: list[str], config_dir: Path) -> str:
    """A config file (an experiment, say) sets `key`, and the choice made for the key's group
    has no such setting: the file, not the command line, is where to look."""
    group = key.split(".")[0]
    path = f"{config_dir.name}/{file}.yaml"
    source = f"{file.replace('/', '=', 1)} ({path})"
    if file.split("/")[0] == group:  # its own group's schema: the keys sit one level too deep
        return (
            f"{key} is set by {source} and is not a setting of {group}: a file in {group}/ "
            f"holds {group}'s keys at its top level, or, with the first line "
            "`# @package _global_`, any section's"
        )
    typed = [o.partition("=")[2] for o in overrides if override_key(o) == group]
    chosen = typed[-1] if typed else None  # else config.yaml's default
    owners = list(choices_with(group, config_dir, skip=chosen).get(key, {}))
    choose = f"choose {' or '.join(f'{group}={c}' for c in owners)}, or " if owners else ""
    fix = f"{choose}drop {key} from {path}"
    which = f"{group}={chosen}" if chosen else f"the {group} chosen"
    return f"{key} is set by {source} and is not a setting of {which}: {fix}"


def _missing(e: MissingMandatoryValue) -> str:
    """A required key left out (a network schedule phase without its bandwidth): which one,
    and every key an entry of its list needs."""
    kind = e.object_type
    needed = [
        f.name
        for f in (dataclasses.fields(kind) if dataclasses.is_dataclass(kind) else ())
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    listed = re.match(r"(.+)\[\d+\]\.[^.]+$", e.full_key)
    if listed and needed:
        return (
            f"{e.full_key} is not set: each entry of {listed[1]} names "
            f"{', '.join(needed[:-1])} and {needed[-1]}"
        )
    return f"{e.full_key} is not set: give it a value"


def _one_line(e: Exception) -> str:
    """The first line of an error that needs no translation, with the key it concerns."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    keep = [ln for ln in lines if not ln.startswith(("full_key", "object_type", "reference_type"))]
    key = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("full_key")), "")
    msg = keep[0] if keep else type(e).__name__
    if "HydraConfig was not set" in msg:  # `${hydra:job.num}`: the app runner's own state
        return (
            f"{key or 'a setting'}: ${{hydra:...}} reads the state of Hydra's app runner, "
            "which repro does not use; interpolate a setting instead (e.g. "
            "run_dir=runs/s${seed}), or set runs_root=DIR for one directory per run"
        )
    return f"{key}: {msg}" if key and key not in msg else msg


def _expects(node) -> str:
    """What a value node accepts, in words."""
    if isinstance(node, EnumNode):
        return "one of " + ", ".join(m.name for m in node.enum_type)
    if isinstance(node, ListConfig):
        return "a list"
    return next((text for cls, text in EXPECTS.items() if isinstance(node, cls)), "a str")


def _wrong_value(e: ValidationError) -> str:
    key, node = e.full_key, e.child_node
    if isinstance(node, DictConfig):
        first = next(iter(node), "KEY")
        return (
            f"{key} is a section of settings, not a value; set one of its keys "
            f"({', '.join(node)}) as {key}.{first}=VALUE"
        )
    wanted = f"expected {_expects(node)}, e.g. {_example(key, node)}"
    if e.value is None:
        return f"{key}=null: {key} cannot be null; {wanted}"
    if e.value == "":
        return f"{key}= has no value: {wanted}"
    return f"{key}={e.value}: {wanted}"


def _missing_value(raw: str, others: list[str], config_dir: Path) -> str:
    key = raw.lstrip("+")
    if (config_dir / key).is_dir():
        known = group_options(key, config_dir)
        return f"{key} has no value: write {key}=CHOICE, one of {', '.join(known)}"
    cfg = compose_quietly(config_dir, others)
    node = node_at(cfg, key) if cfg is not None and key not in unread_keys(cfg) else None
    if node is not None and not isinstance(node, DictConfig | ListConfig):
        return f"{key} has no value: expected {_expects(node)}, e.g. {_example(key, node)}"
    group = key.split(".")[0]
    owners = choices_with(group, config_dir).get(key, {})
    if owners:
        choice, node = next(iter(owners.items()))
        only = " and ".join(f"{group}={c}" for c in owners)
        return (
            f"{key} has no value: expected {_expects(node)}, e.g. {group}={choice} "
            f"{_example(key, node)} ({key} is a setting of {only} only)"
        )
    return f"{key} has no value: write {key}=VALUE"


def _example(key: str, node) -> str:
    value = node._value() if node is not None else None
    if isinstance(value, str) and "${" in value:  # the rejected interpolation itself
        value = None
    if isinstance(node, BooleanNode):
        value = str(value).lower() if value is not None else "true"
    elif isinstance(node, EnumNode) and value is not None:
        value = value.name
    elif isinstance(node, ListConfig) and value is not None:
        value = f"[{','.join(str(v) for v in value)}]"  # no spaces: one shell word
    return f"{key}={'VALUE' if value is None or value == '' else value}"


def _closest(key: str, known: list[str]) -> str | None:
    """The known key most like `key`: the same leaf name elsewhere (`steps` ->
    `trainer.steps`), else a close spelling of the leaf in the same section
    (`trainer.step` -> `trainer.steps`), else a close spelling of the whole key."""
    section, _, leaf = key.rpartition(".")
    same_leaf = [k for k in known if k.rpartition(".")[2] == leaf]
    if len(same_leaf) == 1:
        return same_leaf[0]
    siblings = {k.rpartition(".")[2]: k for k in known if k.rpartition(".")[0] == section}
    # 0.6: two letters swapped in a short name (`tua`, `tau`) is 0.67, `foo` and `flow` 0.57
    close = difflib.get_close_matches(leaf, list(siblings), n=1, cutoff=0.6)
    if close:
        return siblings[close[0]]
    # the whole key, for a misspelt section (`trainr.steps`): a key of the same section was
    # already weighed by its leaf, and would match here on the shared section alone
    elsewhere = [k for k in known if k.rpartition(".")[0] != section]
    close = difflib.get_close_matches(key, elsewhere, n=1, cutoff=0.85)
    return close[0] if close else None


def expand_sweep(overrides: list[str], config_dir: Path) -> list[list[str]]:
    """Every combination of Hydra sweep values (a=1,2 b=x,y; range(..); choice(..); a
    group's glob(..) over its choices), as plain override lists."""
    from hydra.core.override_parser.types import Glob

    parsed = OverridesParser.create().parse_overrides(overrides)
    choices = []
    for raw, ov in zip(overrides, parsed, strict=True):
        if not ov.is_sweep_override():
            choices.append([raw])
            continue
        key = ov.get_key_element()
        glob = ov.value()
        if not isinstance(glob, Glob):
            choices.append([f"{key}={v}" for v in ov.sweep_string_iterator()])
            continue
        group = override_key(raw)
        if not (config_dir / group).is_dir():  # Hydra's glob needs names to filter
            raise UserError(
                f"{raw}: glob() picks among a config group's choices (method=glob(*topk*)); "
                f"list the values of {group} instead: {group}=A,B"
            )
        known = group_options(group, config_dir)
        names = glob.filter(known)
        if not names:
            raise UserError(f"{raw} matches no {group}; choose from {known}")
        choices.append([f"{key}={name}" for name in names])
    return [list(c) for c in itertools.product(*choices)]
