"""The Hudi sink's commit: one Hudi write per prepared commit, by Hudi's own Spark writer.

The participants leave each commit's rows as Parquet under the table's
``.sinkadmin/incoming/<commit>/`` (``sinks.hudi.writer``). Once the
ledger has prepared the commit (DESIGN I4), the coordinator has Spark read
them and write them with Hudi's datasource (``format("hudi")``), as
HoodieStreamer writes a batch: Hudi's index, key generator, payload and
merge mode, its copy-on-write or merge-on-read files, its metadata table,
and its inline cleaning and archival. The write's instant carries the
ledger's commit id in its commit metadata (``sinks.hudi.timeline``).

Exactly once, with Hudi's mechanisms and ours:

- **A retried commit finds its instant.** Before writing, the timeline is
  read: a completed instant with the commit's id means it is done. A write
  that died before completing its instant left it in flight; Hudi rolls it
  back at the next write (its failed-writes cleaning policy, EAGER for a
  single writer), and the commit is written again.
- **A zombie cannot complete a second instant.** "Read the timeline, write,
  complete" runs under a PostgreSQL advisory lock on the table, held by the
  coordinator's connection for the whole write: two coordinators of one
  connector (a zombie and its successor rolling the same commit forward)
  take turns, and the second finds the first's instant. Table services the
  maintenance runs between commits take the same lock (``sinks.hudi.services``).
- **Nor can a killed one's write.** A coordinator killed mid-write loses its
  connection, and with it the lock, but its write goes on in the Spark
  server. Hudi's optimistic concurrency, with the sink's rule in its
  pre-commit check (jvm/hudi-fence), fails whichever of two writes of one
  commit completes second; the successor's, failed so, returns the first's
  instant.
"""

from __future__ import annotations

import functools
import logging
import posixpath
import time
from collections.abc import Mapping
from typing import Any

import pyarrow.parquet as pq

from connectors.config import SinkConfig
from sinks.hudi.settings import HudiSettings, writer_options
from sinks.hudi.timeline import (
    META_PREFIX,
    commit_metadata,
    completed_instants,
    instant_of_commit,
    latest_of,
    of_commit,
    pending_writes,
)
from sinks.hudi.writer import INCOMING, IS_DELETED, SEQUENCE
from workers.coordinator import PreparedCommit, SinkUnavailable
from workers.failpoints import failpoint, failpoint_set, failpoint_while
from workers.locks import advisory_lock
from workers.spark_writer import SparkJobs, SparkUnavailable
from workers.storage import StoragePath

log = logging.getLogger(__name__)


# How Hudi's writer says that its pre-commit check failed (jvm/hudi-fence: the commit is in another instant).
CONFLICT = "HoodieWriteConflictException"


def table_lock(settings: HudiSettings) -> str:
    """The advisory lock every writer of the table's timeline takes (commits, table services)."""
    return f"sinkadmin.hudi:{settings.base_path}"


