"""The conformance kit: every registered method, in every variant its config declares.

The guarantees every method must keep (the engines computing the same thing at 2 and 4
workers, a run resumed mid-way ending as an uninterrupted one, a config checked without
torch, `make gpu-check`, the simulated engine's memory estimate) iterate `variants()`
rather than a list of methods kept by hand: a method is discovered as the trainer
discovers it (`repro.strategies.base.registered`), and its variants are what its
`configs/method/<name>.yaml` declares (`MethodConfig.test_variants`). A new method is
checked by all of them as soon as it exists, and one whose config declares no variants is
refused like any other bad config.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from repro.config import compose
from repro.strategies.base import registered


@dataclass(frozen=True)
class Variant:
    """One declared variant: `method` and the overrides its config lists, in order.
    `first` marks the method's first variant, which the checks too costly to run for
    every variant take."""

    method: str
    extra: tuple[str, ...]
    first: bool

    @property
    def overrides(self) -> list[str]:
        """What composes it: `method=<name>`, then the declared overrides."""
        return [f"method={self.method}", *self.extra]

    @property
    def id(self) -> str:
        """A short name for test ids and report lines: `topk[cr=0.05,collective=ar_ring]`."""
        if not self.extra:
            return self.method
        return f"{self.method}[{','.join(o.removeprefix('method.') for o in self.extra)}]"


@functools.cache
def variants() -> tuple[Variant, ...]:
    """Every registered method's declared variants, methods in name order. Composing each
    method's config reads its declarations and refuses a config lacking them
    (`MethodConfig.check_declared`)."""
    out: list[Variant] = []
    for name in sorted(registered()):
        declared = compose([f"method={name}"]).method.test_variants
        out += [Variant(name, tuple(v), i == 0) for i, v in enumerate(declared)]
    return tuple(out)


def firsts() -> tuple[Variant, ...]:
    """Each method's first declared variant."""
    return tuple(v for v in variants() if v.first)
