"""Fixtures shared by the whole suite (the local SLURM cluster and the local PostgreSQL), and
how `make test` spreads the suite over its two pytest-xdist workers.

Each test module goes to one worker whole, so a module's fixtures (a data set, the
engine-equivalence traces) are built once. Every test that uses the SLURM cluster or the
PostgreSQL server lives under tests/daemons/, and that directory goes to one worker whole:
each worker holds its own session fixtures, and two of them would start and stop one daemon
under each other, while SLURM's CPUs would queue one test's jobs behind another's. The
scheduler groups by path because it sees only test ids; xdist's own `loadgroup` marks cannot
do it here (it appends the group to `item._nodeid`, which pytest 9 no longer reads). Modules
are handed out in collection order (tests/comm and tests/daemons first, the quick unit
modules last, filling in at the end) rather than by test count.

A test's commands start their own wandb service, as they do from a terminal: once this
process has run wandb it names its service in WANDB_SERVICE, and a command inheriting that
would share it, where a run killed a moment ago can still hold its id ("run ID ... is in
use" on the resume).
"""

import os

import pytest

pytest_plugins = ["tests.slurm_fixture", "tests.pg_fixture"]

DAEMONS = {"slurm_cluster", "pg_server"}
DAEMON_TESTS = "tests/daemons/"


def work_unit(nodeid: str) -> str:
    """The group a test runs in: tests/daemons/ as one, every other module on its own."""
    module = nodeid.split("::", 1)[0]
    return DAEMON_TESTS if module.startswith(DAEMON_TESTS) else module


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    # called only where xdist runs: a serial run does not need it installed
    from xdist.scheduler import LoadScopeScheduling

    class ByModule(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    config.option.loadscopereorder = False
    return ByModule(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        used = sorted(DAEMONS & set(item.fixturenames))
        if used and not item.nodeid.startswith(DAEMON_TESTS):
            raise pytest.UsageError(
                f"{item.nodeid} uses {', '.join(used)}: move it under {DAEMON_TESTS}, whose "
                "tests run on one worker"
            )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # before the test's fixtures, a module's too (they start commands as well); not put back
    # after the test, when wandb may have stopped the service it names
    os.environ.pop("WANDB_SERVICE", None)
