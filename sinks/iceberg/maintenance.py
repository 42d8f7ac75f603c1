"""Table maintenance beside the sink, on Iceberg's own Spark procedures.

A streaming sink writes at least one file per partition and one snapshot per
commit: at a 1 s interval over 16 partitions, ~57,000 files and 3,600
snapshots an hour. Each coordinator maintains its connector's tables every
``sinkadmin.maintenance.interval-ms``, one table after the other, with
Iceberg's procedures (``CALL <catalog>.system.<procedure>``) on the process's
Spark, in this order:

1. **Manifest rewrite**, ``rewrite_manifests``: a commit adds a manifest, and
   a scan plans over them all; they become a few, clustered by partition. It
   runs between two of the sink's commits (``BetweenCommits``): Iceberg's
   manifest rewrite fails when one of its manifests leaves the table
   meanwhile, as a compaction's delete-only manifests do at the sink's next
   append.
2. **Compaction**, ``rewrite_data_files`` (bin-pack): files under three
   quarters of ``target-file-size-bytes``, at least ``min-input-files`` of
   them in a partition (or more than the target together), and files with
   ``delete-file-threshold`` position delete files or more, become files of
   about that size without their deleted rows, in one REPLACE snapshot:
   readers see the same rows, incremental readers know no data changed.
   Then ``rewrite_position_delete_files`` compacts the delete files left
   (merge-on-read upserts write one per data file and commit).
3. **Snapshot expiry**, ``expire_snapshots``, of the snapshots this module
   chooses (``snapshots_to_expire``), and Iceberg deletes the files only they
   referenced.
4. **Orphan removal**, ``remove_orphan_files``, as a dry run: Iceberg lists
   the table's location and finds the files no metadata references, older
   than the window; those that no prepared commit of the ledger holds are
   deleted here.

What stays ours, and why (docs/maintenance.md): which snapshots expire
(Iceberg's policy would expire a connector's last commit, which a lost ledger
is rebuilt from, DESIGN I2), and the final cut of the orphans (a prepared
commit's files are not yet in any metadata, and must stay appliable, I9).

Iceberg's procedures commit through the connector's catalog, mapped into
Spark (``sinks.iceberg.tables.spark_catalog_conf``), beside the sink: a commit that
loses the race to the other is retried by its writer (Iceberg's by its
``commit.retry.*``, the sink's by ``tables.commit_to_table``, which checks
first that its commit is not already in), and neither kind of snapshot
changes what the other wrote. A run killed at any point leaves the table
readable and exact: the sink's idempotence check walks past a REPLACE
snapshot (it has no ``sinkadmin.connector``), and a rewrite that never
committed leaves orphans a later run removes.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar
from urllib.parse import urlsplit

from sinks.iceberg.settings import IcebergMaintenance
from workers.failpoints import failpoint, failpoint_while
from workers.maintenance import BetweenCommits, MaintenanceFailed, MaintenanceLedger, Stopped

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.io import FileIO

log = logging.getLogger(__name__)

T = TypeVar("T")


# --- expiry and orphans: what stays ours (pure: unit-tested without servers) -------------


@dataclass(frozen=True)
class SnapshotInfo:
    snapshot_id: int
    timestamp_ms: int
    # sinkadmin.connector of the snapshot's summary, if a connector wrote it,
    # and the partitions ("topic/partition") whose offsets its commit holds.
    connector: str | None = None
    partitions: tuple[str, ...] = ()


def snapshots_to_expire(
    snapshots: Sequence[SnapshotInfo],
    current_lineage: Sequence[int],
    protected: Iterable[int],
    now_ms: int,
    max_age_ms: int,
    min_to_keep: int,
) -> list[int]:
    """The snapshots expiry removes: older than ``max_age_ms``, and none of those it must keep.

    Kept whatever their age: the ``min_to_keep`` latest of the current
    lineage (newest first in ``current_lineage``), ``protected`` ones (branch
    and tag heads), and, for each connector, its latest snapshot and the
    latest one holding each partition's offsets. A lost ledger is rebuilt
    from those (DESIGN I2): a commit's summary has only the partitions that
    had records in it, so a partition idle for a month has its offsets in a
    month-old snapshot, which must stay.
    """
    keep = set(current_lineage[:min_to_keep]) | set(protected)
    latest: dict[tuple[str, str], SnapshotInfo] = {}
    for s in snapshots:
        if s.connector is None:
            continue
        for key in [(s.connector, ""), *((s.connector, p) for p in s.partitions)]:
            seen = latest.get(key)
            if seen is None or (s.timestamp_ms, s.snapshot_id) > (seen.timestamp_ms, seen.snapshot_id):
                latest[key] = s
    keep |= {s.snapshot_id for s in latest.values()}
    cutoff = now_ms - max_age_ms
    return sorted(s.snapshot_id for s in snapshots if s.timestamp_ms < cutoff and s.snapshot_id not in keep)


def snapshot_info(snapshot: Any) -> SnapshotInfo:
    """What expiry needs of a pyiceberg snapshot: when, and which connector's commit of which partitions."""
    from sinks.iceberg.tables import PROP_CONNECTOR, PROP_OFFSETS

    props = snapshot.summary.additional_properties if snapshot.summary is not None else {}
    try:
        offsets = json.loads(props.get(PROP_OFFSETS, "{}"))
        partitions = tuple(sorted(f"{topic}/{p}" for topic, parts in offsets.items() for p in parts))
    except (ValueError, AttributeError):
        partitions = ()  # (not ours to read: another writer's property of that name)
    return SnapshotInfo(snapshot.snapshot_id, snapshot.timestamp_ms, props.get(PROP_CONNECTOR), partitions)


