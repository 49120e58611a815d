"""Fixtures shared by the whole suite: the local SLURM cluster and the local PostgreSQL."""

pytest_plugins = ["tests.slurm_fixture", "tests.pg_fixture"]
