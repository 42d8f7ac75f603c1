"""The JSON decoder (workers.json_decoder) against the Iceberg sink's own conversion of a record to a table's
row (iceberg-kafka-connect 1.12.0's RecordConverter, run by tests/integration/java/ConvertRecords.java on the
records Kafka's JsonConverter reads): random tables of every column type the sink writes, and random records
whose fields hold values of the column's type, of other types, or text of them. Each record must be a row of
the same values in both (each of the same type: an int an int, a timestamp the same microsecond), or refused
by both: where the Java sink's converter throws, the record is a bad record here.

Not generated, where the two differ on purpose or the decoder's readers do (docs/protocol.md): a number
beyond what its column holds (the Java sink wraps or saturates it), days outside the years 1-9999, integers
beyond 64 bits, duplicate keys, text and numbers in one list of one record, an array for a map (Kafka
Connect's pairs of a map whose keys are no text), a date alone in a timestamp column and a time with an
offset in one without a zone.
"""

from __future__ import annotations

import base64
import datetime as dt
import itertools
import json
import random
import struct
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from connectors.smt.kafka import float32
from sinks.iceberg.writes import arrow_schema
from tests.java_oracles import run_oracle
from workers.json_decoder import JsonDecoder

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def random_type(rng: random.Random, ids: Iterator[int], depth: int = 0) -> IcebergType:
    kinds = [
        IntegerType(),
        LongType(),
        FloatType(),
        DoubleType(),
        DecimalType(9, 2),
        BooleanType(),
        StringType(),
        DateType(),
        TimeType(),
        TimestampType(),
        TimestamptzType(),
        UUIDType(),
        BinaryType(),
        FixedType(4),
    ]
    roll = rng.random()
    if depth < 1 and roll < 0.1:
        return StructType(
            NestedField(next(ids), "x", random_type(rng, ids, depth + 1), required=False),
            NestedField(next(ids), "y", random_type(rng, ids, depth + 1), required=False),
        )
    if depth < 1 and roll < 0.18:
        return ListType(next(ids), random_type(rng, ids, depth + 1), element_required=False)
    if depth < 1 and roll < 0.22:
        return MapType(next(ids), StringType(), next(ids), random_type(rng, ids, depth + 1), value_required=False)
    return rng.choice(kinds)


def random_schema(rng: random.Random) -> Schema:
    ids = itertools.count(1)  # (field ids, one after another)
    fields = [NestedField(next(ids), "id", LongType(), required=False)]
    for name in ("a", "b", "c", "d"):
        fields.append(NestedField(next(ids), name, random_type(rng, ids), required=False))
    return Schema(*fields)


# The largest magnitude of a number generated for a column of each type: within what the column holds, where the
# Java sink wraps or saturates what it cannot hold (``Number.intValue()``), or makes a date of another era; here
# such a value is a bad record (docs/protocol.md). 2^53: the longs a double holds exactly.
LIMITS = {IntegerType: 2**31 - 1, DateType: 700_000, TimestampType: 2**53, TimestamptzType: 2**53, LongType: 2**62}


