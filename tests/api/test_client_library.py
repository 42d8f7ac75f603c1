"""A published Kafka Connect client (kafka-connect-py from PyPI), given only the base
URL and basic auth, drives the API on a live server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import requests
from kafka_connect import KafkaConnect

from connectors import actions
from connectors.models import Connector, DesiredState
from tests.api.conftest import CONFIG, PASSWORD, add_task, run_coordinator


def http_error(call: Callable[[], object]) -> tuple[int, Any]:
    """Status and body of the HTTPError the client raises.

    Not pytest.raises: its ExceptionInfo keeps the response, and with it the
    live server's keep-alive connection and that thread's database session,
    open past the test.
    """
    try:
        call()
    except requests.HTTPError as error:
        response = error.response
        assert response is not None
        return response.status_code, response.json()
    raise AssertionError("the call succeeded")


@pytest.fixture
def client(live_server: Any, alice: object) -> KafkaConnect:
    return KafkaConnect(url=f"{live_server.url}/api/connect", auth=f"alice:{PASSWORD}")


@pytest.mark.django_db(transaction=True)
def test_a_connect_client_manages_a_connector_end_to_end(client: KafkaConnect) -> None:
    info = client.get_cluster_info()
    assert info["version"].startswith("3.9.0")

    created = client.create_connector({"name": "orders-sink", "config": CONFIG})
    assert created["name"] == "orders-sink"
    assert created["config"]["sasl.jaas.config"] == "[hidden]"
    assert client.list_connectors() == ["orders-sink"]

    connector = Connector.objects.get(name="orders-sink")
    run_coordinator(connector, "host-1:8083")
    add_task(connector, 0)
    status = client.get_connector_status("orders-sink")
    assert status["connector"] == {"state": "RUNNING", "worker_id": "host-1:8083"}
    assert status["tasks"][0]["state"] == "RUNNING"
    assert client.list_connectors(expand="status", state="running") == {"orders-sink": {"status": status}}

    client.pause_connector("orders-sink")
    assert client.get_connector_status("orders-sink")["connector"]["state"] == "PAUSED"
    client.resume_connector("orders-sink")
    assert Connector.objects.get(name="orders-sink").desired_state == DesiredState.RUNNING

    restarted = client.restart_connector("orders-sink", include_tasks=True)
    assert restarted["connector"]["state"] == "RESTARTING"
    assert restarted["tasks"] == [{"id": 0, "state": "RESTARTING", "worker_id": "worker-0:8083"}]
    assert client.restart_connector("orders-sink") is None

    shown = client.get_connector_config("orders-sink")
    updated = client.update_connector("orders-sink", {**shown, "topics": "payments"})
    assert updated["config"]["topics"] == "payments"
    stored = Connector.objects.get(name="orders-sink").config
    # The [hidden] values the client sent back kept the real secrets.
    assert stored["sasl.jaas.config"] == CONFIG["sasl.jaas.config"]

    assert client.list_connector_tasks("orders-sink")[0]["id"] == {"connector": "orders-sink", "task": 0}
    client.restart_connector_task("orders-sink", 0)
    validation = client.validate_connector_config("IcebergSinkConnector", {**CONFIG, "tasks.max": "0"})
    assert validation["error_count"] == 1
    assert client.list_connector_plugins()[0]["class"] == "org.apache.iceberg.connect.IcebergSinkConnector"

    client.delete_connector("orders-sink")
    assert client.list_connectors() == []
    assert http_error(lambda: client.get_connector("orders-sink")) == (
        404,
        {"error_code": 404, "message": "Connector orders-sink not found"},
    )


@pytest.mark.django_db(transaction=True)
def test_a_connect_client_without_credentials_is_refused(live_server: Any, alice: object) -> None:
    client = KafkaConnect(url=f"{live_server.url}/api/connect")
    status, body = http_error(client.list_connectors)
    assert status == 401
    assert body["error_code"] == 401


@pytest.mark.django_db(transaction=True)
def test_a_connect_client_sees_a_conflict_for_an_existing_connector(client: KafkaConnect) -> None:
    actions.create_connector("orders-sink", CONFIG)
    status, body = http_error(lambda: client.create_connector({"name": "orders-sink", "config": CONFIG}))
    assert (status, body) == (409, {"error_code": 409, "message": "Connector orders-sink already exists"})
