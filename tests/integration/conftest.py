"""The integration tests' fixtures (``lake``) and ``sink_config`` live in
tests/conftest.py, shared with the browser tests; ``sink_config`` is
re-exported here for the tests that import it from this module."""

from __future__ import annotations

from tests.conftest import sink_config

__all__ = ["sink_config"]
