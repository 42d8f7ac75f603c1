"""Schema evolution (iceberg.tables.evolve-schema-enabled) against the real
broker, Postgres and catalog: record fields the table lacks become optional
columns, top-level and in structs, and no record is lost or doubled while
the tasks race to add them."""

from __future__ import annotations

import io
import json

import fastavro
import pytest

from connectors import actions
from tests.integration.conftest import sink_config
from tests.integration.helpers import (
    alter,
    caught_up,
    create_topic,
    json_records,
    produce,
    running_in_threads,
    table_of,
    table_rows,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_new_record_fields_become_columns_and_every_record_lands_once(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str
) -> None:
    create_topic(kafka_bootstrap, topic_name, 4)
    actions.create_connector(
        "evolving",
        sink_config(
            topic_name,
            "db.events",
            **{"iceberg.tables.evolve-schema-enabled": "true", "sinkadmin.staging.buffer-bytes": "65536"},
        ),
    )
    second: list[bytes | None] = [
        json.dumps(
            {"id": i, "name": f"n{i}", "country": "NO", "address": {"city": "Oslo"}, "score": i % 3 * 1.5}
        ).encode()
        for i in range(200, 400)
    ]
    # Many records as the table has them, then a new field in a struct: with
    # small chunks, a partition has written files before it meets the field
    # and rolls to new files (a file has one schema) within the commit.
    third: list[bytes | None] = [
        json.dumps({"id": i, "name": f"n{i}", "address": {"city": "Bergen"}, "score": 0.5}).encode()
        for i in range(400, 2400)
    ] + [
        json.dumps({"id": i, "name": f"n{i}", "address": {"city": "Bergen", "floor": 2}, "score": 0.5}).encode()
        for i in range(2400, 2600)
    ]
    with running_in_threads("evolving", tasks=2):
        ends = produce(kafka_bootstrap, topic_name, json_records(0, 200), 4)
        wait_until(caught_up("evolving", ends), 120, "the first records, in the auto-created table")
        # Both tasks meet the new fields in the same commit and race to add them.
        ends = produce(kafka_bootstrap, topic_name, second, 4)
        wait_until(caught_up("evolving", ends), 120, "records with new fields")
        ends = produce(kafka_bootstrap, topic_name, third, 4)
        wait_until(caught_up("evolving", ends), 120, "records with a new field in a struct")

    schema = table_of("evolving", "db.events").schema()
    columns = {f.name: str(f.field_type) for f in schema.fields}
    assert list(columns)[:3] == ["id", "name", "amount"]  # auto-created from the first records
    assert columns["country"] == "string"
    assert [(f.name, str(f.field_type)) for f in schema.find_field("address").field_type.fields] == [
        ("city", "string"),
        ("floor", "long"),
    ]
    assert columns["score"] == "double"
    rows = {r["id"]: r for r in table_rows("evolving", "db.events")}
    assert sorted(rows) == list(range(2600))  # every record once
    assert {(r["country"], r["address"], r["score"]) for i, r in rows.items() if i < 200} == {(None, None, None)}
    assert rows[202]["country"] == "NO" and rows[202]["address"] == {"city": "Oslo", "floor": None}
    assert rows[202]["score"] == 1.5
    assert rows[401]["country"] is None and rows[401]["address"] == {"city": "Bergen", "floor": None}
    assert rows[2401]["address"] == {"city": "Bergen", "floor": 2}


def envelope(schema_fields: list[dict[str, object]], payload: dict[str, object]) -> bytes:
    return json.dumps({"schema": {"type": "struct", "fields": schema_fields}, "payload": payload}).encode()


def test_fields_added_to_connect_envelope_schemas_become_columns(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str
) -> None:
    v1 = [{"field": "id", "type": "int64"}, {"field": "name", "type": "string"}]
    city = {"field": "city", "type": "string"}
    v2 = [*v1, {"field": "address", "type": "struct", "fields": [city]}, {"field": "vip", "type": "boolean"}]
    zip_code = {"field": "zip", "type": "int32"}
    v3 = [*v1, {"field": "address", "type": "struct", "fields": [city, zip_code]}]
    create_topic(kafka_bootstrap, topic_name, 2)
    actions.create_connector(
        "enveloped",
        sink_config(
            topic_name,
            "db.events",
            **{"iceberg.tables.evolve-schema-enabled": "true", "value.converter.schemas.enable": "true"},
        ),
    )
    first = [envelope(v1, {"id": i, "name": f"n{i}"}) for i in range(40)]
    # Old and new producers side by side, in one commit: the union of their schemas.
    mixed = [
        envelope(v2, {"id": i, "name": f"n{i}", "address": {"city": "Oslo"}, "vip": True})
        if i % 2
        else envelope(v3, {"id": i, "name": f"n{i}", "address": {"city": "Bergen", "zip": 5003}})
        for i in range(40, 80)
    ]
    with running_in_threads("enveloped"):
        ends = produce(kafka_bootstrap, topic_name, first, 2)
        wait_until(caught_up("enveloped", ends), 120, "the first schema's records")
        ends = produce(kafka_bootstrap, topic_name, mixed, 2)
        wait_until(caught_up("enveloped", ends), 120, "records of two newer schemas")

    schema = table_of("enveloped", "db.events").schema()
    assert [(f.name, str(f.field_type)) for f in schema.fields][:2] == [("id", "long"), ("name", "string")]
    assert str(schema.find_field("vip").field_type) == "boolean"
    assert [(f.name, str(f.field_type)) for f in schema.find_field("address").field_type.fields] == [
        ("city", "string"),
        ("zip", "int"),
    ]
    rows = {r["id"]: r for r in table_rows("enveloped", "db.events")}
    assert sorted(rows) == list(range(80))
    assert rows[1]["address"] is None and rows[1]["vip"] is None
    assert rows[41]["address"] == {"city": "Oslo", "zip": None} and rows[41]["vip"] is True
    assert rows[42]["address"] == {"city": "Bergen", "zip": 5003} and rows[42]["vip"] is None


def avro_values(schema: dict[str, object], records: list[dict[str, object]]) -> list[bytes | None]:
    parsed = fastavro.parse_schema(schema)
    values: list[bytes | None] = []
    for record in records:
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, record)
        values.append(buffer.getvalue())
    return values


