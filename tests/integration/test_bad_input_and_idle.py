"""Poison records under each errors.tolerance (I8), dead letters as consumed whatever the converter and the
transforms made of them, idle partitions and empty intervals."""

from __future__ import annotations

import io
import json
import struct
import time
from typing import Any

import fastavro
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from pyiceberg.exceptions import NoSuchTableError

from connectors import actions
from connectors.api.status import State, connector_status
from connectors.models import Commit, CommitState, Connector
from sinks.iceberg.tables import PROP_COMMIT_ID
from tests.integration.conftest import sink_config
from tests.integration.helpers import (
    KEPT_FOREVER,
    caught_up,
    create_topic,
    json_records,
    ledger_offsets,
    produce,
    running_in_threads,
    sink_snapshots,
    table_of,
    table_rows,
    wait_until,
)
from workers.dead_letters import ConsumedRecord, KafkaOriginals

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

POISON_AT = 57


def poisoned_records() -> list[bytes | None]:
    values = json_records(0, 200)
    values[POISON_AT] = b'{"id": "not-a-number", "name": 7'  # truncated, and the wrong type
    return values


@pytest.mark.parametrize("writer", ["arrow", "spark"])
def test_with_tolerance_none_a_poison_record_stops_the_connector_and_loses_nothing(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, writer: str
) -> None:
    create_topic(kafka_bootstrap, topic_name, 1)
    produce(kafka_bootstrap, topic_name, json_records(0, 10), 1)
    actions.create_connector(
        "strict", sink_config(topic_name, "db.events", **{"errors.tolerance": "none", "sinkadmin.writer": writer})
    )
    with running_in_threads("strict"):
        wait_until(caught_up("strict", {(topic_name, 0): 10}), 120, "the clean records")
        produce(kafka_bootstrap, topic_name, poisoned_records(), 1)
        wait_until(lambda: Connector.objects.get(name="strict").failed_at is not None, 120, "the connector to fail")

    connector = Connector.objects.get(name="strict")
    poison_offset = 10 + POISON_AT
    assert f"record {topic_name}/0@{poison_offset} cannot be converted" in connector.failure_message
    assert "errors.tolerance=none" in connector.failure_message
    # Nothing after the last good commit was written or skipped: the
    # ledger still points at the first unwritten record.
    assert ledger_offsets("strict") == {(topic_name, 0): 10}
    assert sorted(r["id"] for r in table_rows("strict", "db.events")) == list(range(10))
    assert Commit.objects.filter(connector_name="strict", state=CommitState.ABORTED).exists()
    assert connector_status(connector).connector.state is State.FAILED

    # A new config restarts it, as Kafka Connect restarts a connector given one: the poison record is
    # passed over now, and the rest committed once.
    actions.patch_config("strict", {"errors.tolerance": "all"})
    assert Connector.objects.get(name="strict").failed_at is None
    with running_in_threads("strict"):
        wait_until(caught_up("strict", {(topic_name, 0): 210}), 120, "the records after the poison record")
    expected = [*range(10), *(i for i in range(200) if i != POISON_AT)]
    assert sorted(r["id"] for r in table_rows("strict", "db.events")) == sorted(expected)


