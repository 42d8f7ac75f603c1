"""One connector for a database's tables: Debezium's topics (one per source table) into one Iceberg table
each, named by the Iceberg sink's DebeziumTransform (``_cdc.target``) with dynamic routing
(``iceberg.tables.dynamic-enabled``), as the Apache Iceberg sink's users configure it. The tables have
different columns: each is created from its own records, with only its own columns, and upserted to its
source table's state, read by pyiceberg, Spark's Iceberg reader and DuckDB's."""

from __future__ import annotations

import random
import signal
from typing import Any

import pytest

from connectors import actions
from connectors.models import Commit, CommitState, MaintenanceOutcome, MaintenanceRun
from sinks.iceberg.tables import PROP_COMMIT_ID
from tests.conftest import sink_config
from tests.integration.helpers import (
    Processes,
    assert_upserts_merged_on_read,
    caught_up,
    create_topic,
    duckdb_rows,
    running_in_threads,
    sink_snapshots,
    table_of,
    table_rows,
    wait_until,
)
from tests.integration.test_debezium_cdc import PARTITIONS, SourceTable

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def order_columns(key: int, name: str, rng: random.Random) -> dict[str, Any]:
    return {"sku": f"sku-{key % 7}", "quantity": rng.randrange(1, 9), "amount": round(rng.uniform(0, 100), 2)}


def dynamic_config(topic_name: str, topics: dict[str, str], **overrides: str) -> dict[str, str]:
    """Debezium's topics of a database, each event's table named by DebeziumTransform's _cdc.target."""
    return sink_config(
        topic_name,
        "",
        **{
            "topics": ",".join(topics.values()),
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "key.converter.schemas.enable": "false",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter.schemas.enable": "false",
            "transforms": "dbz",
            "transforms.dbz.type": "org.apache.iceberg.connect.transforms.DebeziumTransform",
            "iceberg.tables.dynamic-enabled": "true",
            "iceberg.tables.route-field": "_cdc.target",
            "iceberg.tables.cdc-field": "_cdc.op",
            "iceberg.tables.upsert-mode-enabled": "true",
            "iceberg.tables.default-id-columns": "id",
            **overrides,
        },
    )


def source_tables() -> dict[str, SourceTable]:
    return {
        "customers": SourceTable(seed=48, table="customers"),
        "orders": SourceTable(seed=49, table="orders", columns=order_columns),
    }


def create_topics(bootstrap: str, topic_name: str) -> dict[str, str]:
    topics = {"customers": f"{topic_name}.public.customers", "orders": f"{topic_name}.public.orders"}
    for topic in topics.values():
        create_topic(bootstrap, topic, PARTITIONS)
    return topics


COLUMNS = {"customers": ["id", "name", "amount"], "orders": ["id", "sku", "quantity", "amount"]}


def assert_tables_equal_the_sources(name: str, sources: dict[str, SourceTable]) -> None:
    """Each table holds its source table's rows, each once (pyiceberg's rows, checked against Spark's)."""
    for table, source in sources.items():
        rows = table_rows(name, f"public.{table}")
        assert {r["id"]: {c: r[c] for c in COLUMNS[table]} for r in rows} == source.rows
        assert len(rows) == len(source.rows), f"a key is in public.{table} twice"


