"""Commits to Iceberg format v3 tables, made by Spark's Iceberg runtime.

pyiceberg 0.12 reads format v3 tables but writes none: its v3 table metadata refuses to be written
(apache/iceberg-python #1551), and it writes neither v3 manifests nor deletion vectors. So the sink's
commit to a v3 table, its schema changes and the creation of one are made by Spark's Iceberg runtime
(docs/decisions/021-format-v3-tables-through-spark.md). A commit goes on a branch of its own, published in
one step, so that readers see its deletes and its rows at once, with its offsets:

1. If main holds the commit already, that is all (the branches of earlier attempts are dropped). Otherwise
   a branch of this attempt's own, ``sinkadmin_<commit id>_<attempt>``, is made at main's snapshot.
2. In upsert mode, the table's rows of every key the commit writes or deletes are deleted on the branch
   (``MERGE INTO ... WHEN MATCHED THEN DELETE``): Iceberg writes deletion vectors, or rewrites the data
   files, as the table's ``write.merge.mode`` says. With an ordering field, a row later than the commit's
   record of its key stays, and that record is left out of the rows (its key found by a join first).
3. The commit's rows are appended to the branch, the commit's properties (connector, commit id, epoch,
   offsets) in that snapshot's summary; the branch must then hold the commit once, at its head.
4. main is fast-forwarded to the branch (Iceberg's ``fast_forward``). That fails if main moved since step 1
   (another writer, or this commit's zombie, which would have published its own whole branch), or if the
   branch is gone (a successor published the commit and dropped it): the attempt starts again, from a
   check of main.
5. The branch is dropped.

Each step is safe to run twice (a Spark Connect session lost mid-step is joined again and the step run
again, ``SparkProcedures.run``), save the append, which step 3 checks.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.table import TableProperties
from pyiceberg.table.name_mapping import NameMapping
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from sinks.iceberg.maintenance import SparkProcedures, sql_identifier, sql_string
from sinks.iceberg.writes import table_filesystem
from workers.failpoints import failpoint

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table

    from connectors.config import SinkConfig
    from sinks.iceberg.tables import CommittedTable, TableCommit
    from sinks.iceberg.upserts import Winners

log = logging.getLogger(__name__)

# The first table format version pyiceberg cannot write.
SPARK_WRITTEN_FORMAT = 3
BRANCH_PREFIX = "sinkadmin_"
# What Iceberg's fast_forward says when main moved off the branch's base; and what Spark's error says of a
# statement that lost the catalog's compare-and-swap to another writer (CREATE BRANCH beside a commit).
NOT_AN_ANCESTOR = "is not an ancestor of"
ICEBERG_COMMIT_FAILED = "org.apache.iceberg.exceptions.CommitFailedException"


def written_by_spark(table: Table) -> bool:
    """Whether the sink writes ``table`` through Spark's Iceberg runtime (a format pyiceberg cannot write)."""
    return table.metadata.format_version >= SPARK_WRITTEN_FORMAT


def through_spark(spark: SparkTables | None, table_name: str) -> SparkTables:
    """``spark``, through which the format v3 table ``table_name`` is written; a ValueError if none is given."""
    if spark is None:
        raise ValueError(f"{table_name} is a format v3 table, which the sink writes through Spark: none is given")
    return spark


def commit_branch(commit_id: str) -> str:
    """The prefix of the branches a commit is made on before it is published: one per attempt, so that a
    zombie's fast-forward can only publish its own branch, which holds the whole commit."""
    return f"{BRANCH_PREFIX}{uuid.UUID(commit_id).hex}_"


# The columns of a commit's keys file beside the identifier columns: each key's index among the commit's keys
# (``Winners.keys``), whether the commit deletes it without writing it, and its record's ordering value.
KEY_INDEX, DELETES_ONLY, INCOMING = "__sinkadmin_key", "__sinkadmin_deletes", "__sinkadmin_incoming"


