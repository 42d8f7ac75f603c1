"""Schema evolution (iceberg.tables.evolve-schema-enabled) against the real
broker, Postgres and catalog: record fields the table lacks become optional
columns, top-level and in structs, and no record is lost or doubled while
the tasks race to add them."""

from __future__ import annotations

import json

import pytest

from connectors import actions
from tests.integration.conftest import sink_config
from tests.integration.helpers import (
    caught_up,
    create_topic,
    json_records,
    produce,
    running_in_threads,
    table_of,
    table_rows,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_new_record_fields_become_columns_and_every_record_lands_once(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str
) -> None:
    create_topic(kafka_bootstrap, topic_name, 4)
    actions.create_connector(
        "evolving",
        sink_config(
            topic_name,
            "db.events",
            **{"iceberg.tables.evolve-schema-enabled": "true", "sinkadmin.staging.buffer-bytes": "65536"},
        ),
    )
    second: list[bytes | None] = [
        json.dumps(
            {"id": i, "name": f"n{i}", "country": "NO", "address": {"city": "Oslo"}, "score": i % 3 * 1.5}
        ).encode()
        for i in range(200, 400)
    ]
    # Many records as the table has them, then a new field in a struct: with
    # small chunks, a partition has written files before it meets the field
    # and rolls to new files (a file has one schema) within the commit.
    third: list[bytes | None] = [
        json.dumps({"id": i, "name": f"n{i}", "address": {"city": "Bergen"}, "score": 0.5}).encode()
        for i in range(400, 2400)
    ] + [
        json.dumps({"id": i, "name": f"n{i}", "address": {"city": "Bergen", "floor": 2}, "score": 0.5}).encode()
        for i in range(2400, 2600)
    ]
    with running_in_threads("evolving", tasks=2):
        ends = produce(kafka_bootstrap, topic_name, json_records(0, 200), 4)
        wait_until(caught_up("evolving", ends), 120, "the first records, in the auto-created table")
        # Both tasks meet the new fields in the same commit and race to add them.
        ends = produce(kafka_bootstrap, topic_name, second, 4)
        wait_until(caught_up("evolving", ends), 120, "records with new fields")
        ends = produce(kafka_bootstrap, topic_name, third, 4)
        wait_until(caught_up("evolving", ends), 120, "records with a new field in a struct")

    schema = table_of("evolving", "db.events").schema()
    columns = {f.name: str(f.field_type) for f in schema.fields}
    assert list(columns)[:3] == ["id", "name", "amount"]  # auto-created from the first records
    assert columns["country"] == "string"
    assert [(f.name, str(f.field_type)) for f in schema.find_field("address").field_type.fields] == [
        ("city", "string"),
        ("floor", "long"),
    ]
    assert columns["score"] == "double"
    rows = {r["id"]: r for r in table_rows("evolving", "db.events")}
    assert sorted(rows) == list(range(2600))  # every record once
    assert {(r["country"], r["address"], r["score"]) for i, r in rows.items() if i < 200} == {(None, None, None)}
    assert rows[202]["country"] == "NO" and rows[202]["address"] == {"city": "Oslo", "floor": None}
    assert rows[202]["score"] == 1.5
    assert rows[401]["country"] is None and rows[401]["address"] == {"city": "Bergen", "floor": None}
    assert rows[2401]["address"] == {"city": "Bergen", "floor": 2}