@pytest.mark.parametrize("writer", ["spark", "arrow"])
def test_debezium_topics_of_several_tables_upsert_the_table_each_event_names(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, writer: str
) -> None:
    topics = create_topics(kafka_bootstrap, topic_name)
    name = f"cdc-dynamic-{writer}"
    actions.create_connector(
        name,
        dynamic_config(
            topic_name,
            topics,
            **{
                "sinkadmin.writer": writer,
                "tasks.max": "2",
                # (A table of its own partitioning, by the table's name: read for a table no list names.)
                "iceberg.table.public.orders.partition-by": "bucket(4, sku)",
            },
        ),
    )
    sources = source_tables()
    ends: dict[tuple[str, int], int] = {}
    with running_in_threads(name, tasks=2):
        for wave in range(3):
            for table, source in sources.items():
                if wave == 0:
                    source.snapshot(120)
                else:
                    source.changes(200)
                ends = {**ends, **source.publish(kafka_bootstrap, topics[table])}
            wait_until(caught_up(name, ends), 240, f"{name} to commit wave {wave}")

    assert_tables_equal_the_sources(name, sources)
    for table, source in sources.items():
        iceberg = f"public.{table}"
        schema = table_of(name, iceberg).schema()
        # Created from its own records: its columns and the transform's _cdc, none of the other table's.
        assert [f.name for f in schema.fields] == [*COLUMNS[table], "_cdc"]
        assert schema.identifier_field_names() == {"id"}
        assert {r["_cdc"]["target"] for r in table_rows(name, iceberg)} == {iceberg}
        duck = duckdb_rows(name, iceberg)
        assert sorted(tuple(r[c] for c in COLUMNS[table]) for r in duck) == sorted(
            tuple(row[c] for c in COLUMNS[table]) for row in source.rows.values()
        )
        assert_upserts_merged_on_read(name, iceberg)
    spec = table_of(name, "public.orders").spec()
    assert [(f.name, str(f.transform)) for f in spec.fields] == [("sku_bucket", "bucket[4]")]
    # Each commit is one snapshot per table it wrote (I6), both tables in the commits that had records of both.
    committed = Commit.objects.filter(connector_name=name, state=CommitState.COMMITTED).exclude(files_count=0)
    assert any(set(c.snapshot_ids) == {"public.customers", "public.orders"} for c in committed)
    assert actions.committed_tables(name) == ["public.customers", "public.orders"]


def test_a_coordinator_killed_between_the_tables_of_a_commit_rolls_it_forward_into_the_others_once(
    procs: Processes, kafka_bootstrap: str, topic_name: str
) -> None:
    """The coordinator dies after one table's snapshot of a commit, before the other's: its successor
    finds the commit in the first table (its snapshot's commit id) and makes it in the other only (I4, I6)."""
    topics = create_topics(kafka_bootstrap, topic_name)
    name = "cdc-dynamic-killed"
    # (Maintenance runs beside it, on the tables its commits name: the ledger's, with dynamic routing.)
    maintained = {"sinkadmin.maintenance.enabled": "true", "sinkadmin.maintenance.interval-ms": "2000"}
    actions.create_connector(name, dynamic_config(topic_name, topics, **maintained))
    sources = source_tables()
    procs.task(name)
    first = procs.coordinator(name)
    ends: dict[tuple[str, int], int] = {}
    for table, source in sources.items():
        source.snapshot(80)
        ends = {**ends, **source.publish(kafka_bootstrap, topics[table])}
    wait_until(caught_up(name, ends), 240, "the snapshot to be committed")
    first.kill()
    first.wait(30)
    for table, source in sources.items():
        source.changes(150)
        ends = {**ends, **source.publish(kafka_bootstrap, topics[table])}
    doomed = procs.coordinator(name, failpoints="iceberg.between_tables=kill")
    assert doomed.wait(240) == -signal.SIGKILL
    prepared = Commit.objects.get(connector_name=name, state=CommitState.PREPARED)
    holding = [
        table
        for table in ("public.customers", "public.orders")
        if any(
            s.summary.additional_properties[PROP_COMMIT_ID] == str(prepared.commit_id)
            for s in sink_snapshots(name, table)
        )
    ]
    assert len(holding) == 1, holding
    procs.coordinator(name)
    wait_until(caught_up(name, ends), 240, "the successor to roll the commit forward and catch up")
    assert_tables_equal_the_sources(name, sources)
    for table in ("public.customers", "public.orders"):
        ids = [s.summary.additional_properties[PROP_COMMIT_ID] for s in sink_snapshots(name, table)]
        assert len(ids) == len(set(ids)), f"a commit is in {table} twice"
        assert str(prepared.commit_id) in ids

    def maintained_both() -> bool:
        runs = MaintenanceRun.objects.filter(connector_name=name, outcome=MaintenanceOutcome.SUCCEEDED)
        return set(runs.values_list("table_name", flat=True)) == {"public.customers", "public.orders"}

    wait_until(maintained_both, 120, "a maintenance run of each table records named")
