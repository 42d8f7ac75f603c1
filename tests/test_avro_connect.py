"""Avro values for a connector's transforms: in JsonConverter's envelope of their Connect schema, as Kafka
Connect's AvroConverter hands them to the transforms (``workers.avro_connect``), so the tables the sink creates
of what the transforms leave are typed from the Avro schema."""

from __future__ import annotations

import base64
import datetime as dt
import io
import json
import uuid
from decimal import Decimal
from typing import Any

import fastavro
import pyarrow as pa

from connectors.config import SinkConfig
from connectors.smt.schemas import DATE, DECIMAL, TIME, TIMESTAMP
from tests.conftest import sink_config
from workers.avro_connect import AvroConnect
from workers.converters import AvroValueDecoder, schemaless_payloads
from workers.schemas import schema_from_connect
from workers.staging import RecordChunk
from workers.transformed import RecordTransformer

ROW = {
    "type": "record",
    "name": "Value",
    "namespace": "shop.public.orders",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "qty", "type": {"type": "int", "connect.type": "int16"}},
        {"name": "amount", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}]},
        {"name": "placed", "type": ["null", {"type": "int", "logicalType": "date"}], "default": None},
        {"name": "opens", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "seen", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "seen_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
        {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "blob", "type": "bytes"},
        {"name": "day", "type": {"type": "int", "connect.name": "io.debezium.time.Date"}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {
            "name": "prices",
            "type": {"type": "map", "values": {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 1}},
        },
    ],
}
RECORD = {
    "id": 7,
    "qty": 3,
    "amount": Decimal("12.50"),
    "placed": dt.date(2023, 12, 9),
    "opens": dt.time(1, 0, 0, 500_000),
    "seen": dt.datetime(2023, 11, 14, 22, 13, 20, 123_000, tzinfo=dt.UTC),
    "seen_us": dt.datetime(2023, 11, 14, 22, 13, 20, 123_456, tzinfo=dt.UTC),
    "kind": "B",
    "ref": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "blob": b"\x01\x02",
    "day": 19700,
    "tags": ["x"],
    "prices": {"gold": Decimal("-0.5")},
}


def avro(record: dict[str, Any], schema: dict[str, Any] = ROW) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def test_an_avro_schema_is_the_connect_schema_avro_data_makes_of_it_and_a_record_its_payload() -> None:
    staged = json.loads(
        AvroConnect(fastavro.parse_schema(ROW)).envelope(
            fastavro.schemaless_reader(io.BytesIO(avro(RECORD)), fastavro.parse_schema(ROW), None)
        )
    )
    fields = {f["field"]: {k: v for k, v in f.items() if k != "field"} for f in staged["schema"]["fields"]}
    assert (staged["schema"]["type"], staged["schema"]["name"]) == ("struct", "shop.public.orders.Value")
    assert fields == {
        "id": {"type": "int32", "optional": False},
        "qty": {"type": "int16", "optional": False},
        "amount": {
            "type": "bytes",
            "optional": True,
            "name": DECIMAL,
            "version": 1,
            "parameters": {"scale": "2", "connect.decimal.precision": "10"},
        },
        "placed": {"type": "int32", "optional": True, "name": DATE, "version": 1},
        "opens": {"type": "int32", "optional": False, "name": TIME, "version": 1},
        "seen": {"type": "int64", "optional": False, "name": TIMESTAMP, "version": 1},
        "seen_us": {"type": "int64", "optional": False},
        "kind": {"type": "string", "optional": False},
        "ref": {"type": "string", "optional": False},
        "blob": {"type": "bytes", "optional": False},
        "day": {"type": "int32", "optional": False, "name": "io.debezium.time.Date"},
        "tags": {"type": "array", "optional": False, "items": {"type": "string", "optional": False}},
        "prices": {
            "type": "map",
            "optional": False,
            "keys": {"type": "string", "optional": False},
            "values": {
                "type": "bytes",
                "optional": False,
                "name": DECIMAL,
                "version": 1,
                "parameters": {"scale": "1", "connect.decimal.precision": "4"},
            },
        },
    }
    assert staged["payload"] == {
        "id": 7,
        "qty": 3,
        "amount": base64.b64encode((1250).to_bytes(2, "big")).decode(),
        "placed": 19700,
        "opens": 3_600_500,
        "seen": 1_700_000_000_123,
        "seen_us": 1_700_000_000_123_456,
        "kind": "B",
        "ref": "12345678-1234-5678-1234-567812345678",
        "blob": "AQI=",
        "day": 19700,
        "tags": ["x"],
        "prices": {"gold": base64.b64encode((-5).to_bytes(1, "big", signed=True)).decode()},
    }


