"""The Iceberg sink's Spark data plane: one job per task and commit decodes its staged records into
the tables' data files.

Spark's Python workers run the arrow data plane's writer (``sinks.iceberg.arrow_writer``:
the shared JSON decoder, Iceberg's partition transforms, routing, bad-record
isolation) over each staged file, write zstd Parquet under the table location
and move each file to its immutable name; the job returns only the files'
descriptions, the bad records and the skip counts. So both planes turn the
same records into the same rows and the same bad-record decisions, and bucket
partitions and schema evolution work on both.

Tables with column types the JSON decoder cannot produce (binary, map, time,
UUID, fixed) are decoded in the JVM with ``from_json`` instead (``_write_with_sql``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
from pyiceberg.schema import Schema

from connectors.config import SinkConfig
from connectors.config.transforms import PartitionField
from sinks.iceberg.arrow_writer import ArrowPartitionWriter, arrow_unsupported, publish_decoded
from sinks.iceberg.tables import schema_from_connect, spark_ddl
from sinks.iceberg.writes import TargetTable, Unshaped, WritePlan, table_filesystem
from workers.events import DataFile
from workers.failpoints import failpoint
from workers.spark_writer import STAGING_DDL, SparkJobs, apply_session_conf, is_connect, read_staged_chunks
from workers.staging import StagedPartition
from workers.writes import BadRecord, WriteResult, bad_of_outcome, bad_outcome, publish, uri


class SchemaChanged(Exception):
    """A staged partition's records have fields their table lacks (schema evolution)."""

    def __init__(self, table: str, additions: Schema) -> None:
        super().__init__(f"records for {table} have new fields")
        self.table = table
        self.additions = additions


class TableUnresolved(Exception):
    """Records name a table the job was not given (dynamic routing): the task resolves it first."""


def _schema_changed(table: str, additions: Schema) -> TargetTable:
    raise SchemaChanged(table, additions)


@dataclass(frozen=True)
class StagedDecode:
    """A task's share of one commit, as Spark's Python workers decode it (pickled with the job)."""

    config: SinkConfig
    plan: WritePlan
    commit_id: uuid.UUID
    staging_id: uuid.UUID
    # The job's work: Spark task n decodes staged[n].
    staged: tuple[StagedPartition, ...] = ()

    def table(self, name: str, _samples: object = None) -> TargetTable:
        """The plan's table ``name``; Unshaped if no record could create it, TableUnresolved if not in the plan."""
        if (table := self.plan.table(name)) is not None:
            return table
        if name in self.plan.unshaped:
            raise Unshaped(self.plan.unshaped[name])
        raise TableUnresolved(name)

    def decode(self, staged: StagedPartition) -> dict[str, Any]:
        """Decode one staged partition into data files under their final names; what became of it."""
        assert staged.path is not None
        failpoint("executor.decode")  # (a test's executor dies or stalls here: mid-write)
        sink = ArrowPartitionWriter(
            self.config,
            self.table,
            _schema_changed,
            self.staging_id,
            staged.topic,
            staged.partition,
            staged.start,
            staged.path.parent,
            keep_rejects=False,  # the staged file holds every record, for the dead-letter topic
        )
        try:
            for chunk in read_staged_chunks(staged.path, sink.chunk_bytes):
                sink.write(chunk)
            finished = sink.finish(replace(staged, path=None))
        except SchemaChanged as change:
            sink.discard()
            return {"table": change.table, "additions": change.additions.model_dump_json()}
        except TableUnresolved:
            sink.discard()
            return {"unresolved": self._unresolved(staged.path, sink)}
        except BaseException:
            sink.discard()
            raise
        io_properties = next(iter(self.plan.tables)).io_properties if self.plan.tables else {}
        return {
            "files": [f.as_dict() for f in publish_decoded(self.commit_id, finished, io_properties)],
            "bad": bad_outcome(finished.bad),
            "skipped": finished.skipped,
        }

    def _unresolved(self, path: Path, sink: ArrowPartitionWriter) -> list[str]:
        """Every table the staged records name that the plan lacks: resolved by the task in one round."""
        assert sink.router is not None  # (only routed records name tables)
        named: set[str] = set()
        for chunk in read_staged_chunks(path, sink.chunk_bytes):
            named.update(sink.router.route(chunk.values, chunk.errors).tables)
        return sorted(n for n in named if self.plan.table(n) is None and n not in self.plan.unshaped)


