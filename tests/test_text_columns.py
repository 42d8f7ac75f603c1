"""A number, boolean, object or array in a string column is written as its text, as the Iceberg sink's
``RecordConverter.convertString`` writes it, by every way the JSON decoder reads (no servers)."""

from __future__ import annotations

import datetime as dt
import json
import random
from typing import Any

import pyarrow as pa
import pytest

from workers import json_decoder
from workers.json_decoder import DOES_NOT_FIT, JsonDecoder
from workers.json_values import converted_text


@pytest.mark.parametrize(
    ("value", "java"),
    [
        # Kafka Connect's JsonConverter reads an integer as a long (Long.toString) ...
        (42, "42"),
        (-7, "-7"),
        (0, "0"),
        # ... beyond 64 bits, as Jackson's BigIntegerNode.longValue() wraps it ...
        (2**63, "-9223372036854775808"),
        (2**64 + 5, "5"),
        # ... and a number with a fraction or an exponent as a double (Double.toString: its shortest digits,
        # plain from 10^-3 up to 10^7, else d.dddE<n>).
        (1.0, "1.0"),
        (100.0, "100.0"),
        (-0.0, "0.0"),  # (JsonConverter reads it as a BigDecimal, which has no -0)
        (0.001, "0.001"),
        (0.0001, "1.0E-4"),
        (1234567.5, "1234567.5"),
        (12345678.9, "1.23456789E7"),
        (1e20, "1.0E20"),
        (0.1 + 0.2, "0.30000000000000004"),
        # Where one digit reads back, the one- or two-digit decimal nearest the double (Java 19 and later).
        (5e-324, "4.9E-324"),
        (1e-323, "9.9E-324"),
        (2.5e-323, "2.5E-323"),
        (True, "true"),
        (False, "false"),
        # An object or array as Jackson writes it: compact, its doubles as Double.toString, control characters
        # without a short escape as an upper-case \\u escape.
        ({"a": 1, "b": [1.5, None, True, -0.0], "c": {}}, '{"a":1,"b":[1.5,null,true,0.0],"c":{}}'),
        ([1e20, 'x"\\\n\t\x01\x1f/é'], '[1.0E20,"x\\"\\\\\\n\\t\\u0001\\u001F/é"]'),
        ([], "[]"),
        ("text", "text"),
    ],
)
def test_a_value_is_the_text_the_iceberg_sinks_record_converter_writes(value: Any, java: str) -> None:
    assert converted_text(value) == java


STRINGS = pa.schema(
    [
        ("id", pa.int64()),
        ("s", pa.string()),
        ("tags", pa.list_(pa.string())),
        ("address", pa.struct([("city", pa.large_string()), ("floor", pa.int32())])),
        ("rooms", pa.list_(pa.struct([("name", pa.string())]))),
        ("grid", pa.list_(pa.list_(pa.string()))),
    ]
)
# The same columns with a timestamp: Arrow C++'s reader reads them all then.
WITH_A_TIMESTAMP = STRINGS.append(pa.field("at", pa.timestamp("us")))

# Each record, and what the string columns hold for it.
RECORDS: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"id": 1, "s": "plain"}, {"s": "plain"}),
    ({"id": 2, "s": 42}, {"s": "42"}),
    (
        {"id": 3, "s": 2.5e-7, "tags": ["a", 1, None, False, 1e2]},
        {"s": "2.5E-7", "tags": ["a", "1", None, "false", "100.0"]},
    ),
    ({"id": 4, "address": {"city": 69000, "floor": 2}}, {"address": {"city": "69000", "floor": 2}}),
    ({"id": 5, "rooms": [{"name": 1}, None, {"name": "x"}]}, {"rooms": [{"name": "1"}, None, {"name": "x"}]}),
    ({"id": 6, "grid": [[1, "a"], None, [True]]}, {"grid": [["1", "a"], None, ["true"]]}),
    ({"id": 7, "s": {"k": [1, {"n": None}]}}, {"s": '{"k":[1,{"n":null}]}'}),
    ({"id": 8, "s": [1, 2]}, {"s": "[1,2]"}),
    ({"id": 9, "s": 12345678901234567890123}, {"s": "4807115922877859019"}),  # (its low 64 bits)
]


def decoders() -> dict[str, tuple[JsonDecoder, Any]]:
    """Each way the decoder reads, with how a record is written for it."""
    plain = json.dumps

    def enveloped(record: dict[str, Any]) -> str:
        return json.dumps({"schema": {"type": "struct"}, "payload": record})

    # A struct with a time in it is converted by Python (json_values), its text fields too.
    python = pa.schema(
        [("id", pa.int64()), ("s", pa.string()), ("at", pa.struct([("t", pa.time64("us")), ("s", pa.string())]))]
    )
    return {
        "arrow-rs": (JsonDecoder(STRINGS), plain),
        "arrow-cpp": (JsonDecoder(WITH_A_TIMESTAMP), plain),
        "arrow-cpp, schema evolution": (JsonDecoder(WITH_A_TIMESTAMP, evolve=True), plain),
        "envelope": (JsonDecoder(STRINGS, envelope=True), enveloped),
        "python": (JsonDecoder(python), plain),
    }


