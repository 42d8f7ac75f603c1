"""Transforms of records with a schema (value.converter.schemas.enable=true): the stage writes each record in
the envelope of the schema Kafka Connect's transformations give it (``connectors.smt.schemas``), so a table
the sink creates of them is typed as the Iceberg sink types it, and the sink's decoder fills those columns.
``tests/test_transforms_against_kafka.py`` compares random chains with Kafka's own; these are the cases a
reader checks by eye."""

from __future__ import annotations

import base64
import json
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from connectors.config import SinkConfig
from connectors.smt.schemas import DATE, DECIMAL, TIMESTAMP, envelope_payload
from tests.conftest import sink_config
from workers.json_decoder import JsonDecoder
from workers.schemas import schema_from_connect
from workers.staging import RecordChunk
from workers.transformed import RecordTransformer

K = "org.apache.kafka.connect.transforms."


def decimal(scale: int, optional: bool = True) -> dict[str, Any]:
    return {"type": "bytes", "optional": optional, "name": DECIMAL, "version": 1, "parameters": {"scale": str(scale)}}


ROW = {
    "type": "struct",
    "optional": False,
    "name": "shop.public.orders.Value",
    "fields": [
        {"field": "id", "type": "int32", "optional": False},
        {"field": "amount", **decimal(2)},
        {"field": "placed", "type": "int32", "optional": True, "name": DATE, "version": 1},
        {"field": "seen", "type": "int64", "optional": True, "name": TIMESTAMP, "version": 1},
        {"field": "qty", "type": "int16", "optional": True},
    ],
}
# 12.50 (unscaled 1250), 2023-12-09 (19700 days), 2023-11-14T22:13:20.123Z.
PAYLOAD = {"id": 7, "amount": base64.b64encode((1250).to_bytes(2, "big")).decode(), "placed": 19700}
PAYLOAD |= {"seen": 1_700_000_000_123, "qty": 3}
EVENT_SCHEMA = {
    "type": "struct",
    "optional": False,
    "name": "shop.public.orders.Envelope",
    "fields": [
        {**ROW, "optional": True, "field": "before"},
        {**ROW, "optional": True, "field": "after"},
        {
            "field": "source",
            "type": "struct",
            "optional": False,
            "fields": [
                {"field": "schema", "type": "string", "optional": False},
                {"field": "table", "type": "string", "optional": False},
                {"field": "ts_ms", "type": "int64", "optional": False},
            ],
        },
        {"field": "op", "type": "string", "optional": False},
        {"field": "ts_ms", "type": "int64", "optional": True},
    ],
}
EVENT = {
    "before": None,
    "after": PAYLOAD,
    "source": {"schema": "public", "table": "orders", "ts_ms": 1_700_000_000_000},
    "op": "c",
    "ts_ms": 1_700_000_000_500,
}


def staged(transforms: dict[str, str], schema: dict[str, Any], payload: Any) -> tuple[dict[str, Any], str | None]:
    """The record through the stage of a connector with ``transforms`` (JSON values in their schema envelope,
    JSON keys): what it stages of it, parsed, and its error."""
    config = SinkConfig.parse(
        sink_config(
            "shop.public.orders",
            "db.orders",
            **{"value.converter.schemas.enable": "true", "key.converter": "json", **transforms},
        )
    )
    assert config.transforms is not None and config.sink_view.schemas_enable
    value = json.dumps({"schema": schema, "payload": payload}).encode()
    chunk = RecordChunk("shop.public.orders", 0, [5], [1_700_000_000_999], [b'{"id": 7}'], [value], [None], [None])
    out, _ = RecordTransformer(config, config.transforms).apply(chunk)
    return json.loads(out.values[0] or b"null"), out.errors[0]


def test_debeziums_unwrap_gives_the_rows_schema_and_its_added_fields_optional() -> None:
    transforms = {
        "transforms": "unwrap",
        "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
        "transforms.unwrap.delete.tombstone.handling.mode": "rewrite",
        "transforms.unwrap.add.fields": "op,source.ts_ms",
    }
    record, error = staged(transforms, EVENT_SCHEMA, EVENT)
    assert error is None
    assert record["schema"] == {
        **ROW,
        "fields": [
            *ROW["fields"],
            {"field": "__deleted", "type": "string", "optional": True},
            {"field": "__op", "type": "string", "optional": True},
            {"field": "__source_ts_ms", "type": "int64", "optional": True},
        ],
    }
    assert record["payload"] == {**PAYLOAD, "__deleted": "false", "__op": "c", "__source_ts_ms": 1_700_000_000_000}


def test_the_iceberg_sinks_debezium_transform_gives_cdc_its_schema_without_a_key_read_schemaless() -> None:
    record, error = staged(
        {"transforms": "dbz", "transforms.dbz.type": "org.apache.iceberg.connect.transforms.DebeziumTransform"},
        EVENT_SCHEMA,
        EVENT,
    )
    assert error is None
    cdc = record["schema"]["fields"][-1]
    assert (cdc["field"], [(f["field"], f["type"], f.get("name")) for f in cdc["fields"]]) == (
        "_cdc",
        [
            ("op", "string", None),
            ("ts", "int64", TIMESTAMP),
            ("offset", "int64", None),
            ("source", "string", None),
            ("target", "string", None),
        ],
    )
    # (The key has no schema, read schemaless: as the Iceberg sink's, _cdc has no key then.)
    assert record["payload"]["_cdc"] == {
        "op": "I",
        "ts": 1_700_000_000_500,
        "offset": 5,
        "source": "public.orders",
        "target": "public.orders",
    }