@dataclass(frozen=True)
class SparkCommit:
    """What a commit does to a table written by Spark: the Parquet files of the rows it appends (``rows``, or
    ``rows_of``, given the indexes of the keys whose records are stale) and, in upsert mode, the file of its
    keys (``write_commit_keys``), whose table rows it deletes first."""

    rows: tuple[str, ...] = ()
    keys_file: str | None = None
    id_columns: tuple[str, ...] = ()
    deleted_keys: int = 0  # (how many keys the file flags DELETES_ONLY)
    # With an ordering field: the field, and whether the keys file has each record's value of it (INCOMING;
    # absent when no record has the field).
    ordering_field: str | None = None
    incoming: bool = False
    rows_of: Callable[[Sequence[int]], tuple[str, ...]] | None = field(default=None, repr=False)

    def rows_without(self, stale: Sequence[int]) -> tuple[str, ...]:
        """The files of the rows to append, the records of the ``stale`` keys left out."""
        return self.rows_of(stale) if self.rows_of is not None else self.rows


# Iceberg's types as Spark's DDL names them (Spark's Iceberg runtime maps them back). Spark 3.5 has no time
# type: a time column cannot be added through it.
SPARK_TYPES: dict[type[IcebergType], str] = {
    BooleanType: "boolean",
    IntegerType: "int",
    LongType: "bigint",
    FloatType: "float",
    DoubleType: "double",
    DateType: "date",
    TimestampType: "timestamp_ntz",
    TimestamptzType: "timestamp",
    StringType: "string",
    BinaryType: "binary",
    FixedType: "binary",
    UUIDType: "string",
}


def spark_unreadable(schema: Schema) -> str | None:
    """A column of ``schema`` whose type Spark 3.5 cannot read in the files the sink stages (Parquet's UUID
    type; Iceberg's time, which Spark has no type for), said as such; None if there is none. A format v3
    table is written through Spark, which reads those files."""
    pending: list[tuple[str, IcebergType]] = [(f.name, f.field_type) for f in schema.fields]
    while pending:
        path, field_type = pending.pop(0)
        if isinstance(field_type, UUIDType | TimeType):
            return f"column {path!r} of type {field_type}"
        if isinstance(field_type, StructType):
            pending += [(f"{path}.{f.name}", f.field_type) for f in field_type.fields]
        elif isinstance(field_type, ListType):
            pending.append((f"{path}.element", field_type.element_type))
        elif isinstance(field_type, MapType):
            pending += [(f"{path}.key", field_type.key_type), (f"{path}.value", field_type.value_type)]
    return None


def spark_type(iceberg_type: IcebergType, column: str) -> str:
    """``iceberg_type`` in Spark's DDL, for a column added through Spark; raises ValueError for a type that
    Spark 3.5 has no type for."""
    if isinstance(iceberg_type, DecimalType):
        return f"decimal({iceberg_type.precision}, {iceberg_type.scale})"
    if isinstance(iceberg_type, StructType):
        fields = ", ".join(
            f"{sql_identifier(f.name)}: {spark_type(f.field_type, f'{column}.{f.name}')}" for f in iceberg_type.fields
        )
        return f"struct<{fields}>"
    if isinstance(iceberg_type, ListType):
        return f"array<{spark_type(iceberg_type.element_type, f'{column}.element')}>"
    if isinstance(iceberg_type, MapType):
        key = spark_type(iceberg_type.key_type, f"{column}.key")
        return f"map<{key}, {spark_type(iceberg_type.value_type, f'{column}.value')}>"
    try:
        return SPARK_TYPES[type(iceberg_type)]
    except KeyError:
        raise ValueError(
            f"column {column!r} of type {iceberg_type} cannot be added to a format v3 table: the sink changes "
            "such a table's schema through Spark, which has no such type"
        ) from None


def added_columns(existing: Schema, missing: Schema) -> list[str]:
    """The ``ADD COLUMNS`` clauses of the fields of ``missing`` (``tables.missing_fields``: the fields of a
    candidate schema that ``existing`` lacks, new fields of its structs under them), each a nullable column."""
    clauses: list[str] = []

    def add(path: tuple[str, ...], have: StructType | None, fields: Sequence[NestedField]) -> None:
        for f in fields:
            mine = have.field_by_name(f.name) if have is not None else None
            if mine is not None and isinstance(mine.field_type, StructType) and isinstance(f.field_type, StructType):
                add((*path, f.name), mine.field_type, f.field_type.fields)
            else:
                column = (*path, f.name)
                clauses.append(f"{sql_identifier(*column)} {spark_type(f.field_type, '.'.join(column))}")

    add((), existing.as_struct(), missing.fields)
    return clauses


