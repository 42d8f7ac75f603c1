"""Keyed upserts on Iceberg, merge-on-read (position deletes) and copy-on-write (files rewritten), against
the real broker, Spark and the SQL catalog, read back with pyiceberg, Spark and DuckDB: each table equals a
plain Python model of the topic (the last record of each key; a CDC delete removes it), after clean runs on
both planes and after a task died with its files unreported, a coordinator died between the Spark job and
its snapshot or came back as a zombie (DESIGN I1, I3, I4); an executor killed in the job is in
test_spark_cluster.py."""

from __future__ import annotations

import json
import signal
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from connectors import actions
from connectors.config import SinkConfig
from connectors.models import Commit, CommitState, Connector
from sinks.iceberg import key_index
from sinks.iceberg.maintenance import SparkProcedures, TableMaintenance
from sinks.iceberg.tables import catalog_for, connector_catalog_properties
from tests.conftest import sink_config
from tests.integration.helpers import (
    Processes,
    assert_upserts_merged_on_read,
    caught_up,
    changes,
    create_topic,
    duckdb_rows,
    produce,
    running_in_threads,
    sink_snapshots,
    table_of,
    table_rows,
    topic_records,
    wait_until,
)
from workers.maintenance import BetweenCommits

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
    fields = ("id", "ts", "amount", "op", "region")
    found = {r["id"]: {k: r[k] for k in fields} for r in rows}
    assert found == {key: {k: r[k] for k in fields} for key, r in model_of_topic(bootstrap, ends).items()}
    duck = sorted((r["id"], r["amount"], r["op"]) for r in duckdb_rows(name, TABLE))
    assert duck == sorted((r["id"], r["amount"], r["op"]) for r in rows), "DuckDB reads other rows"


class Figures:
    """A maintenance run's figures, kept here (the maintenance ledger's ``record``)."""

    def __init__(self) -> None:
        self.recorded: dict[str, Any] = {}

    def record(self, run_id: int, **figures: Any) -> None:
        self.recorded.update(figures)


def compact(name: str, **changes: int) -> dict[str, Any]:
    """The connector's maintenance's compaction of TABLE (``changes``: to its settings), run here; its figures."""
    config = SinkConfig.parse(Connector.objects.get(name=name).config)
    settings = config.settings
    figures = Figures()
    with catalog_for(config) as catalog:
        TableMaintenance(
            replace(settings.maintenance, **changes),
            catalog,
            TABLE,
            SparkProcedures(settings.catalog_name, connector_catalog_properties(config)),
            BetweenCommits(),
            figures,  # type: ignore[arg-type]
            0,
        ).compact()
    return figures.recorded


def key_indexed_files(directory: Path) -> list[str]:
    """The data files whose key index entries are in ``directory``."""
    from pyarrow import ipc

    return [
        ipc.open_file(str(entry)).schema.metadata[b"data_file"].decode()
        for entry in sorted(directory.glob(f"*{key_index.SUFFIX}"))
    ]


def start(bootstrap: str, topic: str, name: str, count: int, seed: int, **overrides: str) -> dict[tuple[str, int], int]:
    create_topic(bootstrap, topic, PARTITIONS)
    ends = produce(bootstrap, topic, changes(count, 150, PARTITIONS, seed), PARTITIONS)
    actions.create_connector(name, upsert_config(topic, **overrides))
    return ends


