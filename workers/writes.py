"""What every sink's writer and both data planes (Arrow in the participant, Spark on the host)
share: a write's results, how data files are named, and the writer of the sinks that decode
staged records at the commit's end (``RawStagedWriter``)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from connectors.config.validation import SinkConfig
from workers.events import DataFile, TableVersion
from workers.json_text import parse_json
from workers.staging import ChunkSink, RawStagingFile, StagedPartition, raw_staging_path


def uri(path: str) -> str:
    return path if "://" in path else f"file://{path}"


def narrow_type(arrow_type: pa.DataType, dates_as_text: bool = False) -> pa.DataType:
    """The type with 32-bit offsets (string, binary, list) where pyiceberg says large.

    A decoded chunk is 1 MiB and a row group a few of them, far from 2 GiB a
    column, and Parquet stores both widths alike: the large types would only
    cost a cast of every chunk the JSON reader decoded (it makes 32-bit ones,
    and knows no large types). With ``dates_as_text``, the type the JSON
    reader is asked for: dates arrive as text and are cast after.
    """
    if pa.types.is_large_string(arrow_type) or (dates_as_text and pa.types.is_date(arrow_type)):
        return pa.string()
    if pa.types.is_large_binary(arrow_type):
        return pa.binary()
    if pa.types.is_struct(arrow_type):
        return pa.struct([f.with_type(narrow_type(f.type, dates_as_text)) for f in arrow_type])
    if pa.types.is_large_list(arrow_type) or pa.types.is_list(arrow_type):
        return pa.list_(arrow_type.value_field.with_type(narrow_type(arrow_type.value_type, dates_as_text)))
    return arrow_type


class WriteRefused(ValueError):
    """A write that cannot succeed however often it is tried: the records and the sink's store do not fit
    together (an upsert table without its identifier columns). The connector fails at once, naming the
    reason, and nothing of the commit is prepared: a prepared commit must always be appliable (I9)."""


# What Kafka Connect's converters and transformations raise for a record they cannot convert or transform.
DATA_EXCEPTION = "org.apache.kafka.connect.errors.DataException"

# Kafka Connect's stage of a sink task's own failure on a record (its ``put``): the sinks' refusals of records
# they decoded (an upsert's row without its key, a CDC operation they do not know, a field they cannot place).
TASK_PUT = "TASK_PUT"


@dataclass(frozen=True)
class BadRecord:
    """A record the sink could not write, and why, as Kafka Connect's error context names it."""

    topic: str
    partition: int
    offset: int
    reason: str
    # The stage that failed (Kafka Connect's ``__connect.errors.stage``): TASK_PUT where the sink refused the
    # record; None for a record that could not be converted or transformed, whose reason tells which
    # (``workers.dead_letters.error_context``: the reasons come from the tasks' staging, as text).
    stage: str | None = None
    exception_class: str = DATA_EXCEPTION


# How many records a table or a file schema is settled from (the first of a partition's staged records).
# A run of staged records: their values and errors (None where the record was converted and transformed).
Values = tuple[Sequence[bytes | None], Sequence[str | None]]

SAMPLES = 500


def sample_values(
    values: Sequence[bytes | None], errors: Sequence[str | None], limit: int = SAMPLES
) -> list[bytes | None]:
    """The first ``limit`` values staged without an error, to settle a table's or a file's schema from. A record
    staged with its error (a transformation or the converter failed on it) is staged as it came, untransformed:
    its fields and types are not the records' (a string a Cast would have made a number, a field ReplaceField
    drops), and they must not shape the columns the good records are decoded into."""
    found: list[bytes | None] = []
    for value, error in zip(values, errors, strict=True):
        if error is None:
            found.append(value)
            if len(found) == limit:
                break
    return found


def with_envelope_hint(config: SinkConfig, refused: list[tuple[int, str]], values: Sequence[bytes | None]) -> None:
    """The reasons of records a sink refused (by index into ``values``), each told, where its value is an object of
    just ``schema`` and ``payload``, that it is Kafka Connect's JSON envelope read as plain JSON: its fields are
    under ``payload`` (a converter left at a Kafka Connect worker's default, ``schemas.enable=true``)."""
    if config.value_converter != "json" or config.schemas_enable:
        return
    for n, (i, reason) in enumerate(refused):
        value = values[i]
        if not value or b'"payload"' not in value or b'"schema"' not in value:
            continue
        try:
            parsed = parse_json(value)
        except ValueError:
            continue
        if isinstance(parsed, dict) and parsed.keys() == {"schema", "payload"}:
            refused[n] = (
                i,
                f"{reason} (the value is Kafka Connect's {{schema, payload}} envelope, read as plain JSON: set "
                "value.converter.schemas.enable=true)",
            )


