"""The Arrow data plane's decoding and file splitting, without servers."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator, Sequence
from decimal import Decimal

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import (
    DateType,
    DoubleType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

from connectors.config.transforms import PartitionField
from sinks.iceberg.arrow_writer import split_by_partition
from sinks.iceberg.settings import TableTarget
from sinks.iceberg.tables import iceberg_schema, missing_fields, partition_spec, partition_values_json
from sinks.iceberg.writes import TargetTable, Unshaped, Values, arrow_schema, shaped
from workers.json_decoder import DOES_NOT_FIT, NOT_AN_OBJECT, JsonDecoder
from workers.writes import SAMPLES

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("user", pa.large_string()),
        ("amount", pa.float64()),
        ("day", pa.date32()),
        ("at", pa.timestamp("us", tz="UTC")),
        ("tags", pa.large_list(pa.large_string())),
        ("address", pa.struct([("city", pa.large_string())])),
    ]
)


# SCHEMA's table, as the catalog has it.
TABLE_OF_SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "user", StringType(), required=False),
    NestedField(3, "amount", DoubleType(), required=False),
    NestedField(4, "day", DateType(), required=False),
    NestedField(5, "at", TimestamptzType(), required=False),
    NestedField(6, "tags", ListType(7, StringType(), element_required=False), required=False),
    NestedField(8, "address", StructType(NestedField(9, "city", StringType(), required=False)), required=False),
)


def record(i: int, **extra: object) -> bytes:
    return json.dumps({"id": i, "user": f"u{i}", "amount": i / 4, **extra}).encode()


# What auto-create makes from plain JSON: arrow-rs's reader decodes it.
PLAIN_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("user", pa.string()),
        ("amount", pa.float64()),
        ("ok", pa.bool_()),
        ("n", pa.int32()),
        ("tags", pa.list_(pa.field("element", pa.string()))),
        ("address", pa.struct([("city", pa.string()), ("floor", pa.int64())])),
    ]
)


def decode(values: list[bytes | None], errors: list[str | None] | None = None, schema: pa.Schema = SCHEMA):  # type: ignore[no-untyped-def]
    return JsonDecoder(schema).decode(values, errors or [None] * len(values))


def test_the_data_plane_writes_the_types_the_json_reader_makes() -> None:
    # pyiceberg maps strings and lists to Arrow's 64-bit-offset types; Parquet
    # stores both alike, and casting to them would copy every decoded string.
    from pyiceberg.schema import Schema
    from pyiceberg.types import BinaryType, ListType, LongType, NestedField, StringType, StructType

    schema = arrow_schema(
        Schema(
            NestedField(1, "id", LongType(), required=False),
            NestedField(2, "user", StringType(), required=False),
            NestedField(3, "tags", ListType(5, StringType(), element_required=False), required=False),
            NestedField(4, "address", StructType(NestedField(6, "city", StringType(), required=False)), required=False),
            NestedField(7, "raw", BinaryType(), required=False),
        )
    )
    assert schema.types == [
        pa.int64(),
        pa.string(),
        pa.list_(pa.field("element", pa.string())),
        pa.struct([("city", pa.string())]),
        pa.binary(),
    ]
    decoder = JsonDecoder(pa.schema([f for f in schema if f.name != "raw"]))
    assert not decoder.needs_cast
    decoded = decoder.decode([record(1, tags=["a"], address={"city": "Lyon"})], [None])
    assert decoded.columns.schema == decoder.data_schema


def test_objects_become_columns_of_the_table_types() -> None:
    decoded = decode(
        [
            record(1, day="2024-02-29", at="2024-02-29T10:00:00Z", tags=["a"], address={"city": "Lyon", "zip": 1}),
            record(2, unknown="ignored"),
        ]
    )
    assert decoded.positions == [0, 1] and not decoded.bad
    rows = decoded.columns.to_pylist()
    assert rows[0]["day"] == dt.date(2024, 2, 29)
    assert rows[0]["at"] == dt.datetime(2024, 2, 29, 10, tzinfo=dt.UTC)
    assert rows[0]["address"] == {"city": "Lyon"}
    assert rows[1] == {"id": 2, "user": "u2", "amount": 0.5, "day": None, "at": None, "tags": None, "address": None}
    assert decoded.columns.schema == SCHEMA


@pytest.mark.parametrize("schema", [SCHEMA, PLAIN_SCHEMA], ids=["arrow-cpp", "arrow-rs"])
def test_each_bad_record_is_isolated_with_its_reason_and_the_rest_decode(schema: pa.Schema) -> None:
    assert JsonDecoder(schema).rust_reader == (schema is PLAIN_SCHEMA)
    values: list[bytes | None] = [record(i) for i in range(1000)]
    values[3] = b"null"  # the reader must never see a bare null (it crashes on it)
    values[10] = b"not json"
    values[500] = b'{"id": "forty-two"}'  # does not fit the column type
    values[501] = b"[1, 2]"
    values[700] = b'{"id": 1}{"id": 2}'  # two values in one record
    values[800] = None  # tombstone: skipped, not bad
    values[900] = b'{"id": 9, "user": "\xff"}'  # not UTF-8
    values[950] = b'{"id": 9, "user": "u9"'  # truncated
    decoded = decode(values, schema=schema)
    bad = dict(decoded.bad)
    assert sorted(bad) == [3, 10, 500, 501, 700, 900, 950]
    assert bad[3] == f"{NOT_AN_OBJECT} (it is null)"
    assert bad[501] == f"{NOT_AN_OBJECT} (it is list)"
    assert all(bad[i].startswith(DOES_NOT_FIT) for i in (10, 500, 700, 900, 950))
    assert decoded.skipped == 1
    good = [i for i in range(1000) if i not in bad and i != 800]
    assert decoded.positions == good
    assert decoded.columns.column("id").to_pylist() == good


@pytest.mark.parametrize("schema", [SCHEMA, PLAIN_SCHEMA], ids=["arrow-cpp", "arrow-rs"])
def test_a_nul_character_is_read_into_text_and_a_record_that_does_not_fit_with_one_is_bad(schema: pa.Schema) -> None:
    """arrow-rs's error quoting a NUL once aborted the process (pyo3-arrow hands errors on as C text): one such
    record crashed its task at every try. Strings keep their NUL, raw or escaped, at any depth; an escaped
    backslash before u0000 stays text."""
    values: list[bytes | None] = [
        b'{"id": "\\u0000"}',  # does not fit, and arrow-rs's reason quotes the NUL
        b'{"id": 1, "user": "a\\u0000b\\\\u0000c", "tags": ["x\\u0000", null], "address": {"city": "\\u0000"}}',
        b'{"id": 2, "user"\x00: "u"}',  # a raw NUL where JSON has none
        b'{"id": 3, "user": "raw\x00nul"}',  # (JSON has no raw control character: Arrow C++ refuses it)
        b'{"id": 4, "user": "\\ue000\\u0000"}',  # (the character that would stand in for NUL, in the data)
        record(5),
    ]
    decoded = decode(values, schema=schema)
    lenient = schema is PLAIN_SCHEMA  # (arrow-rs takes a raw control character in a string)
    assert sorted(dict(decoded.bad)) == ([0, 2] if lenient else [0, 2, 3])
    assert "\x00" not in "".join(reason for _, reason in decoded.bad)
    rows = {r["id"]: r for r in decoded.columns.to_pylist()}
    assert rows[1]["user"] == "a\x00b\\u0000c" and rows[1]["tags"] == ["x\x00", None]
    assert rows[1]["address"]["city"] == "\x00"
    assert rows[4]["user"] == "\ue000\x00" and rows[5]["user"] == "u5"
    assert not lenient or rows[3]["user"] == "raw\x00nul"


def test_the_character_standing_in_for_nul_is_none_of_the_columns_names_and_a_name_with_a_nul_is_read_whole() -> None:
    stand_in = JsonDecoder(pa.schema([("id", pa.int64()), ("\ue000", pa.string())]))
    assert stand_in.decode([b'{"id": 1, "\\u0000": "v"}'], [None]).columns.to_pylist() == [{"id": 1, "\ue000": None}]
    decoded = stand_in.decode([b'{"id": 2, "\\u0000": "v", "\\ue000": "w"}'], [None])
    assert decoded.columns.to_pylist() == [{"id": 2, "\ue000": "w"}]
    # (arro3 hands names on as C text, which ends at a NUL: such a schema is read by Arrow C++'s reader.)
    named = JsonDecoder(pa.schema([("id", pa.int64()), ("a\x00", pa.int64())]))
    assert not named.rust_reader
    assert named.decode([b'{"id": 1, "a": 3, "a\\u0000": 4}'], [None]).columns.to_pylist() == [{"id": 1, "a\x00": 4}]


@pytest.mark.parametrize("schema", [SCHEMA, PLAIN_SCHEMA], ids=["arrow-cpp", "arrow-rs"])
def test_pretty_printed_and_padded_objects_decode(schema: pa.Schema) -> None:
    pretty = json.dumps({"id": 7, "user": "seven"}, indent=2).encode()
    decoded = decode([record(1), pretty, b"  " + record(3) + b"\n", record(4)], schema=schema)
    assert not decoded.bad
    assert decoded.columns.column("id").to_pylist() == [1, 7, 3, 4]


def test_plain_json_into_the_columns_auto_create_makes_is_read_by_arrow_rs() -> None:
    decoder = JsonDecoder(PLAIN_SCHEMA)
    assert decoder.rust_reader
    decoded = decoder.decode(
        [
            record(1, ok=True, n=3, tags=["a", None], address={"city": "Lyon", "zip": "69001"}, extra={"x": [1]}),
            record(2),
            b'{"id": 3, "user": "\\u00e9\\ud83d\\ude00", "address": {"floor": null}}',
        ],
        [None] * 3,
    )
    assert not decoded.bad and decoded.positions == [0, 1, 2]
    assert decoded.columns.schema == PLAIN_SCHEMA
    rows = decoded.columns.to_pylist()
    assert rows[0] == {
        "id": 1,
        "user": "u1",
        "amount": 0.25,
        "ok": True,
        "n": 3,
        "tags": ["a", None],
        "address": {"city": "Lyon", "floor": None},  # fields the table lacks are ignored
    }
    assert rows[1] == {"id": 2, "user": "u2", "amount": 0.5, "ok": None, "n": None, "tags": None, "address": None}
    assert rows[2]["user"] == "\u00e9\U0001f600" and rows[2]["address"] == {"city": None, "floor": None}


def test_arrow_rs_converts_numbers_as_the_iceberg_sink_does_and_refuses_what_does_not_fit() -> None:
    # The Iceberg sink's RecordConverter: Number.longValue() truncates toward
    # zero, Long.parseLong / Double.parseDouble take numeric strings.
    fits = [
        b'{"id": 1.9, "n": -2.7}',
        b'{"id": "12", "amount": "2.5"}',
        b'{"amount": 3}',
        # A number, boolean, object or array in a string column is its text, as RecordConverter.convertString
        # writes it: Java's toString (a double's), Jackson's JSON.
        b'{"user": 12, "tags": [1.0, true, {"a": [2, 1e20]}], "address": {"city": -0.5}}',
        # Text in a boolean column is Boolean.parseBoolean's; in a number column, Double.parseDouble's (trimmed).
        b'{"ok": "yes", "amount": " 1e3 "}',
        b'{"ok": "TRUE"}',
    ]
    misfits = {
        b'{"id": 1e20}': "'id'",  # beyond int64 (the Iceberg sink would saturate)
        b'{"n": 3000000000}': "'n'",  # beyond int32
        b'{"id": "abc"}': "'id'",
        b'{"id": "1.5"}': "'id'",  # Long.parseLong refuses it too
        b'{"id": true}': "'id'",
        b'{"ok": 1}': "'ok'",  # (RecordConverter.convertBoolean refuses a number)
        b'{"amount": NaN}': "'N'",  # not JSON
        b'{"tags": "a"}': "'tags'",
        b'{"address": 5}': "'address'",
    }
    decoded = decode([*fits, *misfits], schema=PLAIN_SCHEMA)
    rows = decoded.columns.to_pylist()
    assert [(r["id"], r["n"], r["amount"]) for r in rows[:3]] == [(1, -2, None), (12, None, 2.5), (None, None, 3.0)]
    assert (rows[3]["user"], rows[3]["tags"], rows[3]["address"]) == (
        "12",
        ["1.0", "true", '{"a":[2,1.0E20]}'],
        {"city": "-0.5", "floor": None},
    )
    assert [(r["ok"], r["amount"]) for r in rows[4:]] == [(False, 1000.0), (True, None)]
    assert decoded.positions == [0, 1, 2, 3, 4, 5]
    bad = dict(decoded.bad)
    assert sorted(bad) == list(range(6, 6 + len(misfits)))
    for i, field_named in enumerate(misfits.values(), start=6):
        assert bad[i].startswith(DOES_NOT_FIT) and field_named in bad[i], bad[i]


@pytest.mark.parametrize(
    "column", [pa.list_(pa.uuid()), pa.struct([("x", pa.uuid())]), pa.map_(pa.string(), pa.uuid())]
)
def test_a_chunk_of_bad_records_only_is_decoded_into_no_rows_beside_a_nested_uuid(column: pa.DataType) -> None:
    # (Arrow makes no empty array of an extension type within another: the decoder must not need one.)
    decoded = JsonDecoder(pa.schema([("id", pa.int64()), ("u", column)])).decode([b'{"id": "x"}', b"{"], [None, None])
    assert decoded.columns.num_rows == 0 and [i for i, _ in decoded.bad] == [0, 1]


def test_a_decimal_is_rounded_half_up_from_its_text_and_read_exactly_from_a_number_whatever_its_chunk() -> None:
    # (RecordConverter rounds half up to the scale: BigDecimal.setScale(scale, HALF_UP). A number is read from
    # its text, exactly, alone or beside a record whose value is converted; in a record whose own value is
    # converted, from the double its text is, as RecordConverter reads it: BigDecimal.valueOf(double).)
    schema = pa.schema([("price", pa.decimal128(9, 2)), ("exact", pa.decimal128(38, 18)), ("s", pa.string())])
    records = [b'{"exact": 0.123456789012345678}', b'{"price": "-2.345", "exact": 0.123456789012345678}']
    for chunk in (records, [*records, b'{"price": "0.125", "s": 5}']):
        rows = JsonDecoder(schema).decode(chunk, [None] * len(chunk)).columns.to_pylist()
        assert [(r["price"], r["exact"]) for r in rows] == [
            (None, Decimal("0.123456789012345678")),
            (Decimal("-2.35"), Decimal("0.123456789012345680")),
            *([(Decimal("0.13"), None)] if len(chunk) > 2 else []),
        ]


def test_dates_timestamps_decimals_and_schema_evolution_are_read_by_arrow_cpp() -> None:
    # arrow-rs takes a number into a timestamp column in the column's unit
    # (microseconds); the Iceberg sink reads milliseconds, as Arrow C++'s reads here.
    assert not JsonDecoder(SCHEMA).rust_reader
    assert not JsonDecoder(pa.schema([("price", pa.decimal128(10, 2))])).rust_reader
    assert not JsonDecoder(PLAIN_SCHEMA, evolve=True).rust_reader
    decoded = decode([record(1, at=1_700_000_000_000), record(2, at="2023-11-14T22:13:20Z")])
    assert not decoded.bad
    at = dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.UTC)
    assert decoded.columns.column("at").to_pylist() == [at, at]


TIMES = pa.schema(
    [
        ("id", pa.int64()),
        ("at", pa.timestamp("us", tz="UTC")),
        ("local", pa.timestamp("us")),
        ("day", pa.date32()),
        ("cdc", pa.struct([("op", pa.string()), ("ts", pa.timestamp("us", tz="UTC"))])),
        ("stamps", pa.list_(pa.timestamp("ns", tz="UTC"))),
    ]
)


def test_a_json_number_fills_a_timestamp_as_epoch_milliseconds_and_a_date_as_days_as_the_iceberg_sink_reads_it() -> (
    None
):
    """(RecordConverter: a Number into a timestamp or timestamptz is ``millis * 1000`` microseconds, into a date
    ``dateFromDays``: the Java sink's tables type Debezium's ``_cdc.ts`` and InsertField's timestamp so.)"""
    ms = 1_700_000_000_123
    at = dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=dt.UTC)
    values: list[bytes | None] = [
        b'{"id": 1, "at": %d, "local": %d, "day": 19000, "cdc": {"op": "I", "ts": %d}, "stamps": [%d, null]}'
        % (ms, ms, ms, ms),
        b'{"id": 2, "at": "2023-11-14T22:13:20.123Z", "day": "2022-01-08", "cdc": {"ts": "2023-11-14T22:13:20.123Z"}}',
        b'{"id": 3, "at": -1, "day": -1}',
    ]
    decoder = JsonDecoder(TIMES)
    for _ in range(2):  # (the second time, the decoder begins with numbers where the last chunk had them)
        for chunk in (values, values[::-1], values[:1], values[1:2]):
            decoded = decoder.decode(chunk, [None] * len(chunk))
            assert not decoded.bad, decoded.bad
    decoded = decoder.decode(values, [None] * 3)
    rows = decoded.columns.to_pylist()
    assert [r["at"] for r in rows] == [at, at, dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=dt.UTC)]
    assert rows[0]["local"] == at.replace(tzinfo=None)
    assert [r["day"] for r in rows] == [dt.date(2022, 1, 8), dt.date(2022, 1, 8), dt.date(1969, 12, 31)]
    assert rows[0]["cdc"] == {"op": "I", "ts": at} and rows[1]["cdc"] == {"op": None, "ts": at}
    assert rows[0]["stamps"] == [at, None]


