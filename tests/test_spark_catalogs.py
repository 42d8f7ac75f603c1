"""A connector's Iceberg catalog as Spark's configuration (sinks.iceberg.tables.spark_catalog_conf), and the
tests' comparison of two readers' rows (tests.readers.same_rows)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from sinks.iceberg.tables import SparkCatalogUnmappable, spark_catalog_conf
from tests.readers import same_rows


def test_the_projects_sql_catalog_is_icebergs_jdbc_catalog_on_the_same_postgres() -> None:
    conf = spark_catalog_conf(
        "iceberg",
        {
            "type": "sql",
            "uri": "postgresql+psycopg://sinkadmin:s%40cret@127.0.0.1:5433/sinkadmin",
            "warehouse": "file:///lake",
            "init_catalog_tables": "true",
        },
    )
    assert conf == {
        "spark.sql.catalog.iceberg": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.iceberg.cache-enabled": "false",
        "spark.sql.catalog.iceberg.type": "jdbc",
        "spark.sql.catalog.iceberg.uri": "jdbc:postgresql://127.0.0.1:5433/sinkadmin",
        "spark.sql.catalog.iceberg.jdbc.user": "sinkadmin",
        "spark.sql.catalog.iceberg.jdbc.password": "s@cret",
        "spark.sql.catalog.iceberg.jdbc.ApplicationName": "sinkadmin Spark catalog",
        "spark.sql.catalog.iceberg.warehouse": "file:///lake",
        # (PostgreSQL closes its idle connections, which Iceberg's pool would keep for the catalog's life.)
        "spark.sql.catalog.iceberg.jdbc.options": "-c idle_session_timeout=30000",
        "spark.sql.catalog.iceberg.retryable_status_codes": "57P05",
    }


def test_the_catalogs_own_jdbc_options_and_retried_codes_keep_the_idle_timeout(settings: Any) -> None:
    properties = {"type": "sql", "uri": "postgresql://u:p@db/lake", "warehouse": "file:///lake"}
    own = {"jdbc.options": "-c statement_timeout=60000", "retryable_status_codes": "57P01"}
    conf = spark_catalog_conf("c", {**properties, **own})
    assert conf["spark.sql.catalog.c.jdbc.options"] == "-c statement_timeout=60000 -c idle_session_timeout=30000"
    assert conf["spark.sql.catalog.c.retryable_status_codes"] == "57P01,57P05"
    # Its own timeout wins; and 0 (PostgreSQL before 14, or a pooler refusing options) sets none.
    mine = spark_catalog_conf("c", {**properties, "jdbc.options": "-c idle_session_timeout=5000"})
    assert mine["spark.sql.catalog.c.jdbc.options"] == "-c idle_session_timeout=5000"
    settings.SPARK_CATALOG_IDLE_TIMEOUT_SECONDS = 0
    off = spark_catalog_conf("c", properties)
    assert "spark.sql.catalog.c.jdbc.options" not in off and "spark.sql.catalog.c.retryable_status_codes" not in off


def test_a_rest_catalog_keeps_its_uri_and_passes_its_other_properties_through() -> None:
    conf = spark_catalog_conf(
        "lake", {"uri": "https://catalog.example/api", "credential": "id:secret", "s3.endpoint": "http://s3:9000"}
    )
    assert conf["spark.sql.catalog.lake.type"] == "rest"
    assert conf["spark.sql.catalog.lake.uri"] == "https://catalog.example/api"
    assert conf["spark.sql.catalog.lake.credential"] == "id:secret"
    assert conf["spark.sql.catalog.lake.s3.endpoint"] == "http://s3:9000"
    # The s3.* properties are Iceberg's S3FileIO's: Spark reads the catalog's files with it, unless told.
    assert conf["spark.sql.catalog.lake.io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    own = spark_catalog_conf("lake", {"uri": "https://catalog.example/api", "s3.endpoint": "x", "io-impl": "Mine"})
    assert own["spark.sql.catalog.lake.io-impl"] == "Mine"
    assert "spark.sql.catalog.lake.io-impl" not in spark_catalog_conf("lake", {"uri": "https://catalog.example/api"})


@pytest.mark.parametrize(
    ("properties", "reason"),
    [
        ({"type": "sql", "uri": "sqlite:///catalog.db"}, "a SQL catalog on sqlite has no JDBC driver in Spark"),
        ({"type": "dynamodb"}, "Spark has no Iceberg catalog of type 'dynamodb'"),
    ],
)
def test_a_catalog_spark_cannot_open_is_refused_with_the_reason(properties: dict[str, str], reason: str) -> None:
    with pytest.raises(SparkCatalogUnmappable, match=reason):
        spark_catalog_conf("c", properties)


def test_two_readers_rows_are_the_same_whatever_each_reader_gives_a_value_as() -> None:
    arrow = [{"id": 1, "at": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC), "raw": b"x", "tags": [("a", 1)]}]
    spark = [{"id": 1, "at": datetime.datetime(2026, 1, 1), "raw": bytearray(b"x"), "tags": {"a": 1}}]
    assert same_rows(arrow, spark) == ({}, {})


def test_a_row_missing_or_read_twice_is_told() -> None:
    missing, extra = same_rows([{"id": 1}, {"id": 2}], [{"id": 1}, {"id": 1}])
    assert sum(missing.values()) == 1 and sum(extra.values()) == 1


def test_the_uris_connection_parameters_reach_the_jdbc_driver_and_an_unknown_one_is_refused() -> None:
    uri = "postgresql+psycopg://u:p@db/lake?sslmode=verify-full&sslrootcert=/ca.pem&options=-c%20search_path%3Dcat"
    conf = spark_catalog_conf("c", {"type": "sql", "uri": uri})
    assert conf["spark.sql.catalog.c.uri"] == "jdbc:postgresql://db:5432/lake"
    assert conf["spark.sql.catalog.c.jdbc.sslmode"] == "verify-full"
    assert conf["spark.sql.catalog.c.jdbc.sslrootcert"] == "/ca.pem"
    assert conf["spark.sql.catalog.c.jdbc.options"] == "-c search_path=cat -c idle_session_timeout=30000"
    with pytest.raises(SparkCatalogUnmappable, match="the connection parameter 'gssencmode' of its uri"):
        spark_catalog_conf("c", {"type": "sql", "uri": "postgresql://u:p@db/lake?gssencmode=disable"})