def test_insert_field_cast_and_timestamp_converter_type_what_they_make() -> None:
    transforms = {
        "transforms": "lineage,cast,day",
        "transforms.lineage.type": f"{K}InsertField$Value",
        "transforms.lineage.timestamp.field": "_ts",
        "transforms.lineage.partition.field": "_partition!",
        "transforms.cast.type": f"{K}Cast$Value",
        "transforms.cast.spec": "amount:float64,qty:string",
        "transforms.day.type": f"{K}TimestampConverter$Value",
        "transforms.day.field": "seen",
        "transforms.day.target.type": "Date",
    }
    record, error = staged(transforms, ROW, PAYLOAD)
    assert error is None
    types = {f["field"]: (f["type"], f.get("name"), f["optional"]) for f in record["schema"]["fields"]}
    assert types == {
        "id": ("int32", None, False),
        "amount": ("double", None, True),
        "placed": ("int32", DATE, True),
        "seen": ("int32", DATE, True),
        "qty": ("string", None, True),
        "_partition": ("int32", None, False),
        "_ts": ("int64", TIMESTAMP, True),
    }
    # A Decimal cast as the number it is; a Timestamp's day as its days since the epoch (2023-11-14).
    assert record["payload"] | {} == {
        "id": 7,
        "amount": 12.5,
        "placed": 19700,
        "seen": 19675,
        "qty": "3",
        "_partition": 0,
        "_ts": 1_700_000_000_999,
    }


def test_a_date_is_read_as_the_date_it_is_not_as_a_unix_time() -> None:
    """(Schemaless, 19700 would be 19.7 seconds after the epoch.)"""
    transforms = {
        "transforms": "text",
        "transforms.text.type": f"{K}TimestampConverter$Value",
        "transforms.text.field": "placed",
        "transforms.text.target.type": "string",
        "transforms.text.format": "yyyy/MM/dd",
    }
    record, error = staged(transforms, ROW, PAYLOAD)
    assert error is None and record["payload"]["placed"] == "2023/12/09"


def test_a_decimal_masked_is_zero_at_its_scale_and_a_cast_that_fails_names_the_transformation_and_field() -> None:
    record, error = staged(
        {"transforms": "mask", "transforms.mask.type": f"{K}MaskField$Value", "transforms.mask.fields": "amount"},
        ROW,
        PAYLOAD,
    )
    assert error is None and record["payload"]["amount"] == base64.b64encode(b"\x00").decode()
    _, error = staged(
        {
            "transforms": "cast",
            "transforms.cast.type": f"{K}Cast$Value",
            "transforms.cast.spec": "id:boolean,seen:int8",
        },
        {**ROW, "fields": [*ROW["fields"], {"field": "blob", "type": "bytes", "optional": True}]},
        PAYLOAD,
    )
    assert error is None
    _, error = staged(
        {"transforms": "cast", "transforms.cast.type": f"{K}Cast$Value", "transforms.cast.spec": "blob:int32"},
        {**ROW, "fields": [*ROW["fields"], {"field": "blob", "type": "bytes", "optional": True}]},
        {**PAYLOAD, "blob": "AQID"},
    )
    assert error == "transforms.cast (Cast$Value): field blob: cannot cast 'AQID' to int32: " + (
        "Unexpected type in Cast transformation: class [B"
    )


def test_a_field_renamed_onto_a_kept_one_of_another_type_is_refused_as_kafkas_struct_refuses_it() -> None:
    """(Kafka's ReplaceField with a schema fills each field of the new schema from the field renamed to its name:
    here ``id`` from the excluded ``qty``, a short where the schema has an int.)"""
    _, error = staged(
        {
            "transforms": "r",
            "transforms.r.type": f"{K}ReplaceField$Value",
            "transforms.r.exclude": "qty",
            "transforms.r.renames": "qty:id",
        },
        ROW,
        PAYLOAD,
    )
    assert error is not None and 'class java.lang.Short for field: "id"' in error


def test_what_the_stage_writes_makes_the_columns_the_iceberg_sink_makes_and_the_decoder_fills_them() -> None:
    record, error = staged(
        {"transforms": "unwrap", "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState"},
        EVENT_SCHEMA,
        EVENT,
    )
    assert error is None
    columns = schema_from_connect(record["schema"])
    assert [(f.name, f.type) for f in columns] == [
        ("id", pa.int32()),
        ("amount", pa.decimal128(38, 2)),
        ("placed", pa.date32()),
        ("seen", pa.timestamp("us", tz="UTC")),
        ("qty", pa.int32()),
    ]
    decoded = JsonDecoder(columns, envelope=True).decode([json.dumps(record).encode()], [None])
    [row] = decoded.columns.to_pylist()
    assert (row["amount"], str(row["placed"]), row["seen"].isoformat()) == (
        Decimal("12.50"),
        "2023-12-09",
        "2023-11-14T22:13:20.123000+00:00",
    )


@pytest.mark.parametrize(
    ("schema", "value", "written"),
    [
        (decimal(3), "-1.5", base64.b64encode((-1500).to_bytes(2, "big", signed=True)).decode()),
        ({"type": "int32", "name": DATE}, "2024-01-02", 19724),
        ({"type": "int64", "name": TIMESTAMP}, "1970-01-01T00:00:01.500Z", 1500),
        ({"type": "struct", "fields": [{"field": "a", "type": "string"}]}, {"a": "x", "b": 1}, {"a": "x"}),
    ],
)
def test_a_payload_is_written_in_its_schemas_form(schema: dict[str, Any], value: Any, written: Any) -> None:
    assert envelope_payload(schema, value) == written


def test_a_decimal_with_more_digits_than_its_scale_is_a_bad_record_naming_its_field() -> None:
    schema = {"type": "struct", "fields": [{"field": "price", **decimal(1)}]}
    with pytest.raises(ValueError, match=r"field price: '1\.25' has more digits after its point than"):
        envelope_payload(schema, {"price": "1.25"})
