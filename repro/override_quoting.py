"""Settings written as Hydra's override grammar and a shell read them back whole.

Overrides repro writes itself (a sweep trial's `run_dir`, the `repro reproduce` command a
report names) carry paths from files and folders, which may hold any character; and a
fix offered in an error line must be pasted as it is.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException

_BARE = re.compile(r"[\w/\-+.%*@?|:$ ]*", re.ASCII)
"""What an override's value may hold unquoted (Hydra's lexer: letters, digits and these)."""


def quoted(key: str, value: str, always: bool = False) -> str:
    """`key=value` as Hydra's grammar reads `value` back whole, as a string: as it is where
    it may stand bare and reads as that string (unless `always`), else single-quoted, its
    quotes (and the backslashes before them or at its end) escaped. A path from a file or
    a folder (a sweep's `out`, a report's runs) may hold any character: `Ü`, `(`, `[`,
    `=`, `#` or `'` unquoted failed to parse; `1e3` or `null` bare read as a number or
    None. A `${` stays OmegaConf's interpolation, quoted or not."""
    if not always and _BARE.fullmatch(value) and value == value.strip():
        try:
            bare = OverridesParser.create().parse_override(f"{key}={value}").value()
        except HydraException:
            bare = None
        if bare == value and isinstance(bare, str):
            return f"{key}={value}"
    body = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", value)
    body = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, body)
    return f"{key}='{body}'"


def command_line(words: Iterable[str]) -> str:
    """`words` as one shell command to paste: a word holding single quotes (a quoted
    override) in double quotes where nothing in it is special there, else `shlex`'s."""
    shown = []
    for word in words:
        bare = shlex.quote(word)
        plain = "'" in word and not any(c in word for c in '"$`\\!')
        shown.append(f'"{word}"' if bare != word and plain else bare)
    return " ".join(shown)