@pytest.mark.parametrize(
    ("value", "field_named"),
    [
        (b'{"at": true}', "/at"),
        (b'{"at": 1e300}', "/at"),  # (read as a double: beyond the longs a double holds exactly)
        (b'{"day": 3000000000.5}', "/day"),
        (b'{"at": 9223372036854776}', "/at"),  # beyond the range of microseconds
        (b'{"day": 3000000000}', "day"),  # beyond a date's days
        (b'{"cdc": {"ts": [1]}}', "/cdc/ts"),
    ],
)
def test_a_number_a_timestamp_or_date_cannot_hold_is_a_bad_record_alone(value: bytes, field_named: str) -> None:
    good = b'{"id": 7, "at": 1700000000123}'
    decoder = JsonDecoder(TIMES)
    for order in ([good, value, good], [value, good]):
        decoded = decoder.decode(order, [None] * len(order))
        assert [p for p, _ in decoded.bad] == [order.index(value)]
        assert field_named in decoded.bad[0][1], decoded.bad[0][1]
    # (The reason is the same whichever way the decoder last read the field.)
    fresh = JsonDecoder(TIMES).decode([value], [None])
    assert decoded.bad[0][1] == fresh.bad[0][1]


def test_a_number_with_a_fraction_or_an_exponent_is_truncated_toward_zero_as_javas_long_value_truncates_it() -> None:
    """(RecordConverter: ``((Number) value).longValue()`` milliseconds, ``intValue()`` days; JsonConverter reads
    such a number as a double. Python's ``time.time() * 1000`` writes one.)"""
    at = dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=dt.UTC)
    fractions = [
        b'{"id": 1, "at": 1700000000123.999, "day": 19000.9, "cdc": {"ts": 1.700000000123e12}, "stamps": [1e3]}',
        b'{"id": 2, "at": -1.5, "day": -0.5, "stamps": [0.9, null]}',
    ]
    others = [b'{"id": 3, "at": 1700000000123, "day": 19000}', b'{"id": 4, "at": "2023-11-14T22:13:20.123Z"}']
    decoder = JsonDecoder(TIMES)
    for chunk in (fractions, others, fractions + others[:1], others[:1], fractions[::-1]):
        decoded = decoder.decode(chunk, [None] * len(chunk))
        assert not decoded.bad, decoded.bad
    rows = {r["id"]: r for r in JsonDecoder(TIMES).decode(fractions + others, [None] * 4).columns.to_pylist()}
    assert rows[1]["at"] == at and rows[1]["day"] == dt.date(2022, 1, 8) and rows[1]["cdc"]["ts"] == at
    assert rows[1]["stamps"] == [dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.UTC)]
    assert rows[2]["at"] == dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=dt.UTC)
    assert rows[2]["day"] == dt.date(1970, 1, 1) and rows[2]["stamps"] == [dt.datetime(1970, 1, 1, tzinfo=dt.UTC), None]
    assert rows[3]["at"] == rows[4]["at"] == at
    # A long beyond the ones a double holds exactly, after a chunk read as doubles, is still read as a long.
    beyond = b'{"id": 5, "at": %d}' % (2**53 + 1)
    decoded = decoder.decode([beyond], [None])
    assert not decoded.bad and decoded.columns.column("at").cast(pa.int64()).to_pylist() == [(2**53 + 1) * 1000]


