"""Debezium change events into Iceberg and Hudi through Kafka Connect transforms, as users configure them:
the Iceberg sink's own CDC config (its DebeziumTransform, ``iceberg.tables.cdc-field=_cdc.op``, upsert mode,
identifier columns), Debezium's ExtractNewRecordState (deletes rewritten with ``__deleted``, the operation
added as ``__op``), and Hudi with ExtractNewRecordState's default (a delete becomes a tombstone of its key). The events are a source table's history as Debezium's PostgreSQL connector publishes it
(JSON, keyed by the row's key, one partition per key): a snapshot, updates, deletes each followed by a
tombstone, and re-inserts, over several commits. Each table must equal the source table at the end, read
by pyiceberg and Spark's Iceberg reader, or by hudi-rs and Spark's Hudi reader."""

from __future__ import annotations

import base64
import datetime as dt
import json
import random
from collections.abc import Callable
from decimal import Decimal
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
        schema: Callable[[list[str]], dict[str, Any]] | None = None,
    ) -> None:
        self.table = table
        # With ``schema``: each event in JsonConverter's schema envelope, its rows' schema made of their columns
        # (Debezium's with value.converter.schemas.enable=true), its values as JsonConverter writes them.
        self.schema = schema
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
        if self.schema is not None:
            event = self._enveloped(event)
        self.events.append((partition, json.dumps({"id": key}).encode(), json.dumps(event).encode()))

    def _enveloped(self, event: dict[str, Any]) -> dict[str, Any]:
        assert self.schema is not None
        columns = list(next(row for row in (event["after"], event["before"]) if row is not None))
        row_schema = self.schema(columns)
        encoded = {
            side: None if event[side] is None else connect_payload(row_schema, event[side])
            for side in ("before", "after")
        }
        source_schema = {
            "type": "struct",
            "optional": False,
            "name": "io.debezium.connector.postgresql.Source",
            "fields": [
                {"field": name, "type": "int64" if name in ("ts_ms", "lsn") else "string", "optional": name == "lsn"}
                for name in event["source"]
            ],
        }
        envelope_schema = {
            "type": "struct",
            "optional": False,
            "name": f"dbserver1.public.{self.table}.Envelope",
            "version": 2,
            "fields": [
                {**row_schema, "optional": True, "field": "before"},
                {**row_schema, "optional": True, "field": "after"},
                {**source_schema, "field": "source"},
                {"field": "op", "type": "string", "optional": False},
                {"field": "ts_ms", "type": "int64", "optional": True},
            ],
        }
        return {"schema": envelope_schema, "payload": {**event, **encoded}}

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
                amount: Any = round(self.rng.uniform(0, 100), 2)
                if self.schema is not None:  # (a NUMERIC(10,2) column: its Decimal)
                    amount = Decimal(str(amount)).quantize(Decimal("0.01"))
                row = self._written({**before, "amount": amount})
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


