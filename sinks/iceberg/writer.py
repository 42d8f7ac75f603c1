"""The Iceberg sink's participants' writer (``workers.participant.WritePort``)."""

from __future__ import annotations

import functools
import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from pyiceberg.schema import Schema

from connectors.config import SinkConfig
from sinks.iceberg.arrow_writer import ArrowPartitionWriter, publish_decoded
from sinks.iceberg.dead_letters import DEAD_LETTER_TABLE_SCHEMA, check_dead_letter_table, write_dead_letters
from sinks.iceberg.routing import Router, router_for
from sinks.iceberg.settings import IcebergSettings, TableTarget
from sinks.iceberg.spark_commits import SPARK_WRITTEN_FORMAT, SparkTables, spark_unreadable, written_by_spark
from sinks.iceberg.spark_writer import SparkWriter
from sinks.iceberg.tables import (
    catalog_for,
    catalog_outage,
    connector_catalog_properties,
    create_table,
    evolve_table,
    infer_schema_from_json,
    keyed_schema,
    load_table,
    metadata_location,
    schema_from_avro,
    schema_from_connect,
    schemas_from_registered,
    table_version,
    upsert_key,
    with_metadata_columns,
)
from sinks.iceberg.writes import NotCreated, TargetTable, Unshaped, WritePlan, file_io_properties, shaped
from workers.converters import sample_json_objects, schemaless_payloads, value_decoder
from workers.events import TableVersion
from workers.schema_registry import RegistryUnavailable
from workers.staging import ChunkSink, RawStagingFile, RecordChunk, StagedPartition, raw_staging_path
from workers.transformed import sink_values
from workers.writes import SAMPLES, WriteRefused, WriteResult

log = logging.getLogger(__name__)


def _listed(tables: list[str] | str) -> list[str]:
    """The tables of ``Router.tables_of``; none when it gives why a record can go to none."""
    return tables if isinstance(tables, list) else []