def test_a_table_whose_only_time_column_is_a_date_takes_days_as_the_others_do() -> None:
    # (Debezium's Date is days since the epoch. Arrow C++'s reader reads such a table: arrow-rs would refuse them.)
    decoder = JsonDecoder(pa.schema([("id", pa.int64()), ("day", pa.date32())]))
    assert not decoder.rust_reader
    decoded = decoder.decode(
        [b'{"id": 1, "day": 19000}', b'{"id": 2, "day": 19000.7}', b'{"day": "2022-01-08"}'], [None] * 3
    )
    assert not decoded.bad and decoded.columns.column("day").to_pylist() == [dt.date(2022, 1, 8)] * 3


def test_with_schema_evolution_a_struct_with_a_new_field_and_a_number_in_its_timestamp_reads() -> None:
    schema = pa.schema([("k", pa.struct([("t", pa.timestamp("ms")), ("n", pa.int64())]))])
    decoder = JsonDecoder(schema, evolve=True)
    values = [
        b'{"k": {"t": 1.5, "new": 1}}',
        b'{"k": {"t": 2, "n": 3, "new": 2}}',
        b'{"k": {"t": "1970-01-01T00:00:01"}}',
    ]
    for chunk in (values, values[:1], values[1:2]):
        decoded = decoder.decode(chunk, [None] * len(chunk))
        assert not decoded.bad, decoded.bad
    rows = decoder.decode(values, [None] * 3).columns.column("k").to_pylist()
    assert [r["t"] for r in rows] == [
        dt.datetime(1970, 1, 1, 0, 0, 0, 1000),
        dt.datetime(1970, 1, 1, 0, 0, 0, 2000),
        dt.datetime(1970, 1, 1, 0, 0, 1),
    ]
    assert decoder.decode(values[:1], [None]).records_schema.field("k").type.get_field_index("new") >= 0


