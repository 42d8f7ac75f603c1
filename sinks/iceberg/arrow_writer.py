"""The arrow data plane of the Iceberg sink, and the decode Spark's Python workers run for it.

Each staged partition's records are decoded by the shared JSON decoder
(``workers.json_decoder``) into the first table's columns, routed to the
tables (``iceberg.tables.route-field``), split by each table's Iceberg
partition with Iceberg's own transforms (pyiceberg on Arrow arrays: a bucket
is the hash every Iceberg engine computes) and written as zstd Parquet under
the table's location. With ``sinkadmin.writer=arrow`` each participant does
this as it consumes, so the end of a commit only closes files; with spark
(the default) Spark's Python workers do it over the staged files
(``sinks.iceberg.spark_writer``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyiceberg.partitioning import partition_record_value
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
)

from connectors.config import SinkConfig
from sinks.iceberg.tables import iceberg_schema, missing_fields, partition_values_json
from sinks.iceberg.upserts import UnappliableRows
from sinks.iceberg.writes import TargetTable, Unshaped, WritePlan, shaped, table_filesystem
from workers.events import DataFile
from workers.json_decoder import Decoded, JsonDecoder, text_column, utf8_lossy
from workers.staging import RawStagingFile, RecordChunk, StagedFile, StagedPartition, raw_staging_path
from workers.writes import BadRecord, bad_records, publish

# Types Arrow's JSON reader produces from JSON text as Spark's from_json
# would. Binary (base64 in JSON), maps, time, UUID and fixed are not among them.
_JSON_PRIMITIVES = (
    BooleanType,
    IntegerType,
    LongType,
    FloatType,
    DoubleType,
    DecimalType,
    StringType,
    DateType,
    TimestampType,
    TimestamptzType,
)


def _json_decodable(field_type: IcebergType) -> bool:
    if isinstance(field_type, StructType):
        return all(_json_decodable(f.field_type) for f in field_type.fields)
    if isinstance(field_type, ListType):
        return _json_decodable(field_type.element_type)
    return isinstance(field_type, _JSON_PRIMITIVES)


def arrow_unsupported(config: SinkConfig, tables: Sequence[TargetTable]) -> str | None:
    """Why the JSON decoder cannot turn these records into these tables' columns, or None if it can."""
    for table in tables:
        if (column := jvm_decoded(config, table.schema)) is not None:
            return f"column {column.name} of {table.target.name} has type {column.field_type}, which Arrow cannot read from JSON"
    return None


def jvm_decoded(config: SinkConfig, schema: Schema) -> NestedField | None:
    """The first column of ``schema`` whose type Arrow cannot read from JSON, which makes its records
    decoded in the JVM (Spark's ``from_json``) rather than by the JSON decoder; None if there is none."""
    if config.value_converter not in ("json", "avro"):
        return None
    return next(
        (f for f in schema.fields if not f.name.startswith("_kafka_") and not _json_decodable(f.field_type)), None
    )


def split_by_partition(rows: pa.Table, table: TargetTable) -> list[tuple[tuple[Any, ...], pa.Table]]:
    """The rows grouped by the table's Iceberg partition (one partition per file, as Iceberg
    requires), each with its partition's values as the table's partition record holds them.

    The transforms are Iceberg's own (pyiceberg on Arrow arrays), so a bucket
    is the hash every Iceberg engine computes, and a file's partition need not
    be read back from its column bounds.
    """
    spec, schema = table.spec, table.schema
    if not spec.fields or rows.num_rows == 0:
        return [((), rows)]
    names = [f"_k{i}" for i in range(len(spec.fields))]
    keys = []
    for pf in spec.fields:
        source = schema.find_field(pf.source_id)
        keys.append(pf.transform.pyarrow_transform(source.field_type)(rows.column(source.name)))
    index = pa.table([*keys, pa.array(np.arange(rows.num_rows))], names=[*names, "_row"])
    groups = index.group_by(names, use_threads=False).aggregate([("_row", "list")])
    split = []
    for j in range(groups.num_rows):
        values = tuple(
            partition_record_value(pf, groups.column(n)[j].as_py(), schema)
            for pf, n in zip(spec.fields, names, strict=True)
        )
        split.append((values, rows.take(groups.column("_row_list")[j].values)))
    return split


