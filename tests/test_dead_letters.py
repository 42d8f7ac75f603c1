"""Dead letters read back from staging with their error context, and the Iceberg dead-letter table's columns."""

from __future__ import annotations

import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from sinks.iceberg.dead_letters import DEAD_LETTER_TABLE_SCHEMA, check_dead_letter_table, table_columns
from sinks.iceberg.writes import arrow_schema
from workers.dead_letters import DEAD_LETTER_SCHEMA, dead_letter_rows
from workers.staging import STAGING_SCHEMA
from workers.writes import BadRecord, WriteRefused

AVRO = "io.confluent.connect.avro.AvroConverter"


def staged(path: Path, topic: str, partition: int, offsets: range) -> Path:
    rows = [
        {
            "topic": topic,
            "partition": partition,
            "offset": o,
            "timestamp": 1_700_000_000_000 + o if o % 2 else -1,
            "key": f"k{o}".encode(),
            "value": f"v{o}".encode(),
            "headers": [{"key": "trace", "value": f"t{o}".encode()}],
            "error": None,
        }
        for o in offsets
    ]
    pq.write_table(pa.Table.from_pylist(rows, schema=STAGING_SCHEMA), path)
    return path


def test_dead_letters_are_read_back_per_partition_in_offset_order_with_kafka_connects_error_context(
    tmp_path: Path,
) -> None:
    files = {
        ("orders", 0): staged(tmp_path / "0.parquet", "orders", 0, range(100, 110)),
        ("orders", 1): staged(tmp_path / "1.parquet", "orders", 1, range(0, 5)),
    }
    bad = [
        BadRecord("orders", 1, 3, "not valid JSON"),
        BadRecord("orders", 0, 107, "expected a long"),
        BadRecord("orders", 0, 101, "not valid JSON"),
        BadRecord("orders", 1, 4, "a tombstone without a key", stage="TASK_PUT", exception_class="x.Refused"),
    ]
    found = dead_letter_rows(bad, files, {"value.converter": AVRO, "connector.class": "hudi"})

    assert [source for source, _ in found] == [("orders", 0), ("orders", 1)]
    assert all(rows.schema == DEAD_LETTER_SCHEMA for _, rows in found)
    first, second = (rows.to_pylist() for _, rows in found)
    assert [r["offset"] for r in first] == [101, 107]
    assert first[0]["value"] == b"v101" and first[0]["key"] == b"k101"
    assert first[0]["headers"] == [{"key": "trace", "value": b"t101"}]
    assert (first[1]["error_stage"], first[1]["error_class_name"]) == ("VALUE_CONVERTER", AVRO)
    assert first[1]["error_exception_class_name"] == "org.apache.kafka.connect.errors.DataException"
    assert first[1]["error_exception_message"] == "expected a long"
    # A record refused by the sink (not its converter) names the connector's class.
    assert [(r["offset"], r["error_stage"], r["error_class_name"]) for r in second] == [
        (3, "VALUE_CONVERTER", AVRO),
        (4, "TASK_PUT", "hudi"),
    ]
    assert second[1]["error_exception_class_name"] == "x.Refused"


def test_the_dead_letter_tables_columns_take_kafka_timestamps_and_none_for_missing_ones(tmp_path: Path) -> None:
    files = {("orders", 0): staged(tmp_path / "0.parquet", "orders", 0, range(0, 4))}
    bad = [BadRecord("orders", 0, o, "bad") for o in (1, 2)]
    [(_, rows)] = dead_letter_rows(bad, files, {})
    columns = table_columns(rows)
    stamps = columns.column("timestamp").to_pylist()
    assert stamps == [datetime.datetime(2023, 11, 14, 22, 13, 20, 1000, tzinfo=datetime.UTC), None]
    assert columns.column("error_class_name").to_pylist() == ["org.apache.kafka.connect.json.JsonConverter"] * 2
    # Every column the table has, in types the table's Arrow schema casts to.
    table_schema = arrow_schema(DEAD_LETTER_TABLE_SCHEMA)
    assert columns.schema.names == table_schema.names
    assert (
        pa.Table.from_arrays([columns.column(f.name).cast(f.type) for f in table_schema], schema=table_schema).num_rows
        == 2
    )


class _Table:
    def __init__(self, schema: Schema) -> None:
        self._schema = schema

    def schema(self) -> Schema:
        return self._schema


def test_an_existing_dead_letter_table_without_the_columns_is_refused_before_anything_is_prepared() -> None:
    check_dead_letter_table("db.dlq", _Table(DEAD_LETTER_TABLE_SCHEMA))
    with pytest.raises(WriteRefused, match=r"db\.dlq .* has no column topic, partition"):
        check_dead_letter_table("db.dlq", _Table(Schema(NestedField(1, "offset", LongType(), required=False))))