def test_a_record_larger_than_a_parse_block_decodes() -> None:
    big = record(2, user="x" * (3 << 20))
    decoded = decode([record(1), big, record(3)])
    assert not decoded.bad and decoded.columns.column("id").to_pylist() == [1, 2, 3]


def test_errors_found_before_decoding_are_bad_records() -> None:
    decoded = decode([record(1), record(2)], [None, "Avro: truncated"])
    assert decoded.bad == [(1, "Avro: truncated")] and decoded.positions == [0]


ROWS_SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "user", StringType(), required=False),
    NestedField(3, "at", TimestamptzType(), required=False),
)


def target(*fields: PartitionField) -> TargetTable:
    spec = partition_spec(ROWS_SCHEMA, fields)
    return TargetTable(TableTarget("db.t", tuple(fields), None), ROWS_SCHEMA, "/lake/db/t", spec)


def rows() -> pa.Table:
    at = [
        dt.datetime(2024, 1, 31, 23, 30, tzinfo=dt.UTC),
        dt.datetime(2024, 1, 31, 23, 45, tzinfo=dt.UTC),
        dt.datetime(2024, 2, 1, 0, 15, tzinfo=dt.UTC),
        dt.datetime(2024, 2, 2, 1, 0, tzinfo=dt.UTC),
        None,
    ]
    return pa.table(
        {
            "id": pa.array([-1, 5, 12, 19, 25], pa.int64()),
            "user": pa.array(["ann", "bob", "ann", "bob", "ann"], pa.string()),
            "at": pa.array(at, pa.timestamp("us", tz="UTC")),
        }
    )


