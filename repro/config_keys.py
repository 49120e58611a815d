"""The keys a composed config has, and which choice of a config group has a key.

The one-line errors of `repro.hydra_overrides` and the `--help` of `repro train` both ask
these questions of the config tree: every dotted key a composition holds, the keys a
`+key=` added that no schema reads, the fields a method inherits and never reads (so no
hint offers them as its settings), and for a key the chosen group member lacks, the other
members that have it. Composition for these questions is quiet: a choice that fails to
compose simply has no keys.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from omegaconf.nodes import BooleanNode

from repro.errors import UserError, override_key


def known_keys(tree, unread: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """Every dotted key of a composed config or a plain dict, sections included, without
    Hydra's own `hydra.` node or the fields a method inherits and never reads (`unread`,
    found in a composed config itself: `unread_keys`)."""
    if isinstance(tree, DictConfig):
        unread = {*unread, *unread_keys(tree)}
        tree = OmegaConf.to_container(tree, resolve=False, throw_on_missing=False)
    return [
        k
        for k in _dotted(tree, "")
        if k.split(".")[0] != "hydra" and not any(k == u or k.startswith(f"{u}.") for u in unread)
    ]


def unread_keys(tree: DictConfig | None, prefix: str = "") -> set[str]:
    """The dotted keys of every inherited field a typed section never reads and refuses
    (`MethodConfig.unread`): settings in the schema that are no settings of the choice."""
    if tree is None:
        return set()
    found = {f"{prefix}{k}" for k in getattr(OmegaConf.get_type(tree), "unread", ())}
    for k in tree:
        node = tree._get_node(k)
        if isinstance(node, DictConfig) and not node._is_missing() and not node._is_none():
            found |= unread_keys(node, f"{prefix}{k}.")
    return found


def extra_keys(composed: DictConfig, built: dict) -> list[str]:
    """Keys in the composed tree that the dataclasses dropped: added with `+key=` or `++key=`
    where the schema has no such setting, so they would be ignored without a word."""
    tree = OmegaConf.to_container(composed, resolve=False)
    return sorted(_extra(tree, built, ""))


def _dotted(tree, prefix: str):
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield f"{prefix}{k}"
            yield from _dotted(v, f"{prefix}{k}.")


def _extra(tree, built, prefix: str):
    if not isinstance(tree, dict) or not isinstance(built, dict):
        return
    for k, v in tree.items():
        if k not in built:
            yield f"{prefix}{k}"
        else:
            yield from _extra(v, built[k], f"{prefix}{k}.")


_KEPT: dict[tuple, tuple[tuple, DictConfig]] = {}
_KEEP = 128  # about 160 KiB each


def compose_at(config_dir: Path, overrides: list[str], hydra: bool = False) -> DictConfig:
    """Hydra's composition of `config_dir`/config.yaml with the overrides (with Hydra's own
    node where `hydra`).

    A composition without Hydra's node is kept in this process and handed out again as a
    copy for as long as no file under `config_dir` and no schema in Hydra's ConfigStore has
    changed: Hydra reads and merges every YAML file again each time (about 0.1 s a
    composition, a copy 8 ms), and a run set's labels, its claims' regime and a report
    compose the same configs again and again. A file edited between two compositions (a
    notebook, a tuning search writing `configs/tuned/`) changes its stamp, so it is read."""
    if hydra:
        return _compose(config_dir, overrides, hydra)
    schemas = _schemas()
    key = (str(config_dir), _files(config_dir), tuple(id(n) for n in schemas), tuple(overrides))
    if key in _KEPT:
        return copy.deepcopy(_KEPT[key][1])
    cfg = _compose(config_dir, overrides, hydra)
    if len(_KEPT) >= _KEEP:
        _KEPT.pop(next(iter(_KEPT)))
    # the schemas stay referenced beside the copy, so no new one can take their ids
    _KEPT[key] = (schemas, copy.deepcopy(cfg))
    return cfg


def _files(config_dir: Path) -> tuple:
    """Each file under `config_dir` as (path, inode, size, modification time): a rewrite in
    place or a replacement (a new inode) changes it."""
    stamps = []
    for folder, _, names in os.walk(config_dir):
        for name in names:
            st = os.stat(os.path.join(folder, name))
            stamps.append((folder, name, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(sorted(stamps))


def _schemas() -> tuple:
    """Every node in Hydra's ConfigStore (the structured schemas configs extend) but Hydra's
    own, which it stores anew at each composition."""

    def nodes(tree: dict):
        for v in tree.values():
            yield from nodes(v) if isinstance(v, dict) else (v,)

    return tuple(nodes({k: v for k, v in ConfigStore.instance().repo.items() if k != "hydra"}))


def _compose(config_dir: Path, overrides: list[str], hydra: bool) -> DictConfig:
    """Hydra keeps one global instance; a caller's own (a notebook that composes its configs
    with Hydra too) is set aside for the composition and put back, where
    `initialize_config_dir` would refuse it as already initialized."""
    global_hydra = GlobalHydra.instance()
    callers = global_hydra.hydra if global_hydra.is_initialized() else None
    global_hydra.clear()
    try:
        with initialize_config_dir(config_dir=str(config_dir), version_base=None):
            return hydra_compose("config", overrides=overrides, return_hydra_config=hydra)
    finally:
        if callers is not None:
            GlobalHydra.instance().clear()
            GlobalHydra.instance().initialize(callers)


def compose_quietly(config_dir: Path, overrides: list[str], hydra: bool = False):
    try:
        return compose_at(config_dir, overrides, hydra)
    except (HydraException, OmegaConfBaseException, UserError, ValueError):
        return None


def _group_overrides(overrides: list[str], config_dir: Path) -> list[str]:
    return [
        o for o in overrides if "=" in o and (config_dir / o.lstrip("+").split("=")[0]).is_dir()
    ]


def group_choices(overrides: list[str], config_dir: Path) -> dict[str, str]:
    """Each group's choice for these overrides (an experiment may pick some itself)."""
    cfg = compose_quietly(config_dir, _group_overrides(overrides, config_dir), hydra=True)
    return dict(cfg.hydra.runtime.choices) if cfg is not None else {}


