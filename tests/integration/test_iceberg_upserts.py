"""Keyed upserts on Iceberg (copy-on-write) against the real broker, Spark and the SQL catalog, read back
with pyiceberg: each table equals a plain Python model of the topic (the last record of each key; a CDC
delete removes it), after clean runs on both planes and after a coordinator died between the rewrite and
its snapshot or came back as a zombie (DESIGN I1, I3, I4)."""

from __future__ import annotations

import json
import signal
from typing import Any

import pytest

from connectors import actions
from connectors.models import Commit, CommitState
from tests.conftest import sink_config
from tests.integration.helpers import (
    Processes,
    caught_up,
    changes,
    create_topic,
    produce,
    running_in_threads,
    table_rows,
    topic_records,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

PARTITIONS = 4
TABLE = "db.orders"


def upsert_config(topic: str, **overrides: str) -> dict[str, str]:
    return sink_config(
        topic,
        TABLE,
        **{
            "iceberg.tables.upsert-mode-enabled": "true",
            "iceberg.tables.default-id-columns": "id",
            "iceberg.tables.cdc-field": "op",
            **overrides,
        },
    )


def model_of_topic(bootstrap: str, ends: dict[tuple[str, int], int]) -> dict[int, dict[str, Any]]:
    """The last record of each key in its partition's offset order; op=d (a D operation) deletes the key."""
    state: dict[int, dict[str, Any]] = {}
    for _, _, record in topic_records(bootstrap, ends):
        if record["op"].upper().startswith("D"):
            state.pop(record["id"], None)
        else:
            state[record["id"]] = record
    return state


def assert_table_equals_model(name: str, bootstrap: str, ends: dict[tuple[str, int], int]) -> None:
    rows = table_rows(name, TABLE)
    keys = [r["id"] for r in rows]
    assert len(keys) == len(set(keys)), "a key is in the table twice"
    found = {r["id"]: {k: r[k] for k in ("id", "ts", "amount", "op", "region")} for r in rows}
    assert found == model_of_topic(bootstrap, ends)


def start(bootstrap: str, topic: str, name: str, count: int, seed: int, **overrides: str) -> dict[tuple[str, int], int]:
    create_topic(bootstrap, topic, PARTITIONS)
    ends = produce(bootstrap, topic, changes(count, 150, PARTITIONS, seed), PARTITIONS)
    actions.create_connector(name, upsert_config(topic, **overrides))
    return ends


@pytest.mark.parametrize("writer", ["spark", "arrow"])
def test_upserts_leave_the_last_record_of_each_key(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, writer: str
) -> None:
    name = f"iceberg-upsert-{writer}"
    overrides = {"sinkadmin.writer": writer, "tasks.max": "2", "iceberg.table.db.orders.partition-by": "region"}
    ends = start(kafka_bootstrap, topic_name, name, 3000, 11, **overrides)
    with running_in_threads(name, tasks=2):
        wait_until(caught_up(name, ends), 180, f"{name} to commit every record")
    assert_table_equals_model(name, kafka_bootstrap, ends)
    commits = Commit.objects.filter(connector_name=name, state=CommitState.COMMITTED).exclude(files_count=0)
    assert commits.count() >= 1


def test_a_coordinator_killed_between_the_rewrite_and_its_snapshot_is_rolled_forward(
    procs: Processes, kafka_bootstrap: str, topic_name: str
) -> None:
    name = "iceberg-upsert-kill"
    ends = start(kafka_bootstrap, topic_name, name, 2500, 13)
    procs.task(name)
    doomed = procs.coordinator(name, failpoints="upsert.before_snapshot=kill")
    assert doomed.wait(180) == -signal.SIGKILL
    assert Commit.objects.filter(connector_name=name, state=CommitState.PREPARED).exists()
    procs.coordinator(name)
    wait_until(caught_up(name, ends), 180, "the new coordinator to roll forward and catch up")
    assert_table_equals_model(name, kafka_bootstrap, ends)


def test_a_zombie_coordinator_cannot_upsert_a_commit_twice(
    procs: Processes, kafka_bootstrap: str, topic_name: str
) -> None:
    name = "iceberg-upsert-zombie"
    ends = start(kafka_bootstrap, topic_name, name, 2000, 17)
    procs.task(name)
    zombie = procs.coordinator(name, failpoints="upsert.before_snapshot=stop")
    wait_until(
        lambda: Commit.objects.filter(connector_name=name, state=CommitState.PREPARED).exists(),
        120,
        "the first coordinator to rewrite and freeze",
    )
    procs.coordinator(name)
    wait_until(caught_up(name, ends), 180, "the new coordinator to take over")
    zombie.send_signal(signal.SIGCONT)
    # The zombie's overwrite fails the catalog's check (its files are gone from the table); its retry finds
    # the commit's snapshot. It is fenced at its next ledger write.
    assert zombie.wait(120) == 0
    assert_table_equals_model(name, kafka_bootstrap, ends)


def test_an_upsert_table_without_its_identifier_column_fails_the_connector_before_anything_is_prepared(
    lake: dict[str, str], operator_api: Any, kafka_bootstrap: str, topic_name: str
) -> None:
    # Debezium envelopes into an upsert connector that does not unwrap them: the table auto-created from
    # the records has before/after/op columns and no id. No commit could ever key its rows, so none is
    # prepared (a prepared commit must always be appliable), and the connector fails saying why.
    name = "upsert-no-id"
    create_topic(kafka_bootstrap, topic_name, 1)
    envelopes = [json.dumps({"before": None, "after": {"id": i, "v": f"v{i}"}, "op": "c"}).encode() for i in range(20)]
    produce(kafka_bootstrap, topic_name, envelopes, 1)
    actions.create_connector(name, upsert_config(topic_name, **{"iceberg.tables.cdc-field": ""}))
    with running_in_threads(name):
        wait_until(
            lambda: operator_api.get(f"/api/connect/connectors/{name}/status").json()["connector"]["state"] == "FAILED",
            120,
            "the connector to fail",
        )
    connector = operator_api.get(f"/api/connect/connectors/{name}/status").json()["connector"]
    assert "table db.orders has no column id of its identifier columns" in connector["trace"]
    assert not Commit.objects.filter(connector_name=name, state__in=[CommitState.PREPARED, CommitState.COMMITTED])
