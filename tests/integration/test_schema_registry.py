"""Avro values in the Confluent wire format through a Schema Registry (the tests' own, over HTTP:
tests/schema_registry_server.py), end to end against the real broker, Spark and catalog: the
table follows the registry's schema versions with their types, a value of an unknown schema
goes to the dead-letter topic, and a registry that is down is an outage that loses nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from pyiceberg.types import FloatType, IntegerType, ListType, LongType, StringType
from rest_framework.test import APIClient

from connectors import actions
from connectors.models import Commit, CommitState, Connector
from tests.integration.conftest import sink_config
from tests.integration.helpers import (
    caught_up,
    create_topic,
    produce,
    running_in_threads,
    table_of,
    table_rows,
    wait_until,
)
from tests.schema_registry_server import SchemaRegistryServer, wire_format

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

V1 = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}]}
V2 = {
    "type": "record",
    "name": "Order",
    "fields": [
        *V1["fields"],
        {"name": "quantity", "type": ["null", "int"], "default": None},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
USER, PASSWORD = "sr-user", "sr-s3cret"


@pytest.fixture
def registry() -> Iterator[SchemaRegistryServer]:
    server = SchemaRegistryServer(credentials=(USER, PASSWORD))
    yield server
    server.stop()


def registry_config(topic: str, registry: SchemaRegistryServer, **overrides: str) -> dict[str, str]:
    return sink_config(
        topic,
        "db.orders",
        **{
            "value.converter": "io.confluent.connect.avro.AvroConverter",
            "value.converter.schema.registry.url": registry.url,
            "value.converter.basic.auth.credentials.source": "USER_INFO",
            "value.converter.basic.auth.user.info": f"{USER}:{PASSWORD}",
            "iceberg.tables.evolve-schema-enabled": "true",
            **overrides,
        },
    )


@pytest.mark.parametrize("writer", ["spark", "arrow"])
def test_the_table_follows_the_registrys_schema_versions_and_an_unknown_schema_is_dead_lettered(
    lake: dict[str, str],
    kafka_bootstrap: str,
    topic_name: str,
    registry: SchemaRegistryServer,
    operator_api: APIClient,
    writer: str,
) -> None:
    subject = f"{topic_name}-value"
    v1 = registry.register(subject, V1)
    v2 = registry.register(subject, V2)
    values: list[bytes | None] = [wire_format(v1, V1, {"id": i, "item": f"item-{i}"}) for i in range(40)]
    values += [
        wire_format(v2, V2, {"id": i, "item": f"item-{i}", "quantity": i % 5, "note": None if i % 2 else "gift"})
        for i in range(40, 80)
    ]
    values.append(wire_format(999, V1, {"id": 80, "item": "from a schema the registry never had"}))
    create_topic(kafka_bootstrap, topic_name, 2)
    ends = produce(kafka_bootstrap, topic_name, values, 2)
    dlq = f"{topic_name}-dlq"
    config = registry_config(
        topic_name,
        registry,
        **{"errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq, "sinkadmin.writer": writer},
    )
    actions.create_connector("registered", config)
    with running_in_threads("registered", tasks=2):
        wait_until(caught_up("registered", ends), 120, "every record to be committed or dead-lettered")

    schema = table_of("registered", "db.orders").schema()
    types = {f.name: f.field_type for f in schema.fields}
    # Typed from the registered schemas: an Avro int is an int, not the long a JSON value would infer.
    assert types == {"id": LongType(), "item": StringType(), "quantity": IntegerType(), "note": StringType()}
    rows = {r["id"]: r for r in table_rows("registered", "db.orders")}
    assert sorted(rows) == list(range(80))
    assert rows[3] == {"id": 3, "item": "item-3", "quantity": None, "note": None}
    assert rows[44] == {"id": 44, "item": "item-44", "quantity": 4, "note": "gift"}
    commits = Commit.objects.filter(connector_name="registered", state=CommitState.COMMITTED)
    assert sum(c.dead_lettered for c in commits) == 1
    shown = operator_api.get("/api/connect/connectors/registered/config").json()
    assert PASSWORD not in str(shown) and shown["value.converter.basic.auth.user.info"] != f"{USER}:{PASSWORD}"


def test_a_registry_that_is_down_is_an_outage_that_loses_nothing(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, registry: SchemaRegistryServer
) -> None:
    subject = f"{topic_name}-value"
    v1 = registry.register(subject, V1)
    create_topic(kafka_bootstrap, topic_name, 1)
    first = produce(kafka_bootstrap, topic_name, [wire_format(v1, V1, {"id": i, "item": "a"}) for i in range(10)], 1)
    dlq = f"{topic_name}-dlq"
    config = registry_config(
        topic_name, registry, **{"errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq}
    )
    actions.create_connector("registry-down", config)
    with running_in_threads("registry-down"):
        wait_until(caught_up("registry-down", first), 120, "the first records")

        registry.stop()
        v2 = registry.register(subject, V2)  # (registered meanwhile: no task has its schema yet)
        ends = produce(
            kafka_bootstrap,
            topic_name,
            [wire_format(v2, V2, {"id": i, "item": "b", "quantity": i, "note": None}) for i in range(10, 30)],
            1,
        )

        def waiting() -> bool:
            connector = Connector.objects.get(name="registry-down")
            return "cannot reach the Schema Registry" in connector.coordinator.sink_warning

        wait_until(waiting, 90, "the commits to wait for the registry")
        connector = Connector.objects.get(name="registry-down")
        assert connector.failed_at is None
        assert not Commit.objects.filter(connector_name="registry-down", dead_lettered__gt=0).exists()

        registry.start()
        wait_until(caught_up("registry-down", ends), 120, "the records of the outage")
    assert sorted(r["id"] for r in table_rows("registry-down", "db.orders")) == list(range(30))
    assert not Commit.objects.filter(connector_name="registry-down", dead_lettered__gt=0).exists()
    assert Connector.objects.get(name="registry-down").coordinator.sink_warning == ""


def test_json_schema_values_through_the_registry(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, registry: SchemaRegistryServer
) -> None:
    schema_id = registry.register(f"{topic_name}-value", '{"type": "object"}', schema_type="JSON")
    header = bytes([0]) + schema_id.to_bytes(4, "big")
    values: list[bytes | None] = [header + json.dumps({"id": i, "item": f"i-{i}"}).encode() for i in range(30)]
    values.append(json.dumps({"id": 30, "item": "no wire-format header"}).encode())
    create_topic(kafka_bootstrap, topic_name, 1)
    ends = produce(kafka_bootstrap, topic_name, values, 1)
    dlq = f"{topic_name}-dlq"
    config = registry_config(
        topic_name,
        registry,
        **{
            "value.converter": "io.confluent.connect.json.JsonSchemaConverter",
            "errors.tolerance": "all",
            "errors.deadletterqueue.topic.name": dlq,
        },
    )
    actions.create_connector("json-schema", config)
    with running_in_threads("json-schema"):
        wait_until(caught_up("json-schema", ends), 120, "the JSON Schema records")
    rows = sorted(table_rows("json-schema", "db.orders"), key=lambda r: r["id"])
    assert [r["id"] for r in rows] == list(range(30)) and rows[7]["item"] == "i-7"
    commits = Commit.objects.filter(connector_name="json-schema", state=CommitState.COMMITTED)
    assert sum(c.dead_lettered for c in commits) == 1


ORDER_JSON_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "item": {"type": "string"},
        "quantity": {"oneOf": [{"type": "null"}, {"type": "integer", "connect.type": "int32"}]},
        "weight": {"type": "number", "connect.type": "float32"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
}


@pytest.mark.parametrize("writer", ["spark", "arrow"])
def test_a_json_schema_with_properties_types_the_table(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, registry: SchemaRegistryServer, writer: str
) -> None:
    schema_id = registry.register(f"{topic_name}-value", json.dumps(ORDER_JSON_SCHEMA), schema_type="JSON")
    header = bytes([0]) + schema_id.to_bytes(4, "big")
    # Optional fields left out of some values, as JSON Schema allows.
    values: list[bytes | None] = [
        header + json.dumps({"id": i, "item": f"i-{i}", **({"quantity": i, "weight": 1.5} if i % 2 else {})}).encode()
        for i in range(30)
    ]
    create_topic(kafka_bootstrap, topic_name, 1)
    ends = produce(kafka_bootstrap, topic_name, values, 1)
    name = f"json-typed-{writer}"
    config = registry_config(
        topic_name,
        registry,
        **{"value.converter": "io.confluent.connect.json.JsonSchemaConverter", "sinkadmin.writer": writer},
    )
    actions.create_connector(name, config)
    with running_in_threads(name):
        wait_until(caught_up(name, ends), 120, "the JSON Schema records")
    types = {f.name: f.field_type for f in table_of(name, "db.orders").schema().fields}
    # From the registered schema, not from the values: int32 and float32 as Connect annotates them,
    # and the array no value held.
    assert types == {
        "id": LongType(),
        "item": StringType(),
        "quantity": IntegerType(),
        "weight": FloatType(),
        "tags": ListType(element_id=6, element_type=StringType(), element_required=False),
    }, types
    rows = {r["id"]: r for r in table_rows(name, "db.orders")}
    assert sorted(rows) == list(range(30))
    assert rows[3]["quantity"] == 3 and rows[3]["weight"] == 1.5 and rows[4]["quantity"] is None