class ArrowTableOutput:
    """Open data files of one partition for one table: one per Iceberg partition value.

    Decoded rows wait in memory until ``row_group_bytes`` of them make a row
    group: records are decoded in small chunks, as they arrive, but files
    keep row groups of a useful size.
    """

    def __init__(self, table: TargetTable, tmp_dir: str, prefix: str, row_group_bytes: int) -> None:
        self.table = table
        self.row_group_bytes = row_group_bytes
        self.pending: dict[tuple[Any, ...], list[pa.Table]] = {}
        self.pending_bytes: dict[tuple[Any, ...], int] = {}
        self.arrow_schema = table.arrow_schema
        self.fs, self.tmp_path = table_filesystem(tmp_dir, table.io_properties)
        self.prefix = prefix
        self.writers: dict[tuple[Any, ...], tuple[pq.ParquetWriter, str]] = {}
        self.records: dict[str, int] = {}

    def write(self, rows: pa.Table) -> None:
        if not rows.num_rows:
            return
        if rows.schema != self.arrow_schema:
            # The table's columns in its order: a column the records lack is null.
            rows = pa.Table.from_arrays(
                [
                    rows.column(f.name).cast(f.type) if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type)
                    for f in self.arrow_schema
                ],
                schema=self.arrow_schema,
            )
        for key, part in split_by_partition(rows, self.table):
            if not part.num_rows:
                continue
            self.pending.setdefault(key, []).append(part)
            self.pending_bytes[key] = self.pending_bytes.get(key, 0) + part.nbytes
            if self.pending_bytes[key] >= self.row_group_bytes:
                self._flush(key)

    def _flush(self, key: tuple[Any, ...]) -> None:
        parts = self.pending.pop(key, [])
        self.pending_bytes.pop(key, None)
        if parts:
            opened = self.writers.get(key)
            if opened is None:
                if not self.writers:
                    self.fs.create_dir(self.tmp_path, recursive=True)
                path = f"{self.tmp_path}/{self.prefix}-{len(self.writers):03d}.parquet"
                writer = pq.ParquetWriter(path, self.arrow_schema, compression="zstd", filesystem=self.fs)
                opened = self.writers[key] = (writer, path)
            rows = pa.concat_tables(parts)
            opened[0].write_table(rows, row_group_size=rows.num_rows)
            self.records[opened[1]] = self.records.get(opened[1], 0) + rows.num_rows

    def close(self) -> list[StagedFile]:
        for key in list(self.pending):
            self._flush(key)
        files = []
        for key, (writer, path) in self.writers.items():
            writer.close()
            partition = partition_values_json(self.table.spec, key)
            files.append(StagedFile(self.table.target.name, self.table.location, path, self.records[path], partition))
        self.writers.clear()
        return files

    def discard(self) -> None:
        self.pending.clear()
        self.pending_bytes.clear()
        for writer, path in self.writers.values():
            writer.close()
            self.fs.delete_file(path)
        self.writers.clear()


def unshaped_records(
    config: SinkConfig, values: Sequence[bytes | None], errors: Sequence[str | None], why: str
) -> tuple[list[tuple[int, str]], int]:
    """The records of a missing table that none of them could create (``Unshaped``): all bad (position, reason),
    each with its converter's reason (not JSON, not an object, no envelope), else ``why``; and the tombstones
    skipped among them."""
    envelope = config.value_converter == "json" and config.schemas_enable
    decoded = JsonDecoder(pa.schema([]), envelope=envelope).decode(values, errors)
    return sorted([*decoded.bad, *((i, why) for i in decoded.positions)]), decoded.skipped


