"""Avro values in the Confluent wire format, decoded with schemas a Schema Registry serves over
HTTP (tests/schema_registry_server.py): what each failure means, per key validation, caching."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from connectors.config import SinkConfig, validate_config
from connectors.config.validation import SchemaRegistryConfig
from tests.schema_registry_server import SchemaRegistryServer, wire_format
from workers.converters import RegistryAvroDecoder
from workers.schema_registry import RegistryError, RegistryUnavailable, SchemaRegistry, UnknownSchema

V1 = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}]}
V2 = {
    "type": "record",
    "name": "Order",
    "fields": [*V1["fields"], {"name": "quantity", "type": ["null", "int"], "default": None}],
}
BASE = {
    "connector.class": "iceberg",
    "topics": "orders",
    "iceberg.tables": "db.orders",
    "value.converter": "io.confluent.connect.avro.AvroConverter",
}


@pytest.fixture
def registry() -> Iterator[SchemaRegistryServer]:
    server = SchemaRegistryServer()
    yield server
    server.stop()


def decoder_for(*urls: str, credentials: tuple[str, str] | None = None) -> RegistryAvroDecoder:
    return RegistryAvroDecoder(SchemaRegistry(SchemaRegistryConfig(urls, credentials)))


def test_values_of_each_schema_version_decode_with_their_own_schema_fetched_once(
    registry: SchemaRegistryServer,
) -> None:
    v1, v2 = registry.register("orders-value", V1), registry.register("orders-value", V2)
    decoder = decoder_for(registry.url)
    first = decoder.to_json(wire_format(v1, V1, {"id": 1, "item": "tea"}))
    second = decoder.to_json(wire_format(v2, V2, {"id": 2, "item": "cup", "quantity": 3}))
    decoder.to_json(wire_format(v1, V1, {"id": 3, "item": "pot"}))
    assert json.loads(first) == {"id": 1, "item": "tea"}
    assert json.loads(second) == {"id": 2, "item": "cup", "quantity": 3}
    assert [json.loads(s) for s in decoder.schemas()] == [V1, V2]
    assert registry.requests == [f"/schemas/ids/{v1}", f"/schemas/ids/{v2}"]  # each id once


def test_a_value_the_registry_cannot_explain_is_a_bad_record(registry: SchemaRegistryServer) -> None:
    v1 = registry.register("orders-value", V1)
    json_schema = registry.register("other-value", '{"type": "object"}', schema_type="JSON")
    decoder = decoder_for(registry.url)
    with pytest.raises(UnknownSchema, match="no schema with id 99"):
        decoder.to_json(wire_format(99, V1, {"id": 1, "item": "tea"}))
    with pytest.raises(UnknownSchema, match="is registered as JSON; the connector's converter decodes AVRO"):
        decoder.to_json(wire_format(json_schema, V1, {"id": 1, "item": "tea"}))
    with pytest.raises(ValueError, match="not in the Confluent wire format"):
        decoder.to_json(b'{"id": 1}')
    with pytest.raises(ValueError, match=f"not a valid Avro record for schema id {v1}"):
        decoder.to_json(wire_format(v1, V1, {"id": 1, "item": "tea"}) + b"\x00\x01")
    # Bad records are ValueErrors (errors.tolerance decides); an outage is not.
    assert issubclass(UnknownSchema, ValueError)
    assert not issubclass(RegistryUnavailable, ValueError) and not issubclass(RegistryError, ValueError)


def test_an_unreachable_registry_is_an_outage_and_the_next_url_is_tried(registry: SchemaRegistryServer) -> None:
    v1 = registry.register("orders-value", V1)
    down = SchemaRegistryServer()
    down.stop()
    value = wire_format(v1, V1, {"id": 1, "item": "tea"})
    with pytest.raises(RegistryUnavailable, match="cannot reach the Schema Registry"):
        decoder_for(down.url).to_json(value)
    assert json.loads(decoder_for(down.url, registry.url).to_json(value))["item"] == "tea"


def test_basic_auth_is_sent_and_a_refused_password_is_said_as_such() -> None:
    server = SchemaRegistryServer(credentials=("sr-user", "sr-s3cret"))
    try:
        v1 = server.register("orders-value", V1)
        value = wire_format(v1, V1, {"id": 1, "item": "tea"})
        assert json.loads(decoder_for(server.url, credentials=("sr-user", "sr-s3cret")).to_json(value))["id"] == 1
        with pytest.raises(RegistryError, match="refused: HTTP 401 Unauthorized") as refused:
            decoder_for(server.url, credentials=("sr-user", "wrong")).to_json(value)
        assert "wrong" not in str(refused.value)
    finally:
        server.stop()


def test_registry_keys_are_validated_per_key() -> None:
    ok = validate_config({**BASE, "value.converter.schema.registry.url": "http://a:8081, https://b:8081"})
    assert ok.ok, ok.errors
    parsed = SinkConfig.parse({**BASE, "value.converter.schema.registry.url": "http://a:8081/,https://b:8081"})
    assert parsed.schema_registry == SchemaRegistryConfig(("http://a:8081", "https://b:8081"), None)
    bad = validate_config(
        {
            **BASE,
            "value.converter.schema.registry.url": "ftp://a:8081",
            "value.converter.avro.schema": json.dumps(V1),
            "value.converter.basic.auth.credentials.source": "USER_INFO",
            "value.converter.basic.auth.user.info": "no-colon",
        }
    )
    assert sorted(bad.errors) == [
        "value.converter.avro.schema",
        "value.converter.basic.auth.user.info",
        "value.converter.schema.registry.url",
    ]
    assert "with a registry, each value's schema" in bad.errors["value.converter.avro.schema"][0]
    json_values = validate_config(
        {**BASE, "value.converter": "json", "value.converter.schema.registry.url": "http://a:8081"}
    )
    assert "avro and json-schema converters only" in json_values.errors["value.converter.schema.registry.url"][0]
    neither = validate_config(BASE)
    assert "or value.converter.schema.registry.url" in neither.errors["value.converter.avro.schema"][0]


def test_credentials_come_from_user_info_or_the_url_and_never_travel_in_the_url() -> None:
    info = SinkConfig.parse(
        {
            **BASE,
            "value.converter.schema.registry.url": "http://a:8081",
            "value.converter.basic.auth.credentials.source": "USER_INFO",
            "value.converter.basic.auth.user.info": "sr-user:pa:ss",
        }
    ).schema_registry
    assert info == SchemaRegistryConfig(("http://a:8081",), ("sr-user", "pa:ss"))
    in_url = SinkConfig.parse(
        {
            **BASE,
            "value.converter.schema.registry.url": "http://sr-user:p%40ss@a:8081",
            "value.converter.basic.auth.credentials.source": "URL",
        }
    ).schema_registry
    assert in_url == SchemaRegistryConfig(("http://a:8081",), ("sr-user", "p@ss"))
    missing = validate_config(
        {
            **BASE,
            "value.converter.schema.registry.url": "http://a:8081",
            "value.converter.basic.auth.credentials.source": "URL",
        }
    )
    assert list(missing.errors) == ["value.converter.basic.auth.credentials.source"]


def test_json_values_in_the_wire_format_are_checked_against_the_registry_and_unwrapped(
    registry: SchemaRegistryServer,
) -> None:
    from workers.converters import RegistryJsonDecoder

    order = registry.register("orders-value", '{"type": "object"}', schema_type="JSON")
    avro = registry.register("other-value", V1)
    decoder = RegistryJsonDecoder(SchemaRegistry(SchemaRegistryConfig((registry.url,), None, "JSON")))
    header = bytes([0]) + order.to_bytes(4, "big")
    assert decoder.to_json(header + b'{"id": 1}') == b'{"id": 1}'
    assert decoder.to_json(header + b'{"id": 2}') == b'{"id": 2}'
    assert registry.requests == [f"/schemas/ids/{order}"]
    with pytest.raises(UnknownSchema, match="is registered as AVRO; the connector's converter decodes JSON"):
        decoder.to_json(bytes([0]) + avro.to_bytes(4, "big") + b"{}")
    with pytest.raises(ValueError, match="not in the Confluent wire format"):
        decoder.to_json(b'{"id": 3}')
    needs_registry = validate_config({**BASE, "value.converter": "io.confluent.connect.json.JsonSchemaConverter"})
    assert "needs the Schema Registry" in needs_registry.errors["value.converter.schema.registry.url"][0]
    parsed = SinkConfig.parse(
        {**BASE, "value.converter": "json-schema", "value.converter.schema.registry.url": registry.url}
    )
    assert parsed.value_converter == "json" and parsed.schema_registry is not None
    assert parsed.schema_registry.schema_type == "JSON"


def test_json_schemas_become_table_schemas_as_connect_types_them() -> None:
    from sinks.iceberg.tables import schema_from_json_schema

    schema = schema_from_json_schema(
        {
            "type": "object",
            "properties": {
                "id": {"type": "integer"},
                "small": {"type": ["null", "integer"], "connect.type": "int16"},
                "ratio": {"type": "number"},
                "at": {"type": "string", "format": "date-time"},
                "attrs": {"type": "object", "additionalProperties": {"type": "boolean"}},
                "address": {
                    "anyOf": [{"type": "null"}, {"type": "object", "properties": {"city": {"type": "string"}}}]
                },
            },
        }
    )
    assert schema is not None
    assert [(f.name, str(f.field_type)) for f in schema.fields] == [
        ("id", "long"),
        ("small", "int"),
        ("ratio", "double"),
        ("at", "string"),
        ("attrs", "map<string, boolean>"),
        ("address", "struct<9: city: optional string>"),
    ]
    assert all(not f.required for f in schema.fields)
    # No properties: nothing to type the columns with, the values do it.
    assert schema_from_json_schema({"type": "object"}) is None
    with pytest.raises(ValueError, match=r"\$.v: oneOf of several types"):
        schema_from_json_schema(
            {"type": "object", "properties": {"v": {"oneOf": [{"type": "string"}, {"type": "integer"}]}}}
        )
    with pytest.raises(ValueError, match=r"\$.o: an object without properties"):
        schema_from_json_schema({"type": "object", "properties": {"o": {"type": "object"}}})
