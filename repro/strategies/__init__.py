"""Communication strategies; importing this package registers every method."""

from repro.strategies import adacomm, adasum, local_sgd, sync, topk  # noqa: F401