class HudiCommitter:
    """The coordinator's CommitterPort for the Hudi sink."""

    def __init__(self, connector: str, config: SinkConfig) -> None:
        self.connector = connector
        self.config = config
        self.settings: HudiSettings = config.settings
        self._spark = SparkJobs()
        self._swept_at: float | None = None

    def close(self) -> None:
        pass

    @property
    def ident(self) -> str:
        return f"{self.settings.database}.{self.settings.table_name}"

    def commit(self, prepared: PreparedCommit) -> dict[str, int]:
        commit_id = str(prepared.commit_id)
        paths = [f["path"] for f in prepared.files]
        with advisory_lock(table_lock(self.settings)):
            try:
                instant = self._spark.run_on_session(lambda spark: self._apply(spark, prepared, paths))
            except SparkUnavailable as exc:
                raise SinkUnavailable(str(exc)) from exc
        self._cleanup(commit_id)
        return {self.ident: int(instant)} if instant is not None else {}

    def _apply(self, spark: Any, prepared: PreparedCommit, paths: list[str]) -> str | None:
        """The commit's instant: found on the timeline, or written now. (Run again as a whole when Spark's
        session was lost mid-way: the timeline is read again first.)"""
        commit_id = str(prepared.commit_id)
        instants = completed_instants(self.settings.base)
        found = of_commit(instants, commit_id)
        if found is not None:
            return found.timestamp
        if not paths:
            return None
        previous = latest_of(instants, self.connector)
        options = {
            **writer_options(self.settings, self.config.raw),
            "hoodie.datasource.write.commitmeta.key.prefix": META_PREFIX,
            **commit_metadata(self.connector, commit_id, prepared.epoch, _ranges(prepared.offsets), previous),
        }
        failpoint("hudi.before_write")  # (a test's coordinator dies here: prepared, nothing written)
        pending = pending_writes(self.settings.base) if failpoint_set("hudi.during_write") else set()

        def write(frame: Any) -> None:
            if self.settings.upsert:
                frame = latest_per_key(frame, self.settings)
            # (Or once Hudi's write has requested its instant: the write goes on in the Spark server without it.)
            with failpoint_while("hudi.during_write", when=lambda: bool(pending_writes(self.settings.base) - pending)):
                frame.drop(SEQUENCE).write.format("hudi").options(**options).mode("append").save(
                    self.settings.base_path
                )

        try:
            try:
                # (Partitions' files may differ in columns: a tombstone's has its key's only.)
                write(spark.read.option("mergeSchema", "true").parquet(*paths))
            except Exception as exc:
                # Spark's schema merge refused the files before Hudi's write began: they are read by schema.
                if CANNOT_MERGE_SCHEMAS not in str(exc):
                    raise
                write(typed_rows(spark, paths, self.settings, table_exists=bool(instants)))
        except Exception as exc:
            # Hudi's pre-commit check found the commit in another write's completed instant (a killed
            # predecessor's, which went on in the Spark server): that instant is the commit's.
            if CONFLICT not in str(exc) or (found := instant_of_commit(self.settings.base, commit_id)) is None:
                raise
            log.info(
                "%s: commit %s was completed by an earlier write, as instant %s",
                self.connector,
                commit_id,
                found.timestamp,
            )
            return found.timestamp
        failpoint("hudi.after_write")  # (or here: the instant complete, the ledger not yet told)
        written = instant_of_commit(self.settings.base, commit_id)
        if written is None:
            raise RuntimeError(f"Hudi's write of commit {commit_id} completed no instant on {self.settings.base_path}")
        log.info("%s: commit %s is instant %s", self.connector, commit_id, written.timestamp)
        return written.timestamp

    # Incoming rows of commits that were never prepared (aborted, superseded) go once this old.
    ORPHAN_AGE_S = 3600.0

    def _cleanup(self, commit_id: str) -> None:
        """The applied commit's incoming rows go; every hour, so do those of commits never prepared.

        Only after a commit is applied: the ledger holds one prepared commit at a time, so any other
        commit's rows are of one not prepared yet (a staging round ahead, minutes old at most) or never
        to be (aborted): an hour old, they are the latter."""
        incoming = self.settings.base.child(INCOMING)
        incoming.delete(commit_id)
        if self._swept_at is not None and time.monotonic() - self._swept_at < self.ORPHAN_AGE_S:
            return
        self._swept_at = time.monotonic()
        for folder, newest in list(incoming.folders()):
            if time.time() - newest > self.ORPHAN_AGE_S:
                log.info("%s: removing %s/%s, left by a commit never prepared", self.connector, incoming.uri, folder)
                incoming.delete(folder)


# Spark's error when staged files hold one column in two types, which its Parquet schema merge refuses.
CANNOT_MERGE_SCHEMAS = "CANNOT_MERGE_SCHEMAS"
# Spark's numeric types a column is widened among (to a long, or a double if one is fractional).
INTEGRAL, FRACTIONAL = ("tinyint", "smallint", "int", "bigint"), ("float", "double")


