"""Converters (JSON envelope, Avro, string), Kafka metadata columns, and
rebuilding a lost ledger from the tables' snapshot summaries."""

from __future__ import annotations

import io
import json
import struct

import fastavro
import pytest
from django.core.management import call_command

from connectors import actions
from connectors.models import Commit, CommitState, PartitionOffset
from tests.integration.conftest import sink_config
from tests.integration.helpers import (
    caught_up,
    create_topic,
    json_records,
    ledger_offsets,
    produce,
    running_in_threads,
    table_of,
    table_rows,
    topic_ids,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

AVRO_SCHEMA = {
    "type": "record",
    "name": "Order",
    "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}, {"name": "qty", "type": "int"}],
}


def test_json_values_in_the_connect_schema_envelope_create_a_typed_table(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str
) -> None:
    schema = {
        "type": "struct",
        "fields": [
            {"field": "id", "type": "int64"},
            {"field": "name", "type": "string"},
            {"field": "score", "type": "float64"},
        ],
    }
    values = [
        json.dumps({"schema": schema, "payload": {"id": i, "name": f"n{i}", "score": i / 2}}).encode()
        for i in range(40)
    ]
    create_topic(kafka_bootstrap, topic_name, 2)
    ends = produce(kafka_bootstrap, topic_name, values, 2)
    actions.create_connector(
        "envelope", sink_config(topic_name, "db.events", **{"value.converter.schemas.enable": "true"})
    )
    with running_in_threads("envelope"):
        wait_until(caught_up("envelope", ends), 120, "the envelope records")
    table = table_of("envelope", "db.events")
    assert [(f.name, str(f.field_type)) for f in table.schema().fields] == [
        ("id", "long"),
        ("name", "string"),
        ("score", "double"),
    ]
    rows = sorted(table_rows("envelope", "db.events"), key=lambda r: r["id"])
    assert rows[3] == {"id": 3, "name": "n3", "score": 1.5}


# An order as a Debezium connector writes it in Avro (time.precision.mode=connect): NUMERIC(10,2), DATE and
# TIMESTAMPTZ as Avro's logical types, SMALLINT as an int Confluent's AvroData makes an int16.
TYPED_ORDER = {
    "type": "record",
    "name": "Value",
    "namespace": "shop.public.orders",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "amount", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}]},
        {"name": "placed", "type": {"type": "int", "logicalType": "date"}},
        {"name": "seen", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "qty", "type": {"type": "int", "connect.type": "int16"}},
        {"name": "note", "type": "string"},
    ],
}


@pytest.mark.parametrize("writer", ["arrow", "spark"])
def test_avro_values_through_transforms_create_the_table_their_schema_types(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, writer: str
) -> None:
    """Kafka Connect's AvroConverter hands the transforms a record with the Connect schema of its Avro schema;
    so do the tasks here: the table the sink creates of the transformed records is typed from it (a decimal, a
    date, a timestamptz, an int), and the field InsertField adds with its own type."""
    import datetime as dt
    from decimal import Decimal

    parsed = fastavro.parse_schema(TYPED_ORDER)
    orders = [
        {
            "id": i,
            "amount": None if i % 7 == 0 else Decimal(i * 137 - 900).scaleb(-2),
            "placed": dt.date(2024, 1, 1) + dt.timedelta(days=i),
            "seen": dt.datetime(2024, 5, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=i * 1001),
            "qty": i - 20,
            "note": f"n{i}",
        }
        for i in range(40)
    ]
    values = []
    for order in orders:
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, order)
        values.append(buffer.getvalue())
    create_topic(kafka_bootstrap, topic_name, 2)
    ends = produce(kafka_bootstrap, topic_name, values, 2)
    name = f"avro-typed-{writer}"
    config = {
        "value.converter": "io.confluent.connect.avro.AvroConverter",
        "value.converter.avro.schema": json.dumps(TYPED_ORDER),
        "sinkadmin.writer": writer,
        "transforms": "drop,lineage",
        "transforms.drop.type": "org.apache.kafka.connect.transforms.ReplaceField$Value",
        "transforms.drop.exclude": "note",
        "transforms.lineage.type": "org.apache.kafka.connect.transforms.InsertField$Value",
        "transforms.lineage.offset.field": "_offset",
    }
    actions.create_connector(name, sink_config(topic_name, "db.orders", **config))
    with running_in_threads(name):
        wait_until(caught_up(name, ends), 120, "the Avro orders")
    table = table_of(name, "db.orders")
    assert [(f.name, str(f.field_type)) for f in table.schema().fields] == [
        ("id", "int"),
        ("amount", "decimal(38, 2)"),
        ("placed", "date"),
        ("seen", "timestamptz"),
        ("qty", "int"),
        ("_offset", "long"),
    ]
    rows = {r["id"]: r for r in table_rows(name, "db.orders")}
    assert {i: {k: v for k, v in r.items() if k != "_offset"} for i, r in rows.items()} == {
        o["id"]: {k: v for k, v in o.items() if k != "note"} for o in orders
    }


def avro_value(record: dict[str, object], confluent: bool) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(AVRO_SCHEMA), record)
    body = buffer.getvalue()
    return (b"\x00" + struct.pack(">I", 42) + body) if confluent else body


