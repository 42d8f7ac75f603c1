"""Columns neither JSON reader reads (UUID, binary, fixed, time, map), converted by the decoder as Iceberg's
sink's RecordConverter converts them (workers.json_values, decision 018)."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from workers.json_decoder import DOES_NOT_FIT, JsonDecoder
from workers.schemas import plain

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


def test_with_schema_evolution_new_fields_inside_a_converted_column_are_reported_under_its_struct() -> None:
    # (A struct holding a binary is converted by Python, not read by Arrow's reader, which would have typed
    # its new fields: the decoder types them, as auto-create types new fields.)
    inner = pa.struct([("digest", pa.binary()), ("where", pa.struct([("city", pa.string())]))])
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("blob", inner)])
    decoded = decode(
        schema,
        {"id": 1, "blob": {"digest": "AAE=", "size": 2, "where": {"city": "Oslo", "zip": "0150"}}},
        {"id": 2, "blob": {"digest": "AAI=", "size": 2.5, "none": None}},
        evolve=True,
    )
    assert decoded.columns.to_pylist() == [
        {"id": 1, "blob": {"digest": b"\x00\x01", "where": {"city": "Oslo"}}},
        {"id": 2, "blob": {"digest": b"\x00\x02", "where": None}},
    ]
    assert decoded.records_schema is not None
    blob = decoded.records_schema.field("blob").type
    assert [(f.name, f.type) for f in blob] == [
        ("size", pa.float64()),  # 2 and 2.5: widened
        ("where", pa.struct([pa.field("zip", pa.string())])),
    ]
    # Once the table has them, the records' values are in them.
    widened = pa.schema(
        [
            pa.field("id", pa.int64()),
            pa.field(
                "blob",
                pa.struct(
                    [
                        ("digest", pa.binary()),
                        ("where", pa.struct([("city", pa.string()), ("zip", pa.string())])),
                        ("size", pa.float64()),
                    ]
                ),
            ),
        ]
    )
    again = decode(widened, {"id": 1, "blob": {"digest": "AAE=", "size": 2, "where": {"zip": "0150"}}}, evolve=True)
    assert again.columns.to_pylist() == [
        {"id": 1, "blob": {"digest": b"\x00\x01", "where": {"city": None, "zip": "0150"}, "size": 2.0}}
    ]
    assert again.records_schema is None


def test_with_schema_evolution_the_new_fields_of_every_chunk_are_reported() -> None:
    # A bad record between them parses the records around it apart: each part's new fields are reported.
    schema = pa.schema([pa.field("id", pa.int64())])
    decoded = decode(schema, {"id": 1, "a": "x"}, {"id": "not a number"}, {"id": 3, "b": 2}, evolve=True)
    assert decoded.positions == [0, 2] and [p for p, _ in decoded.bad] == [1]
    assert decoded.records_schema is not None
    assert [(f.name, f.type) for f in decoded.records_schema] == [
        ("id", pa.int64()),
        ("a", pa.string()),
        ("b", pa.int64()),
    ]


def test_dates_timestamps_and_decimals_inside_a_converted_column_are_taken_as_iceberg_takes_them() -> None:
    inner = pa.struct(
        [
            ("day", pa.date32()),
            ("at", pa.timestamp("us", tz="UTC")),
            ("local", pa.timestamp("us")),
            ("price", pa.decimal128(6, 2)),
            ("blob", pa.binary()),
        ]
    )
    schema = pa.schema([pa.field("c", inner), pa.field("m", pa.map_(pa.string(), pa.decimal128(4, 1)))])
    decoded = decode(
        schema,
        {
            "c": {"day": "2024-02-29", "at": "2024-02-29 10:00:00+01:00", "local": "2024-02-29T10:00:00+01:00"},
            "m": {"a": 1.25, "b": "2.35"},
        },
        {"c": {"day": 19782, "at": 1_709_200_800_000, "local": 0, "price": "1234.565", "blob": "AA"}},
        {"c": {"price": 12345.6}},
        {"c": {"at": "yesterday"}},
    )
    assert decoded.positions == [0, 1]
    first, second = decoded.columns.to_pylist()
    assert first["c"]["day"] == dt.date(2024, 2, 29)
    assert first["c"]["at"] == dt.datetime(2024, 2, 29, 9, tzinfo=dt.UTC)
    assert first["c"]["local"] == dt.datetime(2024, 2, 29, 10)  # (the text's own time: toLocalDateTime)
    assert first["m"] == [("a", Decimal("1.3")), ("b", Decimal("2.4"))]  # (half up)
    assert second["c"] == {
        "day": dt.date(2024, 2, 29),
        "at": dt.datetime(2024, 2, 29, 10, tzinfo=dt.UTC),
        "local": dt.datetime(1970, 1, 1),
        "price": Decimal("1234.57"),
        "blob": b"\x00",
    }
    assert [(p, r.split(": ", 1)[1]) for p, r in decoded.bad] == [
        (2, "field c.price: 12345.6 is not a decimal128(6, 2) (too many digits)"),
        (3, "field c.at: 'yesterday' is not a timestamp (ISO-8601 text, or milliseconds since 1970-01-01T00:00Z)"),
    ]


def test_a_required_value_missing_in_a_converted_column_makes_its_record_bad() -> None:
    schema = pa.schema(
        [
            pa.field("id", pa.int64()),
            pa.field("at", pa.time64("us"), nullable=False),
            pa.field("s", pa.struct([pa.field("b", pa.binary(), nullable=False)])),
            pa.field("m", pa.map_(pa.string(), pa.field("value", pa.int64(), nullable=False))),
        ]
    )
    decoded = decode(
        schema, {"id": 1, "at": "10:00"}, {"id": 2}, {"id": 3, "at": 0, "s": {}}, {"id": 4, "at": 0, "m": {"a": None}}
    )
    assert decoded.positions == [0]
    assert [r.split(": ", 1)[1] for _, r in decoded.bad] == [
        "field at: no value, and the column is required",
        "field s.b: no value, and the column is required",
        "field m.a: no value, and the column is required",
    ]


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("0f8fad5b-d9cb-469f-a165-70867728950e", UID),
        ("0F8FAD5B-D9CB-469F-A165-70867728950E", UID),
        ("1-2-3-4-5", "00000001-0002-0003-0004-000000000005"),  # (as java.util.UUID.fromString reads it)
        ("0f8fad5bd9cb469fa16570867728950e", None),
        ("{0f8fad5b-d9cb-469f-a165-70867728950e}", None),
        ("urn:uuid:0f8fad5b-d9cb-469f-a165-70867728950e", None),
        ("0f8fad5b-d9cb-469f-a165-70867728950e\n", None),
    ],
)
def test_uuids_are_read_as_javas_uuid_fromstring_reads_them(text: str, found: str | None) -> None:
    decoded = decode(pa.schema([pa.field("uid", pa.uuid())]), {"uid": text})
    if found is None:
        assert decoded.positions == [] and "is not a UUID" in decoded.bad[0][1]
    else:
        assert decoded.columns.column("uid").to_pylist() == [uuid.UUID(found)]


@pytest.mark.parametrize(
    ("value", "found"),
    [
        ("AAE=", b"\x00\x01"),
        ("AAE", b"\x00\x01"),  # (Java's basic decoder needs no padding)
        ("YQ", b"a"),
        ("A", None),
        ("AA E=", None),
    ],
)
def test_binary_is_base64_as_javas_basic_decoder_reads_it(value: str, found: bytes | None) -> None:
    decoded = decode(pa.schema([pa.field("raw", pa.binary())]), {"raw": value})
    assert decoded.columns.column("raw").to_pylist() == ([found] if found is not None else [])


@pytest.mark.parametrize(
    ("value", "found"),
    [
        ("10:15", dt.time(10, 15)),
        ("10:15:30.", dt.time(10, 15, 30)),
        ("10:15:30.123456789", dt.time(10, 15, 30, 123456)),
        ("10:15\n", None),
        ("10:1\u0665", None),  # (an Arabic-Indic five: not a digit to Java's parser)
        ("7:00", None),
    ],
)
def test_times_are_read_as_javas_localtime_parse_reads_them(value: str, found: dt.time | None) -> None:
    decoded = decode(pa.schema([pa.field("at", pa.time64("us"))]), {"at": value})
    assert decoded.columns.column("at").to_pylist() == ([found] if found is not None else [])


def test_maps_take_connects_key_value_pairs_and_the_last_of_equal_keys() -> None:
    schema = pa.schema([pa.field("m", pa.map_(pa.int32(), pa.string()))])
    # (Kafka Connect's JsonConverter writes a map whose keys are not text as [key, value] pairs.)
    decoded = decode(schema, {"schema": {}, "payload": {"m": [[1, "a"], [2, "b"]]}}, envelope=True)
    assert decoded.columns.column("m").to_pylist() == [[(1, "a"), (2, "b")]]
    decoded = decode(schema, {"m": {"1": "a", "01": "b", "2": "c"}})
    assert decoded.columns.column("m").to_pylist() == [[(1, "b"), (2, "c")]]


def test_with_schema_evolution_a_converted_columns_values_may_differ_in_json_type() -> None:
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("at", pa.list_(pa.time64("us")))])
    decoded = decode(schema, {"id": 1, "at": ["10:00", 3_600_000]}, {"id": 2, "at": [0]}, evolve=True)
    assert decoded.bad == []
    assert decoded.columns.column("at").to_pylist() == [[dt.time(10), dt.time(1)], [dt.time(0)]]


def test_bytes_columns_hold_the_bytes_base64_encodes_not_its_text() -> None:
    """What the files and Hudi sinks write for a Kafka Connect or Avro bytes field: JsonConverter and the
    Avro stage write bytes as base64, and Arrow C++'s reader kept that text's own bytes."""
    decoded = decode(pa.schema([pa.field("blob", pa.binary())]), {"blob": "aGk="})
    assert decoded.columns.column("blob").to_pylist() == [b"hi"]


def test_with_schema_evolution_a_bad_records_new_fields_are_not_reported() -> None:
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("uid", pa.uuid())])
    decoded = decode(schema, {"id": 1, "a": "x"}, {"id": 2, "uid": "not-a-uuid", "b": 1}, evolve=True)
    assert decoded.positions == [0] and [p for p, _ in decoded.bad] == [1]
    assert decoded.records_schema is not None and "a" in decoded.records_schema.names
    assert "b" not in decoded.records_schema.names


@pytest.mark.parametrize(
    ("first", "second", "found"),
    [
        # Null (or an empty list) in every record of one part: the other part's values type the field.
        ({"a": None}, {"a": 5}, "int64"),
        ({"a": []}, {"a": [1]}, "list<element: int64>"),
        ({"a": {"x": None}}, {"a": {"x": 2}}, "struct<x: int64>"),
        # An integer in one part, a double in the other: a double, as when they are read at once.
        ({"a": 1}, {"a": 2.5}, "double"),
    ],
)
def test_with_schema_evolution_parts_parsed_apart_type_their_new_fields_as_one_read_would(
    first: dict[str, Any], second: dict[str, Any], found: str
) -> None:
    schema = pa.schema([pa.field("id", pa.int64())])
    together = decode(schema, {"id": 1, **first}, {"id": 3, **second}, evolve=True)
    apart = decode(schema, {"id": 1, **first}, {"id": "bad"}, {"id": 3, **second}, evolve=True)
    for decoded in (together, apart):
        assert decoded.records_schema is not None
        assert str(plain(decoded.records_schema).field("a").type) == found
