"""Records routed to their tables before they are decoded (sinks.iceberg.routing), without servers: static
and dynamic routing as Apache Iceberg's sink does it, each table decoded into its own columns and created
from its own records."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from connectors.config import SinkConfig
from connectors.config.validation import validate_config
from sinks.iceberg.routing import Router
from sinks.iceberg.writer import TableWriter
from workers.staging import RecordChunk, StagedPartition


def config(**keys: str) -> SinkConfig:
    return SinkConfig.parse(
        {
            "connector.class": "org.apache.iceberg.connect.IcebergSinkConnector",
            "topics": "orders",
            "iceberg.catalog.type": "sql",
            "iceberg.catalog.uri": "sqlite:///:memory:",
            "iceberg.catalog.warehouse": "file:///tmp/none",
            **keys,
        }
    )


def encoded(*values: object) -> list[bytes | None]:
    return [None if v is None else v if isinstance(v, bytes) else json.dumps(v).encode() for v in values]


@pytest.mark.unit
def test_static_routing_matches_each_tables_regex_against_the_whole_value_nested_and_numbers_as_text() -> None:
    router = Router(
        config(
            **{
                "iceberg.tables": "db.eu,db.rest,db.codes",
                "iceberg.tables.route-field": "where.region",
                "iceberg.table.db.eu.route-regex": "eu",
                "iceberg.table.db.rest.route-regex": "us|apac|eu",
                "iceberg.table.db.codes.route-regex": "[0-9]+",
            }
        )
    )
    values = encoded(
        {"where": {"region": "eu"}},  # both eu and rest
        {"where": {"region": "us"}},
        {"where": {"region": "europe"}},  # matches neither whole: skipped
        {"where": {"region": 44}},  # a number, as text
        {"where": {}},  # no value: skipped
        None,  # a tombstone: skipped
        b"[1]",
        {"where": 7},  # not an object where the field nests: bad
    )
    routed = Router.route(router, values, [None] * len(values))
    assert routed.tables == {"db.eu": [0], "db.rest": [0, 1], "db.codes": [3]}
    assert routed.skipped == 3
    assert [(p, r.split(":")[0]) for p, r in routed.bad] == [
        (6, "value is not a JSON object (it is list)"),
        (7, "value is not valid JSON, or a field does not fit its column type"),
    ]


@pytest.mark.unit
def test_dynamic_routing_names_the_table_lower_cased_and_refuses_what_names_none() -> None:
    router = Router(
        config(
            **{
                "iceberg.tables.dynamic-enabled": "true",
                "iceberg.tables.route-field": "_cdc.target",
                "errors.tolerance": "all",
                "errors.deadletterqueue.table.name": "db.dead",
            }
        )
    )
    values = encoded(
        {"_cdc": {"target": "Inventory.Customers"}},
        {"_cdc": {"target": "inventory.orders"}},
        {"_cdc": {"target": "orders"}},
        {"_cdc": {"target": "db.dead"}},
        {"_cdc": None},
        {"id": 1},
        {"_cdc": {"target": "inventory.customers"}},
        {"_cdc": {"target": "inventory.customers\n"}},  # (a line break ends no name)
    )
    errors: list[str | None] = [None] * len(values)
    errors[1] = "transforms.dbz (DebeziumTransform): no"
    routed = router.route(values, errors)
    assert routed.tables == {"inventory.customers": [0, 6]}
    assert routed.bad == [
        (1, "transforms.dbz (DebeziumTransform): no"),
        (2, "_cdc.target is 'orders', which names no table: a table is namespace.table"),
        (3, "_cdc.target names the dead-letter table db.dead"),
        (7, "_cdc.target is 'inventory.customers\\n', which names no table: a table is namespace.table"),
    ]
    assert routed.skipped == 2


@pytest.mark.unit
def test_an_envelopes_route_field_is_read_in_its_payload() -> None:
    router = Router(
        config(
            **{
                "iceberg.tables.dynamic-enabled": "true",
                "iceberg.tables.route-field": "table",
                "value.converter": "org.apache.kafka.connect.json.JsonConverter",
                "value.converter.schemas.enable": "true",
            }
        )
    )
    values = encoded({"schema": {"type": "struct"}, "payload": {"table": "db.a"}}, {"table": "db.b"})
    routed = router.route(values, [None, None])
    assert routed.tables == {"db.a": [0]}
    assert [p for p, _ in routed.bad] == [1]  # (no envelope)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("keys", "key", "error"),
    [
        (
            {"iceberg.tables.dynamic-enabled": "true"},
            "iceberg.tables.dynamic-enabled",
            "set iceberg.tables.route-field",
        ),
        (
            {
                "iceberg.tables.dynamic-enabled": "true",
                "iceberg.tables.route-field": "t",
                "iceberg.table.db.a.route-regex": "a",
            },
            "iceberg.table.db.a.route-regex",
            "no regex is matched",
        ),
        (
            {"iceberg.tables": "db.a,db.b", "iceberg.tables.route-field": "t", "iceberg.table.db.a.route-regex": "a"},
            "iceberg.tables",
            "db.b has no iceberg.table.<table>.route-regex",
        ),
        (
            {"iceberg.tables": "db.a", "iceberg.tables.route-field": "a..b"},
            "iceberg.tables.route-field",
            "nested with dots",
        ),
        ({}, "iceberg.tables", 'Missing required configuration "iceberg.tables"'),
    ],
)
def test_routing_configs_that_cannot_route_are_refused_per_key(keys: dict[str, str], key: str, error: str) -> None:
    result = validate_config(
        {
            "connector.class": "org.apache.iceberg.connect.IcebergSinkConnector",
            "topics": "orders",
            "iceberg.catalog.type": "sql",
            "iceberg.catalog.uri": "sqlite:///:memory:",
            **keys,
        }
    )
    assert any(error in message for message in result.errors.get(key, [])), result.errors


@pytest.mark.unit
def test_with_dynamic_routing_a_listed_table_is_noted_as_unused_and_per_table_settings_apply_to_any_table() -> None:
    keys = {
        "connector.class": "org.apache.iceberg.connect.IcebergSinkConnector",
        "topics": "orders",
        "iceberg.catalog.type": "sql",
        "iceberg.catalog.uri": "sqlite:///:memory:",
        "iceberg.tables": "db.a",
        "iceberg.tables.dynamic-enabled": "true",
        "iceberg.tables.route-field": "t",
        "iceberg.tables.upsert-mode-enabled": "true",
        "iceberg.tables.default-id-columns": "id",
        "iceberg.table.db.b.id-columns": "code",
        "iceberg.table.db.b.partition-by": "bucket(4, code)",
    }
    result = validate_config(keys)
    assert result.ok, result.errors
    assert "iceberg.tables.route-field" in result.notes["iceberg.tables"][0]
    settings = SinkConfig.parse(keys).settings
    assert settings.tables == ()
    assert settings.target("db.b").id_columns == ("code",)
    assert [str(f) for f in settings.target("db.b").partition_by] == ["bucket(4, code)"]
    assert settings.target("db.c").id_columns == ("id",)


def _writer(tmp_path: Path, **keys: str) -> TableWriter:
    return TableWriter(
        SinkConfig.parse(
            {
                "connector.class": "org.apache.iceberg.connect.IcebergSinkConnector",
                "topics": "orders",
                "iceberg.catalog.type": "sql",
                "iceberg.catalog.uri": f"sqlite:///{tmp_path}/catalog.db",
                "iceberg.catalog.warehouse": f"file://{tmp_path}/warehouse",
                "sinkadmin.writer": "arrow",
                "iceberg.tables.auto-create-enabled": "true",
                "errors.tolerance": "all",
                **keys,
            }
        )
    )


def _write(writer: TableWriter, values: list[bytes | None], tmp_path: Path) -> StagedPartition:
    staging_id = uuid.uuid4()
    sink = writer.sink(staging_id, "orders", 0, 0, tmp_path / "staging")
    n = len(values)
    sink.write(RecordChunk("orders", 0, list(range(n)), [None] * n, [None] * n, values, [None] * n, [None] * n))
    return sink.finish(StagedPartition("orders", 0, 0, n, n, None, None))


def _rows(staged: StagedPartition) -> dict[str, list[dict[str, Any]]]:
    rows: dict[str, list[dict[str, Any]]] = {}
    for f in staged.files:
        rows.setdefault(f.table, []).extend(pq.read_table(f.path).to_pylist())
    return rows


@pytest.mark.django_db
def test_each_table_a_record_names_is_created_from_its_own_records_and_decoded_into_its_own_columns(
    tmp_path: Path,
) -> None:
    writer = _writer(tmp_path, **{"iceberg.tables.dynamic-enabled": "true", "iceberg.tables.route-field": "_table"})
    values = encoded(
        {"_table": "inv.customers", "id": 1, "name": "Ada"},
        {"_table": "inv.orders", "id": 10, "amount": 2.5},
        {"_table": "inv.customers", "id": 2, "name": "Bo"},
        {"_table": "Inv.Orders", "id": 12, "amount": 4},
    )
    staged = _write(writer, values, tmp_path)
    catalog = writer.catalog
    assert [f.name for f in catalog.load_table("inv.customers").schema().fields] == ["_table", "id", "name"]
    assert [f.name for f in catalog.load_table("inv.orders").schema().fields] == ["_table", "id", "amount"]
    rows = _rows(staged)
    assert [(r["id"], r["name"]) for r in rows["inv.customers"]] == [(1, "Ada"), (2, "Bo")]
    assert [(r["id"], r["amount"]) for r in rows["inv.orders"]] == [(10, 2.5), (12, 4.0)]
    assert staged.bad == []


@pytest.mark.django_db
def test_a_record_one_of_its_tables_cannot_take_is_bad_and_written_to_none(tmp_path: Path) -> None:
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    writer = _writer(tmp_path, **{"iceberg.tables": "db.text,db.numbers"})
    writer.catalog.create_namespace("db")
    for name, value_type in (("db.text", StringType()), ("db.numbers", LongType())):
        writer.catalog.create_table(
            name,
            Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "v", value_type, required=False)),
        )
    staged = _write(writer, encoded({"id": 1, "v": "5"}, {"id": 2, "v": "x"}, None, {"id": 3, "v": "7"}), tmp_path)
    rows = _rows(staged)
    assert [r["id"] for r in rows["db.numbers"]] == [1, 3]
    assert [(r["id"], r["v"]) for r in rows["db.text"]] == [(1, "5"), (3, "7")]
    assert [(b.offset, b.reason.split(":")[0]) for b in staged.bad] == [
        (1, "value is not valid JSON, or a field does not fit its column type")
    ]
    assert staged.skipped == 1  # (the tombstone, once)


@pytest.mark.django_db
def test_a_table_a_record_names_that_is_not_created_makes_its_records_bad_not_the_connector(tmp_path: Path) -> None:
    writer = _writer(
        tmp_path,
        **{
            "iceberg.tables.dynamic-enabled": "true",
            "iceberg.tables.route-field": "_table",
            "iceberg.tables.auto-create-enabled": "false",
        },
    )
    writer.catalog.create_namespace("inv")
    writer.catalog.create_table("inv.kept", _writer_schema())
    staged = _write(writer, encoded({"_table": "inv.kept", "id": 1}, {"_table": "inv.typo", "id": 2}), tmp_path)
    assert [r["id"] for r in _rows(staged)["inv.kept"]] == [1]
    assert [(b.offset, b.reason) for b in staged.bad] == [
        (1, "table inv.typo does not exist and iceberg.tables.auto-create-enabled is false")
    ]


def _writer_schema() -> Any:
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    return Schema(
        NestedField(1, "_table", StringType(), required=False), NestedField(2, "id", LongType(), required=False)
    )


@pytest.mark.unit
def test_a_renamed_topic_put_in_a_field_routes_each_topic_to_the_table_it_names() -> None:
    """docs/transforms.md's recipe: RegexRouter renames the topic, InsertField puts it in the value, and
    dynamic routing writes it to that table, as Kafka Connect's chain and Iceberg's sink would."""
    from workers.transformed import RecordTransformer

    routed_by_topic = config(
        **{
            "iceberg.tables.dynamic-enabled": "true",
            "iceberg.tables.route-field": "_topic",
            "transforms": "rename,topic",
            "transforms.rename.type": "org.apache.kafka.connect.transforms.RegexRouter",
            "transforms.rename.regex": "dbserver1\\.inventory\\.(.*)",
            "transforms.rename.replacement": "inventory.$1",
            "transforms.topic.type": "org.apache.kafka.connect.transforms.InsertField$Value",
            "transforms.topic.topic.field": "_topic",
        }
    )
    chunks = {
        topic: RecordChunk(
            topic, 0, [0, 1], [None] * 2, [None] * 2, encoded({"id": 1}, {"id": 2}), [None] * 2, [None] * 2
        )
        for topic in ("dbserver1.inventory.customers", "dbserver1.inventory.orders")
    }
    router = Router(routed_by_topic.sink_view)
    for topic, table in (
        ("dbserver1.inventory.customers", "inventory.customers"),
        ("dbserver1.inventory.orders", "inventory.orders"),
    ):
        out, dropped = RecordTransformer(routed_by_topic, routed_by_topic.transforms).apply(chunks[topic])
        assert dropped == 0
        assert router.route(out.values, out.errors).tables == {table: [0, 1]}


@pytest.mark.django_db
def test_tables_made_elsewhere_with_uuid_binary_time_and_map_columns_each_take_their_own_columns(
    tmp_path: Path,
) -> None:
    """Columns Arrow's JSON readers cannot read are converted by the same decoder (workers.json_values), so
    records routed to tables of such different columns are each decoded into their own (decision 017)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import BinaryType, LongType, MapType, NestedField, StringType, TimeType, UUIDType

    writer = _writer(
        tmp_path,
        **{
            "iceberg.tables": "db.a,db.b",
            "iceberg.tables.route-field": "t",
            "iceberg.table.db.a.route-regex": "a",
            "iceberg.table.db.b.route-regex": "b",
        },
    )
    writer.catalog.create_namespace("db")
    writer.catalog.create_table(
        "db.a",
        Schema(
            NestedField(1, "id", UUIDType(), required=False),
            NestedField(2, "at", TimeType(), required=False),
            NestedField(3, "tags", MapType(4, StringType(), 5, LongType(), value_required=False), required=False),
        ),
    )
    writer.catalog.create_table(
        "db.b", Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "raw", BinaryType()))
    )
    first = "0f8fad5b-d9cb-469f-a165-70867728950e"
    values = encoded(
        {"t": "a", "id": first, "at": "10:15:30.25", "tags": {"x": 1}},
        {"t": "b", "id": 7, "raw": "AAEC"},
        {"t": "a", "id": "not-a-uuid"},
        {"t": "a", "at": 3_600_000},
    )
    staged = _write(writer, values, tmp_path)
    rows = _rows(staged)
    assert rows["db.a"] == [
        {"id": uuid.UUID(first), "at": dt.time(10, 15, 30, 250000), "tags": [("x", 1)]},
        {"id": None, "at": dt.time(1, 0), "tags": None},
    ]
    assert rows["db.b"] == [{"id": 7, "raw": b"\x00\x01\x02"}]
    assert [(b.offset, b.reason) for b in staged.bad] == [
        (2, "value is not valid JSON, or a field does not fit its column type: field id: 'not-a-uuid' is not a UUID")
    ]
