"""Poison records under each errors.tolerance (I8), idle partitions and empty intervals."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from connectors import actions
from connectors.api.status import State, connector_status
from connectors.models import Commit, CommitState, Connector
from sinks.iceberg.tables import PROP_COMMIT_ID
from tests.integration.conftest import sink_config
from tests.integration.helpers import (
    caught_up,
    create_topic,
    json_records,
    ledger_offsets,
    produce,
    running_in_threads,
    sink_snapshots,
    table_rows,
    wait_until,
)

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