def staged_names(table: Table) -> dict[tuple[str, ...], tuple[str, ...]]:
    """Each column's path (its current names; a struct's fields under it) and the names its values may have
    in files written before a rename: its current name, then the names the table's name mapping gives its
    field id (Iceberg adds a renamed field's new name there and keeps the old)."""
    by_id: dict[int, list[str]] = {}
    pending = list((table.name_mapping() or NameMapping([])).root)
    while pending:
        mapped = pending.pop()
        if mapped.field_id is not None:
            by_id[mapped.field_id] = mapped.names
        pending += mapped.fields
    found: dict[tuple[str, ...], tuple[str, ...]] = {}

    def visit(struct: StructType, path: tuple[str, ...]) -> None:
        for f in struct.fields:
            here = (*path, f.name)
            found[here] = tuple(dict.fromkeys([f.name, *by_id.get(f.field_id, [])]))
            if isinstance(f.field_type, StructType):
                visit(f.field_type, here)

    visit(table.schema().as_struct(), ())
    return found


def projection(target: Any, source: Any, names: Mapping[tuple[str, ...], Sequence[str]] = {}) -> list[str]:
    """Spark SQL expressions selecting, from rows of schema ``source``, the columns of ``target`` (both
    Spark StructTypes): each by the first of its ``names`` (``staged_names``; else its own name) the rows
    have, a missing column (top-level or in a struct) as null, as a table whose schema grew since the rows
    were written reads them."""
    from pyspark.sql.types import StructType as SparkStruct

    def found(fields: Any, path: tuple[str, ...]) -> Any:
        by_name = {f.name: f for f in fields}
        return next((by_name[n] for n in names.get(path, (path[-1],)) if n in by_name), None)

    def value(target_type: Any, source_field: Any, reference: str, path: tuple[str, ...]) -> str:
        if source_field is None:
            return f"CAST(NULL AS {target_type.simpleString()})"
        reference = f"{reference}{'.' if reference else ''}{sql_identifier(source_field.name)}"
        if isinstance(target_type, SparkStruct) and isinstance(source_field.dataType, SparkStruct):
            members = ", ".join(
                f"{sql_string(f.name)}, "
                + value(f.dataType, found(source_field.dataType.fields, (*path, f.name)), reference, (*path, f.name))
                for f in target_type.fields
            )
            return f"IF({reference} IS NULL, NULL, named_struct({members}))"
        return reference

    return [
        f"{value(f.dataType, found(source.fields, (f.name,)), '', (f.name,))} AS {sql_identifier(f.name)}"
        for f in target.fields
    ]


# Iceberg's S3FileIO catalog properties, and the S3A settings (under ``fs.s3a.bucket.<bucket>.``) that say the
# same to Hadoop's S3A connector, through which Spark reads a commit's staged files.
S3A_OF_ICEBERG = {
    "s3.endpoint": "endpoint",
    "s3.access-key-id": "access.key",
    "s3.secret-access-key": "secret.key",
    "s3.session-token": "session.token",
    "s3.path-style-access": "path.style.access",
    "client.region": "endpoint.region",
    "s3.region": "endpoint.region",
}


