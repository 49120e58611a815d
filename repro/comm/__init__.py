"""Collectives over the worker axis (the contract, both engines' implementations and the
record each call returns), process groups and launching."""