def route_text(config: SinkConfig) -> Any:
    """A Spark expression of each staged record's route field as text (``iceberg.tables.route-field``; None
    without one), as the JSON decoder's routing reads it (``sinks.iceberg.routing``): any field, nested or
    not, in the payload of Kafka Connect's envelope."""
    from pyspark.sql import functions as F

    field = config.settings.route_field
    if not field:
        return None
    envelope = config.value_converter == "json" and config.schemas_enable
    return F.get_json_object(F.col("value").cast("string"), ("$.payload." if envelope else "$.") + field)


def _data_columns(schema: Schema) -> list[tuple[str, str]]:
    """A table's columns but the Kafka metadata ones, by name and type."""
    return [(f.name, str(f.field_type)) for f in schema.fields if not f.name.startswith("_kafka_")]


def partition_value(field: PartitionField, schema: Schema) -> Any:
    """A Spark expression with one value per Iceberg partition of ``field``.

    Files are split by these values so that each file holds one partition,
    as Iceberg requires of the files it is given.
    """
    from pyiceberg.types import StringType
    from pyspark.sql import functions as F

    column = F.col(field.column)
    if field.transform == "identity":
        return column
    if field.transform == "year":
        return F.year(column)
    if field.transform == "month":
        return F.date_trunc("month", column)
    if field.transform == "day":
        return F.to_date(column)
    if field.transform == "hour":
        return F.date_trunc("hour", column)
    if field.transform == "void":
        return F.lit(None)
    if field.transform == "truncate" and field.argument:
        if isinstance(schema.find_field(field.column).field_type, StringType):
            return F.substring(column, 1, field.argument)
        return column - F.pmod(column, F.lit(field.argument))
    if field.transform == "bucket":
        raise ValueError(f"{field}: Spark SQL has no Iceberg bucket hash (the JSON decoder computes it)")
    raise ValueError(f"partition transform {field} is not supported by the spark writer")