@pytest.mark.parametrize("writer", ["arrow", "spark"])
def test_with_tolerance_all_a_poison_record_goes_to_the_dead_letter_topic_and_table_with_connect_context(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, writer: str
) -> None:
    dlq = f"{topic_name}-dlq"
    create_topic(kafka_bootstrap, topic_name, 1)
    traces = [[("trace-id", f"t-{i}".encode())] for i in range(200)]
    ends = produce(kafka_bootstrap, topic_name, poisoned_records(), 1, headers=traces)
    actions.create_connector(
        "tolerant",
        sink_config(
            topic_name,
            "db.events",
            **{
                "errors.tolerance": "all",
                "errors.deadletterqueue.topic.name": dlq,
                "errors.deadletterqueue.table.name": "db.events_dlq",
                "sinkadmin.writer": writer,
            },
        ),
    )
    with running_in_threads("tolerant"):
        wait_until(caught_up("tolerant", ends), 120, "all records, poison included, to be accounted for")

    ids = sorted(r["id"] for r in table_rows("tolerant", "db.events"))
    assert ids == [i for i in range(200) if i != POISON_AT]
    commits = Commit.objects.filter(connector_name="tolerant", state=CommitState.COMMITTED)
    assert sum(c.dead_lettered for c in commits) == 1
    assert sum(c.records for c in commits) == 200

    # The dead-letter table, read by pyiceberg and by Spark's Iceberg reader
    # (table_rows): the record as consumed and why, added by the commit that
    # skipped it.
    [dead] = table_rows("tolerant", "db.events_dlq")
    assert (dead["topic"], dead["partition"], dead["offset"]) == (topic_name, 0, POISON_AT)
    assert dead["value"] == poisoned_records()[POISON_AT]
    assert dead["headers"] == [{"key": "trace-id", "value": f"t-{POISON_AT}".encode()}]
    assert dead["timestamp"] is not None
    assert dead["error_stage"] == "VALUE_CONVERTER"
    assert dead["error_class_name"] == "org.apache.kafka.connect.json.JsonConverter"
    assert dead["error_exception_class_name"] == "org.apache.kafka.connect.errors.DataException"
    assert "not valid JSON" in dead["error_exception_message"]
    [snapshot] = sink_snapshots("tolerant", "db.events_dlq")
    skipped_by = snapshot.summary.additional_properties[PROP_COMMIT_ID]
    assert commits.filter(commit_id=skipped_by, dead_lettered=1).exists()

    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "dlq-reader"})
    consumer.assign([TopicPartition(dlq, 0, 0)])
    message = None
    for _ in range(20):
        message = consumer.poll(1.0)
        if message is not None and not message.error():
            break
    consumer.close()
    assert message is not None and message.value() == poisoned_records()[POISON_AT]
    headers = dict(message.headers())
    assert headers["trace-id"] == f"t-{POISON_AT}".encode()  # the record's own headers travel with it
    assert headers["__connect.errors.topic"] == topic_name.encode()
    assert headers["__connect.errors.partition"] == b"0"
    assert headers["__connect.errors.offset"] == str(POISON_AT).encode()
    assert headers["__connect.errors.connector.name"] == b"tolerant"
    assert headers["__connect.errors.stage"] == b"VALUE_CONVERTER"
    assert headers["__connect.errors.class.name"] == b"org.apache.kafka.connect.json.JsonConverter"
    assert b"not valid JSON" in headers["__connect.errors.exception.message"]


def enveloped(record_id: int) -> bytes:
    """A record in Kafka Connect's schema envelope (the JsonConverter's with schemas.enable=true)."""
    schema = {"type": "struct", "fields": [{"field": "id", "type": "int64", "optional": False}], "optional": False}
    return json.dumps({"schema": schema, "payload": {"id": record_id}}).encode()


