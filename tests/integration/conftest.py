"""The integration tests' fixtures (``lake``) and ``sink_config`` live in
tests/conftest.py, shared with the browser tests; ``sink_config`` is
re-exported here for the tests that import it from this module. ``topics``
names the two topics each mirror test copies."""

from __future__ import annotations

import uuid

import pytest

from tests.conftest import sink_config

__all__ = ["sink_config"]


@pytest.fixture
def topics() -> list[str]:
    """Two topic names of this test's own (the mirror's tests copy two topics)."""
    run = uuid.uuid4().hex[:8]
    return [f"orders-{run}", f"payments-{run}"]