def test_a_union_of_other_branches_has_no_schema_and_its_records_go_schemaless() -> None:
    """(A table is then created from the payloads, as from plain JSON: ``schemaless_payloads``.)"""
    schema = {"type": "record", "name": "R", "fields": [{"name": "v", "type": ["int", "string"]}]}
    connect = AvroConnect(fastavro.parse_schema(schema))
    assert connect.schema is None
    staged = connect.envelope({"v": "x"})
    assert json.loads(staged) == {"schema": None, "payload": {"v": "x"}}
    assert schemaless_payloads([staged, None, b"{}", b'{"schema": {"type": "struct"}, "payload": {}}']) == [{"v": "x"}]


def transformed(config: SinkConfig, values: list[bytes]) -> list[dict[str, Any]]:
    """``values`` decoded as the tasks decode Avro for the transforms, then through the stage."""
    decoder = AvroValueDecoder(json.dumps(ROW))
    n = len(values)
    envelopes: list[bytes | None] = [decoder.to_envelope(v) for v in values]
    chunk = RecordChunk("orders", 0, list(range(n)), [0] * n, [None] * n, envelopes, [None] * n, [None] * n)
    assert config.transforms is not None
    out, _ = RecordTransformer(config, config.transforms).apply(chunk)
    assert out.errors == [None] * n
    return [json.loads(v or b"null") for v in out.values]


def test_avro_through_the_transforms_makes_the_columns_of_its_schema() -> None:
    config = SinkConfig.parse(
        sink_config(
            "orders",
            "db.orders",
            **{
                "value.converter": "io.confluent.connect.avro.AvroConverter",
                "value.converter.avro.schema": json.dumps(ROW),
                "transforms": "drop,lineage",
                "transforms.drop.type": "org.apache.kafka.connect.transforms.ReplaceField$Value",
                "transforms.drop.exclude": "blob,tags,prices,seen_us",
                "transforms.lineage.type": "org.apache.kafka.connect.transforms.InsertField$Value",
                "transforms.lineage.offset.field": "_offset",
            },
        )
    )
    assert config.avro_envelopes
    view = config.sink_view
    assert (view.value_converter, view.schemas_enable, view.avro_schema, view.transforms) == ("json", True, None, None)
    [staged] = transformed(config, [avro(RECORD)])
    columns = schema_from_connect(staged["schema"])
    assert [(f.name, f.type) for f in columns] == [
        ("id", pa.int32()),
        ("qty", pa.int32()),
        ("amount", pa.decimal128(38, 2)),
        ("placed", pa.date32()),
        ("opens", pa.time64("us")),
        ("seen", pa.timestamp("us", tz="UTC")),
        ("kind", pa.string()),
        ("ref", pa.string()),
        ("day", pa.int32()),
        ("_offset", pa.int64()),
    ]
    assert staged["payload"]["_offset"] == 0 and staged["payload"]["placed"] == 19700


def test_without_transforms_avro_is_staged_as_json_as_before() -> None:
    config = SinkConfig.parse(
        sink_config(
            "orders",
            "db.orders",
            **{
                "value.converter": "io.confluent.connect.avro.AvroConverter",
                "value.converter.avro.schema": json.dumps(ROW),
            },
        )
    )
    assert not config.avro_envelopes and config.sink_view is config
