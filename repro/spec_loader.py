"""Strict YAML-to-dataclass loading, shared by sweep specs, tuning specs and claims files.

Each of these files is written by hand and read into frozen dataclasses, and a mistake in
one must be refused when it is read, in one line naming the file, the key's path and the
fix: an unknown key (a misspelt one would otherwise be ignored), a value of the wrong type,
a missing key. The dataclass is the schema: its fields are the keys, a field without a
default is required, its annotation is the type; its `__post_init__` then checks what a
type cannot say (ranges, choices, relations between fields). A key written without a value
(`overrides:`) keeps the field's default.

OmegaConf's structured configs, which compose the training configs, were measured for this
and do not fit: they convert where these files must refuse (a quoted bound "0.4" becomes
0.4; an int search bound 1 becomes 1.0 under `float | None`, so an int entry would sample
floats), turn tuples into lists, report over three lines without a fix, and cannot fill a
field from the mapping key an entry sits under (a tuning arm's name) or from the file's
name. What is checked here is the few annotation shapes these dataclasses use: str, int,
float, bool, Any, `X | None`, bare list and dict, `tuple[X, ...]`, `dict[str, X]` and
nested dataclasses.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml

from repro.errors import UserError

# Field metadata for values the loader sets instead of the file: the name of the file read
# (for messages), or the key of the mapping the entry sits under (a tuning arm's name).
FILE = {"spec_loader": "file"}
KEY = {"spec_loader": "key"}

_KINDS = {str: "a text", int: "an integer", float: "a number", bool: "true or false"}
_KINDS.update({list: "a list", tuple: "a list", dict: "a mapping"})


class _OnceLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key written twice in one mapping: plain YAML keeps the
    last silently, so a budget set at the top and again further down would run the second
    unseen."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, Hashable):  # YAML's own refusal follows, one line
                continue
            line = key_node.start_mark.line + 1
            if key in seen:
                raise UserError(
                    f"key {key} is written twice (lines {seen[key]} and {line}); keep one"
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: Path, what: str) -> Any:
    """The parsed file, or one line saying that it is missing, not a file, not YAML, or
    that it sets a key twice."""
    if path.is_dir():
        raise UserError(f"{what} {path} is a directory; give the YAML file")
    if not path.is_file():
        raise UserError(f"{what} {path} does not exist")
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=_OnceLoader)
    except yaml.YAMLError as err:
        raise UserError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
    except UserError as err:
        raise UserError(f"{path}: {err}") from None


def load(cls: type, data: Any, source: str) -> Any:
    """`cls` built from a whole file's parsed YAML; every refusal starts with `source`."""
    try:
        return build(cls, data, "", source=source)
    except UserError as err:
        raise UserError(_within(source, str(err))) from None


def build(cls: type, data: Any, where: str = "", *, source: str = "", key: str = "") -> Any:
    """`cls` from the mapping `data` at path `where` of a file, refusing in one line that
    names `where`: a value that is not a mapping, an unknown or a missing key, a value of
    the wrong type, or what `cls.__post_init__` refuses."""
    fields = _fields(cls)
    keys = sorted(f.name for f, _ in fields if "spec_loader" not in f.metadata)
    if not isinstance(data, dict):
        what = where or "the file"
        raise UserError(f"{what} must be a mapping of {', '.join(keys)}; got {_shown(data)}")
    unknown = sorted(map(str, set(data) - set(keys)))
    if unknown:
        raise UserError(
            _within(where, f"unknown key(s) {', '.join(unknown)}; known: {', '.join(keys)}")
        )
    missing = [f.name for f, _ in fields if f.name in keys and f.name not in data and _required(f)]
    if missing:
        them = "it" if len(missing) == 1 else "them"
        raise UserError(_within(where, f"missing key(s) {', '.join(missing)}; add {them}"))
    args = {}
    for f, hint in fields:
        role = f.metadata.get("spec_loader")
        if role is not None:
            args[f.name] = source if role == "file" else key
        elif data.get(f.name) is not None or (f.name in data and _required(f)):
            args[f.name] = _convert(hint, data[f.name], where, f.name)
    try:
        return cls(**args)
    except UserError as err:
        raise UserError(_within(where, str(err))) from None


def _convert(hint: Any, value: Any, where: str, name: str, key: str = "") -> Any:
    """`value` checked against the annotation `hint`; `name` is its path below `where`.
    A YAML list becomes the tuple a `tuple[X, ...]` field holds."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]  # only `X | None` is used
        return _convert(inner, value, where, name, key)
    if dataclasses.is_dataclass(hint):
        return build(hint, value, f"{where}.{name}" if where else name, key=key)
    base = origin or hint
    if base is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif base is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, list | tuple) if base is tuple else isinstance(value, base)
    if not ok:
        raise UserError(_within(where, f"{name}={_shown(value)} must be {_KINDS[base]}"))
    if base is tuple and args:
        return tuple(_convert(args[0], v, where, f"{name}[{i}]") for i, v in enumerate(value))
    if base is dict and args:
        return {
            str(k): _convert(args[1], v, where, f"{name}.{k}", str(k)) for k, v in value.items()
        }
    return value


@functools.cache
def _fields(cls: type) -> list[tuple[dataclasses.Field, Any]]:
    """The fields a file may set (or the loader sets), each with its resolved annotation."""
    hints = typing.get_type_hints(cls)
    return [(f, hints[f.name]) for f in dataclasses.fields(cls) if f.init]


def _required(f: dataclasses.Field) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _within(where: str, text: str) -> str:
    """`text` prefixed by `where`, unless it already names it first."""
    return text if not where or text.startswith(where) else f"{where}: {text}"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