def random_scalar(rng: random.Random, limit: int, column: IcebergType | None = None) -> Any:
    """A JSON scalar of any type: numbers within ``limit`` (and within 2^62, the longs a double may be read
    as without a doubt), text of numbers (a tie at a decimal's scale among them), dates, times, UUIDs and
    base64. Into a timestamp ``column``, no date alone; into one without a zone, no time with an offset
    (docs/protocol.md: Arrow C++'s reader reads them otherwise than the Java sink)."""
    timestamp = isinstance(column, TimestampType | TimestamptzType)
    days = ["03:04:05", "03:04:05.123456", "12:00", *([] if timestamp else ["2024-01-02"])]
    moments = ["2024-01-02T03:04:05", "2024-01-02T03:04:05.678Z", "2024-01-02 03:04:05Z"]
    if not isinstance(column, TimestampType):
        moments.append("2024-01-02T03:04:05+02:00")
    numbers = [0, 1_700_000_000_123, 19_000, 0.5, 1.0, -2.25, 1e10, 123.456, 0.1, 3.4e38, 1e300]
    numbers += [rng.randint(-1000, 1000), rng.randint(-(2**40), 2**40), rng.uniform(-(2**31), 2**31)]
    if isinstance(column, DecimalType):
        # (A number with more decimals than the scale is refused here, where Java rounds the double it reads:
        # docs/protocol.md. Its text is rounded in both.)
        numbers = [n for n in numbers if isinstance(n, int) or round(n, column.scale) == n]
    return rng.choice(
        [
            None,
            True,
            False,
            rng.choice([n for n in numbers if abs(n) <= limit]),
            rng.choice(["", "abc", "12", "-7", "1.5", "true", "TRUE", "1e3", " 5", "+5", "0x1p3", "2.345", "-0.125"]),
            rng.choice(moments),
            rng.choice(days),
            rng.choice([str(uuid.UUID(int=rng.getrandbits(128))), base64.b64encode(b"abcd").decode(), "AAECAw=="]),
        ]
    )


def random_json(rng: random.Random, column: IcebergType, depth: int = 0) -> Any:
    """A value for a field of type ``column``: of its type or another, an object or an array now and then (not
    an array for a map: Kafka Connect's pairs of a map whose keys are no text, which the decoder takes)."""
    inner = column
    if isinstance(column, ListType):
        inner = column.element_type
    elif isinstance(column, MapType):
        inner = column.value_type
    roll = rng.random()
    if depth < 2 and roll < 0.12:
        fields = column.fields if isinstance(column, StructType) else ()
        names = [f.name for f in fields] + ["z", "id", "n"]
        types = {f.name: f.field_type for f in fields}
        chosen = rng.sample(names, rng.randint(0, 3))
        return {n: random_json(rng, types.get(n, inner), depth + 1) for n in chosen}
    if depth < 2 and roll < 0.24 and not isinstance(column, MapType):
        # (One kind of value per list: text and numbers in one list of one record are documented apart.)
        item = random_json(rng, inner, depth + 1) if isinstance(column, ListType) else random_scalar(rng, 2**31, inner)
        return [item if rng.random() < 0.8 else None for _ in range(rng.randint(0, 3))]
    return random_scalar(rng, LIMITS.get(type(inner), 2**62), inner)


def random_record(rng: random.Random, schema: Schema, offset: int) -> str:
    record: dict[str, Any] = {"id": offset}
    for f in rng.sample(schema.fields[1:], rng.randint(0, len(schema.fields) - 1)):
        record[f.name] = random_json(rng, f.field_type)
    if rng.random() < 0.2:
        record["extra"] = random_scalar(rng, 2**62)
    return json.dumps(record)


def tagged(value: Any, arrow_type: pa.DataType) -> Any:
    """A decoded value as the harness tags the Java sink's (``ConvertRecords.tagged``)."""
    if value is None:
        return None
    if pa.types.is_struct(arrow_type):
        return {
            arrow_type.field(i).name: tagged(value.get(arrow_type.field(i).name), arrow_type.field(i).type)
            for i in range(arrow_type.num_fields)
        }
    if pa.types.is_map(arrow_type):
        return ["map", [[tagged(k, arrow_type.key_type), tagged(v, arrow_type.item_type)] for k, v in value]]
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return [tagged(item, arrow_type.value_type) for item in value]
    if pa.types.is_integer(arrow_type):
        return ["i", value]
    if pa.types.is_float32(arrow_type):
        return ["f", value]
    if pa.types.is_float64(arrow_type):
        return ["d", struct.unpack("<q", struct.pack("<d", value))[0]]
    if pa.types.is_decimal(arrow_type):
        return ["n", format(value, "f")]
    if pa.types.is_date(arrow_type):
        return ["date", value.isoformat()]
    if pa.types.is_time(arrow_type):
        return ["time", ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond]
    if pa.types.is_timestamp(arrow_type):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
        micros = (moment - EPOCH) // dt.timedelta(microseconds=1)
        return ["tstz" if arrow_type.tz is not None else "ts", micros]
    if isinstance(arrow_type, pa.UuidType) or isinstance(value, uuid.UUID):
        return ["uuid", str(value if isinstance(value, uuid.UUID) else uuid.UUID(bytes=value))]
    if isinstance(value, bytes):
        return ["b", base64.b64encode(value).decode()]
    if isinstance(value, Decimal):
        return ["n", format(value, "f")]
    return value