def file_key(location: str) -> str:
    """One spelling per file: ``file:/x``, ``file:///x`` and ``/x`` are one file, as are ``s3a://`` and ``s3://``."""
    from pyiceberg.io.pyarrow import PyArrowFileIO

    scheme, _, path = PyArrowFileIO.parse_location(location)
    scheme = {"s3a": "s3", "s3n": "s3", "gcs": "gs"}.get(scheme, scheme)
    return f"{scheme}://{path}" if scheme != "file" else path


# --- Iceberg's procedures ------------------------------------------------------------------


class IcebergProcedures(Protocol):
    def call(self, procedure: str, table: str, **arguments: str) -> list[dict[str, Any]]:
        """``CALL <catalog>.system.<procedure>(table => ..., <name> => <SQL literal>, ...)``; its rows."""
        ...


# The locations remove_orphan_files lists through Hadoop's file systems (its default): local paths and HDFS.
HADOOP_LISTED = ("", "file", "hdfs", "viewfs")


def sql_identifier(*parts: str) -> str:
    """A multipart identifier, each part quoted (catalog names such as ``catalog-orders`` need it)."""
    return ".".join("`" + part.replace("`", "``") + "`" for part in parts)


def sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def sql_map(values: Mapping[str, str]) -> str:
    return "map(" + ", ".join(f"{sql_string(k)}, {sql_string(v)}" for k, v in values.items()) + ")"


def sql_timestamp(epoch_s: float) -> str:
    """A TIMESTAMP literal of the instant, whatever the session's time zone."""
    return f"TIMESTAMP '{datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec='milliseconds')}'"