@pytest.mark.parametrize("way", list(decoders()))
def test_every_way_of_reading_writes_a_value_that_is_no_text_as_its_text(way: str) -> None:
    decoder, written = decoders()[way]
    assert decoder.rust_reader == (not way.startswith("arrow-cpp"))
    names = decoder.data_schema.names
    values = [written(record).encode() for record, _ in RECORDS]
    if way == "python":
        values = [
            written({"id": r["id"], "s": r.get("s"), "at": {"t": "10:15", "s": r.get("s")}}).encode()
            for r, _ in RECORDS
        ]
    decoded = decoder.decode(values, [None] * len(values))
    assert decoded.bad == [] and decoded.positions == list(range(len(RECORDS)))
    for row, (_, texts) in zip(decoded.columns.to_pylist(), RECORDS, strict=True):
        found = {name: row[name] for name in texts if name in names}
        assert found == {name: text for name, text in texts.items() if name in names}
        if way == "python":
            assert row["at"] == {"t": dt.time(10, 15), "s": texts.get("s")}


@pytest.mark.parametrize("cpp_reader", [False, True])
def test_a_chunk_decodes_as_its_records_do_alone_whatever_else_is_bad_beside_them(cpp_reader: bool) -> None:
    rng = random.Random(7)
    for schema in (STRINGS, WITH_A_TIMESTAMP):
        values: list[bytes | None] = []
        for i in range(600):
            record: dict[str, Any] = {"id": i}
            kind = rng.randrange(8)
            if kind == 0:
                record["s"] = rng.choice([i, i / 8, True, None, {"a": i}, [i], f"t{i}"])
            elif kind == 1:
                record["tags"] = [rng.choice([1, "x", None, 2.5, {"b": []}]) for _ in range(3)]
            elif kind == 2:
                record["id"] = "not a number"  # bad, whatever the string columns hold
                record["s"] = i
            elif kind == 3:
                record["address"] = {"city": i, "floor": "high"}  # bad: the floor
            elif kind == 4:
                record["tags"] = {"not": "a list"}  # bad: no list
            elif kind == 5 and "at" in schema.names:
                record["at"] = rng.choice([1_700_000_000_000, "2024-02-29T10:00:00", "someday"])  # ms, text, or bad
            elif kind in (6, 7):
                record["s"] = rng.choice([i, None, "x"])
            text = json.dumps(record)
            if kind == 6:
                # Another field refused first (a number where a struct goes, as its text has it: the record written
                # again has it otherwise), beside a number in a string column.
                text = text[:-1] + ', "address": ' + rng.choice(["1e-3", "10.50", "-0.0"]) + ', "s": 5}'
            elif kind == 7:
                # A duplicate key (Arrow C++ refuses one; the last wins, as in Jackson, once written again).
                text = text[:-1] + ', "s": ' + json.dumps(rng.choice([i, "x", None])) + "}"
            values.append(text.encode())
        decoder = JsonDecoder(schema, cpp_reader=cpp_reader)
        for _ in range(2):  # (a decoder reused gives the same)
            whole = decoder.decode(values, [None] * len(values))
        alone = [JsonDecoder(schema, cpp_reader=cpp_reader).decode([v], [None]) for v in values]
        assert whole.positions == [i for i, d in enumerate(alone) if d.positions]
        assert whole.bad == [(i, d.bad[0][1]) for i, d in enumerate(alone) if d.bad]
        assert whole.columns.to_pylist() == [row for d in alone for row in d.columns.to_pylist()]
        assert 0 < len(whole.bad) < len(values) * 2 // 3
        assert all(reason.startswith(DOES_NOT_FIT) for _, reason in whole.bad)


def test_a_uuid_column_read_as_text_still_refuses_a_number() -> None:
    # RecordConverter.convertUUID takes text only ("Cannot convert to UUID").
    decoder = JsonDecoder(pa.schema([("uid", pa.uuid()), ("s", pa.string())]))
    decoded = decoder.decode([b'{"uid": 42, "s": 1}', b'{"s": 2}'], [None, None])
    assert decoded.positions == [1] and decoded.columns.to_pylist() == [{"uid": None, "s": "2"}]
    ((at, reason),) = decoded.bad
    assert at == 0 and "'uid'" in reason and "expected string got 42" in reason


def test_numbers_into_a_timestamp_and_into_text_in_one_chunk() -> None:
    # A timestamp's number is epoch milliseconds; a string's is its text; both in any order across records.
    schema = pa.schema([("at", pa.timestamp("us", tz="UTC")), ("s", pa.string())])
    values = [
        b'{"at": 1700000000123, "s": 5}',
        b'{"at": "2024-01-01T00:00:00Z", "s": "x"}',
        b'{"at": 1700000000123, "s": "y"}',
        b'{"s": true}',
    ]
    decoded = JsonDecoder(schema).decode(values, [None] * len(values))
    assert decoded.bad == []
    rows = decoded.columns.to_pylist()
    assert [r["s"] for r in rows] == ["5", "x", "y", "true"]
    moment = dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=dt.UTC)
    assert [r["at"] for r in rows] == [moment, dt.datetime(2024, 1, 1, tzinfo=dt.UTC), moment, None]


def test_a_chunk_refused_for_a_number_in_a_uuid_column_is_looked_through_for_text_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # (The reader says the same of it as of a number in a string column; the halves need not look again.)
    looked: list[int] = []
    as_converted = json_decoder._as_converted

    def counted(lines: Any, leaves: Any) -> Any:
        looked.append(len(lines))
        return as_converted(lines, leaves)

    monkeypatch.setattr(json_decoder, "_as_converted", counted)
    values = [b'{"uid": %d, "s": "x"}' % i for i in range(64)]
    decoded = JsonDecoder(pa.schema([("uid", pa.uuid()), ("s", pa.string())])).decode(values, [None] * 64)
    assert len(decoded.bad) == 64 and sum(looked) == 64