# 2024-01-31 is day 19753 since the epoch; January 2024 is month 648; hours
# are since the epoch too; a null source value is a null partition value.
@pytest.mark.parametrize(
    ("spec", "partitions"),
    [
        ((PartitionField("identity", "user"),), {("ann",), ("bob",)}),
        ((PartitionField("day", "at"),), {(19753,), (19754,), (19755,), (None,)}),
        ((PartitionField("hour", "at"),), {(474095,), (474096,), (474121,), (None,)}),
        ((PartitionField("month", "at"),), {(648,), (649,), (None,)}),
        ((PartitionField("year", "at"),), {(54,), (None,)}),
        # Iceberg truncates integers towards -infinity: -1 is in [-10, 0).
        ((PartitionField("truncate", "id", 10),), {(-10,), (0,), (10,), (20,)}),
        ((PartitionField("truncate", "user", 1),), {("a",), ("b",)}),
        ((PartitionField("identity", "user"), PartitionField("day", "at")), None),
        ((PartitionField("bucket", "id", 4),), None),
        ((PartitionField("bucket", "user", 16), PartitionField("bucket", "id", 2)), None),
        ((), {()}),
    ],
)
def test_rows_are_split_one_partition_per_file_with_icebergs_partition_values(
    spec: tuple[PartitionField, ...], partitions: set[tuple[object, ...]] | None
) -> None:
    table = target(*spec)
    split = split_by_partition(rows(), table)
    assert sum(part.num_rows for _, part in split) == rows().num_rows
    if partitions is not None:
        assert {key for key, _ in split} == partitions
    for key, part in split:
        for pf, value in zip(table.spec.fields, key, strict=True):
            source = ROWS_SCHEMA.find_field(pf.source_id)
            # Each row's own partition value, from pyiceberg's row-at-a-time
            # transform (Python's mmh3 for buckets, not the Arrow kernels).
            row_values = {
                pf.transform.transform(source.field_type)(_internal(v)) if v is not None else None
                for v in part.column(source.name).to_pylist()
            }
            assert row_values == {value}


