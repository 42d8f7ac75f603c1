"""Spark turns staged records into table data files (the data plane).

One Spark per host (a Spark Connect server, or a cluster via SPARK_REMOTE /
SPARK_MASTER) serves every participant; a process connects once and keeps the
session. Participants stage raw records with pyarrow; Spark reads them,
decodes with ``from_json`` in the JVM, and writes Parquet. Files are then
moved to immutable names ``<topic>+<partition>+<first>+<last>-<commit>-<attempt>-<part>``
under the table location (DESIGN I5).
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Sequence
from typing import Any

import pyarrow.fs as pafs
from pyiceberg.schema import Schema

from connectors.config import SinkConfig
from connectors.config.transforms import PartitionField
from workers.events import DataFile
from workers.staging import STAGING_SCHEMA, StagedPartition
from workers.tables import schema_from_connect, spark_ddl
from workers.writes import BadRecord, TargetTable, WriteResult, publish, uri

log = logging.getLogger(__name__)

_session_lock = threading.Lock()
_session: Any = None

SESSION_CONF = {
    # pyiceberg reads INT96 timestamps poorly; Iceberg wants micros.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.compression.codec": "zstd",
    "spark.sql.shuffle.partitions": "4",
}

STAGING_DDL = (
    "`topic` STRING, `partition` INT, `offset` BIGINT, `timestamp` BIGINT, `key` BINARY, `value` BINARY, "
    "`headers` ARRAY<STRUCT<`key`: STRING, `value`: BINARY>>, `error` STRING"
)
assert STAGING_SCHEMA.names == ["topic", "partition", "offset", "timestamp", "key", "value", "headers", "error"]


def spark_session() -> Any:
    """The process's Spark session, created on first use and kept."""
    global _session  # noqa: PLW0603 - one session per process is the point
    with _session_lock:
        if _session is None:
            from django.conf import settings
            from pyspark.sql import SparkSession

            builder = SparkSession.builder.appName("sinkadmin")
            if settings.SPARK_REMOTE:
                session = builder.remote(settings.SPARK_REMOTE).getOrCreate()
            else:
                session = builder.master(settings.SPARK_MASTER).config("spark.ui.enabled", "false").getOrCreate()
            for key, value in SESSION_CONF.items():
                session.conf.set(key, value)
            _session = session
        return _session


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
        raise ValueError(
            f"{field}: Spark SQL has no Iceberg bucket hash; bucket partitions are written by the arrow data plane"
        )
    raise ValueError(f"partition transform {field} is not supported by the spark writer")


class SparkWriter:
    def __init__(self, config: SinkConfig, session: Any = None) -> None:
        self.config = config
        self._session = session

    @property
    def spark(self) -> Any:
        if self._session is None:
            self._session = spark_session()
        return self._session

    def write(
        self,
        commit_id: uuid.UUID,
        staged: Sequence[StagedPartition],
        tables: Sequence[TargetTable],
    ) -> WriteResult:
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        with_data = [s for s in staged if s.path is not None and s.records > 0]
        result = WriteResult()
        if not with_data:
            return result
        raw = self.spark.read.schema(STAGING_DDL).parquet(*[uri(str(s.path)) for s in with_data])
        decoded, bad_condition, skip_condition = self._decode(raw, tables)
        # The common case has no bad or skipped record: the write itself
        # counts them (an observation rides along the one pass over the
        # data), and only when there are some does a second pass find them.
        # Unique per write: tasks of one commit may share this process and session.
        observation = Observation(f"commit-{commit_id}-{uuid.uuid4().hex[:8]}")
        observed = decoded.observe(
            observation, F.count_if(bad_condition).alias("bad"), F.count_if(skip_condition).alias("skipped")
        )
        good = observed.where(~bad_condition & ~skip_condition)
        for table in tables:
            rows = good
            if self.config.route_field and table.target.route_regex is not None:
                rows = rows.where(F.col("_route").rlike(f"^(?:{table.target.route_regex.pattern})$"))
            result.files.extend(self._write_table(commit_id, rows, table, with_data))
        metrics = observation.get
        if not metrics.get("bad") and not metrics.get("skipped"):
            return result
        counts = (
            decoded.groupBy("topic", "partition")
            .agg(F.count_if(bad_condition).alias("bad"), F.count_if(skip_condition).alias("skipped"))
            .collect()
        )
        result.skipped = {(r["topic"], r["partition"]): r["skipped"] for r in counts if r["skipped"]}
        if metrics.get("bad"):
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

    def envelope_schemas(self, staged: Sequence[StagedPartition]) -> list[Schema]:
        """The distinct record schemas of the staged Kafka Connect envelopes, as table schemas
        (schema evolution; one extra pass over the records, in the JVM). A schema that is not
        a struct is left out: its records are bad records when decoded."""
        from pyspark.sql import functions as F

        paths = [uri(str(s.path)) for s in staged if s.path is not None and s.records > 0]
        if not paths:
            return []
        raw = self.spark.read.schema(STAGING_DDL).parquet(*paths)
        texts = raw.select(F.get_json_object(F.col("value").cast("string"), "$.schema").alias("schema"))
        schemas = []
        for row in texts.where(F.col("schema").isNotNull()).distinct().collect():
            try:
                schemas.append(schema_from_connect(json.loads(row["schema"])))
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
        # Conditions become columns: later aggregations cannot see the raw
        # value or the parsed record any more.
        keep = [F.col(c) for c in ("topic", "partition", "offset", "error")]
        keep += [bad.alias("_bad"), (skip & ~bad).alias("_skip")]
        if cfg.route_field:
            keep.append(F.col("_record").getField(cfg.route_field).cast("string").alias("_route"))
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
        fs, tmp_path = pafs.FileSystem.from_uri(uri(tmp_dir))
        by_slot = {topics.index(s.topic) * 1_000_000 + s.partition: s for s in staged}
        parts: dict[int, list[str]] = {}
        for info in fs.get_file_info(pafs.FileSelector(tmp_path, recursive=True)):
            if info.type != pafs.FileType.File or not info.base_name.endswith(".parquet"):
                continue
            slot_dir = info.path[len(tmp_path) :].strip("/").split("/")[0]
            parts.setdefault(int(slot_dir.removeprefix("_slot=")), []).append(info.path)
        files = [
            publish(commit_id, attempt, path, n, table.target.name, table.location, by_slot[slot])
            for slot, paths in sorted(parts.items())
            for n, path in enumerate(sorted(paths))
        ]
        fs.delete_dir(tmp_path)
        return files
