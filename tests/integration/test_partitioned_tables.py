"""Partitioned tables: each data file holds one partition, as Iceberg requires."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from pyiceberg.expressions import EqualTo
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

from connectors import actions
from connectors.config import SinkConfig
from connectors.config.transforms import parse_partition_by
from sinks.iceberg.tables import catalog_for, create_table
from tests.integration.conftest import sink_config
from tests.integration.helpers import caught_up, create_topic, produce, running_in_threads, table_of, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

REGIONS = ["eu", "us", "apac"]


def events(count: int) -> list[bytes | None]:
    return [
        json.dumps({"id": i, "region": REGIONS[i % 3], "ts": f"2026-11-{1 + i % 4:02d}T10:00:00Z"}).encode()
        for i in range(count)
    ]


@pytest.mark.parametrize("writer", ["arrow", "spark"])
def test_an_existing_table_partitioned_by_day_and_region_gets_one_partition_per_file(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, writer: str
) -> None:
    config = sink_config(
        topic_name, "db.events", **{"iceberg.tables.auto-create-enabled": "false", "sinkadmin.writer": writer}
    )
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "region", StringType(), required=False),
        NestedField(3, "ts", TimestamptzType(), required=False),
    )
    with catalog_for(SinkConfig.parse(config)) as catalog:
        create_table(catalog, "db.events", schema, parse_partition_by("days(ts), region"))
    create_topic(kafka_bootstrap, topic_name, 2)
    ends = produce(kafka_bootstrap, topic_name, events(240), 2)
    actions.create_connector("parted", config)
    with running_in_threads("parted"):
        wait_until(caught_up("parted", ends), 120, "the partitioned commit")

    table = table_of("parted", "db.events")
    assert len(table.scan().to_arrow()) == 240
    eu = table.scan(row_filter=EqualTo("region", "eu")).to_arrow()
    assert len(eu) == 80 and set(eu.column("region").to_pylist()) == {"eu"}
    files = table.inspect.files().to_pylist()
    partitions = {(f["partition"]["ts_day"], f["partition"]["region"]) for f in files}
    assert len(partitions) == 12  # 4 days x 3 regions, per Kafka partition at most one file each
    assert sum(f["record_count"] for f in files) == 240


def sink_to_auto_created_table(
    name: str, kafka_bootstrap: str, topic: str, partitions: int, count: int, partition_by: str
) -> Table:
    """``count`` events over ``partitions`` into db.events, created with ``partition_by``, until committed."""
    create_topic(kafka_bootstrap, topic, partitions)
    ends = produce(kafka_bootstrap, topic, events(count), partitions)
    actions.create_connector(
        name, sink_config(topic, "db.events", **{"iceberg.table.db.events.partition-by": partition_by})
    )
    with running_in_threads(name):
        wait_until(caught_up(name, ends), 120, "the commit")
    return table_of(name, "db.events")


def test_an_auto_created_table_takes_its_partition_spec_from_the_config(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str
) -> None:
    table = sink_to_auto_created_table("auto-parted", kafka_bootstrap, topic_name, 1, 30, "region")
    assert [f.name for f in table.spec().fields] == ["region"]
    files = table.inspect.files().to_pylist()
    assert sorted(f["partition"]["region"] for f in files) == sorted(REGIONS)


def test_a_table_bucketed_by_id_gets_icebergs_bucket_of_each_file_and_prunes_by_it(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str
) -> None:
    # A bucket is a hash, not readable from a file's bounds: the participant
    # that split the rows sends each file's partition with it. A wrong value
    # would make Iceberg prune the file away from a lookup by id.
    table = sink_to_auto_created_table("bucketed", kafka_bootstrap, topic_name, 2, 240, "bucket(4, id), region")
    assert [str(f.transform) for f in table.spec().fields] == ["bucket[4]", "identity"]
    bucket = BucketTransform(4).transform(LongType())
    files = table.inspect.files().to_pylist()
    assert sum(f["record_count"] for f in files) == 240
    for f in files:
        ids = pq.read_table(f["file_path"].removeprefix("file://"), columns=["id"]).column("id").to_pylist()
        assert {bucket(i) for i in ids} == {f["partition"]["id_bucket"]}
    assert {(f["partition"]["id_bucket"], f["partition"]["region"]) for f in files} == {
        (b, r) for b in range(4) for r in REGIONS
    }
    for i in (0, 7, 131, 239):
        found = table.scan(row_filter=EqualTo("id", i)).to_arrow()
        assert found.column("id").to_pylist() == [i]
