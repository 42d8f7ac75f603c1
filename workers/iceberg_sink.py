"""The Iceberg sink's runtime, as its plugin names it (``connectors.config.definitions.ICEBERG``)."""

from __future__ import annotations

from typing import Any

from connectors.config import SinkConfig


def writer(config: SinkConfig) -> Any:
    from workers.runtime import TableWriter

    return TableWriter(config)


def committer(connector: str, config: SinkConfig) -> Any:
    from workers.runtime import IcebergCommitter

    return IcebergCommitter(connector, config)


def maintainer(connector: str, connector_id: int, epoch: int, config: SinkConfig, committer: Any) -> Any:
    """Table maintenance beside the sink, when the config asks for it."""
    from workers.maintenance import IcebergTables, SparkProcedures
    from workers.runtime import start_maintainer
    from workers.tables import connector_catalog_properties

    if not config.maintenance.enabled:
        return None
    return start_maintainer(
        connector,
        connector_id,
        epoch,
        config,
        lambda ledger: IcebergTables(
            config.maintenance,
            lambda: [t.name for t in config.tables],
            lambda: committer.catalog,
            SparkProcedures(config.catalog_name, connector_catalog_properties(config)),
            ledger,
        ),
    )


def recovered_commits(connector: str, config: SinkConfig) -> list[Any]:
    """Every commit of ``connector`` in its tables' snapshot summaries (for rebuilding a lost ledger)."""
    from workers.tables import catalog_for
    from workers.tables import recovered_commits as from_snapshots

    return from_snapshots(catalog_for(config), [t.name for t in config.tables], connector)
