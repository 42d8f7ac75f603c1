"""Dead letters read back from staging with their error context, and the Iceberg dead-letter table's columns."""

from __future__ import annotations

import datetime
import json
import uuid
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import IntegerType, LongType, NestedField, StringType

from connectors.config import SinkConfig
from sinks.files.writer import PartitionFiles
from sinks.hudi.writer import PartitionRows
from sinks.iceberg.arrow_writer import ArrowPartitionWriter
from sinks.iceberg.dead_letters import DEAD_LETTER_TABLE_SCHEMA, check_dead_letter_table, table_columns
from sinks.iceberg.settings import TableTarget
from sinks.iceberg.writes import TargetTable, arrow_schema
from tests.conftest import sink_config
from workers.dead_letters import (
    DEAD_LETTER_SCHEMA,
    SINK_TASK,
    ConsumedRecord,
    DeadLetterSink,
    StagedForm,
    dead_letter_rows,
    error_context,
    offset_runs,
)
from workers.staging import STAGING_SCHEMA, RecordChunk, StagedPartition
from workers.transformed import KEY_NOT_JSON, RecordTransformer
from workers.writes import TASK_PUT, BadRecord, WriteRefused, bad_of_outcome, bad_outcome

AVRO = "io.confluent.connect.avro.AvroConverter"
# The Avro converter, with the schema it needs without a registry.
AVRO_CONVERTER = {
    "value.converter": AVRO,
    "value.converter.avro.schema": '{"type": "record", "name": "r", "fields": [{"name": "id", "type": "long"}]}',
}
# A connector's dead-letter topic: its tasks stage headers for it.
DEAD_LETTER_TOPIC = {"errors.tolerance": "all", "errors.deadletterqueue.topic.name": "dlq"}

TP = tuple[str, int]


class Topic:
    """The source topic that dead letters staged in a changed form are read again from: its records as consumed,
    by partition and offset, and what each fetch asked of it."""

    def __init__(self, records: Mapping[TP, Mapping[int, ConsumedRecord]] | None = None) -> None:
        self.records = records or {}
        self.asked: list[dict[TP, list[int]]] = []

    def fetch(self, wanted: Mapping[TP, Collection[int]]) -> dict[TP, dict[int, ConsumedRecord]]:
        self.asked.append({tp: sorted(offsets) for tp, offsets in wanted.items()})
        held = {tp: self.records.get(tp, {}) for tp in wanted}
        return {tp: {o: held[tp][o] for o in offsets if o in held[tp]} for tp, offsets in wanted.items()}


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
    # (Avro values are staged decoded, so the records are asked of their topic; it no longer has them.)
    topic = Topic()
    found = dead_letter_rows(bad, files, sink_config("orders", "db.t", **AVRO_CONVERTER, **DEAD_LETTER_TOPIC), topic)
    assert topic.asked == [{("orders", 0): [101, 107], ("orders", 1): [3, 4]}]

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
        (4, "TASK_PUT", SINK_TASK),
    ]
    assert second[1]["error_exception_class_name"] == "x.Refused"


def test_the_dead_letter_tables_columns_take_kafka_timestamps_and_none_for_missing_ones(tmp_path: Path) -> None:
    files = {("orders", 0): staged(tmp_path / "0.parquet", "orders", 0, range(0, 4))}
    bad = [BadRecord("orders", 0, o, "bad") for o in (1, 2)]
    [(_, rows)] = dead_letter_rows(bad, files, sink_config("orders", "db.t", **DEAD_LETTER_TOPIC), Topic())
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


# The error context of each kind of bad record: which stage failed and the class of what failed in it, as
# Kafka Connect's ``__connect.errors.*`` headers and the dead-letter table's columns name them.

CAST = "org.apache.kafka.connect.transforms.Cast$Value"
JSON = "org.apache.kafka.connect.json.JsonConverter"
STRING = "org.apache.kafka.connect.storage.StringConverter"
DATA_EXCEPTION = "org.apache.kafka.connect.errors.DataException"


def upsert_config(**overrides: str) -> SinkConfig:
    """An upsert connector whose transforms cast ``amount`` (the type named by its short alias, as Kafka
    Connect takes it) and key each record by its ``id`` (a step that reads the keys, as their converter
    gives them)."""
    return SinkConfig.parse(
        sink_config(
            "orders",
            "db.t",
            **{
                "key.converter": STRING,
                "value.converter": JSON,
                "value.converter.schemas.enable": "false",
                "transforms": "cast,tokey",
                "transforms.cast.type": "Cast$Value",
                "transforms.cast.spec": "amount:int32",
                "transforms.tokey.type": "org.apache.kafka.connect.transforms.ValueToKey",
                "transforms.tokey.fields": "id",
                "iceberg.tables.upsert-mode-enabled": "true",
                "iceberg.tables.default-id-columns": "id",
                "iceberg.tables.cdc-field": "op",
                **overrides,
            },
        )
    )


