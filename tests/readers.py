"""Spark's own Iceberg and Hudi readers, as the tests' second reader of what the sinks write: through
the test session's Spark Connect server (started by the project's own code, as ``make run`` starts
its own), the Iceberg catalog mapped as a user maps it (``manage.py spark_conf``).

``same_rows`` compares two readers' rows as multisets, after evening out how each gives a value:
Spark's binary is a bytearray and its timestamps are naive (the session's time zone is UTC), a map is
a dict in Spark and a list of pairs in Arrow, a struct a Row in Spark and a dict in Arrow.
"""

from __future__ import annotations

import datetime
import functools
import uuid
from collections import Counter
from collections.abc import Iterable
from typing import Any

from django.conf import settings

from connectors.config import SinkConfig


@functools.cache
def spark_reader() -> Any:
    """One Spark Connect session for the tests' reads, its time zone UTC."""
    from workers.spark_writer import connect

    session = connect(settings.SPARK_REMOTE or f"sc://127.0.0.1:{settings.SPARK_CONNECT_PORT}")
    session.conf.set("spark.sql.session.timeZone", "UTC")
    return session


def spark_iceberg_rows(config: SinkConfig, table: str) -> list[dict[str, Any]]:
    """The table's rows as Spark's Iceberg reader gives them, by name in the connector's catalog mapped
    into Spark (sinks.iceberg.tables.connector_spark_catalog_conf)."""
    from sinks.iceberg.maintenance import sql_identifier
    from sinks.iceberg.tables import connector_spark_catalog_conf

    session = spark_reader()
    for key, value in connector_spark_catalog_conf(config).items():
        session.conf.set(key, value)
    name = sql_identifier(config.settings.catalog_name, *table.split("."))
    return [row.asDict(recursive=True) for row in session.table(name).collect()]


def spark_iceberg_rows_at(metadata_location: str) -> list[dict[str, Any]]:
    """The rows of the table whose metadata file is ``metadata_location``, read by Spark with no catalog."""
    return [
        row.asDict(recursive=True) for row in spark_reader().read.format("iceberg").load(metadata_location).collect()
    ]


def duckdb_iceberg_rows(metadata_location: str) -> list[dict[str, Any]]:
    """The rows of the Iceberg table whose metadata file is ``metadata_location`` (a local one), as DuckDB's
    Iceberg extension reads them, position deletes applied. The extension and the Avro one it reads
    manifests with come from PyPI (duckdb-extension-iceberg, duckdb-extension-avro)."""
    from pathlib import Path

    import duckdb
    import duckdb_extension_avro
    import duckdb_extension_iceberg

    connection = duckdb.connect()
    try:
        for package, name in ((duckdb_extension_avro, "avro"), (duckdb_extension_iceberg, "iceberg")):
            extension = (
                Path(package.__file__).parent / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
            )
            connection.execute(f"LOAD '{extension}'")
        rows = connection.execute("SELECT * FROM iceberg_scan(?)", [metadata_location]).to_arrow_table()
        return list(rows.to_pylist())
    finally:
        connection.close()


def spark_hudi_rows(base_path: str) -> list[dict[str, Any]]:
    """The Hudi table's rows (its latest snapshot) as Hudi's Spark reader gives them, by path."""
    return [row.asDict(recursive=True) for row in spark_reader().read.format("hudi").load(base_path).collect()]


def plain(value: Any) -> Any:
    """``value`` as both readers would give it."""
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, uuid.UUID):
        return str(value)  # (Spark has no UUID type: its reader gives the text)
    if isinstance(value, datetime.datetime) and value.tzinfo is None:
        return value.replace(tzinfo=datetime.UTC)
    if isinstance(value, datetime.datetime):
        return value.astimezone(datetime.UTC)
    if isinstance(value, dict):
        return tuple(sorted((str(k), plain(v)) for k, v in value.items()))
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):  # an Arrow map's pairs
            return tuple(sorted((str(k), plain(v)) for k, v in value))
        return tuple(plain(v) for v in value)
    return value


def same_rows(expected: Iterable[dict[str, Any]], found: Iterable[dict[str, Any]]) -> tuple[Counter[Any], Counter[Any]]:
    """The rows only ``expected`` has and those only ``found`` has (both empty: the same rows, each as
    many times), columns compared by name."""
    left = Counter(plain(row) for row in expected)
    right = Counter(plain(row) for row in found)
    return left - right, right - left


def assert_same_rows(reader: str, expected: list[dict[str, Any]], found: list[dict[str, Any]]) -> None:
    missing, extra = same_rows(expected, found)
    assert not missing and not extra, (
        f"{reader} read {len(found)} rows where the first reader read {len(expected)}: "
        f"{sum(missing.values())} missing (e.g. {list(missing)[:2]}), {sum(extra.values())} extra (e.g. {list(extra)[:2]})"
    )
