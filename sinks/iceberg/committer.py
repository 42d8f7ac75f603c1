"""The Iceberg sink's committer (``workers.coordinator.CommitterPort``)."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from connectors.config import SinkConfig
from sinks.iceberg.key_index import KeyIndexCache
from sinks.iceberg.settings import IcebergSettings
from sinks.iceberg.spark_commits import SparkTables
from sinks.iceberg.tables import CommitFile, TableCommit, catalog_for, catalog_outage, commit_to_table
from sinks.iceberg.upserts import commit_upserts
from workers.coordinator import CommitNotApplied, PreparedCommit, SinkUnavailable
from workers.events import TableVersion
from workers.failpoints import failpoint
from workers.spark_writer import SparkUnavailable, UnitRunner


def key_cache() -> KeyIndexCache | None:
    """Where upsert lookups keep the live files' key indexes (settings.KEY_INDEX_DIR), if anywhere."""
    if not settings.KEY_INDEX_MB:
        return None
    return KeyIndexCache(settings.KEY_INDEX_DIR, settings.KEY_INDEX_MB << 20)


class IcebergCommitter:
    """The coordinator's committer: a prepared commit's files into each table, one snapshot per table,
    idempotently (a table that already holds the commit is skipped, DESIGN I4)."""

    def __init__(self, connector: str, config: SinkConfig) -> None:
        self.connector = connector
        self.config = config
        self.settings: IcebergSettings = config.settings
        self._catalog: Any = None
        # Where an upsert's rewrite runs.
        self._run_units = UnitRunner(config)
        # What the last commit left its tables at (workers.sink.VersionedCommitter).
        self.table_versions: dict[str, TableVersion] = {}
        # Where format v3 tables are committed to (pyiceberg writes up to v2).
        self.spark_tables = SparkTables.of(config)

    @property
    def catalog(self) -> Any:
        # Opened at the first commit, not at start-up: a coordinator whose
        # catalog is out starts, heartbeats and says so (SinkUnavailable).
        if self._catalog is None:
            self._catalog = catalog_for(self.config)
        return self._catalog

    def close(self) -> None:
        # A SQL catalog holds a connection pool; a worker process outlives
        # the coordinators it hosts.
        if self._catalog is not None:
            self._catalog.close()
            self._catalog = None

    def commit(self, prepared: PreparedCommit) -> dict[str, int]:
        try:
            return self._commit(prepared)
        except SparkUnavailable as exc:
            # (Spark runs an upsert's lookups and a format v3 table's whole commit: out of reach, the commit
            # waits for it, as for the catalog.)
            raise SinkUnavailable(str(exc)) from exc
        except Exception as exc:
            outage = catalog_outage(exc, self.config)
            if outage is None:
                raise
            raise SinkUnavailable(outage) from exc

    def _commit(self, prepared: PreparedCommit) -> dict[str, int]:
        by_table: dict[str, list[CommitFile]] = {}
        # By Kafka partition (topic, partition, then name): upserts take the last record of a key, ordering
        # a partition's rows by the offsets their files' footers give (upserts.winners).
        for f in sorted(prepared.files, key=lambda f: (f["topic"], f["partition"], f["path"])):
            by_table.setdefault(f["table"], []).append(CommitFile(f["path"], f.get("partition_values")))
        if self.config.allow_empty_commit:
            for target in self.settings.tables:
                by_table.setdefault(target.name, [])
        snapshot_ids, self.table_versions = {}, {}
        for table_name, files in sorted(by_table.items()):
            commit = TableCommit(
                connector=self.connector,
                commit_id=str(prepared.commit_id),
                epoch=prepared.epoch,
                files=tuple(files),
                offsets=prepared.offsets,
                watermark_ms=prepared.watermark_ms,
            )
            # (Every table but the dead-letter table is keyed in upsert mode: those listed, and those that
            # records name with dynamic routing.)
            keyed = self.settings.target(table_name) if table_name != self.settings.dead_letter_table else None
            try:
                if self.settings.upsert_mode and keyed is not None:
                    committed = commit_upserts(
                        self.catalog,
                        table_name,
                        commit,
                        files,
                        keyed.id_columns,
                        self.settings.cdc_field,
                        self._run_units,
                        ordering_field=self.settings.ordering_field,
                        key_cache=key_cache(),
                        spark=self.spark_tables,
                    )
                else:
                    committed = commit_to_table(self.catalog, table_name, commit, spark=self.spark_tables)
            except Exception as exc:
                if isinstance(exc, SparkUnavailable) or catalog_outage(exc, self.config) is not None:
                    raise
                reason = f"{type(exc).__name__}: {exc}"
                raise CommitNotApplied(self.connector, prepared.commit_id, reason, f"table {table_name}") from exc
            snapshot_ids[table_name] = committed.snapshot_id
            self.table_versions[table_name] = committed.table
            if len(snapshot_ids) < len(by_table):
                failpoint("iceberg.between_tables")  # (a test's coordinator dies here: some tables hold the commit)
        return snapshot_ids
