"""One colour per method in every report and comparison.

Colours are keyed by run label only, never by which other runs a figure shows, so a method
has the same colour in the AdaComm, Flexible Top-k and Adasum reports, the index and
`repro report compare`.
"""

from __future__ import annotations

import math
import re
import zlib
from dataclasses import dataclass

# Methods without a parameter have a fixed colour; a family of parameterised runs (fixed
# tau, one Top-k variant at several ratios, one combiner at several batches) shares a colour
# map and is shaded by the parameter on a fixed per-family range.
# Shades run from the map's 45 % point (light enough to tell apart, dark enough to see on
# white) to its end; the fixed-tau family takes a multi-hue map (yellow-green-blue), whose
# shades of tau 5, 20 and 100 differ by more than 20 CIELAB units, where plain blues did not.
# The baselines (fully synchronous SGD, dense allreduce) are black.
FIXED_COLOURS = {
    "sync": "#000000",
    "dense": "#000000",
    "dense_ring": "#000000",
    "dense_tree": "#555555",
    "adacomm": "#d62728",
    "adacomm_lrdecay": "#ff7f0e",
    "adasum": "#d62728",
    "sum": "#1f77b4",
    "mean": "#2ca02c",
    "moo": "#e377c2",
}


@dataclass(frozen=True)
class Family:
    """Runs whose label matches `pattern` (whole label): colour map `cmap`, shaded by the
    |log2| of the first number in the label, from light at `lo` to dark at `hi`."""

    pattern: str
    cmap: str
    lo: float
    hi: float
    dashed: bool


FAMILIES = (
    Family(r"local_sgd.*", "YlGnBu", 1.0, 7.0, True),  # tau 2 .. 128
    Family(r"ag_topk.*", "Oranges", 3.0, 10.0, True),  # c 0.1 .. 0.001
    Family(r"star_topk.*", "Greens", 3.0, 10.0, True),
    Family(r"var_topk.*", "Purples", 3.0, 10.0, True),
    Family(r"flex_topk.*", "Blues", 3.0, 10.0, False),  # the switch under C1, solid
    Family(r"(toy_|cost_)?adasum.*", "Reds", 5.0, 14.0, False),  # batch 32 .. 16384
    Family(r"(toy_|cost_)?sum.*", "Blues", 5.0, 14.0, False),
    Family(r"(toy_|cost_)?mean.*", "Greens", 5.0, 14.0, False),
)
# Optimizers of the Adasum runs, told apart by line style since colour names the combiner.
OPTIMIZER_STYLES = {"adam": ":", "lamb": "-."}
SHADE_START = 0.45  # where on its colour map a family's lightest shade sits
FALLBACK = "tab10"  # colour map of labels in no family, indexed by a hash of the label


def _family(label: str) -> Family | None:
    return next((f for f in FAMILIES if re.fullmatch(f.pattern, label)), None)


def colour_for(label: str) -> str:
    """The colour of a run label in every report (fixed map, family shade, or stable hash)."""
    from matplotlib import colormaps  # loads only when a report draws or colours runs
    from matplotlib.colors import to_hex

    if label in FIXED_COLOURS:
        return FIXED_COLOURS[label]
    family = _family(label)
    if family is None:
        fallback = colormaps[FALLBACK]
        return to_hex(fallback(zlib.crc32(label.encode()) % fallback.N))
    number = re.search(r"\d+(?:\.\d+)?", label)
    value = float(number.group()) if number else 0.0
    # No number (toy_adasum) sits mid-range.
    magnitude = abs(math.log2(value)) if value else (family.lo + family.hi) / 2
    shade = min(1.0, max(0.0, (magnitude - family.lo) / (family.hi - family.lo)))
    return to_hex(colormaps[family.cmap](SHADE_START + (1 - SHADE_START) * shade))


def line_style(label: str) -> str:
    """Dashed for fixed-parameter baselines (fixed tau, fixed ratio), dotted or dash-dotted
    for the Adasum runs with Adam or LAMB, solid for every other run."""
    family = _family(label)
    if family is not None and family.dashed:
        return "--"
    return next((OPTIMIZER_STYLES[p] for p in label.split("_") if p in OPTIMIZER_STYLES), "-")
