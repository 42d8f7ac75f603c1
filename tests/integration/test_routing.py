"""Fan-out to several tables: one snapshot per table per commit, routed by a field (I6)."""

from __future__ import annotations

import json

import pytest

from connectors import actions
from connectors.models import Commit, CommitState
from tests.integration.conftest import sink_config
from tests.integration.helpers import caught_up, create_topic, produce, running_in_threads, table_rows, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_records_are_routed_by_field_and_every_table_gets_one_snapshot_per_commit(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str
) -> None:
    regions = ["eu", "us", "apac", "eu"]
    values: list[bytes | None] = [json.dumps({"id": i, "region": regions[i % 4]}).encode() for i in range(80)]
    create_topic(kafka_bootstrap, topic_name, 2)
    ends = produce(kafka_bootstrap, topic_name, values, 2)
    actions.create_connector(
        "routed",
        sink_config(
            topic_name,
            "db.eu,db.rest",
            **{
                "iceberg.tables.route-field": "region",
                "iceberg.table.db.eu.route-regex": "eu",
                "iceberg.table.db.rest.route-regex": "us|apac",
            },
        ),
    )
    with running_in_threads("routed"):
        wait_until(caught_up("routed", ends), 120, "the routed records")
    eu = sorted(r["id"] for r in table_rows("routed", "db.eu"))
    rest = sorted(r["id"] for r in table_rows("routed", "db.rest"))
    assert eu == [i for i in range(80) if regions[i % 4] == "eu"]
    assert rest == [i for i in range(80) if regions[i % 4] != "eu"]
    for commit in Commit.objects.filter(connector_name="routed", state=CommitState.COMMITTED).exclude(files_count=0):
        assert set(commit.snapshot_ids) == {"db.eu", "db.rest"}