# Offset: (key, value). What each record is, and so which stage fails on it.
RECORDS: dict[int, tuple[bytes, bytes]] = {
    10: (b"1", b'{"id": 1, "amount": "7", "op": "I"}'),  # written
    11: (b"2", b'{"id": 2, "amount": "abc", "op": "I"}'),  # the cast fails: TRANSFORMATION
    12: (b"3", b"{not json"),  # the value converter fails: VALUE_CONVERTER
    13: (b"4", b'{"id": "four", "amount": 1, "op": "I"}'),  # a field that does not fit its column: VALUE_CONVERTER
    14: (b"5", b'{"amount": 1, "op": "I"}'),  # no key for the upsert: TASK_PUT
    15: (b"6", b'{"id": 6, "amount": 1, "op": "x"}'),  # an operation no upsert knows: TASK_PUT
    16: (b"{oops", b'{"id": 16, "amount": 1, "op": "I"}'),  # not JSON: KEY_CONVERTER with the JSON key converter
}


def through_the_iceberg_sink(tmp_path: Path, config: SinkConfig) -> tuple[list[BadRecord], Path]:
    """RECORDS through the tasks' transform stage and the Iceberg sink's Arrow writer: its bad records, and
    the file it keeps them in as consumed (for the dead-letter topic)."""
    assert config.transforms is not None
    n = len(RECORDS)
    chunk = RecordChunk(
        "orders",
        0,
        list(RECORDS),
        [1_700_000_000_000] * n,
        [k for k, _ in RECORDS.values()],
        [v for _, v in RECORDS.values()],
        [[("trace", b"t")]] * n,
        [None] * n,
    )
    transformed, dropped = RecordTransformer(config, config.transforms).apply(chunk)
    assert dropped == 0
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "amount", IntegerType(), required=False),
        NestedField(3, "op", StringType(), required=False),
        identifier_field_ids=[1],
    )
    table = TargetTable(TableTarget("db.t", (), None, ("id",)), schema, str(tmp_path / "lake" / "t"))
    writer = ArrowPartitionWriter(
        config.sink_view,
        lambda _name, _samples: table,
        lambda _name, _additions: table,
        uuid.uuid4(),
        "orders",
        0,
        10,
        tmp_path,
    )
    writer.write(transformed)
    staged = writer.finish(StagedPartition("orders", 0, 10, 10 + n, n, None, None))
    assert staged.path is not None
    return staged.bad, staged.path


def consumed(offsets: Collection[int] = RECORDS) -> Topic:
    """The topic RECORDS were consumed from (those at ``offsets``), each as through_the_iceberg_sink stages it
    before its transforms."""
    return Topic(
        {
            ("orders", 0): {
                o: ConsumedRecord(1_700_000_000_000, *RECORDS[o], [{"key": "trace", "value": b"t"}]) for o in offsets
            }
        }
    )


def contexts(bad: list[BadRecord], rejects: Path, config: Mapping[str, str]) -> dict[int, dict[str, Any]]:
    [(_, rows)] = dead_letter_rows(bad, {("orders", 0): rejects}, config, consumed())
    return {r["offset"]: r for r in rows.to_pylist()}


def test_each_bad_record_names_the_stage_that_failed_and_the_class_of_what_failed(tmp_path: Path) -> None:
    config = upsert_config()
    bad, rejects = through_the_iceberg_sink(tmp_path, config)
    found = contexts(bad, rejects, config.raw)
    assert {o: (r["error_stage"], r["error_class_name"]) for o, r in found.items()} == {
        # The transformation's configured class, by its full name (its type named it by its short alias).
        11: ("TRANSFORMATION", CAST),
        12: ("VALUE_CONVERTER", JSON),
        13: ("VALUE_CONVERTER", JSON),
        # The sink's own refusals of records it decoded: its put, the connector's class.
        14: ("TASK_PUT", SINK_TASK),
        15: ("TASK_PUT", SINK_TASK),
    }
    assert {r["error_exception_class_name"] for r in found.values()} == {DATA_EXCEPTION}
    assert found[11]["error_exception_message"].startswith("transforms.cast (Cast$Value): field amount")
    assert "no operation an upsert knows" in found[15]["error_exception_message"]
    assert "an identifier column of upsert mode" in found[14]["error_exception_message"]
    # As consumed: the key and value before the transforms, and the headers.
    assert (found[11]["key"], found[11]["value"]) == RECORDS[11]
    assert found[11]["headers"] == [{"key": "trace", "value": b"t"}]
    # The dead-letter table's columns say the same.
    [(_, rows)] = dead_letter_rows(bad, {("orders", 0): rejects}, config.raw, consumed())
    assert table_columns(rows).column("error_stage").to_pylist() == [found[o]["error_stage"] for o in sorted(found)]


