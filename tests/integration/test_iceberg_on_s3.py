"""Iceberg tables on S3 (moto's S3-compatible server), configured as the Iceberg sink's users configure them:
the catalog's ``s3.*`` properties (``iceberg.catalog.s3.endpoint``, its keys and region), and nothing else.
Those reach every reader and writer of the tables' files: both data planes' writes, merge-on-read upserts
(their Spark job reads the live files' keys and writes delete files beside them), the commit, pyiceberg,
Spark's Iceberg (S3FileIO) and its maintenance. The bucket is one no other setting of the session reaches:
the Hudi tests' bucket is reached through Hadoop's S3A settings in spark-defaults.conf, and no AWS_*
variable sets an endpoint or keys."""

from __future__ import annotations

import os
from typing import Any

import pytest

from connectors import actions
from tests.conftest import s3_client, sink_config
from tests.integration.helpers import (
    assert_upserts_merged_on_read,
    caught_up,
    changes,
    create_topic,
    produce,
    running_in_threads,
    table_of,
    table_rows,
    topic_records,
    wait_until,
)
from tests.integration.test_iceberg_upserts import compact

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

PARTITIONS = 2
TABLE = "db.orders"
BUCKET = "iceberg-warehouse"


def s3_catalog(endpoint: str) -> dict[str, str]:
    """The catalog's storage, as Iceberg's S3FileIO and pyiceberg both name its settings."""
    return {
        "iceberg.catalog.warehouse": f"s3://{BUCKET}/warehouse",
        "iceberg.catalog.s3.endpoint": endpoint,
        "iceberg.catalog.s3.access-key-id": "lake-writer",
        "iceberg.catalog.s3.secret-access-key": "lake-writer-secret",
        "iceberg.catalog.s3.path-style-access": "true",
        "iceberg.catalog.client.region": "us-east-1",
    }


def model(bootstrap: str, ends: dict[tuple[str, int], int]) -> dict[int, dict[str, Any]]:
    """The last record of each key; op d deletes it."""
    state: dict[int, dict[str, Any]] = {}
    for _, _, record in topic_records(bootstrap, ends):
        if record["op"] == "d":
            state.pop(record["id"], None)
        else:
            state[record["id"]] = record
    return state


def assert_table_is(name: str, expected: dict[int, dict[str, Any]]) -> None:
    rows = table_rows(name, TABLE)  # (pyiceberg's rows, checked against Spark's Iceberg reader's)
    keys = [r["id"] for r in rows]
    assert len(keys) == len(set(keys)), "a key is in the table twice"
    assert {r["id"]: {k: r[k] for k in ("id", "ts", "amount", "op", "region")} for r in rows} == expected


@pytest.mark.parametrize("writer", ["spark", "arrow"])
def test_a_table_on_s3_is_written_upserted_read_and_compacted_with_the_catalogs_s3_properties(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, s3_endpoint: str, writer: str
) -> None:
    reaching = [v for v in os.environ if v.startswith(("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY", "AWS_SECRET"))]
    assert not reaching, f"the environment would reach S3 on its own: {reaching}"
    s3_client(s3_endpoint).create_dir(BUCKET)
    name = f"iceberg-s3-{writer}"
    config = sink_config(
        topic_name,
        TABLE,
        **{
            **s3_catalog(s3_endpoint),
            "sinkadmin.writer": writer,
            "tasks.max": "2",
            "iceberg.tables.upsert-mode-enabled": "true",
            "iceberg.tables.default-id-columns": "id",
            "iceberg.tables.cdc-field": "op",
            "iceberg.table.db.orders.partition-by": "region",
        },
    )
    create_topic(kafka_bootstrap, topic_name, PARTITIONS)
    actions.create_connector(name, config)
    with running_in_threads(name, tasks=2):
        # Two waves: the second's updates and deletes meet keys the table holds (delete files on S3).
        for wave, seed in enumerate((21, 22)):
            ends = produce(kafka_bootstrap, topic_name, changes(600, 80, PARTITIONS, seed), PARTITIONS)
            wait_until(caught_up(name, ends), 180, f"{name} to commit wave {wave}")

    table = table_of(name, TABLE)
    assert table.location().startswith(f"s3://{BUCKET}/warehouse/"), table.location()
    files = table.inspect.files().to_pylist()
    assert files and all(f["file_path"].startswith(f"s3://{BUCKET}/") for f in files)
    assert any(f["content"] == 1 for f in files), "no position delete file on S3"
    assert_upserts_merged_on_read(name, TABLE)
    expected = model(kafka_bootstrap, ends)
    assert_table_is(name, expected)

    # Spark's maintenance folds the delete files into the data files, on S3 through the same properties.
    compact(name, delete_file_threshold=1, min_input_files=1)
    compacted = table_of(name, TABLE)
    assert all(not task.delete_files for task in compacted.scan().plan_files()), "deletes left after compaction"
    assert int(compacted.current_snapshot().summary.additional_properties.get("total-position-deletes", 0)) == 0
    assert_table_is(name, expected)


def test_a_format_v3_table_on_s3_is_upserted_through_spark_with_the_catalogs_s3_properties(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, s3_endpoint: str
) -> None:
    """Spark reads the commit's staged files on S3 through Hadoop's S3A connector, given the catalog's
    ``s3.*`` properties as the bucket's S3A settings (sinks.iceberg.spark_commits.hadoop_locations), and
    writes the deletion vectors and rows through Iceberg's S3FileIO."""
    from tests.integration.test_iceberg_v3_tables import assert_merged_on_read_with_deletion_vectors

    s3_client(s3_endpoint).create_dir(BUCKET)
    name = "iceberg-s3-v3"
    config = sink_config(
        topic_name,
        TABLE,
        **{
            **s3_catalog(s3_endpoint),
            "iceberg.tables.upsert-mode-enabled": "true",
            "iceberg.tables.default-id-columns": "id",
            "iceberg.tables.cdc-field": "op",
            "iceberg.tables.auto-create-props.format-version": "3",
        },
    )
    create_topic(kafka_bootstrap, topic_name, PARTITIONS)
    actions.create_connector(name, config)
    with running_in_threads(name):
        for wave, seed in enumerate((31, 32)):
            ends = produce(kafka_bootstrap, topic_name, changes(600, 80, PARTITIONS, seed), PARTITIONS)
            wait_until(caught_up(name, ends), 180, f"{name} to commit wave {wave}")
    files = table_of(name, TABLE).inspect.files().to_pylist()
    assert files and all(f["file_path"].startswith(f"s3://{BUCKET}/") for f in files)
    assert_merged_on_read_with_deletion_vectors(name)
    assert_table_is(name, model(kafka_bootstrap, ends))