class SparkWriter(SparkJobs):
    """Decodes and writes the Iceberg tables' data files of a task's share of a commit."""

    def __init__(self, config: SinkConfig, session: Any = None) -> None:
        super().__init__(session, decoder_modules=("sinks.iceberg.arrow_writer",))
        self.config = config

    # Rounds of schema evolution one commit may take before giving up.
    MAX_SCHEMA_ROUNDS = 8

    def write(
        self,
        commit_id: uuid.UUID,
        staging_id: uuid.UUID,
        staged: Sequence[StagedPartition],
        plan: WritePlan,
        evolve: Callable[[WritePlan, str, Schema], WritePlan] | None = None,
        resolve: Callable[[WritePlan, Sequence[str]], WritePlan] | None = None,
    ) -> WriteResult:
        """One Spark job decodes every staged partition into data files under their final names.

        A partition whose records have fields their table lacks (schema evolution) comes back with those
        fields instead of files; they are added (``evolve``) and that partition decoded again. So does one
        whose records name tables the plan lacks (dynamic routing): they are resolved (``resolve``), created
        if missing, and it is decoded again.
        """
        with_data = [s for s in staged if s.path is not None and s.records > 0]
        if not with_data:
            return WriteResult()
        if (reason := arrow_unsupported(self.config, plan.tables)) is not None:
            return self._write_with_sql(commit_id, with_data, plan.tables, reason)
        result = WriteResult()
        pending, current = with_data, plan
        for _ in range(self.MAX_SCHEMA_ROUNDS):
            outcomes = self.run(StagedDecode(self.config, current, commit_id, staging_id, tuple(pending)))
            changed: list[StagedPartition] = []
            unresolved: set[str] = set()
            for s in pending:
                outcome = outcomes[(s.topic, s.partition)]
                if "additions" in outcome:
                    if evolve is None:
                        raise ValueError(f"records of {s.topic}/{s.partition} have fields the tables lack")
                    current = evolve(current, outcome["table"], Schema.model_validate_json(outcome["additions"]))
                    changed.append(s)
                    continue
                if "unresolved" in outcome:
                    if resolve is None:
                        raise ValueError(f"records of {s.topic}/{s.partition} name tables the plan lacks")
                    unresolved.update(outcome["unresolved"])
                    changed.append(s)
                    continue
                result.files.extend(DataFile(**f) for f in outcome["files"])
                result.bad.extend(bad_of_outcome(s.topic, s.partition, outcome["bad"]))
                if outcome["skipped"]:
                    result.skipped[(s.topic, s.partition)] = outcome["skipped"]
            if unresolved:
                assert resolve is not None
                current = resolve(current, sorted(unresolved))
                if (reason := arrow_unsupported(self.config, current.tables)) is not None:
                    raise ValueError(f"tables that records name cannot be written when {reason}")
            if not changed:
                return result
            pending = changed
        raise RuntimeError(f"the tables changed {self.MAX_SCHEMA_ROUNDS} times while writing one commit")

    def _write_with_sql(
        self, commit_id: uuid.UUID, with_data: Sequence[StagedPartition], tables: Sequence[TargetTable], reason: str
    ) -> WriteResult:
        """Decode in the JVM with ``from_json``, for column types the JSON decoder cannot produce (``reason``)."""
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        bucketed = [str(f) for t in tables for f in t.partition_by if f.transform == "bucket"]
        if bucketed:
            raise ValueError(f"tables partitioned by {', '.join(bucketed)} cannot be written when {reason}")
        if (
            self.config.settings.evolve_schema
            and self.config.value_converter == "json"
            and not self.config.schemas_enable
        ):
            raise ValueError(f"schema evolution of plain JSON needs the JSON decoder, and {reason}")
        if self.config.settings.dynamic:
            raise ValueError(
                f"tables that records name (iceberg.tables.dynamic-enabled) cannot be written when {reason}"
            )
        # (Decoded once, into the first table's columns: a table with other columns would lose its own.)
        columns = [_data_columns(t.schema) for t in tables]
        if any(c != columns[0] for c in columns[1:]):
            raise ValueError(
                f"tables with different columns ({', '.join(t.target.name for t in tables)}) cannot be written "
                f"together when {reason}: give them the same columns, or write each with a connector of its own"
            )
        result = WriteResult()
        if is_connect(self.spark):
            # The JVM's decoding depends on the session's configuration (time
            # zone, timestamp type), which a Spark 3.5 server that dropped the
            # session has forgotten (session_lost) with no error to tell.
            apply_session_conf(self.spark)
        raw = self.spark.read.schema(STAGING_DDL).parquet(*[uri(str(s.path)) for s in with_data])
        decoded, bad_condition, skip_condition = self._decode(raw, tables)
        observation = None
        observed = decoded
        if not is_connect(self.spark):
            # The common case has no bad or skipped record: the write itself
            # counts them (an observation rides along the one pass over the
            # data), and only when there are some does a second pass find them.
            # Unique per write: tasks of one commit may share this process and session.
            # (Spark 3.5's Connect client has no Observation: there, the second pass always runs.)
            observation = Observation(f"commit-{commit_id}-{uuid.uuid4().hex[:8]}")
            observed = decoded.observe(
                observation, F.count_if(bad_condition).alias("bad"), F.count_if(skip_condition).alias("skipped")
            )
        good = observed.where(~bad_condition & ~skip_condition)
        for table in tables:
            rows = good
            if self.config.settings.route_field and table.target.route_regex is not None:
                rows = rows.where(F.col("_route").rlike(f"^(?:{table.target.route_regex.pattern})$"))
            result.files.extend(self._write_table(commit_id, rows, table, with_data))
        if observation is not None:
            metrics = observation.get
            if not metrics.get("bad") and not metrics.get("skipped"):
                return result
        counts = (
            decoded.groupBy("topic", "partition")
            .agg(F.count_if(bad_condition).alias("bad"), F.count_if(skip_condition).alias("skipped"))
            .collect()
        )
        result.skipped = {(r["topic"], r["partition"]): r["skipped"] for r in counts if r["skipped"]}
        if any(r["bad"] for r in counts):
            bad_rows = (
                decoded.where(bad_condition)
                .select(
                    "topic", "partition", "offset", F.coalesce("error", F.lit("undecodable record")).alias("reason")
                )
                .orderBy("topic", "partition", "offset")
            )
            if self.config.errors_tolerance == "none":
                bad_rows = bad_rows.limit(1)
            result.bad = [BadRecord(r["topic"], r["partition"], r["offset"], r["reason"]) for r in bad_rows.collect()]
        return result

    def envelope_schemas(self, staged: Sequence[StagedPartition]) -> list[tuple[str | None, Schema]]:
        """The distinct record schemas of the staged Kafka Connect envelopes, as table schemas, each with
        the text of its records' route field (``iceberg.tables.route-field``; None without one): schema
        evolution, each table by its own records' schemas. One extra pass over the records, in the JVM. A
        schema that is not a struct is left out: its records are bad records when decoded."""
        from pyspark.sql import functions as F

        paths = [uri(str(s.path)) for s in staged if s.path is not None and s.records > 0]
        if not paths:
            return []
        raw = self.spark.read.schema(STAGING_DDL).parquet(*paths)
        route = route_text(self.config)
        schema = F.get_json_object(F.col("value").cast("string"), "$.schema")
        texts = raw.select(schema.alias("schema"), (route if route is not None else F.lit(None)).alias("route"))
        schemas = []
        for row in texts.where(F.col("schema").isNotNull()).distinct().collect():
            try:
                schemas.append((row["route"], schema_from_connect(json.loads(row["schema"]))))
            except ValueError:
                continue
        return schemas

    def _decode(self, raw: Any, tables: Sequence[TargetTable]) -> tuple[Any, Any, Any]:
        """Columns of the first table's schema (plus metadata), a bad-record and a skip condition."""
        from pyspark.sql import functions as F

        cfg = self.config
        schema = tables[0].schema
        data_fields = [f for f in schema.fields if not f.name.startswith("_kafka_")]
        ddl = spark_ddl(Schema(*data_fields)) if data_fields else "`value` STRING"
        tombstone = F.col("value").isNull()
        if cfg.value_converter in ("json", "avro"):
            text = F.col("value").cast("string")
            options = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": "_corrupt"}
            if cfg.schemas_enable and cfg.value_converter == "json":
                parsed = F.from_json(text, f"`payload` STRUCT<{ddl}>, `_corrupt` STRING", options)
                record = parsed.getField("payload")
                corrupt = parsed.getField("_corrupt").isNotNull() | (parsed.isNotNull() & record.isNull())
            else:
                parsed = F.from_json(text, f"{ddl}, `_corrupt` STRING", options)
                record = parsed
                corrupt = parsed.getField("_corrupt").isNotNull()
            decoded = raw.withColumn("_record", record)
            bad = F.col("error").isNotNull() | (~tombstone & (corrupt | F.col("_record").isNull()))
            reason = (
                F.when(F.col("error").isNotNull(), F.col("error"))
                .when(corrupt, F.lit("value is not valid JSON, or a field does not fit its column type"))
                .otherwise(F.lit("value is not a JSON object"))
            )
            decoded = decoded.withColumn("error", F.when(bad, reason))
            columns = [F.col("_record").getField(f.name).alias(f.name) for f in data_fields]
        else:
            decoded = raw
            bad = F.col("error").isNotNull()
            value = F.col("value").cast("string") if cfg.value_converter == "string" else F.col("value")
            columns = [value.alias(data_fields[0].name if data_fields else "value")]
        metadata = {
            "_kafka_topic": F.col("topic"),
            "_kafka_partition": F.col("partition"),
            "_kafka_offset": F.col("offset"),
            "_kafka_timestamp": F.timestamp_millis(F.col("timestamp")),
            "_kafka_key": F.col("key").cast("string") if cfg.key_converter != "bytearray" else F.col("key"),
        }
        names = {f.name for f in schema.fields}
        columns += [expr.alias(name) for name, expr in metadata.items() if name in names]
        skip = tombstone if cfg.value_converter in ("json", "avro") else F.lit(False)
        route = route_text(cfg)
        if route is not None:
            # A record it routes to no table is skipped.
            matched = F.lit(False)
            for table in tables:
                if table.target.route_regex is not None:
                    matched = matched | route.rlike(f"^(?:{table.target.route_regex.pattern})$")
            skip = skip | F.coalesce(~matched, F.lit(True))
        # Conditions become columns: later aggregations cannot see the raw
        # value or the parsed record any more.
        keep = [F.col(c) for c in ("topic", "partition", "offset", "error")]
        keep += [bad.alias("_bad"), (skip & ~bad).alias("_skip")]
        if route is not None:
            keep.append(route.alias("_route"))
        decoded = decoded.select(*keep, *columns)
        return decoded, F.col("_bad"), F.col("_skip")

    def _write_table(
        self, commit_id: uuid.UUID, rows: Any, table: TargetTable, staged: Sequence[StagedPartition]
    ) -> list[DataFile]:
        from pyspark.sql import functions as F

        topics = sorted({s.topic for s in staged})
        topic_index = F.lit(0)
        for index, topic in enumerate(topics):
            topic_index = F.when(F.col("topic") == topic, F.lit(index)).otherwise(topic_index)
        columns = [F.col(f.name) for f in table.schema.fields]
        slot = (topic_index * F.lit(1_000_000) + F.col("partition")).alias("_slot")
        values = [partition_value(pf, table.schema).alias(f"_p{i}") for i, pf in enumerate(table.partition_by)]
        attempt = uuid.uuid4().hex[:8]
        tmp_dir = f"{table.location.rstrip('/')}/data/_tmp/{commit_id}-{attempt}"
        out = rows.select(slot, *values, *columns)
        # No repartition: each staged file belongs to one slot, so partitionBy
        # alone yields per-partition files without a shuffle. The partition
        # value columns only name directories; they are not in the files.
        out.write.mode("error").partitionBy("_slot", *[f"_p{i}" for i in range(len(values))]).parquet(uri(tmp_dir))
        return self._publish(commit_id, attempt, tmp_dir, table, staged, topics)

    def _publish(
        self,
        commit_id: uuid.UUID,
        attempt: str,
        tmp_dir: str,
        table: TargetTable,
        staged: Sequence[StagedPartition],
        topics: list[str],
    ) -> list[DataFile]:
        """Move Spark's part files (one directory per slot) to their immutable names."""
        fs, tmp_path = table_filesystem(tmp_dir, table.io_properties)
        by_slot = {topics.index(s.topic) * 1_000_000 + s.partition: s for s in staged}
        parts: dict[int, list[str]] = {}
        for info in fs.get_file_info(pafs.FileSelector(tmp_path, recursive=True)):
            if info.type != pafs.FileType.File or not info.base_name.endswith(".parquet"):
                continue
            slot_dir = info.path[len(tmp_path) :].strip("/").split("/")[0]
            parts.setdefault(int(slot_dir.removeprefix("_slot=")), []).append(info.path)
        files = [
            publish(
                commit_id,
                attempt,
                path,
                n,
                table.target.name,
                table.location,
                by_slot[slot],
                filesystem=lambda at: table_filesystem(at, table.io_properties),
            )
            for slot, paths in sorted(parts.items())
            for n, path in enumerate(sorted(paths))
        ]
        fs.delete_dir(tmp_path)
        return files