def typed_rows(spark: Any, paths: list[str], settings: HudiSettings, table_exists: bool) -> Any:
    """The commit's staged rows when Spark's schema merge refused their files for a column's types. Each task
    types its partitions' plain JSON columns from their own records, so one may give a column as a long and
    another as a double; and a partition of tombstones alone has its keys as its Kafka keys wrote them (text,
    with StringConverter). The files are read by schema, and each group cast:

    - a column that makes a record's identity (a record key or partition field) is never widened, since
      Hudi's record key and partition path are its text: it takes the table's type, or without a table the
      type the records agree on; else the commit fails, saying so. A tombstone whose key is not the text of
      such a value exactly (``1.0`` for a long) can delete no row, and is left out, counted in the log; a
      record's fails the commit, saying so;
    - another column of numbers of several types is widened: to a long, or to a double if one is fractional;
    - other differences are left to Spark's union (it widens a long and a string to a string), with a
      warning: Hudi's writer then evolves the table's column, or refuses it.

    ``table_exists``: the table has a completed commit, whose schema is read (the caller read the timeline)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, LongType

    # The files grouped by their columns, read from their footers here (a Spark job for each file's schema took
    # a commit of many partitions seconds); then Spark reads each group's schema once.
    grouped: dict[tuple[tuple[str, str], ...], list[str]] = {}
    folders: dict[str, tuple[Any, str]] = {}  # (a commit's files are in one folder: one file system for them)
    for path in paths:
        folder, name = posixpath.split(path)
        if folder not in folders:
            folders[folder] = StoragePath.parse(folder).filesystem()
        fs, root = folders[folder]
        columns = pq.read_schema(f"{root}/{name}", filesystem=fs)
        grouped.setdefault(tuple((f.name, str(f.type)) for f in columns), []).append(path)
    groups = [(spark.read.parquet(group[0]).schema, spark.read.parquet(*group)) for group in grouped.values()]
    keying = {*settings.record_key_fields, IS_DELETED, SEQUENCE}
    records = [schema for schema, _ in groups if set(schema.names) - keying]
    table = spark.read.format("hudi").load(settings.base_path).schema if table_exists else None
    identity = dict.fromkeys([*settings.record_key_fields, *settings.partition_columns])
    targets: dict[str, Any] = {}
    for name in identity:
        top = name.split(".")[0]
        kinds = {schema[top].dataType for schema, _ in groups if top in schema.names}
        if len(kinds) < 2:
            continue
        if top != name:
            raise ValueError(
                f"the commit's partitions give {top}, whose field {name} makes a record's identity, several types: "
                "give its values one JSON type in every partition"
            )
        agreed = {schema[name].dataType for schema in records if name in schema.names}
        if table is not None and name in table.names:
            targets[name] = table[name].dataType
        elif len(agreed) == 1:
            targets[name] = agreed.pop()
        else:
            found = ", ".join(sorted(kind.simpleString() for kind in kinds))
            raise ValueError(
                f"the commit's partitions give {name}, which makes a record's identity, the types {found}, and "
                "the table does not say which: give its values one JSON type in every partition"
            )
    for name in dict.fromkeys(n for schema, _ in groups for n in schema.names):
        kinds = {schema[name].dataType.simpleString() for schema, _ in groups if name in schema.names}
        if name in identity or len(kinds) < 2:
            continue
        if kinds <= {*INTEGRAL, *FRACTIONAL}:
            targets[name] = DoubleType() if kinds & set(FRACTIONAL) else LongType()
        else:
            log.warning("the commit's partitions give %s the types %s: Spark's union widens them", name, kinds)
    log.info(
        "the commit's staged files hold a column in several types: read by schema, %s",
        ", ".join(f"{name} cast to {kind.simpleString()}" for name, kind in targets.items()) or "none cast",
    )
    frames = []
    for schema, read in groups:
        casts = {name: kind for name, kind in targets.items() if name in schema.names and schema[name].dataType != kind}
        exact = {
            # (try_cast: with ANSI casts too, a text that is no such value is null, not an error.)
            name: F.expr(f"try_cast(`{name}` AS {kind.simpleString()})")
            .cast("string")
            .eqNullSafe(F.col(name).cast("string"))
            for name, kind in casts.items()
            if name in identity
        }
        kept = read
        if exact:
            every = functools.reduce(lambda a, b: a & b, exact.values())
            deleted = F.col(IS_DELETED)
            wrong = read.agg(
                F.count(F.when(~deleted & ~every, 1)).alias("records"),
                F.count(F.when(deleted & ~every, 1)).alias("tombstones"),
            ).first()
            fields = ", ".join(exact)
            types = ", ".join(casts[name].simpleString() for name in exact)
            if wrong["records"]:
                source = "table" if table is not None else "commit's other records"
                raise ValueError(
                    f"{wrong['records']} record(s) of the commit hold {fields} as no {types} value, the type the "
                    f"{source} give(s) it: give the field one JSON type in every partition"
                )
            if wrong["tombstones"]:
                log.warning(
                    "%d tombstone(s) whose %s is no %s value delete no row: left out",
                    wrong["tombstones"],
                    fields,
                    types,
                )
            kept = read.where(every)
        frames.append(
            kept.select(*(F.col(c).cast(casts[c]).alias(c) if c in casts else F.col(c) for c in schema.names))
        )
    while len(frames) > 1:  # (a balanced union: its plan as deep as the log of the groups)
        frames = [
            frames[i].unionByName(frames[i + 1], allowMissingColumns=True) if i + 1 < len(frames) else frames[i]
            for i in range(0, len(frames), 2)
        ]
    return frames[0]


def latest_per_key(frame: Any, settings: HudiSettings) -> Any:
    """Of the commit's records of one key (of one key and partition path, with an index that is not global:
    ``HudiSettings.identity_partition_fields``), the one Hudi would keep, decided here where Hudi's own combining
    would leave it to chance: in event-time ordering the greatest precombine value, of equal ones the later
    record in the stream (a tombstone has no precombine value: it deletes what came before it in the
    stream, and what comes after it wins over it); in commit-time ordering the last in the stream. (The
    stream's order is its offsets': of a key's records in two Kafka partitions, the greater offset.)"""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    # The record key, and with an index that is not global the partition path's fields, a null one and an empty
    # one alike (Hudi writes both to its default partition).
    identity = [
        *(F.col(k) for k in settings.record_key_fields),
        *(F.coalesce(F.col(p).cast("string"), F.lit("")) for p in settings.identity_partition_fields),
    ]
    order = [F.col(SEQUENCE).desc()]
    if settings.precombine_field and settings.event_time_ordering:
        precombine = F.col(settings.precombine_field)
        tombstone = F.when(precombine.isNull() & F.col(IS_DELETED), F.col(SEQUENCE))
        last_tombstone = F.max(tombstone).over(Window.partitionBy(*identity))
        frame = (
            frame.withColumn("_sinkadmin_tombstone", last_tombstone)
            .where(F.col("_sinkadmin_tombstone").isNull() | (F.col(SEQUENCE) >= F.col("_sinkadmin_tombstone")))
            .drop("_sinkadmin_tombstone")
        )
        order.insert(0, precombine.desc_nulls_last())
    ranked = Window.partitionBy(*identity).orderBy(*order)
    return (
        frame.withColumn("_sinkadmin_rank", F.row_number().over(ranked))
        .where("_sinkadmin_rank = 1")
        .drop("_sinkadmin_rank")
    )


def _ranges(offsets: Mapping[str, Mapping[Any, Any]]) -> dict[str, dict[str, list[int]]]:
    return {topic: {str(p): [int(r[0]), int(r[1])] for p, r in parts.items()} for topic, parts in offsets.items()}


def recovered_commits(connector: str, config: SinkConfig) -> list[Any]:
    """Every commit of ``connector`` on the table's timeline (for rebuilding a lost ledger, DESIGN I2)."""
    import json
    import uuid
    from datetime import UTC, datetime

    from connectors.actions.ledger import RecoveredCommit
    from sinks.hudi.timeline import CONNECTOR_KEY, EPOCH_KEY, RANGES_KEY

    settings: HudiSettings = config.settings
    found = []
    for instant in completed_instants(settings.base):
        extra = instant.extra
        if extra.get(CONNECTOR_KEY) != connector or instant.commit_id is None:
            continue
        ranges = json.loads(extra.get(RANGES_KEY) or "{}")
        found.append(
            RecoveredCommit(
                commit_id=uuid.UUID(instant.commit_id),
                epoch=int(extra.get(EPOCH_KEY, 0)),
                committed_at=datetime.fromtimestamp(instant.completed_at_ms / 1000, tz=UTC),
                snapshot_ids={f"{settings.database}.{settings.table_name}": int(instant.timestamp)},
                ranges={(topic, int(p)): (r[0], r[1]) for topic, parts in ranges.items() for p, r in parts.items()},
                watermark=None,
            )
        )
    return found