class ArrowPartitionWriter:
    """Decodes one partition's records chunk by chunk into the commit's data files: the sink
    of a participant's staging buffer (arrow data plane), and what Spark's Python workers run
    over a staged file (spark data plane, ``workers.spark_writer``).

    The plan (the tables) is settled at the first chunk, when sample records
    exist to create a missing table from.
    """

    DECODE_CHUNK_BYTES = 1 << 20

    def __init__(
        self,
        config: SinkConfig,
        plan_for: Callable[[Sequence[bytes | None]], WritePlan],
        evolve_for: Callable[[Schema], tuple[TargetTable, ...]],
        staging_id: uuid.UUID,
        topic: str,
        partition: int,
        start: int,
        staging_dir: Path,
        keep_rejects: bool = True,
    ) -> None:
        self.config = config
        # Undecodable records are copied to a file of their own for the
        # dead-letter topic, unless the caller already has them all (Spark
        # decodes a raw staging file).
        self.keep_rejects = keep_rejects
        self.plan_for = plan_for
        # Adds fields to the plan's tables (schema evolution) and returns them as they are then.
        self.evolve_for = evolve_for
        self.staging_id = staging_id
        self.topic = topic
        self.partition = partition
        self.start = start
        self.staging_dir = staging_dir
        self.attempt = uuid.uuid4().hex[:8]
        # Decode early and in small pieces, so that little is left to do at
        # the commit's end; row groups are still buffer-bytes large.
        self.chunk_bytes = min(config.buffer_bytes, self.DECODE_CHUNK_BYTES)
        self.plan: WritePlan | None = None
        self.rejects: RawStagingFile | None = None  # the undecodable ones, for the dead-letter topic
        self.outputs: list[ArrowTableOutput] = []
        # Files closed when the tables' schema changed (each file has one schema).
        self.closed: list[StagedFile] = []
        self.schemas = 0
        self.decoder: JsonDecoder | None = None
        # In upsert mode, the decoded rows the tables cannot apply (``_refuse``).
        self.unappliable: UnappliableRows | None = None
        self.value_column = "value"  # string and bytes values: the table's one data column
        self.bad: list[BadRecord] = []
        self.skipped = 0

    def write(self, chunk: RecordChunk) -> None:
        if self.plan is None and (unshaped := self._settle(chunk)) is not None:
            # (No table to write to yet: the chunk's records are bad, and a later chunk may create it.)
            bad, skipped = unshaped_records(self.config, chunk.values, chunk.errors, str(unshaped))
            self._reject(chunk, bad, [])
            self.skipped += skipped
            return
        decoded = self._decode(chunk)
        additions = None
        if decoded.records_schema is not None:
            # (outputs[0] writes the first table, whose columns the decoder decodes)
            additions = missing_fields(self.outputs[0].table.schema, iceberg_schema(decoded.records_schema))
        if additions is not None:
            # New fields (schema evolution): add them to the tables, then
            # decode the chunk again with them. (A field another task added
            # first keeps its type; records that do not fit it are bad.)
            self._open(self.evolve_for(additions))
            decoded = self._decode(chunk)
        self._reject(chunk, decoded.bad, self._refuse(decoded))
        self.skipped += decoded.skipped
        if not decoded.positions:
            return
        columns = self._with_metadata(decoded, chunk)
        route = self._route(columns)
        for output in self.outputs:
            rows = columns
            regex = output.table.target.route_regex
            if route is not None and regex is not None:
                rows = rows.filter(pc.fill_null(pc.match_substring_regex(route, f"^(?:{regex.pattern})$"), False))
            output.write(rows)

    def _reject(self, chunk: RecordChunk, unconverted: list[tuple[int, str]], refused: list[tuple[int, str]]) -> None:
        """The chunk's bad records (their positions, and why), kept for the dead letters."""
        if not (unconverted or refused):
            return
        self.bad.extend(bad_records(self.topic, self.partition, chunk.offsets, unconverted, refused))
        if self.rejects is None and self.keep_rejects:
            self.rejects = RawStagingFile(
                raw_staging_path(self.staging_dir, self.topic, self.partition, self.start, f"-rejects-{self.attempt}"),
                self.chunk_bytes,
            )
        if self.rejects is not None:
            self.rejects.write(chunk.take(sorted(i for i, _ in (*unconverted, *refused))))

    def _settle(self, chunk: RecordChunk) -> Unshaped | None:
        """The plan, from the chunk's first records; else why none of its records can create a missing table."""
        try:
            plan = shaped([(chunk.values, chunk.errors)], lambda samples: self.plan_for(samples()))
        except Unshaped as unshaped:
            return unshaped
        self.plan = plan
        self._open(plan.tables)
        first = plan.tables[0]
        route_field = self.config.settings.route_field
        if route_field and self.decoder is not None and route_field not in self.decoder.data_schema.names:
            raise ValueError(
                f"iceberg.tables.route-field {self.config.settings.route_field!r} is not a column of {first.target.name}"
            )
        return None

    def _unappliable(self, tables: Sequence[TargetTable]) -> UnappliableRows | None:
        """In upsert mode, the rows no table could key (the identifier columns every table has), or whose
        CDC operation is unknown: bad records."""
        settings = self.config.settings
        if not settings.upsert_mode:
            return None
        shared = set.intersection(*(set(t.id_columns) for t in tables)) if tables else set()
        id_columns = tuple(c for c in tables[0].id_columns if c in shared) if tables else ()
        return UnappliableRows(id_columns, settings.cdc_field)

    def _open(self, tables: Sequence[TargetTable]) -> None:
        """Decoder and open files for the tables' current schemas (those open until now are closed)."""
        data_fields = [f for f in tables[0].schema.fields if not f.name.startswith("_kafka_")]
        if self.config.value_converter in ("json", "avro"):
            # (Avro values reach the sinks as JSON: the participant decodes them while staging.)
            envelope = self.config.value_converter == "json" and self.config.schemas_enable
            evolve = self.config.settings.evolve_schema and self.config.value_converter == "json" and not envelope
            unappliable = self.unappliable = self._unappliable(tables)
            # An upsert's key columns are required (identifier fields) but read as nullable: a row without its
            # key is then refused with that reason (UnappliableRows), not as a value that does not fit.
            keys = set(unappliable.id_columns) if unappliable is not None else set()
            columns = pa.schema(
                [
                    field.with_nullable(True) if field.name in keys else field
                    for field in (tables[0].arrow_schema.field(f.name) for f in data_fields)
                ]
            )
            # (The refusals are the writer's own, not the decoder's ``reject``: the sink's, not its converter's,
            # in the dead letters' error context.)
            self.decoder = JsonDecoder(columns, evolve=evolve, envelope=envelope)
        else:
            self.unappliable = None
            self.value_column = data_fields[0].name if data_fields else "value"
        for output in self.outputs:
            self.closed.extend(output.close())
        # Unique temporary names per schema: the files are renamed when published.
        prefix = f"{self.topic}+{self.partition}+{self.start}" + (f"-s{self.schemas}" if self.schemas else "")
        self.schemas += 1
        self.outputs = []
        for table in tables:
            tmp_dir = f"{table.location.rstrip('/')}/data/_tmp/{self.staging_id}-{self.attempt}"
            self.outputs.append(ArrowTableOutput(table, tmp_dir, prefix, self.config.buffer_bytes))

    def _decode(self, chunk: RecordChunk) -> Decoded:
        if self.decoder is not None:
            return self.decoder.decode(chunk.values, chunk.errors)
        column, bad = text_column(chunk.values, as_string=self.config.value_converter == "string")
        bad += [(i, str(e)) for i, e in enumerate(chunk.errors) if e is not None]
        bad_positions = {i for i, _ in bad}
        positions = [i for i in range(len(chunk)) if i not in bad_positions]
        if bad_positions:
            column = column.take(positions)
        return Decoded(pa.table({self.value_column: column}), positions, sorted(bad))

    def _refuse(self, decoded: Decoded) -> list[tuple[int, str]]:
        """The decoded rows an upsert cannot apply (``UnappliableRows``), taken out of ``decoded``: their
        positions in the chunk, and why. A sink's refusal, after its converter's decoding: Kafka Connect's
        TASK_PUT in the dead letters' error context."""
        if self.unappliable is None or not decoded.positions:
            return []
        refused = self.unappliable(decoded.columns)
        if not refused:
            return []
        rows = {row for row, _ in refused}
        keep = [row not in rows for row in range(len(decoded.positions))]
        found = [(decoded.positions[row], reason) for row, reason in refused]
        decoded.columns = decoded.columns.filter(pa.array(keep))
        decoded.positions = [p for p, k in zip(decoded.positions, keep, strict=True) if k]
        return found

    def _with_metadata(self, decoded: Decoded, chunk: RecordChunk) -> pa.Table:
        columns = decoded.columns
        wanted = set(self.config.metadata_columns)
        if not wanted:
            return columns
        take = pa.array(decoded.positions, pa.int64()) if len(decoded.positions) != len(chunk) else None

        def picked(array: pa.Array) -> pa.Array:
            return array.take(take) if take is not None else array

        n = len(decoded.positions)
        if "topic" in wanted:
            columns = columns.append_column("_kafka_topic", pa.array([self.topic] * n, pa.string()))
        if "partition" in wanted:
            columns = columns.append_column("_kafka_partition", pa.array([self.partition] * n, pa.int32()))
        if "offset" in wanted:
            columns = columns.append_column("_kafka_offset", picked(pa.array(chunk.offsets, pa.int64())))
        if "timestamp" in wanted:
            millis = pa.array(chunk.timestamps, pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
            columns = columns.append_column("_kafka_timestamp", picked(millis.cast(pa.timestamp("us", tz="UTC"))))
        if "key" in wanted:
            keys = (
                pa.array(chunk.keys, pa.binary())
                if self.config.key_converter == "bytearray"
                else utf8_lossy(chunk.keys)
            )
            columns = columns.append_column("_kafka_key", picked(keys))
        return columns

    def _route(self, columns: pa.Table) -> pa.ChunkedArray | None:
        if not self.config.settings.route_field or self.config.settings.route_field not in columns.column_names:
            return None
        return pc.cast(columns.column(self.config.settings.route_field), pa.string())

    def finish(self, staged: StagedPartition) -> StagedPartition:
        staged.decoded = True
        staged.files = self.closed + [f for output in self.outputs for f in output.close()]
        staged.bad = self.bad
        staged.skipped = self.skipped
        staged.path = self.rejects.close() if self.rejects is not None else None
        return staged

    def discard(self) -> None:
        if self.rejects is not None:
            self.rejects.discard()
        for output in self.outputs:
            output.discard()
        io_properties = self.plan.tables[0].io_properties if self.plan is not None else {}
        for closed in self.closed:
            table_filesystem(closed.location, io_properties)[0].delete_file(closed.path)
        self.closed.clear()


def publish_decoded(commit_id: uuid.UUID, staged: StagedPartition, io_properties: Mapping[str, str]) -> list[DataFile]:
    """The Arrow writer's files of one partition under their final names; their temporary directory goes.
    (``io_properties``: the catalog's, with which the tables' files are reached.)"""
    files = []
    attempt = uuid.uuid4().hex[:8]
    tmp_dirs = set()

    def filesystem(location: str) -> tuple[pafs.FileSystem, str]:
        return table_filesystem(location, io_properties)

    for n, written in enumerate(staged.files):
        files.append(
            publish(
                commit_id,
                attempt,
                written.path,
                n,
                written.table,
                written.location,
                staged,
                written.partition_values,
                filesystem,
            )
        )
        tmp_dirs.add((written.location, written.path.rsplit("/", 1)[0]))
    for location, tmp in tmp_dirs:
        filesystem(location)[0].delete_dir(tmp)
    return files
