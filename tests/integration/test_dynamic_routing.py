"""One connector for a database's tables: Debezium's topics (one per source table) into one Iceberg table
each, named by the Iceberg sink's DebeziumTransform (``_cdc.target``) with dynamic routing
(``iceberg.tables.dynamic-enabled``), as the Apache Iceberg sink's users configure it. The tables have
different columns: each is created from its own records, with only its own columns, and upserted to its
source table's state, read by pyiceberg, Spark's Iceberg reader and DuckDB's."""

from __future__ import annotations

import random
from typing import Any

import pytest

from connectors import actions
from connectors.models import Commit, CommitState
from tests.conftest import sink_config
from tests.integration.helpers import (
    assert_upserts_merged_on_read,
    caught_up,
    create_topic,
    duckdb_rows,
    running_in_threads,
    table_of,
    table_rows,
    wait_until,
)
from tests.integration.test_debezium_cdc import PARTITIONS, SourceTable

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def order_columns(key: int, name: str, rng: random.Random) -> dict[str, Any]:
    return {"sku": f"sku-{key % 7}", "quantity": rng.randrange(1, 9), "amount": round(rng.uniform(0, 100), 2)}


@pytest.mark.parametrize("writer", ["spark", "arrow"])
def test_debezium_topics_of_several_tables_upsert_the_table_each_event_names(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, writer: str
) -> None:
    topics = {"customers": f"{topic_name}.public.customers", "orders": f"{topic_name}.public.orders"}
    for topic in topics.values():
        create_topic(kafka_bootstrap, topic, PARTITIONS)
    name = f"cdc-dynamic-{writer}"
    actions.create_connector(
        name,
        sink_config(
            topic_name,
            "",
            **{
                "topics": ",".join(topics.values()),
                "sinkadmin.writer": writer,
                "tasks.max": "2",
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
                # (A table of its own partitioning, by the table's name: read for a table no list names.)
                "iceberg.table.public.orders.partition-by": "bucket(4, sku)",
            },
        ),
    )
    sources = {
        "customers": SourceTable(seed=48, table="customers"),
        "orders": SourceTable(seed=49, table="orders", columns=order_columns),
    }
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

    columns = {"customers": ["id", "name", "amount"], "orders": ["id", "sku", "quantity", "amount"]}
    for table, source in sources.items():
        iceberg = f"public.{table}"
        schema = table_of(name, iceberg).schema()
        # Created from its own records: its columns and the transform's _cdc, none of the other table's.
        assert [f.name for f in schema.fields] == [*columns[table], "_cdc"]
        assert schema.identifier_field_names() == {"id"}
        rows = table_rows(name, iceberg)  # (pyiceberg's rows, checked against Spark's Iceberg reader)
        assert {r["id"]: {c: r[c] for c in columns[table]} for r in rows} == source.rows
        assert len(rows) == len(source.rows), f"a key is in {iceberg} twice"
        assert {r["_cdc"]["target"] for r in rows} == {iceberg}
        duck = duckdb_rows(name, iceberg)
        assert sorted(tuple(r[c] for c in columns[table]) for r in duck) == sorted(
            tuple(row[c] for c in columns[table]) for row in source.rows.values()
        )
        assert_upserts_merged_on_read(name, iceberg)
    spec = table_of(name, "public.orders").spec()
    assert [(f.name, str(f.transform)) for f in spec.fields] == [("sku_bucket", "bucket[4]")]
    # Each commit is one snapshot per table it wrote (I6), both tables in the commits that had records of both.
    committed = Commit.objects.filter(connector_name=name, state=CommitState.COMMITTED).exclude(files_count=0)
    assert any(set(c.snapshot_ids) == {"public.customers", "public.orders"} for c in committed)
    assert actions.committed_tables(name) == ["public.customers", "public.orders"]