def _internal(value: object) -> object:
    return int(value.timestamp() * 1_000_000) if isinstance(value, dt.datetime) else value


def test_buckets_are_the_iceberg_specs_hash() -> None:
    # The spec's reference values: hash(34L) = 2017239379, hash("iceberg") = 1210000089.
    split = split_by_partition(
        pa.table({"id": pa.array([34], pa.int64()), "user": ["iceberg"], "at": pa.nulls(1, pa.timestamp("us", "UTC"))}),
        target(PartitionField("bucket", "id", 1000), PartitionField("bucket", "user", 1000)),
    )
    assert [key for key, _ in split] == [(2017239379 % 1000, 1210000089 % 1000)]


def test_a_files_partition_travels_as_json_stamped_with_its_spec() -> None:
    spec = partition_spec(ROWS_SCHEMA, [PartitionField("bucket", "id", 4), PartitionField("identity", "user")])
    text = partition_values_json(spec, (3, "ann"))
    assert json.loads(text) == {"spec-id": 0, "values": [3, "ann"]}


def test_a_transform_that_cannot_partition_its_column_is_refused_when_the_table_is_created() -> None:
    with pytest.raises(ValueError, match="column user has type string, which day cannot partition"):
        partition_spec(ROWS_SCHEMA, [PartitionField("day", "user")])


