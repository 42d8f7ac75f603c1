"""Columns neither JSON reader reads (UUID, binary, fixed, time, map), converted by the decoder as Iceberg's
sink's RecordConverter converts them (workers.json_values, decision 018)."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import pyarrow as pa
import pytest

from workers.json_decoder import DOES_NOT_FIT, JsonDecoder
from workers.json_values import python_decoded

pytestmark = pytest.mark.unit

TYPED = [
    pa.field("uid", pa.uuid()),
    pa.field("raw", pa.binary()),
    pa.field("digest", pa.binary(4)),
    pa.field("at", pa.time64("us")),
    pa.field("attrs", pa.map_(pa.string(), pa.int64())),
    pa.field("by_number", pa.map_(pa.int32(), pa.string())),
    pa.field("nested", pa.struct([("ids", pa.list_(pa.uuid())), ("n", pa.int32())])),
]
UID = "0f8fad5b-d9cb-469f-a165-70867728950e"


def decode(schema: pa.Schema, *records: Any, envelope: bool = False, evolve: bool = False) -> Any:
    values: list[bytes | None] = [None if r is None else json.dumps(r).encode() for r in records]
    return JsonDecoder(schema, envelope=envelope, evolve=evolve).decode(values, [None] * len(values))


# Arrow-rs's reader takes the other columns of the first schema; Arrow C++'s those of the second (a timestamp).
READERS = {
    "arrow-rs": pa.schema([pa.field("id", pa.int64()), *TYPED]),
    "arrow-cpp": pa.schema([pa.field("id", pa.int64()), pa.field("stamp", pa.timestamp("us", tz="UTC")), *TYPED]),
}


@pytest.mark.parametrize("reader", list(READERS))
def test_each_type_is_converted_from_the_json_iceberg_sinks_take(reader: str) -> None:
    schema = READERS[reader]
    assert JsonDecoder(schema).rust_reader == (reader == "arrow-rs")
    decoded = decode(
        schema,
        {
            "id": 1,
            "uid": UID,
            "raw": "AAEC",
            "digest": "AAAAKg==",
            "at": "10:15:30.25",
            "attrs": {"a": 1, "b": None},
            "by_number": {"7": "seven"},
            "nested": {"ids": [UID, None], "n": "3"},
            "unknown": {"ignored": True},
        },
        {"id": 2, "at": 3_600_000, "stamp": "2024-02-29T10:00:00Z"},
        {"id": 3, "at": "23:59"},
    )
    assert decoded.bad == [] and decoded.positions == [0, 1, 2]
    assert decoded.columns.schema == schema
    first, second, third = decoded.columns.to_pylist()
    assert first["uid"] == uuid.UUID(UID) and first["raw"] == b"\x00\x01\x02" and first["digest"] == b"\x00\x00\x00*"
    assert first["at"] == dt.time(10, 15, 30, 250000)
    assert first["attrs"] == [("a", 1), ("b", None)] and first["by_number"] == [(7, "seven")]
    assert first["nested"] == {"ids": [uuid.UUID(UID), None], "n": 3}
    assert second["at"] == dt.time(1) and second["uid"] is None and second["attrs"] is None
    assert third["at"] == dt.time(23, 59)


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        ({"uid": "not-a-uuid"}, "field uid: 'not-a-uuid' is not a UUID"),
        # (A UUID, binary or fixed column is read as text by Arrow's reader, which refuses other values.)
        ({"uid": 42}, "whilst decoding field 'uid': expected string got 42"),
        ({"nested": {"ids": [42]}}, "field nested.ids[0]: 42 is not a UUID (a UUID is its text)"),
        ({"raw": "not base64!"}, "field raw: 'not base64!' is not base64 text"),
        ({"digest": "AAE="}, "field digest: 'AAE=' is not 4 bytes (it is 2)"),
        ({"at": "24:00"}, "field at: '24:00' is not a time"),
        ({"at": 86_400_000}, "field at: 86400000 is not a time (milliseconds since midnight are 0 to 86399999)"),
        ({"at": True}, "field at: True is not a time"),
        ({"attrs": [1, 2]}, "field attrs: [1, 2] is not an object (a map is an object)"),
        ({"attrs": {"a": "x"}}, "field attrs.a: 'x' is not an integer"),
        ({"by_number": {"seven": "7"}}, "field by_number key: 'seven' is not an integer"),
        ({"nested": {"ids": ["x"]}}, "field nested.ids[0]: 'x' is not a UUID"),
        ({"nested": {"n": 1 << 40}}, "field nested.n: 1099511627776 is not a int32 (out of range)"),
    ],
)
def test_a_value_that_does_not_convert_makes_its_record_bad_naming_the_field(
    record: dict[str, Any], reason: str
) -> None:
    good = {"id": 1, "uid": UID}
    decoded = decode(READERS["arrow-rs"], good, {"id": 2, **record}, good)
    assert decoded.positions == [0, 2]
    ((position, found),) = decoded.bad
    assert position == 1 and found.startswith(f"{DOES_NOT_FIT}: {reason}"), found


def test_an_envelopes_payload_is_converted_and_one_without_a_payload_is_bad() -> None:
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("uid", pa.uuid())])
    decoded = decode(schema, {"schema": {}, "payload": {"id": 1, "uid": UID}}, {"schema": {}}, envelope=True)
    assert decoded.columns.to_pylist() == [{"id": 1, "uid": uuid.UUID(UID)}]
    assert [p for p, _ in decoded.bad] == [1]


def test_with_schema_evolution_a_converted_column_is_not_taken_for_a_new_field() -> None:
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("attrs", pa.map_(pa.string(), pa.int64()))])
    decoded = decode(schema, {"id": 1, "attrs": {"a": 1}, "added": "x"}, evolve=True)
    assert decoded.columns.to_pylist() == [{"id": 1, "attrs": [("a", 1)]}]
    assert decoded.records_schema is not None and decoded.records_schema.names == ["id", "added"]


def test_the_readers_types_inside_a_converted_column_are_refused_naming_the_column() -> None:
    assert python_decoded(pa.map_(pa.string(), pa.timestamp("us"))) and not python_decoded(pa.list_(pa.string()))
    with pytest.raises(ValueError, match=r"column stamps \(map<string, timestamp\[us\]>\): a column of type"):
        JsonDecoder(pa.schema([pa.field("stamps", pa.map_(pa.string(), pa.timestamp("us")))]))


def test_bytes_columns_hold_the_bytes_base64_encodes_not_its_text() -> None:
    """What the files and Hudi sinks write for a Kafka Connect or Avro bytes field: JsonConverter and the
    Avro stage write bytes as base64, and Arrow C++'s reader kept that text's own bytes."""
    decoded = decode(pa.schema([pa.field("blob", pa.binary())]), {"blob": "aGk="})
    assert decoded.columns.column("blob").to_pylist() == [b"hi"]