def same(java: Any, python: Any) -> bool:
    """Whether a tagged Java value is the decoded one: a float as a float, a map's entries in any order (a map
    has none: Java's are a HashMap's)."""
    if isinstance(java, list) and len(java) == 2 and java[0] == "map" and isinstance(python, list):
        if len(python) != 2 or python[0] != "map" or len(java[1]) != len(python[1]):
            return False
        by_key = {json.dumps(key): value for key, value in python[1]}
        return all(json.dumps(key) in by_key and same(value, by_key[json.dumps(key)]) for key, value in java[1])
    if isinstance(java, list) and len(java) == 2 and java[0] == "f" and isinstance(python, list) and python[0] == "f":
        return float32(float(java[1])) == float32(python[1])
    if isinstance(java, dict) and isinstance(python, dict):
        return java.keys() == python.keys() and all(same(java[k], python[k]) for k in java)
    if isinstance(java, list) and isinstance(python, list):
        return len(java) == len(python) and all(same(j, p) for j, p in zip(java, python, strict=True))
    return bool(java == python)


def differences(schema: Schema, records: list[str], result: dict[str, Any]) -> list[str]:
    """How the decoder differs from the Java sink's ``result`` on ``records``, and on each record decoded alone
    from the same record in the chunk (a record's outcome must not depend on its chunk-mates)."""
    columns = arrow_schema(schema)
    decoder = JsonDecoder(columns)
    decoded = decoder.decode([r.encode() for r in records], [None] * len(records))
    bad = dict(decoded.bad)
    rows = dict(zip(decoded.positions, decoded.columns.to_pylist(), strict=True))
    found = []
    for i, text in enumerate(records):
        alone = decoder.decode([text.encode()], [None])
        if (bool(alone.bad), alone.columns.to_pylist()) != (i in bad, [rows[i]] if i in rows else []):
            found.append(
                f"{text}: alone {alone.bad or alone.columns.to_pylist()}, in its chunk {bad.get(i) or rows[i]}"
            )
    for i, (text, java) in enumerate(zip(records, result["rows"], strict=True)):
        if "failed" in java or i in bad:
            if ("failed" in java) != (i in bad):
                found.append(f"{text}: Java {java}, here {bad.get(i) or rows.get(i)}")
            continue
        here = {f.name: tagged(rows[i].get(f.name), f.type) for f in columns}
        if not same(java["row"], here):
            found.append(f"{text}: Java {java['row']}, here {here}")
    return found


@pytest.mark.parametrize("seed", range(4))
def test_records_become_the_rows_the_iceberg_sinks_record_converter_makes(seed: int) -> None:
    rng = random.Random(seed)
    schemas = [random_schema(rng) for _ in range(40)]
    jobs = [
        {"schema": json.loads(s.model_dump_json()), "records": [random_record(rng, s, i) for i in range(25)]}
        for s in schemas
    ]
    results = run_oracle("ConvertRecords.java", jobs)
    found = [
        f"{schema}\n  {difference}"
        for schema, job, result in zip(schemas, jobs, results, strict=True)
        for difference in differences(schema, job["records"], result)
    ]
    assert not found, f"{len(found)} difference(s):\n" + "\n".join(found[:15])