def connect_payload(schema: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    """A row as JsonConverter writes it in the payload of ``schema``: a Decimal as the base64 of its unscaled
    integer, a date as its days, a timestamp as its epoch milliseconds."""
    out: dict[str, Any] = {}
    for field in schema["fields"]:
        value = row.get(field["field"])
        if isinstance(value, Decimal):
            unscaled = int(value.scaleb(int(field["parameters"]["scale"])))
            size = (unscaled + (unscaled < 0)).bit_length() // 8 + 1
            value = base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()
        elif isinstance(value, dt.datetime):
            value = int(value.timestamp() * 1000)
        elif isinstance(value, dt.date):
            value = (value - dt.date(1970, 1, 1)).days
        out[field["field"]] = value
    return out


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


# A PostgreSQL table's columns as Debezium's connector types them with time.precision.mode=connect: INTEGER an
# int32, SMALLINT an int16, NUMERIC(10,2) a Connect Decimal, DATE a Connect Date, TIMESTAMPTZ... as a Connect
# Timestamp, VARCHAR a string.
ORDER_TYPES: dict[str, dict[str, Any]] = {
    "id": {"type": "int32", "optional": False},
    "name": {"type": "string", "optional": True},
    "amount": {
        "type": "bytes",
        "optional": True,
        "name": "org.apache.kafka.connect.data.Decimal",
        "version": 1,
        "parameters": {"scale": "2", "connect.decimal.precision": "10"},
    },
    "qty": {"type": "int16", "optional": True},
    "ordered_on": {"type": "int32", "optional": True, "name": "org.apache.kafka.connect.data.Date", "version": 1},
    "updated_at": {"type": "int64", "optional": True, "name": "org.apache.kafka.connect.data.Timestamp", "version": 1},
    "discount": {
        "type": "bytes",
        "optional": True,
        "name": "org.apache.kafka.connect.data.Decimal",
        "version": 1,
        "parameters": {"scale": "3", "connect.decimal.precision": "6"},
    },
}


def order_columns(key: int, name: str, rng: random.Random) -> dict[str, Any]:
    return {
        "name": name,
        "amount": Decimal(rng.randrange(-(10**8), 10**8)).scaleb(-2),
        "qty": rng.randrange(-300, 300),
        "ordered_on": dt.date(2024, 1, 1) + dt.timedelta(days=rng.randrange(-800, 800)),
        "updated_at": dt.datetime(2024, 5, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=rng.randrange(10**11)),
    }


def test_debezium_events_with_their_schemas_make_the_tables_the_iceberg_sink_makes_of_them(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    """Debezium's events in JsonConverter's schema envelope (value.converter.schemas.enable=true, its default)
    through the Iceberg sink's DebeziumTransform and through ExtractNewRecordState: the tasks transform each with
    its schema, so the tables the sink creates are typed as the Iceberg sink types them (a Decimal a
    decimal(38, scale), a Date a date, a Timestamp a timestamptz, an int16 an int), not from the JSON (strings
    and longs); a decimal column added to the source mid-stream is added as one. Each table equals the source,
    read by pyiceberg, Spark's Iceberg reader and DuckDB's."""
    from pyiceberg.types import DateType, DecimalType, IntegerType, LongType, StringType, TimestamptzType

    create_topic(kafka_bootstrap, topic_name, PARTITIONS)
    base = cdc_configs(topic_name, tmp_path)
    # (Schema evolution from envelopes is the spark data plane's.)
    enveloped = {
        "value.converter.schemas.enable": "true",
        "iceberg.tables.evolve-schema-enabled": "true",
        "sinkadmin.writer": "spark",
    }
    configs = {
        "typed-dbz": {**base["cdc-iceberg-transform"], **enveloped, "iceberg.tables": "db.orders_dbz"},
        "typed-unwrap": {**base["cdc-unwrap-rewrite"], **enveloped, "iceberg.tables": "db.orders_unwrap"},
    }
    for name, config in configs.items():
        assert SinkConfig.parse(config).staged_transforms is not None  # (with schemas: the tasks' stage)
        actions.create_connector(name, config)
    source = SourceTable(
        seed=48,
        table="orders",
        columns=order_columns,
        schema=lambda names: {
            "type": "struct",
            "optional": False,
            "name": "dbserver1.public.orders.Value",
            "fields": [{**ORDER_TYPES[name], "field": name} for name in names],
        },
    )
    ends: dict[tuple[str, int], int] = {}
    with running_in_threads("typed-dbz"), running_in_threads("typed-unwrap"):
        for wave in range(3):
            if wave == 0:
                source.snapshot(120)
            else:
                if wave == 2:  # ALTER TABLE orders ADD COLUMN discount NUMERIC(6,3)
                    source.added["discount"] = lambda key: Decimal(key % 1000).scaleb(-3)
                source.changes(200)
            ends = {**ends, **source.publish(kafka_bootstrap, topic_name)}
            for name in configs:
                wait_until(caught_up(name, ends), 240, f"{name} to commit wave {wave}")

    typed = {
        "id": IntegerType(),
        "name": StringType(),
        "amount": DecimalType(38, 2),
        "qty": IntegerType(),
        "ordered_on": DateType(),
        "updated_at": TimestamptzType(),
        "discount": DecimalType(38, 3),
    }
    columns = list(typed)
    model = {key: {c: row.get(c) for c in columns} for key, row in source.rows.items()}
    for name, table in (("typed-dbz", "db.orders_dbz"), ("typed-unwrap", "db.orders_unwrap")):
        schema = table_of(name, table).schema()
        assert {c: schema.find_field(c).field_type for c in columns} == typed, name
        assert schema.identifier_field_names() == {"id"}
        rows = table_rows(name, table)
        assert {r["id"]: {c: r[c] for c in columns} for r in rows} == model, name
        assert len(rows) == len(model), "a key is in the table twice"
        duck = duckdb_rows(name, table)
        assert sorted((r["id"], r["amount"], r["ordered_on"], r["discount"]) for r in duck) == sorted(
            (r["id"], r["amount"], r["ordered_on"], r["discount"]) for r in model.values()
        )
        assert_upserts_merged_on_read(name, table)
    dbz = table_of("typed-dbz", "db.orders_dbz").schema()
    assert (dbz.find_field("_cdc.ts").field_type, dbz.find_field("_cdc.offset").field_type) == (
        TimestamptzType(),
        LongType(),
    )
    unwrap = table_of("typed-unwrap", "db.orders_unwrap").schema()
    assert unwrap.find_field("__source_ts_ms").field_type == LongType()