class SparkProcedures:
    """Iceberg's Spark procedures on a connector's catalog, in a Spark session of that catalog's own.

    The catalog is the one pyiceberg opens for the sink, mapped into Spark
    under its own name (``spark_catalog_conf``: Iceberg's JDBC catalog finds
    pyiceberg's SQL catalog's tables by that name). The session is one of
    that configuration's own, shared by every process maintaining a table of
    it: Spark keeps a catalog as first configured under a name in a session,
    and connectors may name two catalogs alike. The configuration is set
    before each call (a Spark 3.5 server that dropped an idle session gives
    back an empty one); the procedures run in the JVM, so the session needs
    none of the data plane's Python code.
    """

    def __init__(self, catalog_name: str, catalog_properties: Mapping[str, str], session: Any = None) -> None:
        self.catalog = catalog_name
        self.properties = dict(catalog_properties)
        identity = json.dumps([catalog_name, sorted(self.properties.items())])
        self.session_id = str(uuid.UUID(hashlib.sha256(identity.encode()).hexdigest()[:32], version=4))
        self._given = session
        self._session: Any = session

    @functools.cached_property
    def conf(self) -> dict[str, str]:
        """The catalog's Spark configuration (raises SparkCatalogUnmappable, failing the run that needs it)."""
        from sinks.iceberg.tables import spark_catalog_conf

        return spark_catalog_conf(self.catalog, self.properties)

    def call(self, procedure: str, table: str, **arguments: str) -> list[dict[str, Any]]:
        arguments = {"table": sql_string(sql_identifier(*table.split("."))), **arguments}
        named = ", ".join(f"{name} => {value}" for name, value in arguments.items())
        statement = f"CALL {sql_identifier(self.catalog, 'system', procedure)}({named})"

        def run(spark: Any) -> list[dict[str, Any]]:
            # (A test's process dies here while Spark runs the procedure: the
            # server goes on or gives up, and the table is exact either way.)
            with failpoint_while(f"spark.{procedure}", after_s=0.25):
                return [row.asDict() for row in spark.sql(statement).collect()]

        return self.run(run)

    def run[T](self, work: Callable[[Any], T]) -> T:
        """``work(spark)`` on the catalog's session, as ``workers.spark_writer.guarded`` runs it: once more on
        a session joined again if the server had dropped it (so ``work`` must be safe to run twice)."""
        from workers.spark_writer import guarded

        conf = self.conf

        def run() -> T:
            spark = self._spark()
            for key, value in conf.items():
                spark.conf.set(key, value)
            return work(spark)

        return guarded(run, self._forget)

    def table_identifier(self, table: str, branch: str | None = None) -> str:
        """``table`` (``db.name``) of the catalog as Spark names it, or its ``branch``."""
        parts = [self.catalog, *table.split(".")]
        return sql_identifier(*parts, *([f"branch_{branch}"] if branch else []))

    def _spark(self) -> Any:
        if self._session is None:
            from django.conf import settings

            from workers.spark_writer import connect, spark_session, with_session_id

            if settings.SPARK_REMOTE:
                self._session = connect(with_session_id(settings.SPARK_REMOTE, self.session_id))
            else:
                self._session = spark_session().newSession()
        return self._session

    def _forget(self) -> None:
        self._session = self._given


# --- between two commits ------------------------------------------------------------------


@dataclass
class RunFigures:
    rewritten_files: int = 0
    rewritten_bytes: int = 0
    added_files: int = 0
    added_bytes: int = 0
    replace_snapshot_id: int | None = None
    rewritten_manifests: int = 0
    added_manifests: int = 0
    expired_snapshots: int = 0
    expired_files: int = 0
    orphan_files: int = 0
    removed_bytes: int = 0


# Snapshot ids Iceberg's expire_snapshots takes in one call (the statement's size).
EXPIRE_BATCH = 1000
ORPHAN_CLOCK_MARGIN_S = 60


