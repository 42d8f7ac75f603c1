"""GET /health (KIP-1017): what probes and load balancers call, without credentials."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from django.db import connection
from rest_framework.test import APIClient

from tests.api.conftest import BASE

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_control_plane_whose_database_answers_is_healthy_to_anyone() -> None:
    answer = APIClient().get(f"{BASE}/health")
    assert answer.status_code == 200
    assert answer.json() == {"status": "healthy", "message": "The control plane and its database answer requests."}
    assert APIClient().post(f"{BASE}/health").status_code == 405


@pytest.fixture
def database_gone() -> Iterator[None]:
    """The control plane's database at a port where nothing listens (the connection really fails)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    saved = dict(connection.settings_dict)
    connection.close()
    connection.settings_dict.update({"HOST": "127.0.0.1", "PORT": str(closed_port)})
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)


def test_a_control_plane_whose_database_is_gone_is_unhealthy_and_says_only_that(database_gone: None) -> None:
    answer = APIClient().get(f"{BASE}/health")
    assert answer.status_code == 503
    body = answer.json()
    assert body["status"] == "unhealthy" and set(body) == {"status", "message"}
    # Nothing of the database's address or the driver's error reaches an unauthenticated caller.
    assert "127.0.0.1" not in body["message"] and "connection" not in body["message"].lower()
