"""Spark, through the Spark Connect server started as make run starts it (the project's own Iceberg
catalog mapped as ``iceberg``), reads the table an Iceberg connector wrote: by name in that catalog and
by metadata location, with no configuration of its own, and both equal the topic's records."""

from __future__ import annotations

import uuid

import pytest
from django.conf import settings
from django.db import connection

from connectors import actions
from connectors.config import SinkConfig
from sinks.iceberg.tables import JDBC_APPLICATION_NAME
from tests.integration.conftest import sink_config
from tests.integration.helpers import (
    caught_up,
    create_topic,
    json_records,
    produce,
    running_in_threads,
    table_of,
    topic_records,
    wait_until,
)
from tests.readers import assert_same_rows, spark_iceberg_rows, spark_iceberg_rows_at, spark_reader

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_spark_reads_a_table_of_the_default_catalog_by_name_and_by_metadata_location(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str
) -> None:
    table = f"db.events_{uuid.uuid4().hex[:8]}"  # (the default catalog's tables outlive a test)
    create_topic(kafka_bootstrap, topic_name, 2)
    ends = produce(kafka_bootstrap, topic_name, json_records(0, 300), partitions=2)
    config = sink_config(topic_name, table)
    del config["iceberg.catalog"]  # the project's own catalog, which make run's Spark has mapped
    actions.create_connector("default-catalog", config)
    with running_in_threads("default-catalog", tasks=2):
        wait_until(caught_up("default-catalog", ends), 120, "the topic's records")

    topic = [record for _, _, record in topic_records(kafka_bootstrap, ends)]
    by_name = [row.asDict() for row in spark_reader().table(f"iceberg.{table}").collect()]
    assert_same_rows("Spark, by name in the iceberg catalog", topic, by_name)
    location = table_of("default-catalog", table).metadata_location
    assert_same_rows("Spark, by metadata location", topic, spark_iceberg_rows_at(location))


def test_the_spark_catalogs_postgres_connections_close_when_idle_and_open_again_for_the_next_read(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str
) -> None:
    """Iceberg's JDBC catalog keeps the connections it opens for the catalog's life, and Spark never closes a
    catalog: PostgreSQL closes them once idle (``SPARK_CATALOG_IDLE_TIMEOUT_SECONDS``), so that the Spark server
    does not hold one for every catalog it has opened, and the next read connects again."""
    create_topic(kafka_bootstrap, topic_name, 1)
    ends = produce(kafka_bootstrap, topic_name, json_records(0, 50), partitions=1)
    config = sink_config(topic_name, "db.idle")
    actions.create_connector("idle-catalog", config)
    with running_in_threads("idle-catalog"):
        wait_until(caught_up("idle-catalog", ends), 120, "the topic's records")
    topic = [record for _, _, record in topic_records(kafka_bootstrap, ends)]

    def catalog_connections() -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND datname = current_database()",
                [JDBC_APPLICATION_NAME],
            )
            return int(cursor.fetchone()[0])

    assert_same_rows("Spark's Iceberg reader", topic, spark_iceberg_rows(SinkConfig.parse(config), "db.idle"))
    assert catalog_connections() >= 1
    wait_until(
        lambda: catalog_connections() == 0, settings.SPARK_CATALOG_IDLE_TIMEOUT_SECONDS + 60, "idle ones to close"
    )
    assert_same_rows("Spark, connected again", topic, spark_iceberg_rows(SinkConfig.parse(config), "db.idle"))
