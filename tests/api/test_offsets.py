"""GET/PATCH/DELETE /connectors/{name}/offsets in KIP-875's sink shapes."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from connectors import actions
from connectors.config.kafka_clients import admin_client
from connectors.models import Connector, PartitionOffset
from tests.api.conftest import BASE, commit, run_coordinator
from tests.integration.helpers import group_offsets
from workers.kafka import ensure_topic

pytestmark = pytest.mark.django_db

URL = f"{BASE}/connectors/orders-sink/offsets"


def _offset(topic: str, partition: Any, offset: Any) -> dict[str, Any]:
    return {
        "partition": {"kafka_topic": topic, "kafka_partition": partition},
        "offset": None if offset is None else {"kafka_offset": offset},
    }


def _ledger(connector: Connector) -> dict[tuple[str, int], int]:
    return {(r.topic, r.partition): r.next_offset for r in PartitionOffset.objects.filter(connector=connector)}


def test_it_gives_the_ledgers_committed_offset_per_partition(api: APIClient, connector: Connector) -> None:
    epoch = run_coordinator(connector)
    commit(connector, epoch, 0, 42, partition=0)
    commit(connector, epoch, 5, 9, partition=1)
    response = api.get(URL)
    assert response.status_code == 200
    assert response.json() == {"offsets": [_offset("orders", 0, 42), _offset("orders", 1, 9)]}


def test_a_connector_that_never_committed_has_no_offsets(api: APIClient, connector: Connector) -> None:
    assert api.get(URL).json() == {"offsets": []}


def test_offsets_of_an_unknown_connector_is_a_404(api: APIClient) -> None:
    assert api.get(f"{BASE}/connectors/nope/offsets").status_code == 404


def topics(bootstrap: str, partitions: dict[str, int]) -> None:
    admin = admin_client(bootstrap, {})
    for topic, count in partitions.items():
        ensure_topic(admin, topic, partitions=count)


def test_only_a_mirror_translates_a_consumer_groups_offsets(api: APIClient, connector: Connector) -> None:
    response = api.get(f"/api/connect/connectors/{connector.name}/groups/billing/translated")
    assert response.status_code == 404
    assert "only a Kafka mirror does" in response.json()["message"]
    assert api.get("/api/connect/connectors/nope/groups/billing/translated").status_code == 404


def test_altering_offsets_writes_the_next_commits_start_into_the_ledger_and_the_consumer_group(
    api: APIClient, connector: Connector, kafka_bootstrap: str
) -> None:
    topics(kafka_bootstrap, {"orders": 2, "payments": 4})
    epoch = run_coordinator(connector)
    commit(connector, epoch, 0, 42, partition=0)
    commit(connector, epoch, 0, 7, partition=1)
    actions.stop_connector("orders-sink")
    unknown = api.patch(URL, {"offsets": [_offset("orders", 9, 1), _offset("nowhere", 0, 1)]}, format="json")
    assert unknown.status_code == 400
    assert "no partition nowhere/0, orders/9: nothing was moved" in unknown.json()["message"]
    body = {"offsets": [_offset("orders", 0, 100), _offset("orders", "1", None), _offset("payments", 3, "5")]}
    response = api.patch(URL, body, format="json")
    assert response.status_code == 200
    assert response.json() == {"message": "The offsets for this connector have been altered successfully"}
    assert _ledger(connector) == {("orders", 0): 100, ("payments", 3): 5}
    # As Kafka Connect moves a sink's group: lag tools see the same offsets; a forgotten partition has none.
    partitions = [("orders", 0), ("orders", 1), ("payments", 3)]
    assert group_offsets(kafka_bootstrap, "connect-orders-sink", partitions) == _ledger(connector)


def test_altering_offsets_of_a_running_connector_is_refused(api: APIClient, connector: Connector) -> None:
    response = api.patch(URL, {"offsets": [_offset("orders", 0, 1)]}, format="json")
    assert response.status_code == 400
    assert response.json()["message"].startswith(
        "Connectors must be in the STOPPED state before their offsets can be modified."
    )
    assert _ledger(connector) == {}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "Partitions / offsets need to be provided for an alter offsets request"),
        ({"offsets": []}, "Partitions / offsets need to be provided for an alter offsets request"),
        ({"offsets": [{"offset": None}]}, "The partition for a sink connector offset cannot be null or missing"),
        (
            {"offsets": [{"partition": {}, "offset": None}]},
            "The partition for a sink connector offset must contain the keys 'kafka_topic' and 'kafka_partition'",
        ),
        (
            {"offsets": [_offset("orders", "not a number", None)]},
            "Failed to parse the following Kafka partition value in the provided offsets: 'not a number'. "
            "Partition values for sink connectors need to be integers.",
        ),
        (
            {"offsets": [_offset("orders", 1.5, None)]},
            "Partition values for sink connectors need to be integers.",
        ),
        (
            {"offsets": [{"partition": {"kafka_topic": "orders", "kafka_partition": 1}, "offset": {}}]},
            "The offset for a sink connector should either be null or contain the key 'kafka_offset'",
        ),
        (
            {"offsets": [_offset("orders", 1, "not a number")]},
            "Failed to parse the following Kafka offset value in the provided offsets: 'not a number'. "
            "Offset values for sink connectors need to be integers.",
        ),
        ({"offsets": [_offset("orders", 1, True)]}, "Offset values for sink connectors need to be integers."),
        ({"offsets": [_offset("orders", -1, 0)]}, "Kafka partition -1 is out of range"),
        ({"offsets": [_offset("orders", 0, -5)]}, "Kafka offset -5 is out of range"),
        ({"offsets": [_offset("orders", 0, 2**63)]}, "is out of range"),
        ({"offsets": [_offset("bad topic", 0, 0)]}, "'bad topic' is not a valid Kafka topic name"),
        ({"offsets": [_offset("x" * 250, 0, 0)]}, "is not a valid Kafka topic name"),
    ],
)
def test_altering_offsets_rejects_a_malformed_body(
    api: APIClient, connector: Connector, body: dict[str, Any], message: str
) -> None:
    actions.stop_connector("orders-sink")
    response = api.patch(URL, body, format="json")
    assert response.status_code == 400
    assert message in response.json()["message"]
    assert _ledger(connector) == {}


def test_resetting_offsets_forgets_every_partition_in_the_ledger_and_the_consumer_group(
    api: APIClient, connector: Connector, kafka_bootstrap: str
) -> None:
    topics(kafka_bootstrap, {"orders": 2})
    epoch = run_coordinator(connector)
    commit(connector, epoch, 0, 42)
    actions.stop_connector("orders-sink")
    assert api.patch(URL, {"offsets": [_offset("orders", 0, 42)]}, format="json").status_code == 200
    assert group_offsets(kafka_bootstrap, "connect-orders-sink", [("orders", 0)]) == {("orders", 0): 42}
    response = api.delete(URL)
    assert response.status_code == 200
    assert response.json() == {"message": "The offsets for this connector have been reset successfully"}
    assert _ledger(connector) == {}
    assert group_offsets(kafka_bootstrap, "connect-orders-sink", [("orders", 0)]) == {}


def test_resetting_offsets_of_a_running_connector_is_refused(api: APIClient, connector: Connector) -> None:
    epoch = run_coordinator(connector)
    commit(connector, epoch, 0, 42)
    response = api.delete(URL)
    assert response.status_code == 400
    assert _ledger(connector) == {("orders", 0): 42}


def test_resetting_offsets_of_an_unknown_connector_is_a_404(api: APIClient) -> None:
    assert api.delete(f"{BASE}/connectors/nope/offsets").status_code == 404
