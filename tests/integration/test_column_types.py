"""Tables made elsewhere with the column types JSON has no reading of: UUID, binary, fixed, time and map.

The Iceberg sink's users often create their tables first (in Spark or Trino) with these types. Both data
planes decode such records with the one JSON decoder (``workers.json_values``), as Iceberg's sink converts
them, into files every reader reads as the same values. Until 2026-11-29 the Spark plane decoded them in the
JVM: UUID and fixed columns were written as Parquet strings and binary, so a prepared commit could not be
applied ("Unexpected physical type BYTE_ARRAY for uuid"), and a time column failed the write.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import uuid
from typing import Any

import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    FixedType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimeType,
    UUIDType,
)

from connectors import actions
from connectors.config import SinkConfig
from sinks.iceberg.settings import CREATED_TABLE_PROPERTIES
from sinks.iceberg.tables import catalog_for, create_table
from tests.integration.conftest import sink_config
from tests.integration.helpers import (
    assert_upserts_merged_on_read,
    caught_up,
    create_topic,
    duckdb_rows,
    produce,
    running_in_threads,
    table_of,
    wait_until,
)
from tests.integration.test_bad_input_and_idle import dead_letters
from tests.readers import assert_same_rows, spark_iceberg_rows

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TYPED = Schema(
    NestedField(1, "kind", StringType(), required=False),
    NestedField(2, "id", LongType(), required=False),
    NestedField(3, "uid", UUIDType(), required=False),
    NestedField(4, "raw", BinaryType(), required=False),
    NestedField(5, "digest", FixedType(4), required=False),
    NestedField(6, "attrs", MapType(7, StringType(), 8, LongType(), value_required=False), required=False),
)
# (Apart: Spark 3.5 has no time type, so Spark's Iceberg reader cannot read a table with one.)
CLOCK = Schema(
    NestedField(1, "kind", StringType(), required=False),
    NestedField(2, "id", LongType(), required=False),
    NestedField(3, "at", TimeType(), required=False),
)
COUNT = 60


def record(i: int) -> dict[str, Any]:
    if i % 3 == 2:
        # Kafka Connect's Time: milliseconds since midnight, or ISO-8601 text.
        return {"kind": "clock", "id": i, "at": (i % 24) * 3_600_000 if i % 2 else f"{i % 24:02d}:30:07.5"}
    return {
        "kind": "typed",
        "id": i,
        "uid": str(uuid.UUID(int=i * 7919)),
        "raw": base64.b64encode(f"raw-{i}".encode()).decode(),
        "digest": base64.b64encode(i.to_bytes(4, "big")).decode(),
        "attrs": {"n": i, "none": None},
    }


def expected(i: int) -> dict[str, Any]:
    if i % 3 == 2:
        at = dt.time(i % 24) if i % 2 else dt.time(i % 24, 30, 7, 500000)
        return {"kind": "clock", "id": i, "at": at}
    return {
        "kind": "typed",
        "id": i,
        "uid": str(uuid.UUID(int=i * 7919)),
        "raw": f"raw-{i}".encode(),
        "digest": i.to_bytes(4, "big"),
        "attrs": {"n": i, "none": None},
    }


BAD = [
    {"kind": "typed", "id": 1000, "uid": "not-a-uuid"},
    {"kind": "typed", "id": 1001, "digest": base64.b64encode(b"12345").decode()},
    {"kind": "clock", "id": 1002, "at": "25:00"},
    {"kind": "typed", "id": 1003, "attrs": {"n": "many"}},
]


@pytest.mark.parametrize("writer", ["spark", "arrow"])
def test_tables_with_uuid_binary_fixed_time_and_map_columns_are_written_as_every_reader_reads_them(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, writer: str
) -> None:
    config = sink_config(
        topic_name,
        "db.typed,db.clock",
        **{
            "iceberg.tables.auto-create-enabled": "false",
            "iceberg.tables.route-field": "kind",
            "iceberg.table.db.typed.route-regex": "typed",
            "iceberg.table.db.clock.route-regex": "clock",
            "errors.tolerance": "all",
            "errors.deadletterqueue.topic.name": f"{topic_name}-dlq",
            "sinkadmin.writer": writer,
        },
    )
    with catalog_for(SinkConfig.parse(config)) as catalog:
        create_table(catalog, "db.typed", TYPED, ())
        create_table(catalog, "db.clock", CLOCK, ())
    create_topic(kafka_bootstrap, topic_name, 2)
    create_topic(kafka_bootstrap, f"{topic_name}-dlq", 1)
    values: list[bytes | None] = [json.dumps(v).encode() for v in [*map(record, range(COUNT)), *BAD]]
    ends = produce(kafka_bootstrap, topic_name, values, 2)
    name = f"typed-{writer}"
    actions.create_connector(name, config)
    with running_in_threads(name):
        wait_until(caught_up(name, ends), 180, "the commit")

    want = [expected(i) for i in range(COUNT)]
    for table, kind in (("db.typed", "typed"), ("db.clock", "clock")):
        mine = [row for row in want if row["kind"] == kind]
        assert_same_rows(f"pyiceberg ({table})", mine, table_of(name, table).scan().to_arrow().to_pylist())
        assert_same_rows(f"DuckDB ({table})", mine, duckdb_rows(name, table))
    typed = [row for row in want if row["kind"] == "typed"]
    assert_same_rows(
        "Spark's Iceberg reader (db.typed)", typed, spark_iceberg_rows(SinkConfig.parse(config), "db.typed")
    )
    # Each bad record is refused with the field and the value, and written to no table.
    letters = dead_letters(kafka_bootstrap, f"{topic_name}-dlq", len(BAD))
    reasons = {
        json.loads(m.value())["id"]: dict(m.headers())["__connect.errors.exception.message"].decode() for m in letters
    }
    assert {i: r.split(": ", 1)[1] for i, r in reasons.items()} == {
        1000: "field uid: 'not-a-uuid' is not a UUID",
        1001: "field digest: 'MTIzNDU=' is not 4 bytes (it is 5)",
        1002: "field at: '25:00' is not a time (ISO-8601 text such as 10:15:30, or milliseconds since midnight)",
        1003: "field attrs.n: 'many' is not an integer",
    }


@pytest.mark.parametrize("writer", ["spark", "arrow"])
def test_upserts_keyed_by_a_uuid_column_replace_each_keys_row(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, writer: str
) -> None:
    """A UUID identifier column keys upserts (compared as its bytes' text, upserts.key_text): each commit's
    record of a key replaces the table's row of it, merge-on-read."""
    config = sink_config(
        topic_name,
        "db.keyed",
        **{
            "iceberg.tables.auto-create-enabled": "false",
            "iceberg.tables.upsert-mode-enabled": "true",
            "iceberg.table.db.keyed.id-columns": "uid",
            "sinkadmin.writer": writer,
        },
    )
    schema = Schema(
        NestedField(1, "uid", UUIDType(), required=True),
        NestedField(2, "version", LongType(), required=False),
        NestedField(3, "raw", BinaryType(), required=False),
        identifier_field_ids=[1],
    )
    with catalog_for(SinkConfig.parse(config)) as catalog:
        create_table(catalog, "db.keyed", schema, (), {**CREATED_TABLE_PROPERTIES, "write.merge.mode": "merge-on-read"})
    create_topic(kafka_bootstrap, topic_name, 2)

    def row(i: int, version: int) -> dict[str, Any]:
        return {
            "uid": str(uuid.UUID(int=(i + 1) << 100)),
            "version": version,
            "raw": base64.b64encode(bytes([i])).decode(),
        }

    name = f"keyed-{writer}"
    actions.create_connector(name, config)
    with running_in_threads(name):
        ends = produce(kafka_bootstrap, topic_name, [json.dumps(row(i, 1)).encode() for i in range(30)], 2)
        wait_until(caught_up(name, ends), 180, "the first commit")
        again = [json.dumps(row(i, 2)).encode() for i in range(0, 40, 2)]  # (20 of them new keys or updates)
        ends = produce(kafka_bootstrap, topic_name, again, 2)
        wait_until(caught_up(name, ends), 180, "the upserts")
    latest = {i: 1 for i in range(30)} | {i: 2 for i in range(0, 40, 2)}
    want = [{"uid": str(uuid.UUID(int=(i + 1) << 100)), "version": v, "raw": bytes([i])} for i, v in latest.items()]
    assert_same_rows("pyiceberg (db.keyed)", want, table_of(name, "db.keyed").scan().to_arrow().to_pylist())
    assert_same_rows("Spark's Iceberg reader", want, spark_iceberg_rows(SinkConfig.parse(config), "db.keyed"))
    assert_same_rows("DuckDB", want, duckdb_rows(name, "db.keyed"))
    assert_upserts_merged_on_read(name, "db.keyed")


def test_schema_evolution_adds_new_fields_inside_a_struct_that_holds_binary(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str
) -> None:
    """A struct holding a binary column is converted by the decoder itself, not read by Arrow's reader; the
    new fields records bring into it are added to the table as those of any struct are, and written."""
    config = sink_config(
        topic_name,
        "db.blobs",
        **{"iceberg.tables.auto-create-enabled": "false", "iceberg.tables.evolve-schema-enabled": "true"},
    )
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "blob", StructType(NestedField(3, "digest", BinaryType(), required=False)), required=False),
    )
    with catalog_for(SinkConfig.parse(config)) as catalog:
        create_table(catalog, "db.blobs", schema, ())
    create_topic(kafka_bootstrap, topic_name, 1)

    def value(i: int) -> bytes:
        blob: dict[str, Any] = {"digest": base64.b64encode(bytes([i])).decode()}
        if i >= 5:
            blob |= {"size": i, "where": {"city": f"c{i}"}}
        return json.dumps({"id": i, "blob": blob}).encode()

    ends = produce(kafka_bootstrap, topic_name, [value(i) for i in range(10)], 1)
    name = "blobs"
    actions.create_connector(name, config)
    with running_in_threads(name):
        wait_until(caught_up(name, ends), 180, "the commit")
    table = table_of(name, "db.blobs")
    blob = table.schema().find_field("blob").field_type
    assert [(f.name, str(f.field_type)) for f in blob.fields[:2]] == [("digest", "binary"), ("size", "long")]
    where = blob.fields[2]
    assert where.name == "where" and [(f.name, str(f.field_type)) for f in where.field_type.fields] == [
        ("city", "string")
    ]

    def row(i: int) -> dict[str, Any]:
        extra = {"size": i, "where": {"city": f"c{i}"}} if i >= 5 else {"size": None, "where": None}
        return {"id": i, "blob": {"digest": bytes([i]), **extra}}

    want = [row(i) for i in range(10)]
    assert_same_rows("pyiceberg", want, table.scan().to_arrow().to_pylist())
    assert_same_rows("DuckDB", want, duckdb_rows(name, "db.blobs"))