def test_a_key_its_converter_cannot_read_names_the_key_converter(tmp_path: Path) -> None:
    config = upsert_config(**{"key.converter": JSON})
    bad, rejects = through_the_iceberg_sink(tmp_path, config)
    found = contexts(bad, rejects, config.raw)
    assert (found[16]["error_stage"], found[16]["error_class_name"]) == ("KEY_CONVERTER", JSON)
    assert found[16]["error_exception_class_name"] == DATA_EXCEPTION
    assert found[16]["error_exception_message"].startswith("the key is not JSON")
    assert (found[11]["error_stage"], found[14]["error_stage"]) == ("TRANSFORMATION", "TASK_PUT")
    # Without a converter in the config, Kafka Connect's default: the JSON converter.
    [key_failure] = [b for b in bad if b.offset == 16]
    assert error_context({}, key_failure) == ("KEY_CONVERTER", JSON, DATA_EXCEPTION)
    assert error_context({}, BadRecord("orders", 0, 1, "value is not valid JSON")).class_name == JSON


def test_a_transformations_failure_is_told_by_its_configured_alias_and_class() -> None:
    config = upsert_config().raw
    failed = BadRecord("orders", 0, 1, "transforms.cast (Cast$Value): field amount: cannot cast 'abc' to int32")
    assert error_context(config, failed) == ("TRANSFORMATION", CAST, DATA_EXCEPTION)
    # A reason of that form whose alias or class the config does not have is no transformation's failure.
    for reason in ("transforms.other (Cast$Value): x", "transforms.cast (ValueToKey): x"):
        assert error_context(config, BadRecord("orders", 0, 1, reason)).stage == "VALUE_CONVERTER"


# Which dead letters are read again from their topic: those the tasks staged in another form than they consumed.

REFUSED = BadRecord("orders", 0, 1, "no value for id, an identifier column: the row has no key", TASK_PUT)
NOT_AVRO = "not a valid Avro record for the configured schema: bad"


@pytest.mark.parametrize(
    ("overrides", "as_consumed"),
    [
        ({}, True),
        ({"value.converter": STRING}, True),
        ({"value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter", "transforms": ""}, True),
        ({"value.converter": JSON, "value.converter.schemas.enable": "true"}, True),
        (AVRO_CONVERTER, False),
        ({**AVRO_CONVERTER, "value.converter": "avro"}, False),
        (
            {
                "value.converter": "io.confluent.connect.json.JsonSchemaConverter",
                "value.converter.schema.registry.url": "http://registry:8081",
            },
            False,
        ),
        ({"transforms": "cast", "transforms.cast.type": CAST, "transforms.cast.spec": "amount:int32"}, False),
    ],
)
def test_only_a_converter_that_decodes_or_transforms_make_the_staged_records_differ_from_the_consumed_ones(
    overrides: dict[str, str], as_consumed: bool
) -> None:
    form = StagedForm.of(sink_config("orders", "db.t", **DEAD_LETTER_TOPIC, **overrides))
    assert form.as_consumed is as_consumed
    # A record the sink refused came through the converter and the transforms.
    assert form.is_original(REFUSED, None) is as_consumed


def test_a_connector_without_a_dead_letter_topic_stages_no_headers_so_its_dead_letter_table_reads_them_again() -> None:
    def stages_headers(**config: str) -> bool:
        return SinkConfig.parse(sink_config("orders", "db.t", **config)).stages_headers

    assert stages_headers(**DEAD_LETTER_TOPIC)
    assert not stages_headers(**{"errors.tolerance": "all", "errors.deadletterqueue.topic.name": " "})
    assert stages_headers(
        **{"transforms": "cast", "transforms.cast.type": CAST, "transforms.cast.spec": "amount:int32"}
    )
    table_only = StagedForm.of(
        sink_config("orders", "db.t", **{"errors.tolerance": "all", "errors.deadletterqueue.table.name": "db.dlq"})
    )
    assert not table_only.as_consumed
    # Even a record staged as consumed, with its error: its headers were not staged.
    assert not table_only.is_original(BadRecord("orders", 0, 1, NOT_AVRO), NOT_AVRO)
    assert not table_only.is_original(REFUSED, None)


