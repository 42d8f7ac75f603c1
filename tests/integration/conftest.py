"""The integration tests' fixtures (``lake``) and ``sink_config`` live in
tests/conftest.py, shared with the browser tests; ``sink_config`` is
re-exported here for the tests that import it from this module. ``topics``
names the two topics each mirror test copies; ``procs`` runs a connector's
roles as processes of their own, which a test can kill."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.conftest import sink_config
from tests.integration.helpers import Processes

__all__ = ["sink_config"]


@pytest.fixture
def topics() -> list[str]:
    """Two topic names of this test's own (the mirror's tests copy two topics)."""
    run = uuid.uuid4().hex[:8]
    return [f"orders-{run}", f"payments-{run}"]


@pytest.fixture
def procs(lake: dict[str, str]) -> Iterator[Processes]:
    """The connector's coordinator and tasks as processes, each killed at the end of the test."""
    processes = Processes(lake)
    yield processes
    processes.stop_all()