def test_fields_added_to_the_configured_avro_schema_become_columns(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str
) -> None:
    id_field = {"name": "id", "type": "long"}
    v1 = {"type": "record", "name": "Order", "fields": [id_field]}
    v2 = {**v1, "fields": [id_field, {"name": "note", "type": ["null", "string"], "default": None}]}
    create_topic(kafka_bootstrap, topic_name, 1)
    config = sink_config(
        topic_name,
        "db.events",
        **{
            "iceberg.tables.evolve-schema-enabled": "true",
            "value.converter": "avro",
            "value.converter.avro.schema": json.dumps(v1),
        },
    )
    actions.create_connector("avro-evolving", config)
    ends = produce(kafka_bootstrap, topic_name, avro_values(v1, [{"id": i} for i in range(10)]), 1)
    with running_in_threads("avro-evolving"):
        wait_until(caught_up("avro-evolving", ends), 120, "records of the first schema")
    # The producers move to the new schema, and so does the connector's config.
    actions.update_config("avro-evolving", {**config, "value.converter.avro.schema": json.dumps(v2)})
    ends = produce(kafka_bootstrap, topic_name, avro_values(v2, [{"id": i, "note": f"n{i}"} for i in range(10, 20)]), 1)
    with running_in_threads("avro-evolving"):
        wait_until(caught_up("avro-evolving", ends), 120, "records of the second schema")

    assert [f.name for f in table_of("avro-evolving", "db.events").schema().fields] == ["id", "note"]
    rows = {r["id"]: r["note"] for r in table_rows("avro-evolving", "db.events")}
    assert rows == {i: (f"n{i}" if i >= 10 else None) for i in range(20)}


@pytest.mark.parametrize("change", ["column", "partition spec"])
def test_a_table_someone_else_alters_while_the_connector_runs_is_written_as_it_now_is(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, change: str
) -> None:
    # Between commits the tasks write with their copies of the table
    # (sinks.iceberg.writer.TableWriter): a change made by someone else (Spark SQL,
    # say) must reach the next write all the same.
    create_topic(kafka_bootstrap, topic_name, 4)
    actions.create_connector("altered", sink_config(topic_name, "db.altered"))
    noted: list[bytes | None] = [
        json.dumps({"id": i, "name": f"n{i}", "note": f"note {i}"}).encode() for i in range(400, 600)
    ]
    with running_in_threads("altered", tasks=2):
        for first in (0, 200):  # (the second round's tasks write with their copies)
            ends = produce(kafka_bootstrap, topic_name, json_records(first, 200), 4)
            wait_until(caught_up("altered", ends), 120, f"records from {first}")
        alter(table_of("altered", "db.altered"), change)
        ends = produce(kafka_bootstrap, topic_name, noted, 4)
        wait_until(caught_up("altered", ends), 120, "records after the change")

    table = table_of("altered", "db.altered")
    rows = {r["id"]: r for r in table.scan().to_arrow().to_pylist()}
    assert sorted(rows) == list(range(600))  # every record once
    if change == "column":
        assert {rows[i]["note"] for i in range(400)} == {None}
        assert all(rows[i]["note"] == f"note {i}" for i in range(400, 600))
    else:
        new_spec = table.spec().spec_id
        files = {f.file.file_path: f.file for f in table.scan().plan_files()}
        after = [f for f in files.values() if f.spec_id == new_spec]
        assert sum(f.record_count for f in after) == 200  # every record since the change, in the new spec
        assert all(f.partition[0] is not None for f in after)
