"""Fixtures shared by the report tests: the full AdaComm run set keyed by label."""

import pytest

from tests.unit.report_data import adacomm_set, by_label


@pytest.fixture
def runs():
    return by_label(adacomm_set())
