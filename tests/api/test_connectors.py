"""GET/POST /connectors, GET/DELETE /connectors/{name}."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from rest_framework.test import APIClient

from connectors.models import Commit, Connector, DesiredState
from tests.api.conftest import BASE, CONFIG, SECRET_VALUES, add_task, commit, run_coordinator

pytestmark = pytest.mark.django_db


def test_it_lists_connector_names_sorted(api: APIClient, make_connector: Callable[..., Connector]) -> None:
    make_connector("b-sink")
    make_connector("a-sink")
    response = api.get(f"{BASE}/connectors")
    assert response.status_code == 200
    assert response.json() == ["a-sink", "b-sink"]


def test_it_lists_nothing_when_there_are_no_connectors(api: APIClient) -> None:
    assert api.get(f"{BASE}/connectors").json() == []


def test_expand_status_gives_each_connectors_status(api: APIClient, connector: Connector) -> None:
    run_coordinator(connector, "host-1:8083")
    add_task(connector, 0)
    response = api.get(f"{BASE}/connectors", {"expand": "status"})
    assert response.status_code == 200
    assert response.json() == {
        "orders-sink": {
            "status": {
                "name": "orders-sink",
                "connector": {"state": "RUNNING", "worker_id": "host-1:8083"},
                "tasks": [{"id": 0, "state": "RUNNING", "worker_id": "worker-0:8083"}],
                "type": "sink",
            }
        }
    }


def test_expand_info_gives_each_connectors_info_with_secrets_hidden(api: APIClient, connector: Connector) -> None:
    body = api.get(f"{BASE}/connectors", {"expand": "info"}).json()
    assert set(body) == {"orders-sink"}
    info = body["orders-sink"]["info"]
    assert info["name"] == "orders-sink" and info["type"] == "sink" and info["tasks"] == []
    assert info["config"]["iceberg.catalog.s3.secret-access-key"] == "[hidden]"
    assert info["config"]["sasl.jaas.config"] == "[hidden]"
    assert not any(secret in str(body) for secret in SECRET_VALUES)


def test_expand_can_be_repeated_and_ignores_unknown_values(api: APIClient, connector: Connector) -> None:
    body = api.get(f"{BASE}/connectors?expand=status&expand=info&expand=bogus").json()
    assert set(body["orders-sink"]) == {"status", "info"}
    only_unknown = api.get(f"{BASE}/connectors?expand=bogus").json()
    assert only_unknown == {"orders-sink": {}}


def test_creating_a_connector_answers_201_with_its_info_and_location(api: APIClient) -> None:
    response = api.post(f"{BASE}/connectors", {"name": "orders-sink", "config": CONFIG}, format="json")
    assert response.status_code == 201
    assert response["Location"] == "http://testserver/api/connect/connectors/orders-sink"
    body = response.json()
    assert body["name"] == "orders-sink"
    assert body["type"] == "sink"
    assert body["tasks"] == []
    assert body["config"]["name"] == "orders-sink"
    assert body["config"]["topics"] == "orders"
    assert body["config"]["iceberg.catalog.s3.secret-access-key"] == "[hidden]"
    stored = Connector.objects.get(name="orders-sink")
    # The secret is stored as given; only the response hides it.
    assert stored.config["iceberg.catalog.s3.secret-access-key"] == "s3-secret-value"
    assert stored.desired_state == DesiredState.RUNNING


def test_the_location_of_a_new_connector_is_url_encoded(api: APIClient) -> None:
    response = api.post(f"{BASE}/connectors", {"name": "orders sink#1", "config": CONFIG}, format="json")
    assert response.status_code == 201
    assert response["Location"].endswith("/api/connect/connectors/orders%20sink%231")
    assert api.get(response["Location"]).json()["name"] == "orders sink#1"


def test_create_trims_whitespace_around_the_name_as_connect_does(api: APIClient) -> None:
    response = api.post(f"{BASE}/connectors", {"name": "  orders-sink \t", "config": CONFIG}, format="json")
    assert response.status_code == 201
    assert response.json()["name"] == "orders-sink"


@pytest.mark.parametrize("initial_state", ["PAUSED", "STOPPED", "paused"])
def test_create_honours_the_initial_state(api: APIClient, initial_state: str) -> None:
    body = {"name": "orders-sink", "config": CONFIG, "initial_state": initial_state}
    assert api.post(f"{BASE}/connectors", body, format="json").status_code == 201
    assert Connector.objects.get(name="orders-sink").desired_state == initial_state.upper()


def test_create_rejects_an_unknown_initial_state(api: APIClient) -> None:
    body = {"name": "orders-sink", "config": CONFIG, "initial_state": "SLEEPING"}
    response = api.post(f"{BASE}/connectors", body, format="json")
    assert response.status_code == 400
    assert "initial_state must be one of" in response.json()["message"]


def test_creating_an_existing_connector_is_a_409_conflict(api: APIClient, connector: Connector) -> None:
    response = api.post(f"{BASE}/connectors", {"name": "orders-sink", "config": CONFIG}, format="json")
    assert response.status_code == 409
    assert response.json() == {"error_code": 409, "message": "Connector orders-sink already exists"}


def test_create_rejects_an_invalid_config_listing_every_error_per_key(api: APIClient) -> None:
    config = {"connector.class": "iceberg", "tasks.max": "zero", "topics": "bad topic!"}
    response = api.post(f"{BASE}/connectors", {"name": "orders-sink", "config": config}, format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["error_code"] == 400
    message = body["message"]
    assert message.startswith("Connector configuration is invalid and contains the following 3 error(s):")
    assert "iceberg.tables: Missing required configuration" in message
    assert "tasks.max: Invalid value zero for configuration tasks.max" in message
    assert "topics: 'bad topic!' is not a valid topic name" in message
    assert not Connector.objects.exists()


def test_create_rejects_a_name_in_the_config_that_differs(api: APIClient) -> None:
    body = {"name": "orders-sink", "config": {**CONFIG, "name": "other"}}
    response = api.post(f"{BASE}/connectors", body, format="json")
    assert response.status_code == 400
    assert "doesn't match connector name" in response.json()["message"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"config": CONFIG}, "Connector name is empty"),
        ({"name": "  ", "config": CONFIG}, "Connector name is empty"),
        ({"name": 5, "config": CONFIG}, "Connector name must be a string"),
        ({"name": "orders-sink"}, "Connector config must be a JSON object"),
        ({"name": "orders-sink", "config": "topics=orders"}, "Connector config must be a JSON object"),
        ({"name": "a/b", "config": CONFIG}, "may not contain '/'"),
        ([1, 2], "The request body must be a JSON object"),
    ],
)
def test_create_rejects_a_malformed_request(api: APIClient, body: object, message: str) -> None:
    response = api.post(f"{BASE}/connectors", body, format="json")
    assert response.status_code == 400
    assert message in response.json()["message"]


def test_config_values_that_are_numbers_or_booleans_are_stored_as_strings(api: APIClient) -> None:
    config = {**CONFIG, "tasks.max": 3, "iceberg.tables.auto-create-enabled": True}
    response = api.post(f"{BASE}/connectors", {"name": "orders-sink", "config": config}, format="json")
    assert response.status_code == 201
    stored = Connector.objects.get(name="orders-sink").config
    assert stored["tasks.max"] == "3" and stored["iceberg.tables.auto-create-enabled"] == "true"


def test_a_config_with_a_nul_character_is_a_per_key_400_not_a_database_error(api: APIClient) -> None:
    config = {**CONFIG, "iceberg.catalog.warehouse": "s3://lake\x00"}
    response = api.post(f"{BASE}/connectors", {"name": "orders-sink", "config": config}, format="json")
    assert response.status_code == 400
    assert "iceberg.catalog.warehouse: may not contain NUL characters" in response.json()["message"]


def test_it_gets_one_connectors_info(api: APIClient, connector: Connector) -> None:
    add_task(connector, 0)
    add_task(connector, 1)
    response = api.get(f"{BASE}/connectors/orders-sink")
    assert response.status_code == 200
    body = response.json()
    assert body["name"] == "orders-sink"
    assert body["tasks"] == [{"connector": "orders-sink", "task": 0}, {"connector": "orders-sink", "task": 1}]
    assert body["type"] == "sink"
    assert body["config"]["sasl.jaas.config"] == "[hidden]"


def test_an_unknown_connector_is_a_404_in_connects_shape(api: APIClient) -> None:
    response = api.get(f"{BASE}/connectors/nope")
    assert response.status_code == 404
    assert response.json() == {"error_code": 404, "message": "Connector nope not found"}


def test_a_name_with_a_nul_character_is_a_404_not_a_database_error(api: APIClient) -> None:
    response = api.get(f"{BASE}/connectors/a%00b/status")
    assert response.status_code == 404
    assert response.json()["error_code"] == 404


def test_deleting_a_connector_answers_204_and_keeps_its_ledger(api: APIClient, connector: Connector) -> None:
    epoch = run_coordinator(connector)
    commit(connector, epoch, 0, 10)
    response = api.delete(f"{BASE}/connectors/orders-sink")
    assert response.status_code == 204
    assert response.content == b""
    assert not Connector.objects.filter(name="orders-sink").exists()
    assert Commit.objects.filter(connector_name="orders-sink").count() == 1
    assert api.get(f"{BASE}/connectors/orders-sink").status_code == 404


def test_deleting_an_unknown_connector_is_a_404(api: APIClient) -> None:
    assert api.delete(f"{BASE}/connectors/nope").json() == {"error_code": 404, "message": "Connector nope not found"}


def test_a_connectors_info_carries_the_notes_of_its_ignored_keys_and_its_config_stays_a_plain_map(
    api: APIClient, make_connector: Callable[..., Connector]
) -> None:
    from connectors.config import validate_config

    config = {"iceberg.control.commit.threads": "8", "iceberg.tables.schema-force-optional": "true"}
    make_connector(**config)
    validated = validate_config({**CONFIG, **config})
    body = api.get(f"{BASE}/connectors/orders-sink").json()
    # The same notes, in the same shape, as the validate API reports beside each key.
    assert body["notes"] == validated.notes
    assert set(body["notes"]) == set(config)
    assert body["notes"]["iceberg.control.commit.threads"][0].startswith("ignored: ")
    plain = api.get(f"{BASE}/connectors/orders-sink/config").json()
    assert all(isinstance(v, str) for v in plain.values()) and "notes" not in plain
    assert plain["iceberg.control.commit.threads"] == "8"
    listed = api.get(f"{BASE}/connectors", {"expand": "info"}).json()["orders-sink"]["info"]
    assert listed["notes"] == validated.notes


def test_a_connector_without_ignored_keys_has_no_notes(api: APIClient, connector: Connector) -> None:
    assert api.get(f"{BASE}/connectors/orders-sink").json()["notes"] == {}