def test_a_record_staged_with_its_error_is_as_it_came_to_the_step_that_failed() -> None:
    cast = {"transforms": "cast", "transforms.cast.type": CAST, "transforms.cast.spec": "amount:int32"}
    cast_failed = BadRecord("orders", 0, 1, "transforms.cast (Cast$Value): field amount: cannot cast 'abc' to int32")
    key_failed = BadRecord("orders", 0, 1, f"{KEY_NOT_JSON}bad")
    transformed = StagedForm.of(sink_config("orders", "db.t", **cast))
    assert transformed.is_original(cast_failed, cast_failed.reason)
    assert transformed.is_original(key_failed, key_failed.reason)
    assert not transformed.is_original(REFUSED, None)
    # An Avro value the converter could not decode is staged as consumed; one it decoded, whose transformation
    # then failed, is staged as the JSON it became.
    decoded = StagedForm.of(sink_config("orders", "db.t", **AVRO_CONVERTER, **cast))
    assert decoded.is_original(BadRecord("orders", 0, 1, NOT_AVRO), NOT_AVRO)
    assert not decoded.is_original(cast_failed, cast_failed.reason)
    assert not decoded.is_original(key_failed, key_failed.reason)


def test_dead_letters_staged_transformed_are_read_again_from_their_topic_as_consumed(tmp_path: Path) -> None:
    config = upsert_config()
    bad, rejects = through_the_iceberg_sink(tmp_path, config)
    topic = consumed()
    [(_, rows)] = dead_letter_rows(bad, {("orders", 0): rejects}, config.raw, topic)
    # One fetch, of the records that came through the transforms only: the others were staged as consumed.
    assert topic.asked == [{("orders", 0): [13, 14, 15]}]
    found = {r["offset"]: r for r in rows.to_pylist()}
    assert {o: (r["key"], r["value"]) for o, r in found.items()} == {o: RECORDS[o] for o in found}
    assert {o: (r["timestamp"], r["headers"]) for o, r in found.items()} == {
        o: (1_700_000_000_000, [{"key": "trace", "value": b"t"}]) for o in found
    }


def test_a_dead_letter_its_topic_no_longer_has_goes_as_staged_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = upsert_config()
    bad, rejects = through_the_iceberg_sink(tmp_path, config)
    [(_, rows)] = dead_letter_rows(bad, {("orders", 0): rejects}, config.raw, consumed(set(RECORDS) - {14}))
    found = {r["offset"]: r for r in rows.to_pylist()}
    assert set(found) == {11, 12, 13, 14, 15}
    # As the transforms left it (keyed by its id, which it lacks), not lost.
    assert (json.loads(found[14]["key"]), json.loads(found[14]["value"])) == ({"id": None}, {"amount": 1, "op": "I"})
    assert found[14]["error_stage"] == "TASK_PUT"
    assert (found[15]["key"], found[15]["value"]) == RECORDS[15]
    assert "orders/0 at offsets 14 could not be read again" in caplog.text


def test_a_connector_that_stages_records_as_consumed_reads_no_dead_letter_again(tmp_path: Path) -> None:
    files = {("orders", 0): staged(tmp_path / "0.parquet", "orders", 0, range(0, 4))}
    refused = [BadRecord("orders", 0, o, "no key", TASK_PUT) for o in (1, 2)]
    topic = Topic()
    config = sink_config("orders", "db.t", **{"value.converter": STRING, **DEAD_LETTER_TOPIC})
    [(_, rows)] = dead_letter_rows(refused, files, config, topic)
    assert topic.asked == []
    assert rows.column("value").to_pylist() == [b"v1", b"v2"]


class _Producer:
    def __init__(self) -> None:
        self.produced: list[dict[str, Any]] = []

    def produce(self, topic: str, **record: Any) -> None:
        self.produced.append(record)

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        return 0


