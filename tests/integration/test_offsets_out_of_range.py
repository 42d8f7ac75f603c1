"""Committed offsets the source no longer has: records deleted before they were committed
(retention), and a topic recreated under a running connector. Kafka's DeleteRecords moves a
partition's log start as retention does, and fetches below it answer OFFSET_OUT_OF_RANGE.

Fail (the default) stops the connector with the partitions and offsets in its reason, in the
API status and the UI; skip moves on and writes the skipped offsets into the ledger. Either
way every record the log still has is committed once, and the ledger's ranges tile each
partition from 0 to its end."""

from __future__ import annotations

import re

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from django.conf import LazySettings
from django.test import Client
from django.urls import reverse
from django.utils.html import escape
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from connectors import actions
from connectors.api.status import connector_status
from connectors.models import Commit, CommitEnd, CommitPartition, CommitState, Connector
from connectors.ui.health import Health, rollup
from tests.integration.conftest import sink_config
from tests.integration.helpers import (
    caught_up,
    create_topic,
    json_records,
    ledger_offsets,
    produce,
    running_in_threads,
    table_rows,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def on_kafka(kafka_bootstrap: str, lake: dict[str, str]) -> str:
    return kafka_bootstrap


def delete_records_before(bootstrap: str, topic: str, partition: int, offset: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, partition, offset)]).values():
        future.result(30)


def failed_with(name: str, signed_in: Client, operator_api: APIClient) -> str:
    """The reason the API status and the UI give for the connector's failure (they must agree)."""
    connector = Connector.objects.get(name=name)
    status = operator_api.get(f"/api/connect/connectors/{name}/status").json()["connector"]
    assert status["state"] == "FAILED"
    health = rollup(connector, connector_status(connector))
    assert health.health is Health.FAILED
    page = signed_in.get(reverse("connector-detail", args=[name])).content.decode()
    assert escape(health.reason) in page
    assert health.reason in status["trace"]
    return health.reason


def ledger_tiles(name: str, ends: dict[tuple[str, int], int]) -> None:
    """The decided ranges of every partition follow each other from 0 to its end."""
    for (topic, partition), end in ends.items():
        ranges = sorted(
            CommitPartition.objects.filter(
                commit__connector_name=name, commit__state=CommitState.COMMITTED, topic=topic, partition=partition
            ).values_list("start_offset", "end_offset")
        )
        at = 0
        for start, stop in ranges:
            assert start == at, (topic, partition, ranges)
            at = stop
        assert at == end, (topic, partition, ranges)