def test_with_schema_evolution_new_fields_are_reported_typed_as_auto_create_types_them() -> None:
    values: list[bytes | None] = [
        record(1, address={"city": "Oslo", "zip": "0150"}, country="NO", score=3, seen="2024-05-01T10:00:00"),
        record(2, score=2.5, labels=["a", "b"], nothing=None, empty=[]),
        record(3, day="2024-05-01"),
    ]
    decoded = JsonDecoder(SCHEMA, evolve=True).decode(values, [None] * 3)
    # The table's columns, as without evolution; the new fields wait for the table to have them.
    assert decoded.columns.schema == SCHEMA and decoded.positions == [0, 1, 2]
    assert decoded.columns.column("address").to_pylist() == [{"city": "Oslo"}, None, None]
    assert decoded.records_schema is not None
    additions = missing_fields(TABLE_OF_SCHEMA, iceberg_schema(decoded.records_schema))
    assert additions is not None
    added = {f.name: f for f in additions.fields}
    # Null in every record so far ("nothing", an empty list): no type to give it yet.
    assert set(added) == {"address", "country", "score", "seen", "labels"}
    assert [(f.name, f.field_type) for f in added["address"].field_type.fields] == [("zip", StringType())]
    assert added["country"].field_type == StringType() and added["seen"].field_type == StringType()
    assert added["score"].field_type == DoubleType()  # 3 and 2.5: widened, as auto-create does
    assert isinstance(added["labels"].field_type, ListType)
    assert added["labels"].field_type.element_type == StringType()
    assert all(not f.required for f in additions.fields)