class TableWriter:
    """Resolves (or creates) a commit's target tables and has its records written.

    With the spark data plane (the default) participants stage raw records and
    Spark decodes and writes them when the commit ends (``sinks.iceberg.spark_writer``);
    with arrow they decode as they consume (``sinks.iceberg.arrow_writer``). The
    tables are resolved per staging round (a commit, or what is read ahead for
    the next one): at the first chunk for arrow, at the write for spark.
    """

    # Staging rounds alive at once: a commit being written, one staging, one read ahead.
    LIVE_ROUNDS = 3

    def __init__(self, config: SinkConfig, spark: SparkWriter | None = None) -> None:
        self.config = config
        self.settings: IcebergSettings = config.settings
        self._catalog: Any = None
        self._opening_catalog = threading.Lock()  # (the warm-up's thread and the write's)
        self._spark = spark
        # Per staging round: its tables (arrow resolves them while staging).
        self._plans: dict[uuid.UUID, WritePlan] = {}
        # The tables as this task last loaded, created or evolved them, by
        # name, each as it writes it (TargetTable); and what the
        # coordinator's commits left them at, from the latest START.
        self._copies: dict[str, tuple[Any, TargetTable]] = {}
        self._committed: Mapping[str, TableVersion] = {}
        # With dynamic routing, the tables records have named in this task, created or not (spark: resolved
        # before its jobs).
        self._routed_tables: set[str] = set()

    @property
    def spark(self) -> SparkWriter:
        if self._spark is None:
            self._spark = SparkWriter(self.config)
        return self._spark

    def close(self) -> None:
        """Release the catalog's connections (a worker process outlives the tasks it hosts)."""
        if self._catalog is not None:
            self._catalog.close()
            self._catalog = None

    @property
    def catalog(self) -> Any:
        # Opened by the warm-up or the first write, not on the task's own
        # thread: a task heartbeats within its first second whatever the catalog's latency.
        with self._opening_catalog:
            if self._catalog is None:
                self._catalog = catalog_for(self.config)
            return self._catalog

    @functools.cached_property
    def spark_tables(self) -> SparkTables:
        """Where format v3 tables are created and their schemas changed (``sinks.iceberg.spark_commits``)."""
        return SparkTables.of(self.config)

    @functools.cached_property
    def router(self) -> Router | None:
        """Which tables staged records go to (``sinks.iceberg.routing``), for the Spark plane's samples."""
        return router_for(self.config)

    @functools.cached_property
    def io_properties(self) -> dict[str, str]:
        """The catalog's properties its tables' files are reached with (table_filesystem)."""
        return file_io_properties(connector_catalog_properties(self.config))

    def warm_up(self) -> None:
        """Ready for the first write before it comes: the catalog open, and Spark joined with its
        Python workers' imports done (spark). Opened by the first write instead, the catalog took a
        noticeable part of the write of a make-run connector's first commit (docs/benchmarks.md,
        "Measurements behind the runtime's design")."""
        _ = self.catalog
        if self.config.writer == "spark":
            self.spark.warm_up()

    def tables_committed(self, versions: Mapping[str, TableVersion]) -> None:
        self._committed = versions

    def unavailable(self, exc: BaseException) -> str | None:
        if isinstance(exc, RegistryUnavailable):
            return str(exc)
        return catalog_outage(exc, self.config)

    def sink(self, staging_id: uuid.UUID, topic: str, partition: int, start: int, directory: Path) -> ChunkSink:
        if self.config.writer == "spark":
            return RawStagingFile(raw_staging_path(directory, topic, partition, start), self.config.buffer_bytes)
        return ArrowPartitionWriter(
            self.config,
            lambda name, samples: self.table(staging_id, name, samples),
            lambda name, additions: self.evolve(staging_id, name, additions),
            staging_id,
            topic,
            partition,
            start,
            directory,
        )

    def table(self, staging_id: uuid.UUID, name: str, samples: Callable[[], Sequence[bytes | None]]) -> TargetTable:
        """The table ``name`` for what is staged under ``staging_id``, created from ``samples`` (its first
        records) if it is missing; Unshaped if they cannot create it."""
        plan = self._plans.get(staging_id) or WritePlan((), self.config.writer)
        if (found := plan.table(name)) is not None:
            return found
        table = self._target(self.settings.target(name), samples)
        self._plans[staging_id] = plan.with_table(table)
        while len(self._plans) > self.LIVE_ROUNDS:
            # (Rounds are dropped when their write is done; these were discarded.)
            del self._plans[next(iter(self._plans))]
        return table

    def evolve(self, staging_id: uuid.UUID, name: str, additions: Schema) -> TargetTable:
        """Add new record fields to table ``name`` (schema evolution); the table as it is then.

        With a Schema Registry the fields come from the registered schemas
        first, typed from them; ``additions`` (typed from the values) then
        only adds what no schema had."""
        registered = self._value_schemas() if self.config.schema_registry is not None else []
        # The task's copy when it is current, only to see whether a field is
        # missing: evolve_table updates from the catalog's table.
        table = self._table(name)
        for schema in [*registered, additions]:
            table = evolve_table(self.catalog, name, schema, table, spark=self.spark_tables)
        evolved = self._keep(self.settings.target(name), table)
        if (plan := self._plans.get(staging_id)) is not None:
            # Partitions that settle from now on start with the new columns.
            self._plans[staging_id] = plan.with_table(evolved)
        return evolved

    def write(self, commit_id: uuid.UUID, staging_id: uuid.UUID, staged: Sequence[StagedPartition]) -> WriteResult:
        result = WriteResult()
        # Partitions the Arrow writer decoded only need their files published
        # (a partition with no records has none, whatever its sink).
        for s in staged:
            if s.decoded:
                result.files.extend(publish_decoded(commit_id, s, self.io_properties))
                result.bad.extend(s.bad)
                if s.skipped:
                    result.skipped[(s.topic, s.partition)] = s.skipped
        raw = [s for s in staged if not s.decoded and s.records]
        if raw:
            # Envelopes carry their schema: with schema evolution, the fields of those of a table's records
            # that it lacks are added before Spark decodes them.
            envelopes = (
                self.spark.envelope_schemas(raw) if self.settings.evolve_schema and self.config.schemas_enable else []
            )

            def resolved(plan: WritePlan, names: Sequence[str]) -> WritePlan:
                for name in names:
                    plan = self._resolved(plan, name, raw)
                    if plan.table(name) is not None:
                        for schema in self._envelope_schemas_of(name, envelopes):
                            plan = plan.with_table(self.evolve(staging_id, name, schema))
                return plan

            spark = self.spark.write(
                commit_id,
                staging_id,
                raw,
                resolved(WritePlan((), "spark"), self._spark_tables()),
                evolve=lambda plan, name, additions: plan.with_table(self.evolve(staging_id, name, additions)),
                resolve=resolved,
            )
            result.files.extend(spark.files)
            result.bad.extend(spark.bad)
            result.skipped.update(spark.skipped)
        self._plans.pop(staging_id, None)
        result.bad.sort(key=lambda b: (b.topic, b.partition, b.offset))
        if result.bad and self.settings.dead_letter_table and self.config.errors_tolerance == "all":
            result.files.extend(
                write_dead_letters(
                    self._dead_letter_table(),
                    commit_id,
                    staging_id,
                    staged,
                    result.bad,
                    self.config.raw,
                    self.config.buffer_bytes,
                )
            )
        return result

    def _dead_letter_table(self) -> TargetTable:
        """The dead-letter table, created if missing (it has no records' schema to wait for)."""
        name = self.settings.dead_letter_table
        assert name is not None
        table = self._table(name)
        if table is None:
            table = create_table(self.catalog, name, DEAD_LETTER_TABLE_SCHEMA, (), spark=self.spark_tables)
        check_dead_letter_table(name, table)
        return self._keep(TableTarget(name, (), None), table)

    def _table(self, name: str) -> Any:
        """The table as the catalog has it now: the task's copy when nothing has changed it since.

        The copy is current if the catalog still points at its metadata file,
        or at the one the coordinator's last commit made (the START's
        TableVersion) while that commit left the copy's schema, spec and
        location as they were: a commit only adds a snapshot. Asking costs a
        query (a SQL catalog; with others the table is loaded), where loading
        the table reads and parses its metadata file, which grows with every
        commit until snapshots expire: a load costs more the longer the
        history, while the query costs about what a load of a new table does,
        whatever the history (bench/table_lookup.py; docs/benchmarks.md,
        "Measurements behind the runtime's design"). An altered table is
        loaded whenever the write would have loaded it without the copy.
        """
        copy = self._copies.get(name)
        if copy is not None:
            now = metadata_location(self.catalog, name)
            committed = self._committed.get(name)
            if now is not None and (
                now == copy[0].metadata_location
                or (
                    committed is not None
                    and now == committed.metadata_location
                    and committed.version == table_version(copy[0])
                )
            ):
                return copy[0]
        return load_table(self.catalog, name)

    def _keep(self, target: Any, table: Any) -> TargetTable:
        """``table`` as this task writes it (its copy from now on)."""
        copy = self._copies.get(target.name)
        if copy is not None and copy[0] is table:
            return copy[1]
        described = self._described(target, table)
        self._copies[target.name] = (table, described)
        return described

    def _target(self, target: Any, samples: Callable[[], Sequence[bytes | None]]) -> TargetTable:
        table = self._table(target.name)
        if table is None:
            if not self.settings.auto_create:
                missing = f"table {target.name} does not exist and iceberg.tables.auto-create-enabled is false"
                if self.settings.dynamic:
                    raise NotCreated(missing)  # (a record named it: its records are bad, not the connector)
                raise LookupError(missing)
            schema = with_metadata_columns(self._schema_from(samples()), self.config.metadata_columns)
            if self.settings.upsert_mode:
                # (Refused before the table is created: a table made of the wrong records would stay.)
                self._check_key_columns(target, target.id_columns, {f.name for f in schema.fields}, created=False)
            if self.settings.upsert_mode and target.id_columns:
                schema, unkeyed = keyed_schema(schema, target.id_columns)
                if unkeyed:
                    log.warning(
                        "%s is created without identifier fields (upserts key it all the same): %s",
                        target.name,
                        unkeyed,
                    )
            if self._format_version() >= SPARK_WRITTEN_FORMAT:
                self._check_spark_readable(target.name, schema, created=False)
            table = create_table(
                self.catalog,
                target.name,
                schema,
                target.partition_by,
                self.settings.table_properties,
                spark=self.spark_tables,
            )
        elif (
            self.settings.auto_create
            and self._format_version() >= SPARK_WRITTEN_FORMAT
            and table.metadata.format_version < self._format_version()
            and table.current_snapshot() is None
        ):
            # Created at format 2 by a creator that died before its upgrade to the configured version.
            self._check_spark_readable(target.name, table.schema(), created=True)
            self.spark_tables.upgrade(target.name, self._format_version())
            table = load_table(self.catalog, target.name)
            assert table is not None
        if self.settings.evolve_schema and (self.config.value_converter == "avro" or self.config.schema_registry):
            # The schemas are the config's Avro schema (fields added there, and
            # the connector restarted, become columns) or the registry's, Avro
            # or JSON Schema (each new version's fields become columns before
            # its records are decoded, typed from the schema): only missing
            # fields are added.
            for additions in self._value_schemas():
                table = evolve_table(self.catalog, target.name, additions, table, spark=self.spark_tables)
        if written_by_spark(table):
            self._check_spark_readable(target.name, table.schema(), created=True)
        self._check_keys(target, table)
        return self._keep(target, table)

    def _format_version(self) -> int:
        """The format version of the tables the sink creates (iceberg.tables.auto-create-props.format-version)."""
        return int(self.settings.table_properties.get("format-version", "2"))

    @staticmethod
    def _check_spark_readable(name: str, schema: Any, created: bool) -> None:
        """A format v3 table is written through Spark, which must read every column of the files the sink
        stages: one it cannot is refused before anything is prepared (I9)."""
        unreadable = spark_unreadable(schema)
        if unreadable is None:
            return
        what = f"table {name}" if created else f"the table {name} the records would create (not created)"
        raise WriteRefused(
            f"{what} is of format version 3, which the sink writes through Spark's Iceberg runtime, and has "
            f"{unreadable}, which Spark 3.5 cannot read in the files the sink stages: use format version 2 "
            "(iceberg.tables.auto-create-props.format-version=2), or a table without it"
        )

    def _check_keys(self, target: Any, table: Any) -> None:
        """An upsert table must have its identifier columns, or no commit of it could ever be applied:
        refused here, before the ledger prepares anything (I9)."""
        if not self.settings.upsert_mode:
            return
        schema = table.schema()
        key = upsert_key(target.id_columns, schema)
        if not key:
            raise WriteRefused(
                f"table {target.name} has no identifier fields and none are configured, so upserts cannot key its "
                f"rows: set iceberg.table.{target.name}.id-columns or iceberg.tables.default-id-columns, or give the "
                "table identifier fields (Spark: ALTER TABLE ... SET IDENTIFIER FIELDS), then restart the connector"
            )
        ordering = self.settings.ordering_field
        if ordering:
            try:
                found = schema.find_field(ordering)
            except ValueError:
                found = None
            if found is None or not found.field_type.is_primitive:
                what = "no column of it" if found is None else f"a {found.field_type} column"
                raise WriteRefused(
                    f"sinkadmin.upsert.ordering-field {ordering!r} is {what} in table {target.name}, so it cannot "
                    "order the records of a key: name a column of a plain type (a number, timestamp or text), "
                    "nested with dots, then restart the connector"
                )
        self._check_key_columns(target, key, {f.name for f in schema.fields}, created=True)

    @staticmethod
    def _check_key_columns(target: Any, key: Sequence[str], columns: set[str], created: bool) -> None:
        """The upsert key's columns must be columns of the table (``created``), or of the one the records would
        create: refused, with the likely cause when the records are Debezium change events not unwrapped."""
        keys = f"iceberg.table.{target.name}.id-columns or iceberg.tables.default-id-columns"
        if not key and not created:
            raise WriteRefused(
                f"no id columns are configured, so upserts could not key the rows of table {target.name}, which the "
                f"records would create (not created): set {keys}, then restart the connector"
            )
        missing = [c for c in key if c not in columns]
        if not missing:
            return
        found = f"table {target.name} has" if created else f"the records for table {target.name} (not created) have"
        hint = ""
        if {"before", "after", "op"} <= columns:
            hint = (
                " The records are Debezium change events (before, after, op): their rows are keyed once a transform "
                "unwraps them, e.g. transforms=dbz, transforms.dbz.type=org.apache.iceberg.connect.transforms."
                "DebeziumTransform and iceberg.tables.cdc-field=_cdc.op (docs/transforms.md)."
            )
        fix = "Add the column to the table or name columns it has" if created else "Name columns the records have"
        raise WriteRefused(
            f"{found} no column {', '.join(missing)} of its identifier columns ({keys}), so upserts cannot key its "
            f"rows; its columns are {', '.join(sorted(columns))}.{hint} {fix}, then restart the connector"
        )

    def _value_schemas(self) -> list[Schema]:
        """The schemas the tables follow, as Iceberg schemas: the config's Avro schema, or with a
        registry every schema values were decoded with, oldest id first. JSON Schemas without
        properties, or with what has no column type, are left to the values to type."""
        registry = self.config.schema_registry
        if registry is None:
            return [schema_from_avro(json.loads(self.config.avro_schema or "{}"))]
        decoder = value_decoder(self.config)
        schemas = schemas_from_registered(decoder.schemas() if decoder else [], registry.schema_type)
        if not schemas and registry.schema_type == "AVRO":
            raise ValueError("no value has been decoded with a registered schema yet")
        return schemas

    def _described(self, target: Any, table: Any) -> TargetTable:
        return TargetTable(
            target=target,
            schema=table.schema(),
            location=table.location(),
            spec=table.spec(),
            io_properties=self.io_properties,
        )

    def _spark_tables(self) -> list[str]:
        """The tables of records Spark decodes, resolved before it does: those iceberg.tables lists, or with
        dynamic routing those this task has written before (Spark's decode names the others,
        ``SparkWriter.write``)."""
        return [t.name for t in self.settings.tables] if not self.settings.dynamic else sorted(self._routed_tables)

    def _envelope_schemas_of(self, table: str, envelopes: Sequence[tuple[str | None, Schema]]) -> list[Schema]:
        """The schemas of the envelopes routed to ``table`` (``SparkWriter.envelope_schemas``)."""
        if not self.settings.route_field:
            return [schema for _, schema in envelopes]
        assert self.router is not None  # (a route field makes one)
        return [schema for route, schema in envelopes if table in _listed(self.router.tables_of(route))]

    def _resolved(self, plan: WritePlan, name: str, raw: Sequence[StagedPartition]) -> WritePlan:
        """``plan`` with table ``name``, created if missing from its first records staged, or from the first
        batch of them after those that can shape it (``shaped``); else with why none can."""
        try:
            table = shaped(
                sink_values(self.config, self._staged_records(raw, name)),
                lambda samples: self._target(self.settings.target(name), samples),
            )
        except Unshaped as unshaped:
            # (No table to write to yet: its records are bad; a later commit's may create it. One that is
            # not created is looked up before the next commit's job, rather than found again by it.)
            if isinstance(unshaped, NotCreated):
                self._routed_tables.add(name)
            return plan.with_unshaped(name, str(unshaped))
        if self.settings.dynamic:
            self._routed_tables.add(name)
        return plan.with_table(table)

    def _staged_records(self, staged: Sequence[StagedPartition], table: str) -> Iterator[RecordChunk]:
        """The staged records that go to ``table``, batch by batch, as read (all but their headers, which
        only the dead letters take): staged files can hold gigabytes."""
        router = self.router
        for s in staged:
            if s.path is not None:
                columns = ["offset", "timestamp", "key", "value", "error"]
                for batch in pq.ParquetFile(s.path).iter_batches(batch_size=SAMPLES, columns=columns):
                    offsets, timestamps, keys, values, errors = (batch.column(c).to_pylist() for c in columns)
                    n = len(offsets)
                    chunk = RecordChunk(s.topic, s.partition, offsets, timestamps, keys, values, [None] * n, errors)
                    if router is not None:
                        chunk = chunk.take(router.route(values, errors).tables.get(table, []))
                    yield chunk

    def _schema_from(self, values: Sequence[bytes | None]) -> Any:
        from pyiceberg.types import BinaryType, NestedField, StringType

        cfg = self.config
        if cfg.value_converter == "avro" or cfg.schema_registry is not None:
            registered = self._value_schemas()
            if registered:
                return registered[0]
        if cfg.value_converter in ("string", "bytearray"):
            value_type = StringType() if cfg.value_converter == "string" else BinaryType()
            return Schema(NestedField(1, "value", value_type, required=False))
        samples = sample_json_objects(values, envelope=cfg.schemas_enable)
        if cfg.schemas_enable:
            if not samples and (payloads := schemaless_payloads(values)):
                return infer_schema_from_json(payloads)  # (envelopes of no schema: their payloads')
            if not samples:
                raise Unshaped(
                    "cannot create the table: no record carries a Kafka Connect schema envelope (value.converter."
                    'schemas.enable=true needs "schema" and "payload"; for plain JSON, set it to false)'
                )
            return schema_from_connect(samples[0]["schema"])
        if not samples:
            raise Unshaped("cannot create the table: no record so far is a JSON object to take its columns from")
        return infer_schema_from_json(samples)