def test_the_dead_letter_topics_headers_name_the_stage_and_class(tmp_path: Path) -> None:
    config = upsert_config(**{"key.converter": JSON})
    bad, rejects = through_the_iceberg_sink(tmp_path, config)
    sink = DeadLetterSink.__new__(DeadLetterSink)  # (no broker: its producer is a fake)
    sink.topic, sink.connector, sink.task_index, sink.context_headers = "dlq", "orders-sink", 0, True
    sink.config, sink.originals = config.raw, consumed()
    sink._producer = producer = _Producer()  # type: ignore[assignment]
    assert sink.send(bad, {("orders", 0): rejects}) == len(bad)
    headers = {int(h["__connect.errors.offset"]): h for h in (dict(r["headers"]) for r in producer.produced)}
    stages = {
        offset: tuple(
            h[f"__connect.errors.{name}"].decode() for name in ("stage", "class.name", "exception.class.name")
        )
        for offset, h in headers.items()
    }
    assert stages == {
        11: ("TRANSFORMATION", CAST, DATA_EXCEPTION),
        12: ("VALUE_CONVERTER", JSON, DATA_EXCEPTION),
        13: ("VALUE_CONVERTER", JSON, DATA_EXCEPTION),
        14: ("TASK_PUT", SINK_TASK, DATA_EXCEPTION),
        15: ("TASK_PUT", SINK_TASK, DATA_EXCEPTION),
        16: ("KEY_CONVERTER", JSON, DATA_EXCEPTION),
    }
    assert headers[11]["trace"] == b"t"
    # (A Java stack trace's first line: the exception's class and message.)
    assert all(
        h["__connect.errors.exception.stacktrace"]
        == h["__connect.errors.exception.class.name"] + b": " + h["__connect.errors.exception.message"]
        for h in headers.values()
    )
    # Every one as consumed, the sink's refusals too: their keys before the transforms keyed them by their id.
    keys = {int(dict(r["headers"])["__connect.errors.offset"]): r["key"] for r in producer.produced}
    assert keys == {o: RECORDS[o][0] for o in keys}


def test_hudi_and_files_refusals_are_the_sinks_put_and_travel_with_the_outcome(tmp_path: Path) -> None:
    hudi = SinkConfig.parse(
        {
            "connector.class": "hudi",
            "topics": "orders",
            "target.base.path": str(tmp_path / "hudi"),
            "target.table.name": "orders",
            "hoodie.datasource.write.recordkey.field": "id",
            "hoodie.datasource.write.precombine.field": "ts",
            "sinkadmin.writer": "arrow",
            "transforms": "cast",
            "transforms.cast.type": CAST,
            "transforms.cast.spec": "ts:int64",
        }
    )
    rows = PartitionRows(hudi, hudi.settings, "orders", 0, ())
    values = [b'{"id": 1, "ts": 1}', b'{"ts": 2}', b"{not json", b'{"id": 4, "ts": 4}', None]
    errors: list[str | None] = [None, None, None, "transforms.cast (Cast$Value): no", None]
    rows.write([0, 1, 2, 3, 4], [b"1", b"2", b"3", b"4", None], values, errors)
    bad = sorted(rows.bad, key=lambda b: b.offset)
    assert [(b.offset, b.stage) for b in bad] == [(1, "TASK_PUT"), (2, None), (3, None), (4, "TASK_PUT")]
    # Through a decode's outcome (from Spark's Python workers) as they were.
    assert bad_of_outcome("orders", 0, bad_outcome(rows.bad)) == rows.bad
    assert [error_context(hudi.raw, b)[:2] for b in bad] == [
        ("TASK_PUT", SINK_TASK),  # no record key
        ("VALUE_CONVERTER", JSON),  # not JSON
        ("TRANSFORMATION", CAST),  # staged with its transformation's failure
        ("TASK_PUT", SINK_TASK),  # a tombstone without a key
    ]

    files = SinkConfig.parse(
        {
            "connector.class": "files",
            "topics": "events",
            "store.url": str(tmp_path / "files"),
            "format.class": "parquet",
            "partitioner.class": "field",
            "partition.field.name": "region",
            "flush.size": "10",
        }
    )
    placed = PartitionFiles(files, files.settings, uuid.uuid4(), "events", 0)
    placed.write([0, 1, 2], [0, 0, 0], [b'{"region": "eu"}', b'{"region": null}', b"[1"], [None] * 3)
    placed.close_all()
    assert [(b.offset, b.stage) for b in placed.bad] == [(1, "TASK_PUT"), (2, None)]


def test_originals_are_read_in_runs_so_bad_records_far_apart_cost_two_short_reads() -> None:
    assert offset_runs([], 1000) == []
    assert offset_runs([5_000_000, 7, 12, 12, 1_010, 2_011], 1000) == [[7, 12, 1_010], [2_011], [5_000_000]]
