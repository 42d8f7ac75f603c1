"""GET/PUT/PATCH /connectors/{name}/config."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from connectors import actions
from connectors.actions import runtime as runtime_state
from connectors.models import Connector, ConnectorTask
from tests.api.conftest import BASE, CONFIG, SECRET_VALUES, add_task, run_coordinator

pytestmark = pytest.mark.django_db

URL = f"{BASE}/connectors/orders-sink/config"


def test_it_returns_the_config_with_its_name_and_secrets_hidden(api: APIClient, connector: Connector) -> None:
    response = api.get(URL)
    assert response.status_code == 200
    assert response.json() == {
        "connector.class": "iceberg",
        "topics": "orders",
        "iceberg.tables": "db.orders",
        "iceberg.catalog.uri": "postgresql://lake@db/catalog",
        "iceberg.catalog.s3.secret-access-key": "[hidden]",
        "sasl.jaas.config": "[hidden]",
        "name": "orders-sink",
    }


@pytest.mark.parametrize(
    "key", ["sasl.password", "ssl.key.password", "iceberg.catalog.client.secret", "iceberg.catalog.s3.access.key"]
)
def test_it_hides_every_kind_of_secret_key(api: APIClient, key: str) -> None:
    api.put(URL, {**CONFIG, key: "shh-value"}, format="json")
    assert api.get(URL).json()[key] == "[hidden]"
    assert "shh-value" not in api.get(f"{BASE}/connectors?expand=info").content.decode()
    assert "shh-value" not in api.get(f"{BASE}/connectors/orders-sink/tasks").content.decode()


def test_a_config_for_an_unknown_connector_is_a_404(api: APIClient) -> None:
    assert api.get(f"{BASE}/connectors/nope/config").status_code == 404


def test_put_creates_a_connector_with_201_and_location(api: APIClient) -> None:
    response = api.put(URL, CONFIG, format="json")
    assert response.status_code == 201
    assert response["Location"] == "http://testserver/api/connect/connectors/orders-sink"
    assert response.json()["name"] == "orders-sink"
    assert Connector.objects.filter(name="orders-sink").exists()


def test_put_replaces_the_whole_config_with_200(api: APIClient, connector: Connector) -> None:
    replacement = {"connector.class": "iceberg", "topics": "payments", "iceberg.tables": "db.payments"}
    response = api.put(URL, replacement, format="json")
    assert response.status_code == 200
    assert "Location" not in response
    assert response.json()["config"] == {**replacement, "name": "orders-sink"}
    connector.refresh_from_db()
    assert connector.config == replacement


def test_put_of_a_changed_config_fences_the_running_coordinator(api: APIClient, connector: Connector) -> None:
    api.put(URL, {**CONFIG, "topics": "payments"}, format="json")
    fenced = Connector.objects.get(pk=connector.pk)
    assert fenced.coordinator_epoch == connector.coordinator_epoch + 1
    assert fenced.generation == connector.generation + 1


def test_put_of_the_shown_config_keeps_the_stored_secrets(api: APIClient, connector: Connector) -> None:
    shown = api.get(URL).json()
    response = api.put(URL, {**shown, "topics": "payments"}, format="json")
    assert response.status_code == 200
    connector.refresh_from_db()
    assert connector.config["iceberg.catalog.s3.secret-access-key"] == "s3-secret-value"
    assert connector.config["sasl.jaas.config"] == CONFIG["sasl.jaas.config"]
    assert connector.config["topics"] == "payments"


def test_put_reports_validation_errors_per_key(api: APIClient, connector: Connector) -> None:
    response = api.put(URL, {**CONFIG, "errors.tolerance": "some"}, format="json")
    assert response.status_code == 400
    assert "errors.tolerance: Invalid value some for configuration errors.tolerance" in response.json()["message"]
    connector.refresh_from_db()
    assert connector.config == CONFIG


def test_put_rejects_a_name_that_differs_from_the_url(api: APIClient, connector: Connector) -> None:
    response = api.put(URL, {**CONFIG, "name": "other"}, format="json")
    assert response.status_code == 400
    assert (
        response.json()["message"] == "Connector name configuration (other) doesn't match connector name (orders-sink)"
    )


def test_put_rejects_a_body_that_is_not_an_object(api: APIClient, connector: Connector) -> None:
    response = api.put(URL, ["topics"], format="json")
    assert response.json() == {"error_code": 400, "message": "Connector configuration must be a JSON object"}


def test_patch_sets_and_removes_keys(api: APIClient, connector: Connector) -> None:
    response = api.patch(URL, {"topics": "payments", "iceberg.catalog.uri": None, "tasks.max": "2"}, format="json")
    assert response.status_code == 200
    config = response.json()["config"]
    assert config["topics"] == "payments" and config["tasks.max"] == "2"
    assert "iceberg.catalog.uri" not in config
    connector.refresh_from_db()
    assert "iceberg.catalog.uri" not in connector.config
    assert connector.config["iceberg.catalog.s3.secret-access-key"] == "s3-secret-value"


def test_patch_of_an_unknown_connector_is_a_404(api: APIClient) -> None:
    response = api.patch(f"{BASE}/connectors/nope/config", {"topics": "x"}, format="json")
    assert response.json() == {"error_code": 404, "message": "Connector nope not found"}


def test_patch_reports_validation_errors_per_key(api: APIClient, connector: Connector) -> None:
    response = api.patch(URL, {"iceberg.tables": None}, format="json")
    assert response.status_code == 400
    assert 'iceberg.tables: Missing required configuration "iceberg.tables"' in response.json()["message"]


def test_patch_with_hidden_secret_keeps_it(api: APIClient, connector: Connector) -> None:
    api.patch(URL, {"sasl.jaas.config": "[hidden]", "topics": "payments"}, format="json")
    connector.refresh_from_db()
    assert connector.config["sasl.jaas.config"] == CONFIG["sasl.jaas.config"]


def test_no_response_ever_contains_a_stored_secret(api: APIClient, connector: Connector) -> None:
    urls = [
        URL,
        f"{BASE}/connectors/orders-sink",
        f"{BASE}/connectors?expand=info&expand=status",
        f"{BASE}/connectors/orders-sink/tasks",
    ]
    for url in urls:
        text = api.get(url).content.decode()
        assert not any(secret in text for secret in SECRET_VALUES), url
    put = api.put(URL, CONFIG, format="json").content.decode()
    patch = api.patch(URL, {"topics": "x"}, format="json").content.decode()
    assert not any(secret in put + patch for secret in SECRET_VALUES)


def failed(connector: Connector) -> int:
    """The connector failed by a record task 1 cannot convert, its coordinator stopped; returns its epoch."""
    epoch = run_coordinator(connector, "host-1:8083")
    add_task(connector, 0)
    add_task(connector, 1)
    actions.fail_connector(connector.pk, "record orders/0@3 cannot be converted", task_index=1)
    runtime_state.coordinator_stopped(connector.pk, epoch)
    return epoch


def test_put_of_a_new_config_restarts_a_failed_connector_with_it(api: APIClient, connector: Connector) -> None:
    epoch = failed(connector)
    response = api.put(URL, {**CONFIG, "errors.tolerance": "all"}, format="json")
    assert response.status_code == 200
    restarted = Connector.objects.get(pk=connector.pk)
    # As Kafka Connect restarts a connector and its tasks on a new config: the old failure is gone.
    assert (restarted.failed_at, restarted.failure_message) == (None, "")
    assert restarted.generation == connector.generation + 1 and restarted.coordinator_epoch == epoch + 1
    status = api.get(f"{URL.removesuffix('/config')}/status").json()
    assert status["connector"] == {"state": "RESTARTING", "worker_id": "host-1:8083"}
    assert [(t["id"], t["state"]) for t in status["tasks"]] == [(0, "RESTARTING"), (1, "RESTARTING")]
    assert not ConnectorTask.objects.filter(connector=connector).exclude(error_message="").exists()


@pytest.mark.parametrize(("verb", "state"), [("pause", "PAUSED"), ("stop", "STOPPED")])
def test_put_of_a_new_config_keeps_a_failed_connector_s_target_state(
    api: APIClient, connector: Connector, verb: str, state: str
) -> None:
    failed(connector)
    api.put(f"{URL.removesuffix('/config')}/{verb}")
    assert api.put(URL, {**CONFIG, "errors.tolerance": "all"}, format="json").status_code == 200
    restarted = Connector.objects.get(pk=connector.pk)
    assert restarted.failed_at is None and restarted.desired_state == state
    assert api.get(f"{URL.removesuffix('/config')}/status").json()["connector"]["state"] == state


def test_put_of_the_same_config_leaves_a_failed_connector_failed(api: APIClient, connector: Connector) -> None:
    failed(connector)
    assert api.put(URL, CONFIG, format="json").status_code == 200
    assert Connector.objects.get(pk=connector.pk).failed_at is not None