@pytest.mark.parametrize(
    ("writer", "mode", "id_columns"), [("spark", "merge-on-read", "id,region"), ("arrow", "copy-on-write", "id")]
)
def test_upserts_leave_the_last_record_of_each_key(
    lake: dict[str, str],
    kafka_bootstrap: str,
    topic_name: str,
    writer: str,
    mode: str,
    id_columns: str,
    settings: Any,
    tmp_path: Path,
) -> None:
    """With a composite key (a key's region is its id's), keys are looked up as text, through the live files'
    key indexes (sinks.iceberg.key_index), which Spark's Python workers build and keep; with the id alone, as
    numbers."""
    settings.KEY_INDEX_DIR = str(tmp_path / "key-index")
    name = f"iceberg-upsert-{writer}"
    overrides = {
        "sinkadmin.writer": writer,
        "tasks.max": "2",
        "iceberg.table.db.orders.partition-by": "region",
        "iceberg.tables.auto-create-props.write.merge.mode": mode,
        "iceberg.tables.default-id-columns": id_columns,
    }
    create_topic(kafka_bootstrap, topic_name, PARTITIONS)
    actions.create_connector(name, upsert_config(topic_name, **overrides))
    ends: dict[tuple[str, int], int] = {}
    merged_on_read = 0  # (the commits made while the table was merge-on-read)
    with running_in_threads(name, tasks=2):
        # Two waves, so that the second commits updates and deletes of keys the table holds.
        for wave, seed in enumerate((11, 12)):
            ends = produce(kafka_bootstrap, topic_name, changes(1500, 150, PARTITIONS, seed), PARTITIONS)
            wait_until(caught_up(name, ends), 180, f"{name} to commit wave {wave}")
        if mode == "merge-on-read":
            # Then an operator switches the table to copy-on-write: the next wave rewrites the data files
            # holding its keys, without the rows the delete files deleted (which must not come back).
            merged_on_read = len(sink_snapshots(name, TABLE))
            with table_of(name, TABLE).transaction() as tx:
                tx.set_properties({"write.merge.mode": "copy-on-write"})
            ends = produce(kafka_bootstrap, topic_name, changes(500, 150, PARTITIONS, 13), PARTITIONS)
            wait_until(caught_up(name, ends), 180, f"{name} to commit a copy-on-write wave")
    assert_table_equals_model(name, kafka_bootstrap, ends)
    assert table_of(name, TABLE).schema().identifier_field_names() == set(id_columns.split(","))
    # (Integer keys, and composite keys as text, are looked up through the files' key indexes.)
    indexed = key_indexed_files(tmp_path / "key-index")
    location = table_of(name, TABLE).location()
    assert indexed and all(path.startswith(location) for path in indexed), (location, indexed)
    if mode == "merge-on-read":
        assert_upserts_merged_on_read(name, TABLE, merged_on_read)
        rewrites = [s.summary.additional_properties for s in sink_snapshots(name, TABLE)[merged_on_read:]]
        assert any("deleted-data-files" in summary for summary in rewrites), rewrites
        assert not any("added-position-delete-files" in summary for summary in rewrites), rewrites
        # The maintenance's compaction folds the deletes back: the data files with delete files are
        # rewritten without their deleted rows, and the delete files left are compacted away.
        compact(name, delete_file_threshold=1)
        table = table_of(name, TABLE)
        assert all(not task.delete_files for task in table.scan().plan_files())
        assert int(table.current_snapshot().summary.additional_properties.get("total-position-deletes", 0)) == 0
        assert_table_equals_model(name, kafka_bootstrap, ends)
    else:
        snapshots = sink_snapshots(name, TABLE)
        assert any("deleted-data-files" in s.summary.additional_properties for s in snapshots[1:])
        assert not any("added-position-delete-files" in s.summary.additional_properties for s in snapshots)


def test_a_coordinator_killed_between_the_position_deletes_and_its_snapshot_is_rolled_forward(
    procs: Processes, kafka_bootstrap: str, topic_name: str
) -> None:
    # (A merge-on-read table, as the sink creates one for upserts: the Spark job wrote its delete files.)
    name = "iceberg-upsert-kill"
    ends = start(kafka_bootstrap, topic_name, name, 2500, 13)
    procs.task(name)
    doomed = procs.coordinator(name, failpoints="upsert.before_snapshot=kill")
    assert doomed.wait(180) == -signal.SIGKILL
    assert Commit.objects.filter(connector_name=name, state=CommitState.PREPARED).exists()
    procs.coordinator(name)
    wait_until(caught_up(name, ends), 180, "the new coordinator to roll forward and catch up")
    assert_table_equals_model(name, kafka_bootstrap, ends)


def test_a_task_killed_after_writing_its_upsert_files_loses_and_duplicates_no_change(
    procs: Processes, kafka_bootstrap: str, topic_name: str
) -> None:
    # The task dies with its commit's files written and unreported: the coordinator's commit times out
    # without them, and the replacement task consumes those offsets again.
    name = "iceberg-upsert-task-kill"
    ends = start(kafka_bootstrap, topic_name, name, 2000, 19, **{"iceberg.control.commit.timeout-ms": "4000"})
    procs.coordinator(name)
    doomed = procs.task(name, failpoints="participant.before_status=kill")
    assert doomed.wait(120) == -signal.SIGKILL
    procs.task(name)
    wait_until(caught_up(name, ends), 180, "the replacement task to catch up")
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
    # The zombie's snapshot fails the catalog's check (the table moved on from the snapshot it started
    # from); its retry finds the commit's snapshot. It is fenced at its next ledger write.
    assert zombie.wait(120) == 0
    assert_table_equals_model(name, kafka_bootstrap, ends)


def test_an_upsert_table_without_its_identifier_column_fails_the_connector_before_anything_is_prepared(
    lake: dict[str, str], operator_api: Any, kafka_bootstrap: str, topic_name: str
) -> None:
    # Debezium envelopes into an upsert connector that does not unwrap them: a table auto-created from the
    # records would have before/after/op columns and no id. No commit could ever key its rows, so none is
    # prepared (a prepared commit must always be appliable), the table is not created (it would stay when the
    # config is mended), and the connector fails saying why, and what the records look like.
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
    assert (
        "the records for table db.orders (not created) have no column id of its identifier columns"
        in (connector["trace"])
    )
    assert "The records are Debezium change events (before, after, op)" in connector["trace"]
    assert not Commit.objects.filter(connector_name=name, state__in=[CommitState.PREPARED, CommitState.COMMITTED])
    with catalog_for(SinkConfig.parse(Connector.objects.get(name=name).config)) as catalog:
        assert not catalog.table_exists(TABLE)
