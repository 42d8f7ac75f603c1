"""Both data planes turn the same records into the same rows and the same bad-record decisions.

Each case stages the same records twice through the task's own writer
(``sinks.iceberg.writer.TableWriter``): once into the arrow data plane's sinks,
which decode in this process, and once into raw staging files that one job on
the real Spark (the test session's Spark Connect server) decodes. Each plane
writes its own table, created by the plane from the records as auto-create
does (or given, for column types auto-create never makes); the data files are
then read back with pyarrow and compared, with what each plane refused and why.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import io
import json
import uuid
from pathlib import Path
from typing import Any

import fastavro
import pyarrow.parquet as pq
import pytest
from django.conf import settings
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

from connectors.config import SinkConfig
from sinks.iceberg.tables import catalog_for, create_table
from sinks.iceberg.writer import TableWriter
from workers.converters import AvroValueDecoder
from workers.staging import RecordChunk, StagingBuffer
from workers.writes import WriteResult

pytestmark = pytest.mark.django_db(transaction=True)

Value = bytes | None


def envelope(payload: Any) -> bytes:
    schema = {
        "type": "struct",
        "fields": [
            {"field": "id", "type": "int64"},
            {"field": "name", "type": "string"},
            {"field": "tags", "type": "array", "items": {"type": "string"}},
            # Kafka Connect's logical types: a Decimal (JsonConverter writes its unscaled integer in base64) and a
            # Timestamp (epoch milliseconds), typed and read as the Iceberg sink does.
            {
                "field": "amount",
                "type": "bytes",
                "optional": True,
                "name": "org.apache.kafka.connect.data.Decimal",
                "parameters": {"scale": "2"},
            },
            {"field": "placed", "type": "int64", "optional": True, "name": "org.apache.kafka.connect.data.Timestamp"},
        ],
    }
    return json.dumps({"schema": schema, "payload": payload}).encode()


AVRO_SCHEMA = {
    "type": "record",
    "name": "order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "amount", "type": ["null", "double"], "default": None},
        {"name": "placed", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}], "default": None},
    ],
}


def avro(record: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(AVRO_SCHEMA), record)
    return buffer.getvalue()


PLAIN_JSON: list[Value] = [
    b'{"id": 1, "name": "a", "score": 1.5, "ok": true, "address": {"city": "Oslo", "zip": 1}, "tags": ["x"]}',
    b'{"id": 2, "name": "b", "score": 2, "ok": false, "tags": []}',
    b'{\n  "id": 3,\n  "name": "pretty"\n}',
    b'{"id": 4.9, "name": "truncated toward zero"}',
    b'{"id": "5", "name": "a numeric string"}',
    b'{"id": "five", "name": "does not fit"}',
    b'{"id": 6, "ok": "yes"}',
    b'{"id": 7, "name": "cut off',
    b"[1, 2]",
    b"null",
    b"\xff\xfe not UTF-8",
    b'{"id": 8, "score": NaN}',
    b'{"id": 9} {"id": 10}',
    None,
    b'{"id": 11, "name": "unknown fields are ignored", "extra": {"deep": [1]}}',
    # Not text in string columns: its text, as the Iceberg sink's RecordConverter writes it.
    b'{"id": 12, "name": 1e2, "address": {"city": 7}, "tags": [1, true, {"a": [2.5]}]}',
    b'{"id": 13, "name": {"first": "a", "n": 1}}',
]
# What the string columns of those hold, by id.
AS_TEXT = {
    12: ("100.0", {"city": "7", "zip": None}, ["1", "true", '{"a":[2.5]}']),
    13: ('{"first":"a","n":1}', None, None),
}

CONSISTENT_JSON: list[Value] = [
    value
    for value in PLAIN_JSON
    # Auto-create types a column from every sample: these would make `id` text.
    if value is None or not any(v in value for v in (b'"5"', b'"five"', b'"yes"', b'"id": 12', b'"id": 13'))
]

PLAIN_SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "name", StringType(), required=False),
    NestedField(3, "score", DoubleType(), required=False),
    NestedField(4, "ok", BooleanType(), required=False),
    NestedField(
        5,
        "address",
        StructType(
            NestedField(6, "city", StringType(), required=False), NestedField(7, "zip", LongType(), required=False)
        ),
        required=False,
    ),
    NestedField(8, "tags", ListType(9, StringType(), element_required=False), required=False),
)

TYPED_JSON: list[Value] = [
    b'{"id": 1, "day": "2024-02-29", "at": "2024-02-29T10:00:00Z", "price": 12.34, "ratio": 0.5}',
    b'{"id": 2, "day": "2024-13-01"}',
    b'{"id": 3, "at": "not a time"}',
    b'{"id": 4, "price": "12.345"}',
    b'{"id": 5, "at": "2024-02-29T10:00:00.123456+02:00", "price": -1}',
    # Epoch milliseconds and days with fractions (Python's time.time() * 1000): truncated, as the Java sink does.
    b'{"id": 6, "at": 1709200800123.9, "day": 19782.5, "name": 6}',
]

TYPED_SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "day", DateType(), required=False),
    NestedField(3, "at", TimestamptzType(), required=False),
    NestedField(4, "price", DecimalType(10, 2), required=False),
    NestedField(5, "ratio", DoubleType(), required=False),
    NestedField(6, "name", StringType(), required=False),
)

GIVEN = {"iceberg.tables.auto-create-enabled": "false"}

# Kafka's transforms that only move, drop or insert fields: the sink's decoders apply them to columns.
LINEAGE = {
    "transforms": "fields,lineage",
    "transforms.fields.type": "org.apache.kafka.connect.transforms.ReplaceField$Value",
    "transforms.fields.exclude": "ok",
    "transforms.fields.renames": "name:customer",
    "transforms.lineage.type": "org.apache.kafka.connect.transforms.InsertField$Value",
    "transforms.lineage.topic.field": "_topic",
    "transforms.lineage.partition.field": "_partition",
    "transforms.lineage.offset.field": "_offset",
    "transforms.lineage.timestamp.field": "_ts",
    "transforms.lineage.static.field": "_source",
    "transforms.lineage.static.value": "orders",
}
# A Filter of tombstones (the JSON null too) before them: the decoders drop those before reading values.
FILTERED_LINEAGE = {
    **LINEAGE,
    "transforms": "tombstones,fields,lineage",
    "transforms.tombstones.type": "org.apache.kafka.connect.transforms.Filter",
    "transforms.tombstones.predicate": "null",
    "predicates": "null",
    "predicates.null.type": "org.apache.kafka.connect.transforms.predicates.RecordIsTombstone",
}
# A router and a header after them (they change no value): the decoders still apply the chain.
ROUTED_LINEAGE = {
    **LINEAGE,
    "transforms": "fields,lineage,route,mark",
    "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
    "transforms.route.regex": "t-(.*)",
    "transforms.route.replacement": "routed-$1",
    "transforms.mark.type": "org.apache.kafka.connect.transforms.InsertHeader",
    "transforms.mark.header": "origin",
    "transforms.mark.value.literal": "sinkadmin",
}
LINEAGE_SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "customer", StringType(), required=False),
    NestedField(3, "score", DoubleType(), required=False),
    NestedField(4, "ok", BooleanType(), required=False),
    NestedField(5, "_topic", StringType(), required=False),
    NestedField(6, "_partition", IntegerType(), required=False),
    NestedField(7, "_offset", LongType(), required=False),
    NestedField(8, "_ts", LongType(), required=False),
    NestedField(9, "_source", StringType(), required=False),
)

# name: (connector keys, records, the table's schema if given rather than auto-created)
CASES: dict[str, tuple[dict[str, str], list[Value], Schema | None]] = {
    "plain JSON, auto-created": ({}, CONSISTENT_JSON, None),
    "plain JSON into given columns": (GIVEN, PLAIN_JSON, PLAIN_SCHEMA),
    "plain JSON with Kafka metadata columns, bucketed and routed": (
        {
            **GIVEN,
            "iceberg.tables": "{table}",
            "iceberg.tables.route-field": "name",
            "iceberg.table.{table}.route-regex": "[a-z]",
            "iceberg.table.{table}.partition-by": "bucket(4, id)",
            "sinkadmin.metadata-columns": "topic,partition,offset,timestamp,key",
        },
        PLAIN_JSON,
        Schema(
            *PLAIN_SCHEMA.fields,
            NestedField(20, "_kafka_topic", StringType(), required=False),
            NestedField(21, "_kafka_partition", IntegerType(), required=False),
            NestedField(22, "_kafka_offset", LongType(), required=False),
            NestedField(23, "_kafka_timestamp", TimestamptzType(), required=False),
            NestedField(24, "_kafka_key", StringType(), required=False),
        ),
    ),
    "plain JSON into dates, timestamps and decimals": (GIVEN, TYPED_JSON, TYPED_SCHEMA),
    "InsertField and ReplaceField, auto-created": (LINEAGE, CONSISTENT_JSON, None),
    "InsertField and ReplaceField into given columns": ({**GIVEN, **LINEAGE}, PLAIN_JSON, LINEAGE_SCHEMA),
    "a Filter of tombstones, then InsertField and ReplaceField": (
        {**GIVEN, **FILTERED_LINEAGE},
        PLAIN_JSON,
        LINEAGE_SCHEMA,
    ),
    "InsertField and ReplaceField, then a RegexRouter and InsertHeader": (
        {**GIVEN, **ROUTED_LINEAGE},
        PLAIN_JSON,
        LINEAGE_SCHEMA,
    ),
    # (InsertField's timestamp, epoch milliseconds, into a timestamptz column, as the Iceberg sink reads it.)
    "InsertField's timestamp into a given timestamptz column": (
        {**GIVEN, **LINEAGE},
        PLAIN_JSON,
        Schema(
            *(
                f if f.name != "_ts" else NestedField(8, "_ts", TimestamptzType(), required=False)
                for f in LINEAGE_SCHEMA.fields
            )
        ),
    ),
    "Kafka Connect envelopes": (
        {"value.converter.schemas.enable": "true"},
        [
            # (74.12: its unscaled 7412 in two bytes, base64.)
            envelope({"id": 1, "name": "a", "tags": ["x", "y"], "amount": "HPQ=", "placed": 1_700_000_000_123}),
            envelope({"id": 2, "name": None, "tags": None}),
            envelope(None),
            b'{"id": 3, "name": "no envelope"}',
            envelope({"id": "three", "name": "does not fit"}),
            None,
        ],
        None,
    ),
    "Avro": (
        {"value.converter": "avro", "value.converter.avro.schema": json.dumps(AVRO_SCHEMA)},
        [
            avro({"id": 1, "amount": 9.5, "placed": 1_700_000_000_123}),
            avro({"id": 2, "amount": None, "placed": None}),
            b"\x00\x00\x00\x00\x07" + avro({"id": 3, "amount": 1.0, "placed": 0}),
            b"not avro at all",
            None,
        ],
        None,
    ),
    "strings": ({"value.converter": "string"}, [b"plain text", b"", b"\xff\xfe not UTF-8", None, b'{"a": 1}'], None),
    "bytes": ({"value.converter": "bytearray"}, [b"\x00\x01\x02", b"", b"\xff", None], None),
}


def staged_chunk(topic: str, config: SinkConfig, values: list[Value]) -> RecordChunk:
    """The records as a participant stages them (it decodes Avro to JSON while staging)."""
    offsets = list(range(100, 100 + len(values)))
    errors: list[str | None] = [None] * len(values)
    staged = list(values)
    if config.value_converter == "avro":
        decoder = AvroValueDecoder(config.avro_schema or "")
        for i, value in enumerate(values):
            if value is not None:
                try:
                    staged[i] = decoder.to_json(value)
                except ValueError as exc:
                    errors[i] = str(exc)
    keys: list[bytes | None] = [f"k{o}".encode() for o in offsets]
    stamps: list[int | None] = [1_700_000_000_000 + o for o in offsets]
    return RecordChunk(topic, 0, offsets, stamps, keys, staged, [None] * len(values), errors)


def write_with(plane: str, case: str, table: str, topic: str, tmp_path: Path) -> tuple[WriteResult, list[Any]]:
    overrides, values, given = CASES[case]
    config_map = {
        "connector.class": "iceberg",
        "topics": topic,
        "iceberg.tables": table,
        "iceberg.tables.auto-create-enabled": "true",
        "iceberg.catalog": f"catalog-{topic}",
        "errors.tolerance": "all",
        "sinkadmin.writer": plane,
        # Small chunks: bad records are isolated across several of them.
        "sinkadmin.staging.buffer-bytes": "65536",
    }
    config_map.update({k.replace("{table}", table): v.replace("{table}", table) for k, v in overrides.items()})
    config_map = {k: v for k, v in config_map.items() if v}
    config = SinkConfig.parse(config_map)
    if given is not None:
        with catalog_for(config) as catalog:
            create_table(catalog, table, given, config.settings.tables[0].partition_by)
    # (As the runtime gives the sink its records: after the transforms, which these chains leave to its decoders.)
    assert config.staged_transforms is None
    writer = TableWriter(config.sink_view)
    staging_id, commit_id = uuid.uuid4(), uuid.uuid4()
    directory = tmp_path / plane
    try:
        buffer = StagingBuffer(topic, 0, 100, writer.sink(staging_id, topic, 0, 100, directory))
        chunk = staged_chunk(topic, config, values)
        # Two runs, as fetched: chunks are cut where the sink's buffer fills.
        half = len(chunk) // 2
        first, second = RecordChunk(topic, 0), RecordChunk(topic, 0)
        first.extend(chunk, 0, half)
        second.extend(chunk, half, len(chunk))
        buffer.extend(first)
        buffer.extend(second)
        result = writer.write(commit_id, staging_id, [buffer.finish()])
    finally:
        writer.close()
    rows = [row for f in result.files for row in pq.read_table(f.path.removeprefix("file://")).to_pylist()]
    return result, rows


def comparable(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(json.dumps(row, sort_keys=True, default=_text) for row in rows)


def _text(value: Any) -> str:
    return base64.b64encode(value).decode() if isinstance(value, bytes) else str(value)


@pytest.mark.parametrize("case", list(CASES))
def test_both_data_planes_give_the_same_rows_and_bad_record_decisions(
    case: str, lake: dict[str, str], topic_name: str, tmp_path: Path
) -> None:
    assert settings.STAGING_DIR
    arrow, arrow_rows = write_with("arrow", case, "db.by_arrow", topic_name, tmp_path)
    spark, spark_rows = write_with("spark", case, "db.by_spark", topic_name, tmp_path)
    assert arrow_rows, f"{case}: no record was written"
    assert comparable(spark_rows) == comparable(arrow_rows)
    assert [(b.offset, b.reason) for b in spark.bad] == [(b.offset, b.reason) for b in arrow.bad]
    assert spark.skipped == arrow.skipped
    if case == "Kafka Connect envelopes":
        (one,) = [r for r in spark_rows if r["id"] == 1]
        assert (one["amount"], one["placed"]) == (
            decimal.Decimal("74.12"),
            dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=dt.UTC),
        )
    if CASES[case][2] is TYPED_SCHEMA:
        (six,) = [r for r in spark_rows if r["id"] == 6]
        assert (six["at"], six["day"], six["name"]) == (
            dt.datetime(2024, 2, 29, 10, 0, 0, 123000, tzinfo=dt.UTC),
            dt.date(2024, 2, 29),
            "6",
        )
    if CASES[case][2] in (PLAIN_SCHEMA, LINEAGE_SCHEMA):
        name = "customer" if "transforms" in CASES[case][0] else "name"
        texts = {r["id"]: (r[name], r.get("address"), r.get("tags")) for r in spark_rows if r["id"] in AS_TEXT}
        assert texts == {i: t if name == "name" else (t[0], None, None) for i, t in AS_TEXT.items()}
    if "iceberg.tables.route-field" not in CASES[case][0]:
        # Every record is written, refused or skipped: none is lost.
        assert len(spark_rows) + len(spark.bad) + sum(spark.skipped.values()) == len(CASES[case][1])
    if "transforms" in CASES[case][0]:
        # (The chain applied to the columns: SinkConfig.columnar_chain.)
        stamps = [r["_ts"] if isinstance(r["_ts"], int) else round(r["_ts"].timestamp() * 1000) for r in spark_rows]
        assert {
            (r["_topic"], r["_partition"], r["_source"], stamp - r["_offset"])
            for r, stamp in zip(spark_rows, stamps, strict=True)
        } == {(topic_name, 0, "orders", 1_700_000_000_000)}
        assert all("customer" in r and "name" not in r and r.get("ok") is None for r in spark_rows)
    # Files of both planes are named after the records' offsets (DESIGN I5).
    assert all(f"{topic_name}+0+100+{99 + len(CASES[case][1])}-" in f.path for f in spark.files + arrow.files)