def hadoop_locations(paths: Sequence[str], properties: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """``paths`` (a commit's staged files, where the catalog's FileIO wrote them) as Spark's file sources
    read them, and the session settings that reach them: an ``s3://`` file through Hadoop's S3A connector
    (``s3a://``), with the catalog's ``s3.*`` properties as its bucket's S3A settings. Settings a catalog
    does not give fall to Spark's own (spark-defaults.conf, the AWS SDK's defaults)."""
    from urllib.parse import urlsplit

    located, settings = [], {}
    for path in paths:
        parts = urlsplit(path)
        if parts.scheme not in ("s3", "s3a", "s3n"):
            located.append(path)
            continue
        located.append(parts._replace(scheme="s3a").geturl())
        for name, s3a in S3A_OF_ICEBERG.items():
            if properties.get(name, "").strip():
                settings[f"fs.s3a.bucket.{parts.netloc}.{s3a}"] = properties[name].strip()
    return located, settings


def key_match(id_columns: Sequence[str], table: str, keys: str) -> str:
    """The condition matching a table row to a key row: each identifier column null-safely equal (a null key
    matches the rows without one, as the sink's format v2 upserts match it)."""
    return " AND ".join(
        f"{table}.{sql_identifier(*c.split('.'))} <=> {keys}.{sql_identifier(*c.split('.'))}" for c in id_columns
    )


class SparkTables:
    """Format v3 tables' commits, schema changes and creation, on the connector's catalog in Spark."""

    def __init__(self, procedures: SparkProcedures) -> None:
        self.procedures = procedures

    @classmethod
    def of(cls, config: SinkConfig) -> SparkTables:
        """On the catalog of the connector of ``config`` (its session is joined at the first statement)."""
        from sinks.iceberg.tables import connector_catalog_properties

        return cls(SparkProcedures(config.settings.catalog_name, connector_catalog_properties(config)))

    def sql(self, statement: str) -> list[dict[str, Any]]:
        return self.procedures.run(lambda spark: [row.asDict() for row in spark.sql(statement).collect()])

    def upgrade(self, table_name: str, format_version: int) -> None:
        """Upgrade the table to ``format_version`` (a table pyiceberg created at the newest it writes)."""
        self.sql(
            f"ALTER TABLE {self.procedures.table_identifier(table_name)} "
            f"SET TBLPROPERTIES ('format-version' = '{int(format_version)}')"
        )

    def add_columns(self, table_name: str, existing: Schema, missing: Schema) -> None:
        """Add the fields of ``missing`` that ``existing`` (the table's schema) lacks, as optional columns
        (nested ones in their struct)."""
        clauses = added_columns(existing, missing)
        self.sql(f"ALTER TABLE {self.procedures.table_identifier(table_name)} ADD COLUMNS ({', '.join(clauses)})")

    def commit(
        self, catalog: Catalog, table_name: str, commit: TableCommit, change: SparkCommit, attempts: int = 8
    ) -> CommittedTable:
        """Apply ``change`` to the table as ``commit``, exactly once (see the module's docstring). An attempt
        that loses a race (another writer's commit beside one of its statements, main moved before its
        fast-forward, its branch dropped by a successor) starts again; one that fails otherwise drops its
        branch and raises."""
        from pyiceberg.exceptions import CommitFailedException

        from sinks.iceberg.tables import CommittedTable, committed_version, snapshot_of_commit

        table_id = self.procedures.table_identifier(table_name)
        for attempt in range(attempts):
            table = catalog.load_table(table_name)
            existing = snapshot_of_commit(table, commit.connector, commit.commit_id)
            if existing is not None:
                self._drop_branches(table, table_id, commit.commit_id)
                return CommittedTable(existing, committed_version(table))
            branch = commit_branch(commit.commit_id) + uuid.uuid4().hex[:8]
            try:
                published = self._attempt(catalog, table_name, table, branch, commit, change)
            except Exception as exc:
                raced = isinstance(exc, RuntimeError) and (
                    ICEBERG_COMMIT_FAILED in str(exc)
                    or NOT_AN_ANCESTOR in str(exc)
                    or branch not in catalog.load_table(table_name).metadata.refs
                )
                self._drop_branch_quietly(table_id, branch)
                if not raced:
                    raise
                log.info(
                    "commit %s on %s raced another writer (attempt %d: %s); re-checking",
                    commit.commit_id,
                    table_name,
                    attempt + 1,
                    str(exc).splitlines()[0][:200],
                )
                continue
            if not published:
                self._drop_branch_quietly(table_id, branch)
                continue
            table = catalog.load_table(table_name)
            self._drop_branches(table, table_id, commit.commit_id)
            snapshot_id = snapshot_of_commit(table, commit.connector, commit.commit_id)
            assert snapshot_id is not None, f"main of {table_name} lacks {commit.commit_id} after its fast-forward"
            return CommittedTable(snapshot_id, committed_version(table))
        raise CommitFailedException(f"could not commit {commit.commit_id} to {table_name} after {attempts} attempts")

    def _attempt(
        self, catalog: Catalog, table_name: str, current: Table, branch: str, commit: TableCommit, change: SparkCommit
    ) -> bool:
        """One attempt at the commit, on ``branch``, of the table as ``current`` was loaded: whether main was
        fast-forwarded to it."""
        from sinks.iceberg.tables import snapshot_of_commit
        from sinks.iceberg.upserts import ABSENT_KEY_DELETES, Laps

        laps = Laps()
        table_id = self.procedures.table_identifier(table_name)
        if current.name_mapping() is None:
            # The table's name mapping, which Iceberg then keeps through renames: the commit's files were written
            # with the names of their time, and are read by them (``staged_names``).
            mapping = current.schema().name_mapping.model_dump_json()
            self.sql(
                f"ALTER TABLE {table_id} SET TBLPROPERTIES ({sql_string(TableProperties.DEFAULT_NAME_MAPPING)} = {sql_string(mapping)})"
            )
        self.sql(f"ALTER TABLE {table_id} CREATE BRANCH {sql_identifier(branch)}")
        table = catalog.load_table(table_name)
        laps.lap("branch")
        base = table.metadata.refs[branch].snapshot_id
        if snapshot_of_commit(table, commit.connector, commit.commit_id, base) is not None:
            return False  # (main was published meanwhile: the next attempt finds the commit)
        properties = commit.summary()
        # (No rows at the base, as a new table's: nothing to delete, and every delete is of a key it lacks. A
        # summary without totals, another writer's, says nothing.)
        base_snapshot = table.snapshot_by_id(base)
        summary = base_snapshot.summary if base_snapshot is not None else None
        empty = summary is not None and summary.additional_properties.get("total-records") == "0"
        stale: list[int] = []
        if change.keys_file is not None and not empty:
            stale, counts = self._delete_keys(table_name, branch, change)
            properties.update(counts)
        elif change.deleted_keys:
            properties[ABSENT_KEY_DELETES] = str(change.deleted_keys)
        laps.lap("deletes")
        rows = change.rows_without(stale)
        laps.lap("rows")
        self._append(table, table_name, branch, rows, properties)
        laps.lap("append")
        if not self._holds_once(catalog.load_table(table_name), branch, base, commit):
            log.warning(
                "commit %s on %s: branch %s does not hold it once; starting again", commit.commit_id, table_name, branch
            )
            return False
        failpoint("iceberg.v3.before_fast_forward")  # (a test's coordinator dies here: the branch holds it all)
        # (Fails if main moved off the branch's base: another writer, or a zombie that published this commit; or
        # if the branch is gone, dropped by the coordinator that published it while this one was frozen.)
        self.procedures.call("fast_forward", table_name, branch=sql_string("main"), to=sql_string(branch))
        laps.lap("fast-forward")
        log.info(
            "commit %s on %s through Spark: %d file(s) of rows, %s; %s",
            commit.commit_id,
            table_name,
            len(rows),
            "keyed" if change.keys_file else "appended",
            laps,
        )
        return True

    def _drop_branch_quietly(self, table_id: str, branch: str) -> None:
        """Drop an attempt's branch if Spark can; one left (Spark out of reach) goes when main holds the
        commit (``_drop_branches``)."""
        try:
            self._drop_branch(table_id, branch)
        except Exception as exc:
            log.warning("branch %s of %s left for now: %s", branch, table_id, str(exc).splitlines()[0][:200])

    def _drop_branches(self, table: Table, table_id: str, commit_id: str) -> None:
        """Drop the branches of every attempt at the commit, which main holds: this one's, a dead coordinator's,
        a zombie's (whose fast-forward then fails, and finds the commit in main)."""
        for ref in table.metadata.refs:
            if ref.startswith(commit_branch(commit_id)):
                self._drop_branch(table_id, ref)

    def _drop_branch(self, table_id: str, branch: str) -> None:
        self.sql(f"ALTER TABLE {table_id} DROP BRANCH IF EXISTS {sql_identifier(branch)}")

    def _delete_keys(self, table_name: str, branch: str, change: SparkCommit) -> tuple[list[int], dict[str, str]]:
        """Delete the branch's rows of the commit's keys (``change.keys_file``), but those later by the ordering
        field than the commit's record of the key; the indexes of those keys (their records are stale), and
        the summary properties that count the stale records and the deletes of keys the branch lacks."""
        from sinks.iceberg.upserts import ABSENT_KEY_DELETES, STALE_RECORDS

        assert change.keys_file is not None
        at = self.procedures.table_identifier(table_name, branch)
        match = key_match(change.id_columns, "t", "k")
        later = self._later(change)
        keys_file = change.keys_file
        located = self._located([keys_file])
        view = f"sinkadmin_keys_{uuid.uuid4().hex}"

        def query(statement: str) -> Callable[[Any], list[Any]]:
            def run(spark: Any) -> list[Any]:
                self._reach(spark, [keys_file])
                spark.read.parquet(*located).createOrReplaceTempView(view)
                try:
                    return list(spark.sql(statement.format(keys=view)).collect())
                finally:
                    spark.catalog.dropTempView(view)

            return run

        # (Each runs again on a session joined again: the stale keys and the count before the MERGE, which a
        # second run of finds nothing more to delete.)
        stale: list[int] = []
        if later is not None:
            found = self.procedures.run(
                query(f"SELECT k.{KEY_INDEX} FROM {{keys}} k JOIN {at} t ON {match} WHERE {later}")
            )
            stale = sorted({int(row[0]) for row in found})
        absent = 0
        if change.deleted_keys:
            held = self.procedures.run(
                query(f"SELECT count(*) FROM {{keys}} k LEFT SEMI JOIN {at} t ON {match} WHERE k.{DELETES_ONLY}")
            )
            absent = change.deleted_keys - int(held[0][0])
        unless_later = f" AND NOT ({later})" if later is not None else ""
        self.procedures.run(
            query(f"MERGE INTO {at} t USING {{keys}} k ON {match} WHEN MATCHED{unless_later} THEN DELETE")
        )
        if absent:
            log.info("upsert on %s: %d delete(s) of keys the table does not hold", table_name, absent)
        if stale:
            log.info(
                "upsert on %s: %d record(s) older than the table's row of their key (%s), not applied",
                table_name,
                len(stale),
                change.ordering_field,
            )
        counts = {ABSENT_KEY_DELETES: str(absent)} if absent else {}
        return stale, counts | ({STALE_RECORDS: str(len(stale))} if stale else {})

    @staticmethod
    def _later(change: SparkCommit) -> str | None:
        """The condition of a table row later than the commit's record of its key by the ordering field
        (``upserts.later_in_table``: a greater value, or a value where the record has none), if ordered."""
        if change.ordering_field is None:
            return None
        current = f"t.{sql_identifier(*change.ordering_field.split('.'))}"
        if not change.incoming:
            return f"{current} IS NOT NULL"
        incoming = f"k.{INCOMING}"
        return (
            f"CASE WHEN {incoming} IS NULL THEN {current} IS NOT NULL ELSE coalesce({current} > {incoming}, false) END"
        )

    def _append(
        self, table: Table, table_name: str, branch: str, rows: Sequence[str], properties: Mapping[str, str]
    ) -> None:
        """Append the rows of the files at ``rows`` to the branch, their columns matched to the table's by
        name, through a rename since they were written (``staged_names``)."""
        at = self.procedures.table_identifier(table_name, branch)
        located = self._located(rows)
        names = staged_names(table)

        def append(spark: Any) -> None:
            self._reach(spark, rows)
            target = spark.table(at).schema
            if rows:
                source = spark.read.option("mergeSchema", "true").parquet(*located)
                frame = source.selectExpr(*projection(target, source.schema, names))
            else:
                # (A commit of deletes only, or of no records: its snapshot holds its offsets.)
                frame = spark.createDataFrame([], target)
            writer = frame.writeTo(at)
            for key, value in properties.items():
                writer = writer.option(f"snapshot-property.{key}", value)
            writer.append()

        self.procedures.run(append)

    def _located(self, paths: Sequence[str]) -> list[str]:
        return hadoop_locations(paths, self.procedures.properties)[0]

    def _reach(self, spark: Any, paths: Sequence[str]) -> None:
        """Set the session's settings that reach ``paths`` (``hadoop_locations``)."""
        for key, value in hadoop_locations(paths, self.procedures.properties)[1].items():
            spark.conf.set(key, value)

    @staticmethod
    def _holds_once(table: Table, branch: str, base: int, commit: TableCommit) -> bool:
        """Whether the branch's snapshots since ``base`` hold the commit once, at the branch's head."""
        from pyiceberg.table.snapshots import ancestors_between

        from sinks.iceberg.tables import PROP_COMMIT_ID, PROP_CONNECTOR

        head = table.snapshot_by_id(table.metadata.refs[branch].snapshot_id)
        base_snapshot = table.snapshot_by_id(base)
        if head is None:
            return False
        holding = [
            s
            for s in ancestors_between(base_snapshot, head, table.metadata)
            if s.snapshot_id != base
            and s.summary is not None
            and s.summary.additional_properties.get(PROP_CONNECTOR) == commit.connector
            and s.summary.additional_properties.get(PROP_COMMIT_ID) == commit.commit_id
        ]
        return len(holding) == 1 and holding[0].snapshot_id == head.snapshot_id


def write_commit_keys(
    paths: Sequence[str],
    id_columns: Sequence[str],
    found: Winners,
    target: str,
    io_properties: Mapping[str, str],
) -> tuple[str, bool]:
    """A Parquet file at ``target`` of the commit's keys (``found``, of the files at ``paths``): one row per
    key, its identifier columns as its winning record has them, its index among ``found.keys``
    (KEY_INDEX), whether the commit only deletes it (DELETES_ONLY) and, with an ordering field, the winning
    record's value of it (INCOMING, when some record has one); its location, and whether it has INCOMING."""
    tops = list(dict.fromkeys(c.split(".")[0] for c in id_columns))
    read = []
    for path in paths:
        fs, at = table_filesystem(path, io_properties)
        parquet = pq.ParquetFile(at, filesystem=fs)
        read.append(parquet.read(columns=[c for c in tops if c in parquet.schema_arrow.names]))
    rows = pa.concat_tables(read, promote_options="permissive").take(pa.array(found.winner_at, pa.int64()))
    keys = rows.append_column(KEY_INDEX, pa.array(np.arange(len(found.keys), dtype=np.int64)))
    keys = keys.append_column(DELETES_ONLY, pc.is_in(found.keys, found.deleted_keys).fill_null(False))
    incoming = found.orders is not None and not pa.types.is_null(found.orders.type)
    if incoming:
        assert found.orders is not None
        keys = keys.append_column(INCOMING, found.orders)
    fs, at = table_filesystem(target, io_properties)
    pq.write_table(keys, at, filesystem=fs, compression="zstd")
    return target, incoming


def upserts_through_spark(
    spark: SparkTables,
    catalog: Catalog,
    table_name: str,
    commit: TableCommit,
    ordered: Sequence[Any],
    id_columns: Sequence[str],
    cdc_field: str | None,
    run_units: Any,
    ordering_field: str | None,
) -> CommittedTable:
    """``upserts.commit_upserts`` of a format v3 table: the commit's own records come to the last of each key
    as for any table (``upserts.winners``, by the ordering field if any), its files rewritten without the
    others by ``run_units``; the table's rows of its keys go, and its rows come, through ``spark``. With an
    ordering field, a key whose table row is later keeps it, and the commit's record of it is left out."""
    from sinks.iceberg.upserts import UpsertRewrite, _beside, winners
    from sinks.iceberg.writes import file_io_properties

    io_properties = file_io_properties(catalog.properties)
    paths = [f.path for f in ordered]
    found = winners(paths, id_columns, cdc_field, ordering_field, io_properties)
    template = UpsertRewrite(
        (), tuple(id_columns), found.keys, commit.commit_id, found.deleted_keys, io_properties=io_properties
    )

    def rows_of(stale: Sequence[int]) -> tuple[str, ...]:
        dropped = found.dropping(found.keys.take(pa.array(stale, pa.int64()))) if stale else found.dropped
        units = template.own_units(paths, dropped, found.sizes)
        outcomes = run_units(replace(template, units=tuple(units))) if units else []
        return tuple(
            path if outcome["path"] is None else outcome["path"]
            for path, outcome in zip(paths, outcomes, strict=True)
            if outcome["path"] is None or outcome["records"]
        )

    keys_file, incoming = None, False
    if len(found.keys):
        keys_file, incoming = write_commit_keys(
            paths, id_columns, found, _beside(paths[0], "keys", commit.commit_id), io_properties
        )
    change = SparkCommit(
        keys_file=keys_file,
        id_columns=tuple(id_columns),
        deleted_keys=len(found.deleted_keys),
        ordering_field=ordering_field,
        incoming=incoming,
        rows_of=rows_of,
    )
    committed = spark.commit(catalog, table_name, commit, change)
    if keys_file is not None:
        # (This attempt's own file, named afresh each time; one a crash leaves is an orphan, which maintenance
        # removes.)
        fs, at = table_filesystem(keys_file, io_properties)
        with contextlib.suppress(OSError):
            fs.delete_file(at)
    return committed
