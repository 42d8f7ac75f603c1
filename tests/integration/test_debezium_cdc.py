"""Debezium change events into Iceberg and Hudi through Kafka Connect transforms, as users configure them:
the Iceberg sink's own CDC config (its DebeziumTransform, ``iceberg.tables.cdc-field=_cdc.op``, upsert mode,
identifier columns), Debezium's ExtractNewRecordState (deletes rewritten with ``__deleted``, the operation
added as ``__op``), and Hudi with ExtractNewRecordState's default (a delete becomes a tombstone of its key). The events are a source table's history as Debezium's PostgreSQL connector publishes it
(JSON, keyed by the row's key, one partition per key): a snapshot, updates, deletes each followed by a
tombstone, and re-inserts, over several commits. Each table must equal the source table at the end, read
by pyiceberg and Spark's Iceberg reader, or by hudi-rs and Spark's Hudi reader."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from connectors import actions
from connectors.config import SinkConfig
from sinks.iceberg.upserts import STALE_RECORDS
from tests.conftest import sink_config
from tests.integration.helpers import (
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
from tests.integration.test_hudi_sink import read

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

PARTITIONS = 3
SOURCE = {
    "version": "2.7.3.Final",
    "connector": "postgresql",
    "name": "dbserver1",
    "db": "inventory",
    "schema": "public",
    "table": "customers",
}


class SourceTable:
    """A table of the source database and the change events Debezium publishes for what happens to it."""

    def __init__(
        self,
        seed: int,
        scatter: bool = False,
        table: str = "customers",
        columns: Callable[[int, str, random.Random], dict[str, Any]] | None = None,
    ) -> None:
        self.table = table
        # A new row's columns but its key (the row's amount is what updates change).
        self.columns = columns or (lambda key, name, rng: {"name": name, "amount": round(rng.uniform(0, 100), 2)})
        self.rows: dict[int, dict[str, Any]] = {}
        self.rng = random.Random(seed)
        # Each event to a random partition, not its key's (a topic repartitioned, tables merged into one).
        self.scatter = scatter
        # Columns added to the table (ALTER TABLE ... ADD COLUMN): each row written from then on has them.
        self.added: dict[str, Callable[[int], Any]] = {}
        self.lsn = 1000
        # (partition, key, value) in the order Debezium produces them.
        self.events: list[tuple[int, bytes, bytes | None]] = []

    def _written(self, row: dict[str, Any]) -> dict[str, Any]:
        return {**row, **{column: value(row["id"]) for column, value in self.added.items()}}

    def _emit(self, op: str, key: int, before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
        self.lsn += 8
        event = {
            "before": before,
            "after": after,
            "source": {
                **SOURCE,
                "table": self.table,
                "ts_ms": 1_700_000_000_000 + self.lsn,
                "snapshot": "true" if op == "r" else "false",
                "lsn": self.lsn,
            },
            "op": op,
            "ts_ms": 1_700_000_000_500 + self.lsn,
        }
        partition = self.rng.randrange(PARTITIONS) if self.scatter else key % PARTITIONS
        self.events.append((partition, json.dumps({"id": key}).encode(), json.dumps(event).encode()))

    def snapshot(self, count: int) -> None:
        for key in range(count):
            row = {"id": key, **self.columns(key, f"{self.table[:-1]}-{key}", self.rng)}
            self.rows[key] = row
            self._emit("r", key, None, row)

    def changes(self, count: int, delete_share: float = 0.2) -> None:
        """Updates, deletes (each followed by its tombstone) and inserts of keys deleted before."""
        for _ in range(count):
            key = self.rng.randrange(0, len(self.rows) + 20)
            before = self.rows.get(key)
            if before is None:
                row = self._written({"id": key, **self.columns(key, f"{self.table[:-1]}-{key}-again", self.rng)})
                self.rows[key] = row
                self._emit("c", key, None, row)
            elif self.rng.random() < delete_share:
                del self.rows[key]
                self._emit("d", key, before, None)
                self.events.append((key % PARTITIONS, json.dumps({"id": key}).encode(), None))
            else:
                row = self._written({**before, "amount": round(self.rng.uniform(0, 100), 2)})
                self.rows[key] = row
                self._emit("u", key, before, row)

    def publish(self, bootstrap: str, topic: str) -> dict[tuple[str, int], int]:
        """Produce the events not yet produced, each to its key's partition; the partitions' end offsets."""
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        ends: dict[tuple[str, int], int] = {}

        def delivered(err: Any, msg: Any) -> None:
            assert err is None, err
            ends[(msg.topic(), msg.partition())] = max(ends.get((msg.topic(), msg.partition()), 0), msg.offset() + 1)

        for partition, key, value in self.events:
            producer.produce(topic, value, key, partition=partition, on_delivery=delivered)
        self.events.clear()
        assert producer.flush(30) == 0
        return ends


def cdc_configs(topic: str, hudi_base: Path) -> dict[str, dict[str, str]]:
    """Four connectors over the same topic, each as its users write it."""
    keyed = {
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "key.converter.schemas.enable": "false",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false",
        "iceberg.tables.upsert-mode-enabled": "true",
        "iceberg.tables.default-id-columns": "id",
    }
    return {
        "cdc-iceberg-transform": sink_config(
            topic,
            "db.customers_dbz",
            **keyed,
            **{
                "iceberg.control.topic": f"control-{topic}-dbz",
                "transforms": "dbz",
                "transforms.dbz.type": "org.apache.iceberg.connect.transforms.DebeziumTransform",
                "iceberg.tables.cdc-field": "_cdc.op",
                # (The event's time orders a key's records in a commit; here a key's are in one partition.)
                "sinkadmin.upsert.ordering-field": "_cdc.ts",
            },
        ),
        "cdc-unwrap-rewrite": sink_config(
            topic,
            "db.customers_unwrap",
            **keyed,
            **{
                "iceberg.control.topic": f"control-{topic}-unwrap",
                "sinkadmin.writer": "arrow",
                "transforms": "unwrap",
                "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
                "transforms.unwrap.delete.handling.mode": "rewrite",
                "transforms.unwrap.add.fields": "op,table,source.ts_ms",
                "iceberg.tables.cdc-field": "__op",
                "sinkadmin.upsert.ordering-field": "__source_ts_ms",
            },
        ),
        # Hudi: Debezium's default delete handling (a delete becomes a tombstone), the key unwrapped to the
        # row's id, which the tombstone deletes (merge-on-read, ordered by commit).
        "cdc-hudi": {
            "connector.class": "org.apache.hudi.connect.HoodieSinkConnector",
            "topics": topic,
            "target.base.path": str(hudi_base),
            "target.table.name": "customers",
            **{k: v for k, v in keyed.items() if not k.startswith("iceberg.")},
            "hoodie.table.type": "MERGE_ON_READ",
            "hoodie.datasource.write.recordkey.field": "id",
            "hoodie.datasource.write.partitionpath.field": "",
            "hoodie.record.merge.mode": "COMMIT_TIME_ORDERING",
            "sinkadmin.control.topic": f"control-{topic}-hudi",
            "sinkadmin.commit.interval-ms": "1500",
            "transforms": "unwrap,key",
            "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
            "transforms.key.type": "org.apache.kafka.connect.transforms.ExtractField$Key",
            "transforms.key.field": "id",
        },
        # Hudi with the Iceberg sink's DebeziumTransform: ordered by the event's time, nested in _cdc (Hudi reads
        # a nested precombine field), deletes marked by _cdc.op, Debezium's tombstones dropped first
        # (copy-on-write).
        "cdc-hudi-dbz": {
            "connector.class": "org.apache.hudi.connect.HoodieSinkConnector",
            "topics": topic,
            "target.base.path": str(hudi_base.with_name(hudi_base.name + "_dbz")),
            "target.table.name": "customers_dbz",
            **{k: v for k, v in keyed.items() if not k.startswith("iceberg.")},
            "hoodie.table.type": "COPY_ON_WRITE",
            "hoodie.datasource.write.recordkey.field": "id",
            "hoodie.datasource.write.partitionpath.field": "",
            "hoodie.datasource.write.precombine.field": "_cdc.ts",
            "hoodie.payload.delete.field": "_cdc.op",
            "hoodie.payload.delete.marker": "D",
            "sinkadmin.control.topic": f"control-{topic}-hudi-dbz",
            "sinkadmin.commit.interval-ms": "1500",
            "transforms": "tombstones,dbz",
            "transforms.tombstones.type": "org.apache.kafka.connect.transforms.Filter",
            "transforms.tombstones.predicate": "tombstone",
            "predicates": "tombstone",
            "predicates.tombstone.type": "org.apache.kafka.connect.transforms.predicates.RecordIsTombstone",
            "transforms.dbz.type": "org.apache.iceberg.connect.transforms.DebeziumTransform",
        },
    }


def test_debezium_events_upsert_iceberg_and_hudi_tables_to_the_source_tables_state(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    create_topic(kafka_bootstrap, topic_name, PARTITIONS)
    configs = cdc_configs(topic_name, tmp_path / "customers")
    # (Debezium's unwrap and the DebeziumTransform are applied by the Iceberg writer's decoder as it reads the
    # events, not by the tasks; the Hudi sink's chain by the tasks as they stage them. The tests below, with
    # schema evolution, take the DebeziumTransform through the tasks.)
    assert SinkConfig.parse(configs["cdc-unwrap-rewrite"]).staged_transforms is None
    assert SinkConfig.parse(configs["cdc-iceberg-transform"]).staged_transforms is None
    assert SinkConfig.parse(configs["cdc-hudi"]).staged_transforms is not None
    for name, config in configs.items():
        actions.create_connector(name, config)
    source = SourceTable(seed=45)
    ends: dict[tuple[str, int], int] = {}
    with (
        running_in_threads("cdc-iceberg-transform"),
        running_in_threads("cdc-unwrap-rewrite"),
        running_in_threads("cdc-hudi"),
        running_in_threads("cdc-hudi-dbz"),
    ):
        for wave in range(3):
            if wave == 0:
                source.snapshot(150)
            else:
                source.changes(250)
            ends = {**ends, **source.publish(kafka_bootstrap, topic_name)}
            for name in configs:
                wait_until(caught_up(name, ends), 240, f"{name} to commit wave {wave}")

    model = source.rows
    dbz = table_rows("cdc-iceberg-transform", "db.customers_dbz")
    assert {r["id"]: {k: r[k] for k in ("id", "name", "amount")} for r in dbz} == model
    assert len(dbz) == len(model), "a key is in the table twice"
    for name, table in (("cdc-iceberg-transform", "db.customers_dbz"), ("cdc-unwrap-rewrite", "db.customers_unwrap")):
        # The tables were created merge-on-read (upsert mode): updates and deletes are position deletes.
        assert_upserts_merged_on_read(name, table)
        # ... and with their id column as the table's identifier field (so required).
        schema = table_of(name, table).schema()
        assert schema.identifier_field_names() == {"id"} and schema.find_field("id").required
        # A third reader, DuckDB's, applies them as pyiceberg and Spark do.
        duck = duckdb_rows(name, table)
        assert sorted((r["id"], r["name"], r["amount"]) for r in duck) == sorted(
            (r["id"], r["name"], r["amount"]) for r in model.values()
        )
    # The Iceberg sink's CDC metadata: the operation that wrote the row, where it came from.
    assert {r["_cdc"]["op"] for r in dbz} <= {"I", "U"}
    assert {r["_cdc"]["target"] for r in dbz} == {"public.customers"}

    unwrapped = table_rows("cdc-unwrap-rewrite", "db.customers_unwrap")
    assert {r["id"]: {k: r[k] for k in ("id", "name", "amount")} for r in unwrapped} == model
    assert len(unwrapped) == len(model)
    assert {r["__deleted"] for r in unwrapped} == {"false"}
    assert {r["__table"] for r in unwrapped} == {"customers"}
    assert {r["__op"] for r in unwrapped} <= {"r", "c", "u"}

    # hudi-rs's snapshot, checked against Hudi's Spark reader (tests.integration.test_hudi_sink.read).
    for base in (tmp_path / "customers", tmp_path / "customers_dbz"):
        hudi = read(base)
        assert {r["id"]: {k: r[k] for k in ("id", "name", "amount")} for r in hudi} == model
        assert len(hudi) == len(model)


def test_a_keys_events_in_several_partitions_apply_in_source_order_by_the_ordering_field(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    """Updates of a key reach any partition. The newer half of them (by LSN) is committed first, then the
    older half: within a commit the ordering field picks a key's latest event whatever its partition, and
    across commits an event older than the table's row of its key is not applied."""
    create_topic(kafka_bootstrap, topic_name, PARTITIONS)
    name, table = "cdc-scattered", "db.customers_scattered"
    config = cdc_configs(topic_name, tmp_path)["cdc-iceberg-transform"]
    actions.create_connector(name, {**config, "iceberg.tables": table, "tasks.max": "2"})
    source = SourceTable(seed=46, scatter=True)
    with running_in_threads(name, tasks=2):
        source.snapshot(100)
        wait_until(caught_up(name, source.publish(kafka_bootstrap, topic_name)), 240, f"{name} to commit the snapshot")
        source.changes(300, delete_share=0)  # (a delete leaves no row for an older event to lose to)
        events = source.events
        newer, older = events[len(events) // 2 :], events[: len(events) // 2]
        for wave in (newer, older):
            source.events = list(wave)
            wait_until(caught_up(name, source.publish(kafka_bootstrap, topic_name)), 240, f"{name} to commit")
    rows = table_rows(name, table)
    assert {r["id"]: {k: r[k] for k in ("id", "name", "amount")} for r in rows} == source.rows
    assert len(rows) == len(source.rows), "a key is in the table twice"
    stale = [int(s.summary.additional_properties.get(STALE_RECORDS, 0)) for s in sink_snapshots(name, table)]
    assert sum(stale) > 0, "no older event met the table's newer row of its key"


def test_a_column_added_to_the_source_table_becomes_a_column_of_the_upserted_table(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    """A column added to the source table mid-stream (its events' ``after`` gain a field) is added to the
    Iceberg table (iceberg.tables.evolve-schema-enabled); rows written before it have no value for it."""
    create_topic(kafka_bootstrap, topic_name, PARTITIONS)
    name, table = "cdc-evolving", "db.customers_evolving"
    config = cdc_configs(topic_name, tmp_path)["cdc-iceberg-transform"]
    actions.create_connector(name, {**config, "iceberg.tables": table, "iceberg.tables.evolve-schema-enabled": "true"})
    source = SourceTable(seed=47)
    with running_in_threads(name):
        source.snapshot(100)
        wait_until(caught_up(name, source.publish(kafka_bootstrap, topic_name)), 240, f"{name} to commit the snapshot")
        source.added["tier"] = lambda key: f"tier-{key % 3}"
        source.changes(200)
        wait_until(caught_up(name, source.publish(kafka_bootstrap, topic_name)), 240, f"{name} to commit the changes")
    schema = table_of(name, table).schema()
    assert schema.find_field("tier").required is False
    rows = table_rows(name, table)
    found = {r["id"]: {k: r[k] for k in ("id", "name", "amount", "tier")} for r in rows}
    assert found == {key: {"tier": None, **row} for key, row in source.rows.items()}
    assert any(r["tier"] is not None for r in rows) and any(r["tier"] is None for r in rows)
    assert_upserts_merged_on_read(name, table)
