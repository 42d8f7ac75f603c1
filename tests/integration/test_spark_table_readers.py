"""Spark's own Iceberg reader and Iceberg's procedures, through the Spark Connect server the project
starts (sinkadmin.services.spark_conf): a table of the Iceberg SQL catalog on the project's PostgreSQL,
mapped into Spark as Iceberg's JDBC catalog; and what maintenance says on a Spark without Iceberg's
runtime. (Hudi's Spark reader reads every table of tests/integration/test_hudi_sink.py.)"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from workers import spark_writer

pytestmark = [pytest.mark.integration, pytest.mark.django_db]


def spark(spark_remote: str) -> Any:
    if not spark_remote.startswith("sc://"):
        pytest.skip("reads through the Spark Connect server")
    return spark_writer.connect(spark_remote)


def test_spark_reads_and_maintains_a_table_of_the_sql_catalog(spark_remote: str, tmp_path: Path) -> None:
    from pyiceberg.catalog import load_catalog

    from sinks.iceberg.tables import default_catalog_properties, spark_catalog_conf

    name = f"c{uuid.uuid4().hex[:8]}"  # a catalog of its own: its own rows in iceberg_tables
    properties = {**default_catalog_properties(), "warehouse": (tmp_path / "warehouse").as_uri()}
    catalog = load_catalog(name, **properties)
    catalog.create_namespace("db")
    table = catalog.create_table("db.events", schema=pa.schema([("id", pa.int64()), ("name", pa.string())]))
    for n in range(3):
        table.append(pa.table({"id": pa.array([2 * n, 2 * n + 1], pa.int64()), "name": [f"a{n}", f"b{n}"]}))
    table = catalog.load_table("db.events")
    expected = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"])

    session = spark(spark_remote)
    for key, value in spark_catalog_conf(name, properties).items():
        session.conf.set(key, value)
    by_location = session.read.format("iceberg").load(table.metadata_location).orderBy("id").collect()
    by_name = session.read.format("iceberg").load(f"{name}.db.events").orderBy("id").collect()
    assert [r.asDict() for r in by_location] == expected
    assert [r.asDict() for r in by_name] == expected

    rewritten = session.sql(
        f"CALL {name}.system.rewrite_data_files(table => 'db.events', options => map('min-input-files', '2'))"
    ).collect()
    assert rewritten[0]["rewritten_data_files_count"] == 3 and rewritten[0]["added_data_files_count"] == 1
    session.sql(
        f"CALL {name}.system.expire_snapshots(table => 'db.events', "
        "older_than => TIMESTAMP '2100-01-01 00:00:00', retain_last => 1)"
    ).collect()
    # pyiceberg reads what Spark's procedures committed to the same catalog.
    table = catalog.load_table("db.events")
    assert len(table.snapshots()) == 1 and len(table.inspect.files()) == 1
    assert sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == expected


class Figures:
    """Where a maintenance run's figures go, for a run that is no connector's."""

    def record(self, run_id: int, **figures: Any) -> None:
        pass

    def protected_files(self, tables: Any) -> set[str]:
        return set()


def test_maintenance_on_a_spark_without_icebergs_runtime_says_so(tmp_path: Path, settings: Any) -> None:
    """A user's Spark Connect server started without Iceberg's runtime (pyspark's own launcher, only the
    Spark Connect jar): maintenance fails saying what the server lacks, not with a JVM stack trace."""
    from pyiceberg.catalog import load_catalog

    from sinkadmin.services import jvm_classpath, spark_home, spawn, wait_ready
    from sinks.iceberg.maintenance import SparkProcedures, TableMaintenance
    from sinks.iceberg.settings import IcebergMaintenance
    from sinks.iceberg.tables import default_catalog_properties
    from tests.conftest import free_port
    from workers.maintenance import BetweenCommits, MaintenanceFailed

    name = f"c{uuid.uuid4().hex[:8]}"
    properties = {**default_catalog_properties(), "warehouse": (tmp_path / "warehouse").as_uri()}
    catalog = load_catalog(name, **properties)
    catalog.create_namespace("db")
    table = catalog.create_table("db.events", schema=pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": pa.array([1, 2], pa.int64())}))

    port = free_port()
    connect_jar = next(j for j in jvm_classpath("spark") if j.name.startswith("spark-connect_"))
    argv = [
        str(spark_home() / "bin" / "spark-submit"),
        *("--class", "org.apache.spark.sql.connect.service.SparkConnectServer", "--master", "local[1]"),
        *("--driver-memory", "512m", "--jars", str(connect_jar)),
        *("--conf", f"spark.connect.grpc.binding.port={port}", "--conf", "spark.ui.enabled=false"),
        "spark-internal",
    ]
    server = spawn("bare-spark-connect", argv, tmp_path / "log", env={"SPARK_HOME": str(spark_home())})
    try:
        wait_ready(server, "127.0.0.1", port, timeout=120)
        settings.SPARK_REMOTE = f"sc://127.0.0.1:{port}"
        maintenance = TableMaintenance(
            IcebergMaintenance(128 << 20, 5, 86_400_000, 1, 3 * 86_400_000),
            catalog,
            "db.events",
            SparkProcedures(name, properties),
            BetweenCommits(),
            Figures(),  # type: ignore[arg-type]
            0,
        )
        with maintenance.turns.served(), pytest.raises(MaintenanceFailed) as failed:
            maintenance.run()
    finally:
        server.stop()
    reason = str(failed.value)
    # (The first step that needs Spark: here orphan removal, the table having too few files for the others.)
    assert f": SparkRuntimeMissing: Spark at sc://127.0.0.1:{port} has no Iceberg runtime (" in reason
    assert "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:" in reason and "at org." not in reason
