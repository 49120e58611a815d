"""Fixtures shared by the whole suite: the local SLURM cluster and the local PostgreSQL.

`make test` runs the suite on two pytest-xdist workers (the machine's two cores; most
multi-process tests wait on sleeps and daemons half the time). Each test module goes to one
worker whole, so a module's fixtures (a data set, the engine-equivalence traces) are built
once; every test on the SLURM cluster or the PostgreSQL server goes to the same worker,
because their session fixtures start and stop one daemon each and SLURM's CPUs would queue
one test's jobs behind another's.

A test's commands start their own wandb service, as they do from a terminal: once this
process has run wandb it names its service in WANDB_SERVICE, and a command inheriting that
would share it, where a run killed a moment ago can still hold its id ("run ID ... is in
use" on the resume).
"""

import os

import pytest

pytest_plugins = ["tests.slurm_fixture", "tests.pg_fixture"]

_DAEMONS = {"slurm_cluster", "pg_server"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        group = "daemons" if _DAEMONS & set(item.fixturenames) else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # before the test's fixtures, a module's too (they start commands as well); not put back
    # after the test, when wandb may have stopped the service it names
    os.environ.pop("WANDB_SERVICE", None)