def test_without_schema_evolution_new_fields_are_ignored() -> None:
    decoded = decode([record(1, country="NO", address={"city": "Oslo", "zip": "0150"})])
    assert decoded.records_schema is None and decoded.columns.schema == SCHEMA
    assert decoded.columns.column("address").to_pylist() == [{"city": "Oslo"}]


def test_only_the_fields_a_table_lacks_are_added_nested_ones_under_their_struct() -> None:
    table = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "address", StructType(NestedField(3, "city", StringType(), required=False)), required=False),
    )
    records = Schema(
        NestedField(1, "id", StringType(), required=False),  # another type: the table's stays
        NestedField(
            2,
            "address",
            StructType(
                NestedField(3, "city", StringType(), required=False), NestedField(4, "zip", LongType(), required=False)
            ),
            required=False,
        ),
        NestedField(5, "country", StringType(), required=False),
    )
    missing = missing_fields(table, records)
    assert missing is not None and sorted(missing.column_names) == ["address", "address.zip", "country"]
    assert missing_fields(records, table) is None


def _shape(samples: Callable[[], Sequence[bytes | None]]) -> bytes:
    """A table's shape: the first value that is a JSON object, as a missing table takes its columns."""
    for value in samples():
        if value is not None and value.startswith(b"{"):
            return value
    raise Unshaped("cannot create the table: no record so far is a JSON object to take its columns from")


def test_a_missing_tables_shape_comes_from_the_first_batch_that_has_it_and_no_batch_after_it_is_read() -> None:
    read: list[int] = []

    def batches() -> Iterator[Values]:
        for n in range(6):
            read.append(n)
            values: list[bytes | None] = [b"not json"] * SAMPLES
            if n == 3:
                values[-1] = b'{"id": 3}'
            yield values, [None] * SAMPLES

    assert shaped(batches(), _shape) == b'{"id": 3}'
    assert read == [0, 1, 2, 3]  # (the first batch made the first SAMPLES good values; 4 and 5 never read)


def test_no_batch_is_read_when_the_tables_exist_and_records_staged_with_an_error_never_shape_a_table() -> None:
    def unread() -> Iterator[Values]:
        raise AssertionError("read")
        yield  # pragma: no cover

    assert shaped(unread(), lambda samples: "the tables exist") == "the tables exist"
    # An object staged with its error (a transform failed on it) is the record as it came: never a shape.
    staged = ([b'{"id": 1}', b"[]"], ["Cast failed on field id", None])
    with pytest.raises(Unshaped, match="no record so far is a JSON object"):
        shaped([staged], _shape)


def test_a_batch_past_the_first_samples_is_tried_whole_and_none_shaping_gives_the_last_reason() -> None:
    chunk: list[bytes | None] = [b"1"] * (SAMPLES + 10)
    chunk[SAMPLES + 5] = b'{"id": 505}'
    assert shaped([(chunk, [None] * len(chunk))], _shape) == b'{"id": 505}'
    bad: list[bytes | None] = [b"1"] * (SAMPLES * 2)
    with pytest.raises(Unshaped):
        shaped([(bad, [None] * len(bad))], _shape)


def test_a_chunk_whose_records_give_a_required_timestamp_numbers_and_text_reads_whole_as_halves() -> None:
    """(A part read with the field as a number, and one read as text, are put together: the reader's nullability
    is kept either way.)"""
    schema = pa.schema(
        [pa.field("b", pa.timestamp("ms"), nullable=False), ("s", pa.struct([("a", pa.timestamp("us"))]))]
    )
    decoder = JsonDecoder(schema)
    values: list[bytes | None] = [
        b'{"b": 0, "s": {"a": 1}}',
        b'{"b": "2020-01-01T00:00:00", "s": {"a": "2020-01-01T00:00:00"}}',
    ]
    for chunk in (values, values[::-1], values * 3):
        decoded = decoder.decode(chunk, [None] * len(chunk))
        assert not decoded.bad and decoded.columns.num_rows == len(chunk)
