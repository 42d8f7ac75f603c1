"""Upserts into Iceberg format v3 tables, which the sink writes through Spark's Iceberg runtime
(sinks.iceberg.spark_commits): a commit's deletes become deletion vectors, on a branch of its own that is
published in one step. Against the real broker, Spark and the SQL catalog, each table is read back by
pyiceberg, Spark's Iceberg reader and DuckDB, and equals a plain model of the topic (the last record of each
key; a delete removes it) after clean runs, after a coordinator died with the commit on its branch, and after
one came back as a zombie (DESIGN I1, I3, I4)."""

from __future__ import annotations

import json
import signal

import pytest
from pyiceberg.manifest import DataFileContent, FileFormat
from pyiceberg.table.snapshots import ancestors_of

from connectors import actions
from connectors.config import SinkConfig
from connectors.models import Commit, CommitState, Connector
from sinks.iceberg.spark_commits import BRANCH_PREFIX, SparkTables
from sinks.iceberg.upserts import ABSENT_KEY_DELETES, STALE_RECORDS
from tests.conftest import sink_config
from tests.integration.helpers import (
    Processes,
    caught_up,
    changes,
    create_topic,
    duckdb_rows,
    json_records,
    produce,
    running_in_threads,
    table_of,
    table_rows,
    wait_until,
)
from tests.integration.test_iceberg_upserts import (
    PARTITIONS,
    TABLE,
    assert_table_equals_model,
    compact,
    model_of_topic,
    upsert_config,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

V3 = {"iceberg.tables.auto-create-props.format-version": "3"}


def assert_merged_on_read_with_deletion_vectors(name: str, others: frozenset[int] = frozenset()) -> None:
    """The table is format v3; no snapshot of main (but ``others``, another writer's) removed a data file; the
    upserts' deletes are deletion vectors (Puffin delete files, one per data file they delete rows of); no
    branch of a commit is left."""
    table = table_of(name, TABLE)
    assert table.metadata.format_version == 3
    snapshots = [s for s in table.snapshots() if s.snapshot_id not in others]
    assert not [s for s in snapshots if "deleted-data-files" in s.summary.additional_properties], (
        "a data file was rewritten"
    )
    assert sum(int(s.summary.additional_properties.get("added-dvs", 0)) for s in snapshots) > 0
    deletes = [d for task in table.scan().plan_files() for d in task.delete_files]
    assert deletes and all(
        d.content == DataFileContent.POSITION_DELETES and d.file_format == FileFormat.PUFFIN for d in deletes
    ), deletes
    assert not [ref for ref in table.metadata.refs if ref.startswith(BRANCH_PREFIX)], table.metadata.refs


@pytest.mark.parametrize("writer", ["spark", "arrow"])
def test_upserts_into_a_format_v3_table_delete_by_deletion_vectors(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, writer: str
) -> None:
    name = f"iceberg-v3-{writer}"
    overrides = {
        **V3,
        "sinkadmin.writer": writer,
        "tasks.max": "2",
        "iceberg.table.db.orders.partition-by": "region",
        "iceberg.tables.evolve-schema-enabled": "true",
    }
    create_topic(kafka_bootstrap, topic_name, PARTITIONS)
    actions.create_connector(name, upsert_config(topic_name, **overrides))
    ends: dict[tuple[str, int], int] = {}
    with running_in_threads(name, tasks=2):
        # Two waves, so that the second deletes and updates keys the table holds; then a record with a new
        # field, which becomes a column (added through Spark). Records of keys of partition 0, where produce()
        # puts the first record of a batch.
        for wave, seed in enumerate((21, 22)):
            ends = produce(kafka_bootstrap, topic_name, changes(1500, 150, PARTITIONS, seed), PARTITIONS)
            wait_until(caught_up(name, ends), 180, f"{name} to commit wave {wave}")
        grown = {"id": 4, "ts": 10**6, "amount": 1, "op": "u", "region": "r1", "note": "a new field"}
        # (And a delete of a key never written, which deletes nothing and is counted.)
        never = {"id": 10**6, "ts": 10**6, "amount": 0, "op": "d", "region": "r1"}
        last = [json.dumps(grown).encode(), json.dumps(never).encode()]
        ends = {**ends, **produce(kafka_bootstrap, topic_name, last, PARTITIONS)}
        wait_until(caught_up(name, ends), 180, f"{name} to commit a record with a new field")
        # A commit of one delete alone: no row to append, its snapshot holds its offsets.
        held = next(k for k in (6, 14, 16) if k in model_of_topic(kafka_bootstrap, ends))
        gone = {"id": held, "ts": 10**6 + 1, "amount": 0, "op": "d", "region": f"r{held % 3}"}
        ends = {**ends, **produce(kafka_bootstrap, topic_name, [json.dumps(gone).encode()], PARTITIONS)}
        wait_until(caught_up(name, ends), 180, f"{name} to commit a delete alone")
    assert_table_equals_model(name, kafka_bootstrap, ends)
    assert_merged_on_read_with_deletion_vectors(name)
    table = table_of(name, TABLE)
    assert [r["note"] for r in table.scan().to_arrow().to_pylist() if r["note"] is not None] == ["a new field"]
    assert table.schema().identifier_field_names() == {"id"}
    absent = [s.summary.additional_properties.get(ABSENT_KEY_DELETES) for s in table.snapshots()]
    assert [count for count in absent if count] == ["1"], absent
    # The maintenance's compaction folds the deletion vectors back into the data files.
    compact(name, delete_file_threshold=1)
    assert all(not task.delete_files for task in table_of(name, TABLE).scan().plan_files())
    assert_table_equals_model(name, kafka_bootstrap, ends)


def start(procs: Processes, bootstrap: str, topic: str, name: str, seed: int) -> dict[tuple[str, int], int]:
    """A first wave committed by a coordinator that is then stopped, and a second wave produced: the next
    coordinator's commit deletes rows of keys the table holds."""
    create_topic(bootstrap, topic, PARTITIONS)
    ends = produce(bootstrap, topic, changes(1500, 150, PARTITIONS, seed), PARTITIONS)
    actions.create_connector(name, upsert_config(topic, **V3))
    procs.task(name)
    first = procs.coordinator(name)
    wait_until(caught_up(name, ends), 180, "the first wave to be committed")
    first.terminate()
    first.wait(60)
    return produce(bootstrap, topic, changes(1500, 150, PARTITIONS, seed + 1), PARTITIONS)


def test_a_coordinator_killed_with_the_commit_on_its_branch_is_rolled_forward(
    procs: Processes, kafka_bootstrap: str, topic_name: str
) -> None:
    name = "iceberg-v3-kill"
    ends = start(procs, kafka_bootstrap, topic_name, name, 23)
    doomed = procs.coordinator(name, failpoints="iceberg.v3.before_fast_forward=kill")
    assert doomed.wait(240) == -signal.SIGKILL
    assert Commit.objects.filter(connector_name=name, state=CommitState.PREPARED).exists()
    # (The commit is on its branch, main does not have it.)
    assert [ref for ref in table_of(name, TABLE).metadata.refs if ref.startswith(BRANCH_PREFIX)]
    procs.coordinator(name)
    wait_until(caught_up(name, ends), 240, "the new coordinator to roll forward and catch up")
    assert_table_equals_model(name, kafka_bootstrap, ends)
    assert_merged_on_read_with_deletion_vectors(name)


def test_a_zombie_coordinator_cannot_publish_a_v3_commit_twice(
    procs: Processes, kafka_bootstrap: str, topic_name: str
) -> None:
    name = "iceberg-v3-zombie"
    ends = start(procs, kafka_bootstrap, topic_name, name, 27)
    zombie = procs.coordinator(name, failpoints="iceberg.v3.before_fast_forward=stop")
    wait_until(
        lambda: (
            Commit.objects.filter(connector_name=name, state=CommitState.PREPARED).exists()
            and any(ref.startswith(BRANCH_PREFIX) for ref in table_of(name, TABLE).metadata.refs)
        ),
        180,
        "the first coordinator to make its branch and freeze",
    )
    procs.coordinator(name)
    wait_until(caught_up(name, ends), 240, "the new coordinator to take over")
    zombie.send_signal(signal.SIGCONT)
    # The new coordinator dropped the zombie's branch and made its own: the zombie's fast-forward fails (its
    # branch is gone, or main moved off its base), and its next attempt finds the commit in main.
    assert zombie.wait(180) == 0
    assert_table_equals_model(name, kafka_bootstrap, ends)
    assert_merged_on_read_with_deletion_vectors(name)


def test_another_writers_commit_while_a_commit_is_on_its_branch_makes_it_start_again(
    procs: Processes, kafka_bootstrap: str, topic_name: str
) -> None:
    """main moves (an INSERT through Spark) between the branch's making and its fast-forward: the fast-forward
    fails, and the commit is made again on a branch of the new main, the other writer's row kept."""
    name = "iceberg-v3-race"
    ends = start(procs, kafka_bootstrap, topic_name, name, 29)
    procs.coordinator(name, failpoints="iceberg.v3.before_fast_forward=delay:20")
    wait_until(
        lambda: any(ref.startswith(BRANCH_PREFIX) for ref in table_of(name, TABLE).metadata.refs),
        180,
        "the coordinator to make its commit's branch",
    )
    spark = SparkTables.of(SinkConfig.parse(Connector.objects.get(name=name).config))
    table_id = spark.procedures.table_identifier(TABLE)
    spark.sql(f"INSERT INTO {table_id} (id, ts, amount, op, region) VALUES (99999, 0, 0, 'u', 'r0')")
    other = table_of(name, TABLE).current_snapshot().snapshot_id
    wait_until(caught_up(name, ends), 240, "the coordinator to make its commit again and catch up")
    table = table_of(name, TABLE)
    assert other in {s.snapshot_id for s in ancestors_of(table.current_snapshot(), table.metadata)}
    assert [r["id"] for r in table.scan(row_filter="id = 99999").to_arrow().to_pylist()] == [99999]
    # (Its row deleted again, the whole file it is in: that snapshot removes a data file.)
    spark.sql(f"DELETE FROM {table_id} WHERE id = 99999")
    assert_table_equals_model(name, kafka_bootstrap, ends)
    assert_merged_on_read_with_deletion_vectors(name, frozenset({table_of(name, TABLE).current_snapshot().snapshot_id}))


def test_an_ordering_field_keeps_the_tables_later_row_of_a_key(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str
) -> None:
    """``sinkadmin.upsert.ordering-field`` on v3: a record older than the table's row of its key, by the field,
    is not applied (an update or a delete), nor counted absent; the rest are; the commit counts them."""
    name = "iceberg-v3-ordered"
    config = upsert_config(topic_name, **V3, **{"sinkadmin.upsert.ordering-field": "ts"})
    create_topic(kafka_bootstrap, topic_name, 1)
    actions.create_connector(name, config)

    def record(key: int, ts: int, amount: int, op: str = "u") -> bytes:
        return json.dumps({"id": key, "ts": ts, "amount": amount, "op": op, "region": f"r{key % 3}"}).encode()

    with running_in_threads(name):
        ends = produce(kafka_bootstrap, topic_name, [record(1, 10, 1), record(2, 10, 1), record(3, 10, 1)], 1)
        wait_until(caught_up(name, ends), 180, f"{name} to commit the first rows")
        second = [record(1, 5, 2), record(2, 20, 3), record(3, 5, 0, "d"), record(4, 1, 4), record(5, 1, 0, "d")]
        ends = produce(kafka_bootstrap, topic_name, second, 1)
        wait_until(caught_up(name, ends), 180, f"{name} to commit the second")
    rows = sorted((r["id"], r["ts"], r["amount"]) for r in table_rows(name, TABLE))
    assert rows == [(1, 10, 1), (2, 20, 3), (3, 10, 1), (4, 1, 4)]
    assert sorted((r["id"], r["ts"], r["amount"]) for r in duckdb_rows(name, TABLE)) == rows
    summary = table_of(name, TABLE).current_snapshot().summary.additional_properties
    assert (summary.get(STALE_RECORDS), summary.get(ABSENT_KEY_DELETES)) == ("2", "1"), summary


def test_a_column_renamed_before_a_prepared_commit_is_rolled_forward_keeps_its_values(
    procs: Processes, kafka_bootstrap: str, topic_name: str
) -> None:
    """The commit's files name ``amount``; the table's column is ``total`` by the time the commit is applied.
    Iceberg's name mapping keeps the old name, by which the rows are read: none comes out null."""
    name = "iceberg-v3-renamed"
    ends = start(procs, kafka_bootstrap, topic_name, name, 33)
    doomed = procs.coordinator(name, failpoints="coordinator.after_prepare=kill")
    assert doomed.wait(240) == -signal.SIGKILL
    assert Commit.objects.filter(connector_name=name, state=CommitState.PREPARED).exists()
    spark = SparkTables.of(SinkConfig.parse(Connector.objects.get(name=name).config))
    spark.sql(f"ALTER TABLE {spark.procedures.table_identifier(TABLE)} RENAME COLUMN amount TO total")
    procs.coordinator(name)
    wait_until(caught_up(name, ends), 240, "the new coordinator to roll the commit forward")
    rows = {r["id"]: (r["ts"], r["total"], r["op"]) for r in table_rows(name, TABLE)}
    model = model_of_topic(kafka_bootstrap, ends)
    assert rows == {key: (r["ts"], r["amount"], r["op"]) for key, r in model.items()}


def test_two_connectors_appending_to_one_format_v3_table_lose_and_repeat_nothing(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str
) -> None:
    """Each connector's statements race the other's commits (a branch made beside a commit, a fast-forward
    after main moved): the attempt that loses starts again. A coordinator whose commit failed would stop
    (it runs in a thread here), and its connector would not catch up."""
    topics = [f"{topic_name}-a", f"{topic_name}-b"]
    names = ["iceberg-v3-w1", "iceberg-v3-w2"]
    shared = {**V3, "iceberg.catalog": f"catalog-{topic_name}", "iceberg.control.commit.interval-ms": "300"}
    ends: dict[str, dict[tuple[str, int], int]] = {}
    for topic, name in zip(topics, names, strict=True):
        create_topic(kafka_bootstrap, topic, 2)
        actions.create_connector(name, sink_config(topic, "db.shared", **shared))
        ends[name] = {}
    with running_in_threads(names[0]), running_in_threads(names[1]):
        for wave in range(6):
            for index, (topic, name) in enumerate(zip(topics, names, strict=True)):
                first = (index * 6 + wave) * 200
                ends[name] = {**ends[name], **produce(kafka_bootstrap, topic, json_records(first, 200), 2)}
            for name in names:
                wait_until(caught_up(name, ends[name]), 180, f"{name} to commit wave {wave}")
    ids = sorted(r["id"] for r in table_rows(names[0], "db.shared"))
    assert ids == list(range(2 * 6 * 200))