def test_avro_values_raw_and_in_confluent_wire_format(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str
) -> None:
    values: list[bytes | None] = [
        avro_value({"id": i, "item": f"item-{i}", "qty": i % 7}, confluent=i % 2 == 0) for i in range(30)
    ]
    create_topic(kafka_bootstrap, topic_name, 1)
    ends = produce(kafka_bootstrap, topic_name, values, 1)
    actions.create_connector(
        "avro",
        sink_config(
            topic_name,
            "db.events",
            **{
                "value.converter": "io.confluent.connect.avro.AvroConverter",
                "value.converter.avro.schema": json.dumps(AVRO_SCHEMA),
            },
        ),
    )
    with running_in_threads("avro"):
        wait_until(caught_up("avro", ends), 120, "the Avro records")
    rows = sorted(table_rows("avro", "db.events"), key=lambda r: r["id"])
    assert [r["id"] for r in rows] == list(range(30))
    assert rows[9] == {"id": 9, "item": "item-9", "qty": 2}


def test_string_values_with_kafka_metadata_columns(lake: dict[str, str], kafka_bootstrap: str, topic_name: str) -> None:
    values: list[bytes | None] = [f"line {i}".encode() for i in range(20)]
    create_topic(kafka_bootstrap, topic_name, 2)
    ends = produce(kafka_bootstrap, topic_name, values, 2, keys=[f"k{i}".encode() for i in range(20)])
    actions.create_connector(
        "lines",
        sink_config(
            topic_name,
            "db.events",
            **{
                "value.converter": "org.apache.kafka.connect.storage.StringConverter",
                "sinkadmin.metadata-columns": "key,topic,partition,offset,timestamp",
            },
        ),
    )
    with running_in_threads("lines"):
        wait_until(caught_up("lines", ends), 120, "the string records")
    rows = table_rows("lines", "db.events")
    assert len(rows) == 20
    by_value = {r["value"]: r for r in rows}
    row = by_value["line 5"]
    assert row["_kafka_key"] == "k5" and row["_kafka_topic"] == topic_name
    assert (row["_kafka_partition"], row["_kafka_offset"]) == (1, 2)
    assert row["_kafka_timestamp"] is not None


def test_a_lost_ledger_is_rebuilt_from_the_snapshot_summaries(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str
) -> None:
    create_topic(kafka_bootstrap, topic_name, 2)
    ends = produce(kafka_bootstrap, topic_name, json_records(0, 100), 2)
    actions.create_connector("lost", sink_config(topic_name, "db.events"))
    with running_in_threads("lost"):
        wait_until(caught_up("lost", ends), 120, "the first batch")
        ends = produce(kafka_bootstrap, topic_name, json_records(100, 100), 2)
        wait_until(caught_up("lost", ends), 120, "the second batch")
    committed = set(
        Commit.objects.filter(connector_name="lost", state=CommitState.COMMITTED)
        .exclude(files_count=0)
        .values_list("commit_id", flat=True)
    )
    actions.stop_connector("lost")
    # The ledger is lost.
    Commit.objects.filter(connector_name="lost").delete()
    PartitionOffset.objects.filter(connector__name="lost").delete()

    call_command("rebuild_ledger", "lost")
    assert ledger_offsets("lost") == ends
    restored = set(Commit.objects.filter(connector_name="lost").values_list("commit_id", flat=True))
    assert restored == committed

    # Running again from the rebuilt ledger neither loses nor repeats a record.
    actions.resume_connector("lost")
    more = produce(kafka_bootstrap, topic_name, json_records(200, 50), 2)
    with running_in_threads("lost"):
        wait_until(caught_up("lost", more), 120, "the records after the rebuild")
    assert sorted(r["id"] for r in table_rows("lost", "db.events")) == topic_ids(kafka_bootstrap, more)


def test_a_lost_ledger_of_a_connector_whose_records_name_their_tables_is_rebuilt_from_every_table(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str
) -> None:
    """With dynamic routing the config lists no table: the commits are found in every table of the catalog
    (sinks.iceberg.tables.every_table), a commit that wrote two tables once with both its snapshots."""

    def named(start: int, count: int) -> list[bytes | None]:
        tables = ("db.events", "db.others")
        return [json.dumps({"id": i, "_table": tables[i % 2]}).encode() for i in range(start, start + count)]

    create_topic(kafka_bootstrap, topic_name, 2)
    ends = produce(kafka_bootstrap, topic_name, named(0, 100), 2)
    config = sink_config(
        topic_name, "", **{"iceberg.tables.dynamic-enabled": "true", "iceberg.tables.route-field": "_table"}
    )
    actions.create_connector("lost-dynamic", config)
    with running_in_threads("lost-dynamic"):
        wait_until(caught_up("lost-dynamic", ends), 120, "the first batch")
    committed = {
        commit_id: snapshots
        for commit_id, snapshots in Commit.objects.filter(connector_name="lost-dynamic", state=CommitState.COMMITTED)
        .exclude(files_count=0)
        .values_list("commit_id", "snapshot_ids")
    }
    assert {table for snapshots in committed.values() for table in snapshots} == {"db.events", "db.others"}
    actions.stop_connector("lost-dynamic")
    Commit.objects.filter(connector_name="lost-dynamic").delete()
    PartitionOffset.objects.filter(connector__name="lost-dynamic").delete()

    call_command("rebuild_ledger", "lost-dynamic")
    assert ledger_offsets("lost-dynamic") == ends
    restored = dict(Commit.objects.filter(connector_name="lost-dynamic").values_list("commit_id", "snapshot_ids"))
    assert restored == committed

    actions.resume_connector("lost-dynamic")
    more = produce(kafka_bootstrap, topic_name, named(100, 40), 2)
    with running_in_threads("lost-dynamic"):
        wait_until(caught_up("lost-dynamic", more), 120, "the records after the rebuild")
    ids = sorted(r["id"] for table in ("db.events", "db.others") for r in table_rows("lost-dynamic", table))
    assert ids == topic_ids(kafka_bootstrap, more)