def bad_records(
    topic: str,
    partition: int,
    offsets: Sequence[int],
    unconverted: Iterable[tuple[int, str]],
    refused: Iterable[tuple[int, str]] = (),
) -> list[BadRecord]:
    """A run's bad records, in offset order: those that could not be converted or transformed (record index,
    reason: their stage is told by their reason) and those the sink refused (TASK_PUT); ``offsets[i]`` is
    record ``i``'s offset."""
    found: list[tuple[int, str, str | None]] = [(i, reason, None) for i, reason in unconverted]
    found += [(i, reason, TASK_PUT) for i, reason in refused]
    found.sort(key=lambda b: b[0])
    return [BadRecord(topic, partition, offsets[i], reason, stage) for i, reason, stage in found]


def bad_outcome(bad: Iterable[BadRecord]) -> list[list[Any]]:
    """Bad records as a decode's outcome carries them (from Spark's Python workers): offset, reason, stage."""
    return [[b.offset, b.reason, b.stage] for b in bad]


def bad_of_outcome(topic: str, partition: int, outcome: Iterable[Sequence[Any]]) -> list[BadRecord]:
    """The bad records of a staged partition's outcome (``bad_outcome``)."""
    return [BadRecord(topic, partition, offset, reason, stage) for offset, reason, stage in outcome]


@dataclass
class WriteResult:
    files: list[DataFile] = field(default_factory=list)
    bad: list[BadRecord] = field(default_factory=list)
    # Per (topic, partition): records written to no table (null values).
    skipped: dict[tuple[str, int], int] = field(default_factory=dict)


def publish(
    commit_id: uuid.UUID,
    attempt: str,
    source: str,
    n: int,
    table: str,
    location: str,
    staged: StagedPartition,
    partition_values: str | None = None,
    filesystem: Callable[[str], tuple[pafs.FileSystem, str]] = lambda at: pafs.FileSystem.from_uri(uri(at)),
) -> DataFile:
    """Move a written file to its immutable name (DESIGN I5) and describe it for the commit.

    ``source`` is a path on the filesystem of the table's location, as
    pyarrow names it there (no scheme): both data planes write there.
    ``filesystem`` gives a location's filesystem and the path there (the
    table's own way of reaching its files).
    """
    data_dir = f"{location.rstrip('/')}/data"
    fs, data_path = filesystem(data_dir)
    name = f"{staged.topic}+{staged.partition}+{staged.start}+{staged.end - 1}-{commit_id}-{attempt}-{n:03d}.parquet"
    target = f"{data_path}/{name}"
    fs.move(source, target)
    metadata = pq.read_metadata(target, filesystem=fs)
    return DataFile(
        table=table,
        path=f"{data_dir}/{name}" if "://" in data_dir else uri(target),
        topic=staged.topic,
        partition=staged.partition,
        records=metadata.num_rows,
        bytes=fs.get_file_info(target).size,
        partition_values=partition_values,
    )


def avro_schema(schema: pa.Schema, name: str = "ConnectDefault") -> dict[str, Any]:
    """The Avro record schema of Arrow columns (every field optional, as the records' may be missing)."""
    counter = iter(range(1, 1 << 30))

    def of(arrow: pa.DataType) -> Any:
        if pa.types.is_boolean(arrow):
            return "boolean"
        if pa.types.is_int8(arrow) or pa.types.is_int16(arrow) or pa.types.is_int32(arrow):
            return "int"
        if pa.types.is_integer(arrow):
            return "long"
        if pa.types.is_float32(arrow):
            return "float"
        if pa.types.is_floating(arrow):
            return "double"
        if pa.types.is_string(arrow) or pa.types.is_large_string(arrow):
            return "string"
        if pa.types.is_binary(arrow) or pa.types.is_large_binary(arrow):
            return "bytes"
        if pa.types.is_timestamp(arrow):
            return {"type": "long", "logicalType": "timestamp-micros" if arrow.unit == "us" else "timestamp-millis"}
        if pa.types.is_date(arrow):
            return {"type": "int", "logicalType": "date"}
        if pa.types.is_time(arrow):
            return {"type": "long", "logicalType": "time-micros"}
        if pa.types.is_decimal(arrow):
            return {"type": "bytes", "logicalType": "decimal", "precision": arrow.precision, "scale": arrow.scale}
        if pa.types.is_struct(arrow):
            return record(list(arrow), f"{name}_{next(counter)}")
        if pa.types.is_list(arrow) or pa.types.is_large_list(arrow):
            return {"type": "array", "items": ["null", of(arrow.value_type)]}
        if pa.types.is_map(arrow):
            return {"type": "map", "values": ["null", of(arrow.item_type)]}
        raise ValueError(f"no Avro type for {arrow}")

    def record(fields: list[pa.Field], record_name: str) -> dict[str, Any]:
        return {
            "type": "record",
            "name": record_name,
            "fields": [{"name": f.name, "type": ["null", of(f.type)], "default": None} for f in fields],
        }

    return record(list(schema), name)