class TableMaintenance:
    """One maintenance run of one Iceberg table (see the module's docstring)."""

    def __init__(
        self,
        config: IcebergMaintenance,
        catalog: Catalog,
        table_name: str,
        procedures: IcebergProcedures,
        turns: BetweenCommits,
        ledger: MaintenanceLedger,
        run_id: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.catalog = catalog
        self.table_name = table_name
        self.procedures = procedures
        self.turns = turns
        self.ledger = ledger
        self.run_id = run_id
        # When snapshot ages are measured from (a test moves it on). Orphans are
        # files whose age Iceberg measures by the server's own clock.
        self.clock = clock
        self.figures = RunFigures()

    def run(self) -> RunFigures:
        """Every step; one that fails does not keep the others from running, and the run then fails with
        what failed. An unreachable Spark ends the run at once: every step needs it."""
        from workers.spark_writer import SparkUnavailable

        failures: list[str] = []
        steps = (
            ("manifest rewrite", self.rewrite_manifests),
            ("compaction", self.compact),
            ("expiry", self.expire),
            ("orphan removal", self.remove_orphans),
        )
        for step, work in steps:
            if self.turns.stopped.is_set():
                raise Stopped("the coordinator stopped")
            try:
                work()
            except Stopped:
                raise
            except Exception as exc:
                failures.append(f"{step}: {type(exc).__name__}: {exc}")
                if isinstance(exc, SparkUnavailable):
                    break
        if failures:
            raise MaintenanceFailed("; ".join(failures))
        return self.figures

    def _record(self, **figures: Any) -> None:
        for name, value in figures.items():
            setattr(self.figures, name, value)
        self.ledger.record(self.run_id, **figures)

    def compact(self) -> None:
        """``rewrite_data_files``; the figures, and the REPLACE snapshot it committed."""
        from pyiceberg.table.snapshots import Operation

        from sinks.iceberg.tables import PROP_CONNECTOR

        table = self.catalog.load_table(self.table_name)
        current = table.current_snapshot()
        if current is None or not self._may_compact(current.summary):
            return
        before = {s.snapshot_id for s in table.snapshots()}
        options = {
            "target-file-size-bytes": str(self.config.target_file_size_bytes),
            "min-input-files": str(self.config.min_input_files),
            "delete-file-threshold": str(self.config.delete_file_threshold),
        }
        (result,) = self.procedures.call("rewrite_data_files", self.table_name, options=sql_map(options))
        failpoint("maintenance.after_rewrite")
        self.compact_deletes()
        if not result["rewritten_data_files_count"]:
            return
        replaces = [
            s
            for s in self.catalog.load_table(self.table_name).snapshots()
            if s.snapshot_id not in before
            and s.summary is not None
            and s.summary.operation is Operation.REPLACE
            and PROP_CONNECTOR not in s.summary.additional_properties
        ]
        replace = replaces[-1] if replaces else None
        summary = replace.summary.additional_properties if replace is not None and replace.summary else {}
        log.info(
            "%s: compacted %d files into %d",
            self.table_name,
            result["rewritten_data_files_count"],
            result["added_data_files_count"],
        )
        self._record(
            rewritten_files=result["rewritten_data_files_count"],
            rewritten_bytes=result["rewritten_bytes_count"],
            added_files=result["added_data_files_count"],
            added_bytes=int(summary.get("added-files-size", 0)),
            replace_snapshot_id=replace.snapshot_id if replace is not None else None,
        )

    def compact_deletes(self) -> None:
        """``rewrite_position_delete_files``, when the table has position delete files (merge-on-read
        upserts'): those of a partition become one, and those whose data files compaction rewrote go."""
        table = self.catalog.load_table(self.table_name)
        current = table.current_snapshot()
        totals = current.summary.additional_properties if current is not None and current.summary else {}
        if not int(totals.get("total-position-deletes", 0) or 0):
            return
        options = {"min-input-files": str(self.config.min_input_files)}
        (result,) = self.procedures.call("rewrite_position_delete_files", self.table_name, options=sql_map(options))
        log.info(
            "%s: compacted %d position delete files into %d",
            self.table_name,
            result["rewritten_delete_files_count"],
            result["added_delete_files_count"],
        )

    def _may_compact(self, summary: Any) -> bool:
        """Whether Iceberg's bin-pack could find work, by the current snapshot's totals: with fewer data
        files than ``min-input-files``, only if together they pass the target size or carry deletes. (A
        Spark job for nothing, every run of every table, is what this saves.)"""
        totals = summary.additional_properties if summary is not None else {}
        try:
            files, size = int(totals["total-data-files"]), int(totals["total-files-size"])
        except (KeyError, ValueError):
            return True
        return (
            files >= self.config.min_input_files
            or (files > 1 and size > self.config.target_file_size_bytes)
            or int(totals.get("total-delete-files", 0) or 0) > 0
        )

    def rewrite_manifests(self) -> None:
        """``rewrite_manifests``, between two of the sink's commits.

        Iceberg's manifest rewrite fails when a manifest it rewrites has left
        the table meanwhile, and the sink's appends (pyiceberg's) carry over
        no manifest that holds only deleted entries, as a compaction leaves:
        so it runs in a turn of the coordinator's, where no commit of the
        sink can land. It reads manifests only: a few seconds for thousands.
        A table with fewer than ``min-input-files`` manifests is left as it is.
        """
        table = self.catalog.load_table(self.table_name)
        current = table.current_snapshot()
        if current is None or len(current.manifests(table.io)) < self.config.min_input_files:
            return
        (result,) = self.turns.run(lambda: self.procedures.call("rewrite_manifests", self.table_name))
        self._record(
            rewritten_manifests=result["rewritten_manifests_count"], added_manifests=result["added_manifests_count"]
        )

    def expire(self) -> None:
        """``expire_snapshots`` of the snapshots ``snapshots_to_expire`` chooses, and of no other: Iceberg's
        own age cut is set before the first snapshot."""
        from pyiceberg.table.snapshots import ancestors_of

        table = self.catalog.load_table(self.table_name)
        metadata = table.metadata
        current = table.current_snapshot()
        lineage = [s.snapshot_id for s in ancestors_of(current, metadata)] if current is not None else []
        expired = snapshots_to_expire(
            [snapshot_info(s) for s in metadata.snapshots],
            lineage,
            {ref.snapshot_id for ref in metadata.refs.values()},
            int(self.clock() * 1000),
            self.config.max_snapshot_age_ms,
            self.config.min_snapshots_to_keep,
        )
        deleted = 0
        for first in range(0, len(expired), EXPIRE_BATCH):
            ids = ", ".join(f"{snapshot_id}L" for snapshot_id in expired[first : first + EXPIRE_BATCH])
            (result,) = self.procedures.call(
                "expire_snapshots", self.table_name, older_than=sql_timestamp(0), snapshot_ids=f"array({ids})"
            )
            deleted += sum(int(count or 0) for count in result.values())
            self._record(expired_snapshots=min(len(expired), first + EXPIRE_BATCH), expired_files=deleted)

    def remove_orphans(self) -> None:
        """``remove_orphan_files`` as a dry run, then the files no prepared commit holds are deleted.

        The ledger's prepared files are read first: a commit applied while
        Iceberg lists and reads was prepared before, its files among them.
        """
        protected = {file_key(location) for location in self.ledger.protected_files([self.table_name])}
        # (A minute more than the window: Iceberg refuses an interval under a day by the
        # server's clock, which may lag this host's.)
        older_than = time.time() - self.config.orphan_older_than_ms / 1000 - ORPHAN_CLOCK_MARGIN_S
        table = self.catalog.load_table(self.table_name)
        listing = {}
        if urlsplit(table.location()).scheme not in HADOOP_LISTED:
            # (Object storage: listed by the table's own FileIO, S3FileIO say, which its catalog's s3.*
            # properties configure; Hadoop has no file system for s3:// and reads none of them.)
            listing["prefix_listing"] = "true"
        rows = self.procedures.call(
            "remove_orphan_files",
            self.table_name,
            older_than=sql_timestamp(older_than),
            dry_run="true",
            **listing,
        )
        orphans = [row["orphan_file_location"] for row in rows]
        kept = [location for location in orphans if file_key(location) in protected]
        if kept:
            log.info("%s: %d unreferenced files are a prepared commit's: kept", self.table_name, len(kept))
        removed = self._delete(table.io, [location for location in orphans if file_key(location) not in protected])
        self._record(orphan_files=len(removed), removed_bytes=sum(size for _, size in removed))

    def _delete(self, io: FileIO, locations: Sequence[str]) -> list[tuple[str, int]]:
        removed = []
        for location in locations:
            try:
                size = len(io.new_input(location))
                io.delete(location)
            except FileNotFoundError:
                continue
            removed.append((location, size))
        if removed:
            log.info("%s: deleted %d orphan files", self.table_name, len(removed))
        return removed


# --- the connector's maintenance thread ---------------------------------------------------


class IcebergTables:
    """The Iceberg sink's tables, maintained by Iceberg's own procedures (``TableMaintenance``)."""

    def __init__(
        self,
        config: IcebergMaintenance,
        tables: Callable[[], list[str]],
        catalog: Callable[[], Catalog],
        procedures: IcebergProcedures,
        ledger: MaintenanceLedger,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.tables = tables
        self.catalog = catalog
        self.procedures = procedures
        self.ledger = ledger
        self.clock = clock

    def existing(self) -> list[str]:
        catalog = self.catalog()
        return [name for name in self.tables() if catalog.table_exists(name)]

    def maintain(self, table: str, run_id: int, turns: BetweenCommits) -> None:
        TableMaintenance(
            self.config, self.catalog(), table, self.procedures, turns, self.ledger, run_id, self.clock
        ).run()