@pytest.mark.parametrize("writer", ["arrow", "spark"])
def test_records_no_table_can_be_created_from_follow_errors_tolerance_and_a_later_record_creates_it(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, writer: str
) -> None:
    # Plain JSON where the config says Kafka Connect's envelope, and a value that is not JSON: the table does
    # not exist, and no record can give it columns. Kafka Connect's converter fails each such record, so each
    # follows errors.tolerance; the connector neither fails nor creates a table of them.
    dlq = f"{topic_name}-dlq"
    create_topic(kafka_bootstrap, topic_name, 1)
    unshaped = [json.dumps({"id": i}).encode() for i in range(3)] + [b"not json {", None]
    ends = produce(kafka_bootstrap, topic_name, unshaped, 1)
    enveloping = {
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "true",
        "sinkadmin.writer": writer,
    }
    tolerant = {**enveloping, "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq}
    actions.create_connector("unshaped", sink_config(topic_name, "db.events", **tolerant))
    with running_in_threads("unshaped"):
        wait_until(caught_up("unshaped", ends), 120, "the records no table can be created from")
        with pytest.raises(NoSuchTableError):
            table_of("unshaped", "db.events")
        letters = dead_letters(kafka_bootstrap, dlq, 4)
        assert [m.value() for m in letters] == unshaped[:4]
        for message in letters:
            headers = dict(message.headers())
            assert headers["__connect.errors.stage"] == b"VALUE_CONVERTER"
        reasons = [dict(m.headers())["__connect.errors.exception.message"].decode() for m in letters]
        assert all("envelope has no payload" in reason for reason in reasons[:3])
        assert "not valid JSON" in reasons[3]
        commits = Commit.objects.filter(connector_name="unshaped", state=CommitState.COMMITTED)
        assert (sum(c.dead_lettered for c in commits), sum(c.skipped for c in commits)) == (4, 1)

        # The first record that can shape the table creates it.
        ends = produce(kafka_bootstrap, topic_name, [enveloped(10), enveloped(11)], 1)
        wait_until(caught_up("unshaped", ends), 120, "the enveloped records")
    assert sorted(r["id"] for r in table_rows("unshaped", "db.events")) == [10, 11]

    # With errors.tolerance=none the first of them fails the connector, named, as Kafka Connect's task fails.
    strict_topic = f"{topic_name}-strict"
    create_topic(kafka_bootstrap, strict_topic, 1)
    produce(kafka_bootstrap, strict_topic, unshaped, 1)
    actions.create_connector("unshaped-strict", sink_config(strict_topic, "db.strict", **enveloping))
    with running_in_threads("unshaped-strict"):
        wait_until(lambda: Connector.objects.get(name="unshaped-strict").failed_at is not None, 120, "a failure")
    failure = Connector.objects.get(name="unshaped-strict").failure_message
    assert f"record {strict_topic}/0@0 cannot be converted" in failure and "envelope has no payload" in failure
    assert set(ledger_offsets("unshaped-strict").values()) <= {0}  # (nothing passed over)


# Records the sink refuses after the converter and the transforms changed them: an upsert row without its key.
REFUSED_AT = 7
NOT_JSON_AT = 12
CUSTOMER_SCHEMA = {
    "type": "record",
    "name": "Customer",
    "fields": [{"name": "id", "type": ["null", "long"]}, {"name": "name", "type": "string"}],
}


def debezium_events(count: int) -> list[bytes | None]:
    """Debezium change events (JSON, no schema) of a customers table; the row at REFUSED_AT has lost its id,
    and the value at NOT_JSON_AT is not JSON."""
    events: list[bytes | None] = []
    for i in range(count):
        after = {"name": f"customer-{i}"} if i == REFUSED_AT else {"id": i, "name": f"customer-{i}"}
        event = {"before": None, "after": after, "source": {"table": "customers", "lsn": i}, "op": "c", "ts_ms": i}
        events.append(json.dumps(event).encode())
    events[NOT_JSON_AT] = b'{"before": null, "after": {"id": 12'
    return events


def avro_customers(count: int) -> list[bytes | None]:
    """Customers in Avro (the Confluent wire format); the one at REFUSED_AT has no id."""
    values: list[bytes | None] = []
    for i in range(count):
        body = io.BytesIO()
        customer = {"id": None if i == REFUSED_AT else i, "name": f"customer-{i}"}
        fastavro.schemaless_writer(body, fastavro.parse_schema(CUSTOMER_SCHEMA), customer)
        values.append(b"\x00" + struct.pack(">I", 7) + body.getvalue())
    return values


def dead_letters(bootstrap: str, topic: str, count: int) -> list[Any]:
    """The first ``count`` records of the dead-letter topic."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dlq-reader"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    found: list[Any] = []
    deadline = time.monotonic() + 30
    while len(found) < count and time.monotonic() < deadline:
        found += [m for m in consumer.consume(count, timeout=1.0) if not m.error()]
    consumer.close()
    return found


def test_records_refused_after_the_transforms_or_avros_decoding_reach_the_dead_letters_as_consumed(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str
) -> None:
    """Kafka Connect's dead letters are the records as consumed, which users replay into the topic: a Debezium
    envelope, not the row ExtractNewRecordState unwrapped from it; the Avro bytes, not the JSON they were decoded
    to. Both destinations, the dead-letter topic and table, get them; and a dead-letter table alone (no topic,
    no transforms: the tasks stage no headers) gets the records with their headers."""
    count = 30
    topics = {"unwrapped": topic_name, "avro": f"{topic_name}-avro", "table-only": f"{topic_name}-plain"}
    plain = [json.dumps({"name": f"customer-{i}"} if i == REFUSED_AT else {"id": i}).encode() for i in range(count)]
    produced = {"unwrapped": debezium_events(count), "avro": avro_customers(count), "table-only": plain}
    keys = [json.dumps({"id": i}).encode() for i in range(count)]
    traces = [[("trace-id", f"t-{i}".encode())] for i in range(count)]
    stamps = [1_700_000_000_000 + i for i in range(count)]
    converters = {
        "unwrapped": {
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter.schemas.enable": "false",
            "transforms": "unwrap",
            "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
        },
        "avro": {
            "value.converter": "io.confluent.connect.avro.AvroConverter",
            "value.converter.avro.schema": json.dumps(CUSTOMER_SCHEMA),
        },
        "table-only": {"value.converter": "org.apache.kafka.connect.json.JsonConverter"},
    }
    ends: dict[tuple[str, int], int] = {}
    for case, topic in topics.items():
        create_topic(kafka_bootstrap, topic, 1)
        ends[(topic, 0)] = produce(kafka_bootstrap, topic, produced[case], 1, keys, traces, stamps)[(topic, 0)]
        actions.create_connector(
            f"dlq-{case}",
            sink_config(
                topic,
                "db.customers",
                **{
                    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
                    **converters[case],
                    "iceberg.tables.upsert-mode-enabled": "true",
                    "iceberg.tables.default-id-columns": "id",
                    "sinkadmin.writer": "arrow",
                    "errors.tolerance": "all",
                    **({} if case == "table-only" else {"errors.deadletterqueue.topic.name": f"{topic}-dlq"}),
                    "errors.deadletterqueue.table.name": "db.customers_dlq",
                },
            ),
        )
    with running_in_threads("dlq-unwrapped"), running_in_threads("dlq-avro"), running_in_threads("dlq-table-only"):
        for case, topic in topics.items():
            wait_until(caught_up(f"dlq-{case}", {(topic, 0): ends[(topic, 0)]}), 120, f"dlq-{case}'s records")

    for case, topic in topics.items():
        name = f"dlq-{case}"
        refused = [REFUSED_AT, NOT_JSON_AT] if case == "unwrapped" else [REFUSED_AT]
        # The good records, once each.
        ids = sorted(r["id"] for r in table_of(name, "db.customers").scan().to_arrow().to_pylist())
        assert ids == [i for i in range(count) if i not in refused]
        assert sum(c.dead_lettered for c in Commit.objects.filter(connector_name=name)) == len(refused)
        # The dead letters, as produced: value, key, headers and timestamp.
        if case != "table-only":
            letters = dead_letters(kafka_bootstrap, f"{topic}-dlq", len(refused))
            assert [int(dict(m.headers())["__connect.errors.offset"]) for m in letters] == refused
            for message, offset in zip(letters, refused, strict=True):
                assert (message.value(), message.key()) == (produced[case][offset], keys[offset]), (case, offset)
                assert message.timestamp()[1] == stamps[offset]
                assert dict(message.headers())["trace-id"] == traces[offset][0][1]
            stages = [dict(m.headers())["__connect.errors.stage"] for m in letters]
            assert stages == ([b"TASK_PUT", b"VALUE_CONVERTER"] if case == "unwrapped" else [b"TASK_PUT"])
        rows = sorted(table_of(name, "db.customers_dlq").scan().to_arrow().to_pylist(), key=lambda r: r["offset"])
        assert [(r["offset"], r["key"], r["value"]) for r in rows] == [(o, keys[o], produced[case][o]) for o in refused]
        assert [r["headers"] for r in rows] == [[{"key": "trace-id", "value": traces[o][0][1]}] for o in refused]


def test_originals_are_read_again_by_offset_and_those_the_topic_no_longer_has_are_left_out_without_a_wait(
    kafka_bootstrap: str, topic_name: str
) -> None:
    create_topic(kafka_bootstrap, topic_name, 1, KEPT_FOREVER)
    traces = [[("trace-id", f"t-{i}".encode())] for i in range(10)]
    produce(
        kafka_bootstrap, topic_name, json_records(0, 10), 1, headers=traces, timestamps=[1000 + i for i in range(10)]
    )
    source = (topic_name, 0)
    originals = KafkaOriginals(kafka_bootstrap, {}, timeout_s=20)
    began = time.monotonic()
    # (12: beyond the partition's end; a wanted offset the log does not hold is looked for up to there only.)
    found = originals.fetch({source: [2, 5, 12]})[source]
    assert sorted(found) == [2, 5]
    assert found[5] == ConsumedRecord(1005, b"5", json_records(5, 1)[0], [{"key": "trace-id", "value": b"t-5"}])
    # Retention deleted the records before offset 4: those after it are still read.
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    [deleted] = admin.delete_records([TopicPartition(topic_name, 0, 4)]).values()
    assert deleted.result(30).low_watermark == 4
    assert sorted(originals.fetch({source: [2, 7]})[source]) == [7]
    assert time.monotonic() - began < 15, "a fetch waited for what the topic does not have"


def test_idle_partitions_do_not_delay_commits_and_empty_intervals_write_no_snapshot(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str
) -> None:
    create_topic(kafka_bootstrap, topic_name, 4)
    # Every record in partition 0; 1-3 stay idle.
    values = [json.dumps({"id": i}).encode() for i in range(50)]
    ends = produce(kafka_bootstrap, topic_name, values, 1)
    # A timeout far longer than the test: a commit that waited for the idle
    # partitions to "answer" would never arrive in time.
    actions.create_connector(
        "idle", sink_config(topic_name, "db.events", **{"iceberg.control.commit.timeout-ms": "600000"})
    )
    # Two tasks: the second has only idle partitions, and must answer
    # without the table existing yet (it is created from the first's records).
    with running_in_threads("idle", tasks=2):
        wait_until(caught_up("idle", ends), 90, "a commit without waiting for idle partitions")
        snapshots = len(sink_snapshots("idle", "db.events"))
        commits = Commit.objects.filter(connector_name="idle").count()
        time.sleep(6)  # four more empty intervals of 1.5 s
        assert len(sink_snapshots("idle", "db.events")) == snapshots
        assert Commit.objects.filter(connector_name="idle").count() == commits
    first = Commit.objects.filter(connector_name="idle", state=CommitState.COMMITTED).order_by("started_at").first()
    assert first is not None and first.complete
    assert not Commit.objects.filter(connector_name="idle", state=CommitState.ABORTED).exists()
    assert len(table_rows("idle", "db.events")) == 50