def collect_outcomes(staged: Sequence[StagedPartition], outcomes: dict[tuple[str, int], dict[str, Any]]) -> WriteResult:
    """A task's write result from each staged partition's outcome (``{"files", "bad", "skipped"}``, as the
    sinks' decode functions return it from Spark's Python workers or the participant)."""
    result = WriteResult()
    for s in staged:
        outcome = outcomes[(s.topic, s.partition)]
        result.files.extend(DataFile(**f) for f in outcome["files"])
        result.bad.extend(bad_of_outcome(s.topic, s.partition, outcome["bad"]))
        if outcome["skipped"]:
            result.skipped[(s.topic, s.partition)] = outcome["skipped"]
    result.bad.sort(key=lambda b: (b.topic, b.partition, b.offset))
    return result


def registered_schemas(config: SinkConfig) -> tuple[str, ...]:
    """The Schema Registry schemas a task's staged values were decoded with (as text), for the decoders of
    the sinks whose columns follow the records (files, Hudi). Decoding to JSON happened in the task's own
    process, before staging: its decoder knows every schema it met."""
    if config.schema_registry is None:
        return ()
    from workers.converters import value_decoder

    decoder = value_decoder(config)
    return tuple(decoder.schemas()) if decoder is not None else ()


class RawStagedWriter:
    """A participants' WritePort whose records are staged raw and decoded at the commit's end by one
    function per staged partition (the files and Hudi sinks): Spark's Python workers run it (one Spark
    job per task and commit), or, on the arrow plane, the participant itself. A sink gives ``job``."""

    def __init__(self, config: SinkConfig, spark: Any = None) -> None:
        self.config = config
        self._spark = spark

    @property
    def spark(self) -> Any:
        if self._spark is None:
            from workers.spark_writer import SparkJobs

            # (The warm-up has Spark's Python workers import the sink's writer module, its job's home.)
            self._spark = SparkJobs(decoder_modules=(type(self).__module__,))
        return self._spark

    def close(self) -> None:
        pass

    def warm_up(self) -> None:
        """Spark joined, its Python workers' imports done, before the first write needs them (spark)."""
        if self.config.writer == "spark":
            self.spark.warm_up()

    def unavailable(self, exc: BaseException) -> str | None:
        return None

    def tables_committed(self, versions: Mapping[str, TableVersion]) -> None:
        pass  # (nothing is looked up per commit)

    def job(self, commit_id: uuid.UUID, staged: tuple[StagedPartition, ...], value_schemas: tuple[str, ...]) -> Any:
        """The commit's StagedJob (workers.spark_writer): ``staged`` and ``decode(staged)``."""
        raise NotImplementedError

    def sink(self, staging_id: uuid.UUID, topic: str, partition: int, start: int, directory: Path) -> ChunkSink:
        return RawStagingFile(raw_staging_path(directory, topic, partition, start), self.config.buffer_bytes)

    def write(self, commit_id: uuid.UUID, staging_id: uuid.UUID, staged: Sequence[StagedPartition]) -> WriteResult:
        with_data = tuple(s for s in staged if s.path is not None and s.records > 0)
        if not with_data:
            return WriteResult()
        job = self.job(commit_id, with_data, registered_schemas(self.config))
        if self.config.writer == "spark":
            outcomes = self.spark.run(job)
        else:
            outcomes = {(s.topic, s.partition): job.decode(s) for s in with_data}
        return collect_outcomes(with_data, outcomes)