def test_records_deleted_before_they_were_committed_fail_the_connector_then_skip_records_the_loss(
    on_kafka: str, topic_name: str, signed_in: Client, operator_api: APIClient, settings: LazySettings
) -> None:
    create_topic(on_kafka, topic_name, 2)
    produce(on_kafka, topic_name, json_records(0, 40), partitions=2)
    actions.create_connector("lapsed", sink_config(topic_name, "db.lapsed", **{"sinkadmin.writer": "arrow"}))
    with running_in_threads("lapsed", tasks=2):
        wait_until(caught_up("lapsed", {(topic_name, 0): 20, (topic_name, 1): 20}), 90, "the first 40 records")

    # While the connector is away, 30 records arrive per partition and retention (here
    # DeleteRecords) takes partition 0's first 20 of them before any was committed.
    ends = produce(on_kafka, topic_name, json_records(40, 60), partitions=2)
    assert ends == {(topic_name, 0): 50, (topic_name, 1): 50}
    delete_records_before(on_kafka, topic_name, 0, 40)

    with running_in_threads("lapsed", tasks=2):
        wait_until(lambda: Connector.objects.get(name="lapsed").failed_at is not None, 60, "the connector to fail")
    reason = failed_with("lapsed", signed_in, operator_api)
    assert reason.startswith(
        f"offset out of range on {topic_name}/0: the committed offset 20 is below the log start 40"
    )
    assert "deleted offsets 20 to 39 before they were committed" in reason
    assert ledger_offsets("lapsed") == {(topic_name, 0): 20, (topic_name, 1): 20}  # nothing moved

    # The documented way on: skip, which the ledger records.
    actions.stop_connector("lapsed")
    actions.patch_config("lapsed", {"sinkadmin.offsets.out-of-range": "skip"})
    actions.resume_connector("lapsed")
    actions.restart_connector("lapsed")
    with running_in_threads("lapsed", tasks=2):
        wait_until(caught_up("lapsed", ends), 90, "the records the log still has")

    skip = Commit.objects.get(connector_name="lapsed", ended_by=CommitEnd.SKIPPED)
    assert (skip.state, skip.skipped, skip.records, skip.files) == (CommitState.COMMITTED, 20, 0, [])
    assert skip.offsets() == {f"{topic_name}/0": [20, 40]}
    # ... and the API, the commit page and the metrics show.
    entry = operator_api.get(f"/api/connect/connectors/lapsed/commits/{skip.commit_id}").json()
    assert (entry["ended_by"], entry["skipped"], entry["offsets"][0]["skipped"]) == ("skipped", 20, 20)
    page = signed_in.get(reverse("commit-detail", args=["lapsed", skip.commit_id])).content.decode()
    assert "Skipped offsets" in page and "below the log start" in page
    settings.METRICS_PUBLIC = True
    metrics = {f.name: f for f in text_string_to_metric_families(signed_in.get("/metrics").content.decode())}
    skipped = metrics["sinkadmin_connector_skipped_offsets"].samples
    assert [(s.labels["connector"], s.value) for s in skipped] == [("lapsed", 20.0)]
    ledger_tiles("lapsed", ends)
    # Every record the log still has, once: partition 0 lost ids 40..78 (even), partition 1 nothing.
    ids = sorted(row["id"] for row in table_rows("lapsed", "db.lapsed"))
    lost = {i for i in range(40, 80) if i % 2 == 0}
    assert ids == [i for i in range(100) if i not in lost]


def test_a_topic_recreated_under_a_running_connector_fails_it_with_the_way_on(
    on_kafka: str, topic_name: str, signed_in: Client, operator_api: APIClient
) -> None:
    create_topic(on_kafka, topic_name, 1)
    produce(on_kafka, topic_name, json_records(0, 30), partitions=1)
    actions.create_connector("reborn", sink_config(topic_name, "db.reborn", **{"sinkadmin.writer": "arrow"}))
    with running_in_threads("reborn"):
        wait_until(caught_up("reborn", {(topic_name, 0): 30}), 90, "the first 30 records")
        admin = AdminClient({"bootstrap.servers": on_kafka})
        admin.delete_topics([topic_name])[topic_name].result(30)
        wait_until(lambda: topic_name not in admin.list_topics(timeout=10).topics, 30, "the topic to be deleted")
        create_topic(on_kafka, topic_name, 1)
        produce(on_kafka, topic_name, json_records(1000, 5), partitions=1)
        # The task's fetch at offset 30 meets the new log's end (5): its commit is aborted and
        # the coordinator's check of the ledger against the log stops the connector.
        wait_until(lambda: Connector.objects.get(name="reborn").failed_at is not None, 60, "the connector to fail")

    reason = failed_with("reborn", signed_in, operator_api)
    # (The log's end when the coordinator checked it: 5, or 0 if the fetch met the new topic before
    # its records were written. Either is what the log held then.)
    assert re.match(
        rf"offset out of range on {topic_name}/0: the committed offset 30 is above the log end [05]:", reason
    )
    assert "recreated or truncated" in reason
    assert ledger_offsets("reborn") == {(topic_name, 0): 30}
    assert sorted(row["id"] for row in table_rows("reborn", "db.reborn")) == list(range(30))

    # The way on the reason gives: stop, set the offset to the new log's start, resume.
    actions.stop_connector("reborn")
    actions.alter_offsets("reborn", [(topic_name, 0, 0)])
    actions.resume_connector("reborn")
    actions.restart_connector("reborn")
    with running_in_threads("reborn"):
        wait_until(caught_up("reborn", {(topic_name, 0): 5}), 90, "the new topic's records")
    assert sorted(row["id"] for row in table_rows("reborn", "db.reborn")) == [*range(30), *range(1000, 1005)]