def group_options(group: str, config_dir: Path) -> list[str]:
    """Every choice of `group`, the presets in its subfolders included as Hydra names them
    (`method=compressed/topk_c0.1`), so that an error or the help lists them all."""
    folder = config_dir / group
    return sorted(p.relative_to(folder).with_suffix("").as_posix() for p in folder.rglob("*.yaml"))


def choices_with(group: str, config_dir: Path, skip: str | None = None) -> dict[str, dict]:
    """key -> {each choice of `group` with that setting (an inherited field it refuses,
    `unread_keys`, is none): its node there}, over every choice but `skip`."""
    if group == "experiment" or not (config_dir / group).is_dir():
        return {}
    found: dict[str, dict] = {}
    for path in sorted((config_dir / group).glob("*.yaml")):
        cfg = None if path.stem == skip else compose_quietly(config_dir, [f"{group}={path.stem}"])
        for k in known_keys(cfg[group]) if cfg is not None else []:
            found.setdefault(f"{group}.{k}", {})[path.stem] = node_at(cfg[group], k)
    return found


def node_at(cfg: DictConfig, key: str):
    """The node (not the value) at a dotted key, or None: its type says what it accepts."""
    node = cfg
    for part in key.split("."):
        if not isinstance(node, DictConfig) or part not in node:
            return None
        node = node._get_node(part)
    return node


def check_group_choices(parsed: list, groups: tuple[str, ...], config_dir: Path) -> None:
    """Each config group given one choice it has, read as Hydra parses the override
    (`method='sync'` is `sync`): a list, null, an unknown choice or a sweep that names no
    choices (a glob outside a multirun) is one line naming the choices."""
    for ov in parsed:
        key = override_key(ov.input_line)
        if key not in groups or ov.is_delete():
            continue
        known = group_options(key, config_dir)
        value = ov.value()
        if ov.is_sweep_override():
            try:
                choices = list(ov.sweep_string_iterator())
            except HydraException:  # glob() and interval() list nothing without Hydra's runner
                raise UserError(
                    f"{ov.input_line}: give one {key}, one of {known} (glob() picks several "
                    "only in `repro train --multirun`)"
                ) from None
        elif value is None:
            raise UserError(f"{ov.input_line}: a config group takes one of {known}, not null")
        elif isinstance(value, list):
            several = ",".join(str(v) for v in value)
            raise UserError(
                f"{ov.input_line}: one {key} per run; for a run of each, --multirun {key}={several}"
            )
        else:
            choices = [str(value)]
        for choice in choices:
            if not (config_dir / key / f"{choice}.yaml").exists():
                if (key, choice) == ("network", "calibrated"):  # written by a command
                    raise UserError(
                        "network=calibrated is this machine's fit, not measured yet: "
                        "`repro calibrate` writes it (a few minutes), or choose one of "
                        f"{known}"
                    )
                raise UserError(f"{key}={choice} is not a known {key}; choose one of {known}")


def check_bool_values(parsed: list, cfg: DictConfig) -> None:
    """A bool setting given as true or false. OmegaConf reads any integer (2 is true) and
    yes, no, on, off as bools, so `method.layerwise=2` ran layer-wise without a word."""
    for ov in parsed:
        value = ov.value()
        if ov.is_delete() or ov.is_sweep_override() or value is None or isinstance(value, bool):
            continue
        if isinstance(value, str) and "${" in value:  # an interpolation, resolved later
            continue
        key = override_key(ov.input_line).lstrip("+")
        if isinstance(node_at(cfg, key), BooleanNode):
            raise UserError(f"{ov.input_line}: expected a bool (true or false), e.g. {key}=true")
