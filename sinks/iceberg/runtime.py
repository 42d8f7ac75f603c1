"""The Iceberg sink's runtime, as its plugin names it (``sinks.iceberg.plugin.ICEBERG``): a coordinated,
maintained, recoverable sink with versioned tables (``workers.sink``)."""

from __future__ import annotations

from typing import Any

# The SQL catalog, SQLAlchemy's dialect of the default catalog and pyiceberg's
# table and I/O modules are imported with the runtime, at a worker's start-up:
# the catalog code would import them in the first commit, which waited for
# them (docs/benchmarks.md, "Measurements behind the runtime's design").
# (sinks.iceberg.tables imports them where it uses them, for Spark's Python
# workers, which need its schema functions only.)
import pyiceberg.catalog.sql
import pyiceberg.io.pyarrow
import pyiceberg.table  # noqa: F401
import sqlalchemy.dialects.postgresql.psycopg  # noqa: F401

from connectors.config import SinkConfig
from sinks.iceberg.committer import IcebergCommitter
from sinks.iceberg.settings import IcebergSettings
from sinks.iceberg.writer import TableWriter
from workers.maintenance import Maintainer


def writer(config: SinkConfig) -> TableWriter:
    return TableWriter(config)


def committer(connector: str, config: SinkConfig) -> IcebergCommitter:
    return IcebergCommitter(connector, config)


def maintainer(
    connector: str, connector_id: int, epoch: int, config: SinkConfig, committer: IcebergCommitter
) -> Maintainer | None:
    """Table maintenance beside the sink, when the config asks for it."""
    from sinks.iceberg.maintenance import IcebergTables, SparkProcedures
    from sinks.iceberg.tables import connector_catalog_properties
    from workers.runtime import start_maintainer

    if not config.maintenance.enabled:
        return None
    settings: IcebergSettings = config.settings

    def tables() -> list[str]:
        if not settings.dynamic:
            return settings.table_names
        from connectors.actions import committed_tables

        # (The tables its records have named so far, and the dead-letter table, which commits name too.)
        return committed_tables(connector)

    return start_maintainer(
        connector,
        connector_id,
        epoch,
        config,
        lambda ledger: IcebergTables(
            settings.maintenance,
            tables,
            lambda: committer.catalog,
            SparkProcedures(settings.catalog_name, connector_catalog_properties(config)),
            ledger,
        ),
    )


def recovered_commits(connector: str, config: SinkConfig) -> list[Any]:
    """Every commit of ``connector`` in its tables' snapshot summaries (for rebuilding a lost ledger)."""
    from sinks.iceberg.tables import catalog_for, every_table
    from sinks.iceberg.tables import recovered_commits as from_snapshots

    settings: IcebergSettings = config.settings
    catalog = catalog_for(config)
    # (With dynamic routing, which tables records named is in the ledger being rebuilt: every table is read.)
    return from_snapshots(catalog, every_table(catalog) if settings.dynamic else settings.table_names, connector)
