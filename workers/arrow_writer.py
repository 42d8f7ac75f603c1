"""Decoding records into table data files: the JSON decoder both data planes share, and
the arrow data plane.

With ``sinkadmin.writer=spark`` (the default) Spark's Python workers run the
code of this module over each staged file (``workers.spark_writer``); with
``arrow`` each participant runs it as it consumes, with no JVM: it decodes a
chunk as soon as its buffer is full and appends it to the commit's data files,
so the end of a commit only closes files. Either way the same records give the
same rows and the same bad-record decisions. Values are plain JSON, the
payload of Kafka Connect's schema envelope, Avro (decoded to JSON by the
participant while staging), string or bytes.

Two JSON readers decode plain JSON. Into columns of boolean, integer,
floating-point and string types (and structs and lists of them: all that
auto-create makes from plain JSON), arrow-rs's reader (through arro3): on the
benchmark's 1 KB records, in 1 MiB chunks on one thread, it took 0.37 µs a
record against Arrow C++'s 1.41, with the same columns. It converts as
the Iceberg sink's RecordConverter does: a number with a fraction into an
integer column is truncated toward zero (Java's ``longValue()``) and a string
of digits into a numeric column is parsed; what does not fit (an overflow, a
string that is not a number, a boolean for a number...) fails. Arrow C++'s
reader, stricter on both, serves tables with date, timestamp or decimal
columns (arrow-rs would take a number into a timestamp column as
microseconds, the Iceberg sink takes milliseconds) and schema evolution,
which needs its typing of fields the table lacks.

Undecodable records are found without giving up the fast path: a chunk that
fails to parse is split in halves until the bad records stand alone, so a
poison record costs O(log chunk) parses, not one per record.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import arro3.core
import arro3.io
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.json as pj
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
from workers.events import DataFile
from workers.staging import RawStagingFile, RecordChunk, StagedFile, StagedPartition, raw_staging_path
from workers.tables import missing_fields, partition_values_json
from workers.writes import BadRecord, TargetTable, WritePlan, narrow_type, publish, uri

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

NOT_AN_OBJECT = "value is not a JSON object"
NO_PAYLOAD = "the Kafka Connect envelope has no payload (schemas.enable=true needs one)"
PRESENT = "_payload_present"
DOES_NOT_FIT = "value is not valid JSON, or a field does not fit its column type"


def _rust_readable(arrow_type: pa.DataType) -> bool:
    """Whether arrow-rs's JSON reader fills a column of this type as the Iceberg sink converts
    JSON to it (see the module doc)."""
    if pa.types.is_struct(arrow_type):
        return all(_rust_readable(f.type) for f in arrow_type)
    if pa.types.is_list(arrow_type):
        return _rust_readable(arrow_type.value_type)
    return (
        pa.types.is_boolean(arrow_type)
        or pa.types.is_integer(arrow_type)
        or pa.types.is_floating(arrow_type)
        or pa.types.is_string(arrow_type)
    )


def _json_decodable(field_type: IcebergType) -> bool:
    if isinstance(field_type, StructType):
        return all(_json_decodable(f.field_type) for f in field_type.fields)
    if isinstance(field_type, ListType):
        return _json_decodable(field_type.element_type)
    return isinstance(field_type, _JSON_PRIMITIVES)


def arrow_unsupported(config: SinkConfig, tables: Sequence[TargetTable]) -> str | None:
    """Why the JSON decoder cannot turn these records into these tables' columns, or None if it can."""
    if config.value_converter not in ("json", "avro"):
        return None
    for table in tables:
        for f in table.schema.fields:
            if not f.name.startswith("_kafka_") and not _json_decodable(f.field_type):
                return (
                    f"column {f.name} of {table.target.name} has type {f.field_type}, which Arrow cannot read from JSON"
                )
    return None


@dataclass
class Decoded:
    """The records of a chunk that decoded: their columns and their positions in the chunk."""

    columns: pa.Table
    positions: list[int]
    bad: list[tuple[int, str]] = field(default_factory=list)
    skipped: int = 0
    # With schema evolution, when the records have fields the table's
    # columns lack (not in ``columns``): every field of theirs as the reader
    # typed it, for workers.tables.missing_fields to find the new ones.
    records_schema: Schema | None = None


def _inferred_type(arrow_type: pa.DataType, ids: Callable[[], int]) -> IcebergType | None:
    """The column type for a field Arrow's JSON reader inferred, as auto-create would type its values
    (workers.tables.infer_schema_from_json); None while every value is null."""
    if pa.types.is_boolean(arrow_type):
        return BooleanType()
    if pa.types.is_integer(arrow_type):
        return LongType()
    if pa.types.is_floating(arrow_type):
        return DoubleType()
    if pa.types.is_string(arrow_type) or pa.types.is_timestamp(arrow_type):
        # (Arrow infers timestamps from ISO 8601 text; the table gets text.)
        return StringType()
    if pa.types.is_struct(arrow_type):
        fields = _inferred_fields(list(arrow_type), ids)
        return StructType(*fields) if fields else None
    if pa.types.is_list(arrow_type):
        element = _inferred_type(arrow_type.value_type, ids)
        return ListType(ids(), element, element_required=False) if element is not None else None
    return None


def _inferred_fields(fields: Sequence[pa.Field], ids: Callable[[], int]) -> list[NestedField]:
    typed = []
    for f in fields:
        field_type = _inferred_type(f.type, ids)
        if field_type is not None:
            typed.append(NestedField(ids(), f.name, field_type, required=False))
    return typed


def records_schema(parsed: pa.Schema) -> Schema:
    """The columns of what the JSON reader parsed (and inferred), as optional Iceberg fields;
    fields null in every record so far are left out."""
    counter = iter(range(1, 1 << 31))
    return Schema(*_inferred_fields(list(parsed), lambda: next(counter)))


class JsonDecoder:
    """JSON objects to the columns of the first table: plain JSON, or the ``payload`` of
    Kafka Connect's schema envelope (``envelope``). Both data planes decode with it:
    the participants (arrow) and Spark's Python workers (spark), so the same records
    give the same rows and the same bad-record decisions on both."""

    MIN_BLOCK = 1 << 20

    def __init__(self, data_schema: pa.Schema, evolve: bool = False, envelope: bool = False) -> None:
        self.data_schema = data_schema
        self.envelope = envelope
        columns = pa.schema([f.with_type(narrow_type(f.type, dates_as_text=True)) for f in data_schema])
        # An envelope's payload is read as a struct of the columns; its
        # `schema` is an unknown field, skipped by both readers.
        self.parse_schema = pa.schema([pa.field("payload", pa.struct(list(columns)))]) if envelope else columns
        self.columns_schema = columns
        self.needs_cast = columns != data_schema
        # What a parsed chunk is cast to: the columns, and for an envelope
        # whether each record had a payload.
        self.cast_schema = data_schema.append(pa.field(PRESENT, pa.bool_())) if envelope else data_schema
        if evolve and envelope:
            raise ValueError("an envelope's new fields come from its schema, not from typing its values")
        # With schema evolution the reader also types the fields the table
        # lacks, as it would for a table it knew nothing of; without, it
        # skips them (as the Iceberg sink ignores them).
        self.evolve = evolve
        self._options = pj.ParseOptions(
            explicit_schema=self.parse_schema, unexpected_field_behavior="infer" if evolve else "ignore"
        )
        self.rust_reader = not evolve and all(_rust_readable(f.type) for f in self.parse_schema)
        self._rust_schema = arro3.core.Schema.from_arrow(self.parse_schema)
        self._records_schema: Schema | None = None

    def decode(self, values: Sequence[bytes | None], errors: Sequence[str | None]) -> Decoded:
        self._records_schema = None
        lines: list[bytes] = []
        positions: list[int] = []
        bad: list[tuple[int, str]] = []
        skipped = 0
        for i, value in enumerate(values):
            if errors[i] is not None:
                bad.append((i, str(errors[i])))
            elif value is None:
                skipped += 1  # a tombstone: nothing to write
            elif value[:1] == b"{":
                lines.append(value)
                positions.append(i)
            else:
                # Arrow's reader only takes objects (and must never be shown
                # a bare `null`): anything else is refused here, with why.
                stripped = value.strip()
                if stripped[:1] == b"{":
                    lines.append(stripped)
                    positions.append(i)
                else:
                    bad.append((i, _not_an_object(stripped)))
        tables: list[pa.Table] = []
        good: list[int] = []
        if lines:
            self._isolate(lines, positions, tables, good, bad)
        columns = pa.concat_tables(tables) if tables else self.data_schema.empty_table()
        if self.envelope and tables:
            present = columns.column(PRESENT).combine_chunks()
            columns = columns.drop_columns([PRESENT])
            if present.false_count:
                # Kafka Connect's JsonConverter refuses an envelope without
                # a payload; a null value is a tombstone, not an envelope.
                kept = present.to_pylist()
                bad += [(p, NO_PAYLOAD) for p, k in zip(good, kept, strict=True) if not k]
                good = [p for p, k in zip(good, kept, strict=True) if k]
                columns = columns.filter(present)
        bad.sort()
        return Decoded(columns, good, bad, skipped, self._records_schema)

    def _parse(self, lines: Sequence[bytes]) -> pa.Table:
        data = b"\n".join(lines)
        table = self._read_rust(data, len(lines)) if self.rust_reader else self._read_cpp(data)
        if table.num_rows != len(lines):
            # A value holding more than one JSON value (or, for Arrow C++'s
            # reader, which takes a line for a record, a line break).
            raise ValueError("value holds more than one JSON value")
        if self.envelope:
            payload = table.column("payload").combine_chunks()
            table = pa.Table.from_struct_array(payload).append_column(PRESENT, payload.is_valid())
        elif self.evolve and table.schema != self.parse_schema:
            if self._records_schema is None:
                self._records_schema = records_schema(table.schema)
            # The table's columns only (casting a struct drops its new fields).
            table = table.select(self.parse_schema.names)
            if table.schema != self.parse_schema:
                table = table.cast(self.parse_schema)
        if self.needs_cast:
            table = table.cast(self.cast_schema)
        table.validate(full=True)  # e.g. invalid UTF-8 in a string
        return table

    def _read_rust(self, data: bytes, rows: int) -> pa.Table:
        try:
            batches = arro3.io.read_json(data, self._rust_schema, batch_size=rows).read_all()
        except Exception as exc:
            # (arro3 raises plain Exceptions; with our own schema, only for
            # records that do not decode.)
            raise ValueError(str(exc)) from exc
        return pa.table(batches)

    def _read_cpp(self, data: bytes) -> pa.Table:
        # The whole chunk as one block, parsed on this thread. Arrow's
        # streaming reader, not read_json: read_json starts a read-ahead
        # thread and its pool for every call and waits on it, which held a
        # task idle for a sixth of its time on a busy host (py-spy) and cost
        # more CPU per chunk; handing blocks to Arrow's thread pool cost a
        # tenth more CPU, and the tasks already keep every core busy. One
        # block also means one schema for the chunk, whatever it infers.
        reader = pj.open_json(
            pa.BufferReader(data),
            read_options=pj.ReadOptions(block_size=max(self.MIN_BLOCK, len(data) + 1), use_threads=False),
            parse_options=self._options,
        )
        return reader.read_all()

    def _isolate(
        self,
        lines: Sequence[bytes],
        positions: Sequence[int],
        tables: list[pa.Table],
        good: list[int],
        bad: list[tuple[int, str]],
    ) -> None:
        try:
            tables.append(self._parse(lines))
            good.extend(positions)
            return
        except (pa.ArrowInvalid, ValueError) as exc:
            # (Not ArrowNotImplementedError: a type the reader lacks is the
            # writer's fault, not the records'; it fails the write.)
            if len(lines) > 1:
                middle = len(lines) // 2
                self._isolate(lines[:middle], positions[:middle], tables, good, bad)
                self._isolate(lines[middle:], positions[middle:], tables, good, bad)
                return
            error = exc
        # One value alone: it may be pretty-printed (line breaks are only
        # whitespace between JSON tokens).
        line = lines[0].replace(b"\r", b" ").replace(b"\n", b" ")
        try:
            tables.append(self._parse([line]))
            good.append(positions[0])
        except (pa.ArrowInvalid, ValueError) as exc:
            error = exc
            bad.append((positions[0], f"{DOES_NOT_FIT}: {_reason(error)}"))


def _reason(exc: BaseException) -> str:
    first_line = str(exc).split("\n")[0]
    for prefix in ("JSON parse error: ", "C Data interface error: ", "Json error: "):
        first_line = first_line.removeprefix(prefix)
    return first_line


def _not_an_object(value: bytes) -> str:
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        return f"{DOES_NOT_FIT}: {exc}"
    return f"{NOT_AN_OBJECT} (it is {type(parsed).__name__ if parsed is not None else 'null'})"


def _text_column(values: Sequence[bytes | None], as_string: bool) -> tuple[pa.Array, list[tuple[int, str]]]:
    """Raw values as binary or UTF-8 text; values that are not UTF-8 are bad for a string column."""
    array = pa.array(values, pa.binary())
    if not as_string:
        return array, []
    try:
        return array.cast(pa.string()), []
    except pa.ArrowInvalid:
        bad, text = [], []
        for i, value in enumerate(values):
            try:
                text.append(value.decode() if value is not None else None)
            except UnicodeDecodeError as exc:
                bad.append((i, f"value is not UTF-8 text: {exc}"))
                text.append(None)
        return pa.array(text, pa.string()), bad


def _utf8_lossy(values: Sequence[bytes | None]) -> pa.Array:
    array = pa.array(values, pa.binary())
    try:
        return array.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([v.decode("utf-8", "replace") if v is not None else None for v in values], pa.string())


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
        self.fs, self.tmp_path = pafs.FileSystem.from_uri(uri(tmp_dir))
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
        self.value_column = "value"  # string and bytes values: the table's one data column
        self.bad: list[BadRecord] = []
        self.skipped = 0

    def write(self, chunk: RecordChunk) -> None:
        if self.plan is None:
            self._settle(chunk)
        decoded = self._decode(chunk)
        additions = None
        if decoded.records_schema is not None:
            # (outputs[0] writes the first table, whose columns the decoder decodes)
            additions = missing_fields(self.outputs[0].table.schema, decoded.records_schema)
        if additions is not None:
            # New fields (schema evolution): add them to the tables, then
            # decode the chunk again with them. (A field another task added
            # first keeps its type; records that do not fit it are bad.)
            self._open(self.evolve_for(additions))
            decoded = self._decode(chunk)
        if decoded.bad:
            self.bad.extend(
                BadRecord(self.topic, self.partition, chunk.offsets[i], reason) for i, reason in decoded.bad
            )
            if self.rejects is None and self.keep_rejects:
                self.rejects = RawStagingFile(
                    raw_staging_path(
                        self.staging_dir, self.topic, self.partition, self.start, f"-rejects-{self.attempt}"
                    ),
                    self.chunk_bytes,
                )
            if self.rejects is not None:
                self.rejects.write(chunk.take([i for i, _ in decoded.bad]))
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

    def _settle(self, chunk: RecordChunk) -> None:
        plan = self.plan = self.plan_for(chunk.values[:500])
        self._open(plan.tables)
        first = plan.tables[0]
        route_field = self.config.route_field
        if route_field and self.decoder is not None and route_field not in self.decoder.data_schema.names:
            raise ValueError(
                f"iceberg.tables.route-field {self.config.route_field!r} is not a column of {first.target.name}"
            )

    def _open(self, tables: Sequence[TargetTable]) -> None:
        """Decoder and open files for the tables' current schemas (those open until now are closed)."""
        data_fields = [f for f in tables[0].schema.fields if not f.name.startswith("_kafka_")]
        if self.config.value_converter in ("json", "avro"):
            # (Avro values reach the sinks as JSON: the participant decodes them while staging.)
            envelope = self.config.value_converter == "json" and self.config.schemas_enable
            evolve = self.config.evolve_schema and self.config.value_converter == "json" and not envelope
            columns = pa.schema([tables[0].arrow_schema.field(f.name) for f in data_fields])
            self.decoder = JsonDecoder(columns, evolve=evolve, envelope=envelope)
        else:
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
        column, bad = _text_column(chunk.values, as_string=self.config.value_converter == "string")
        bad += [(i, str(e)) for i, e in enumerate(chunk.errors) if e is not None]
        bad_positions = {i for i, _ in bad}
        positions = [i for i in range(len(chunk)) if i not in bad_positions]
        if bad_positions:
            column = column.take(positions)
        return Decoded(pa.table({self.value_column: column}), positions, sorted(bad))

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
                else _utf8_lossy(chunk.keys)
            )
            columns = columns.append_column("_kafka_key", picked(keys))
        return columns

    def _route(self, columns: pa.Table) -> pa.ChunkedArray | None:
        if not self.config.route_field or self.config.route_field not in columns.column_names:
            return None
        return pc.cast(columns.column(self.config.route_field), pa.string())

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
        for closed in self.closed:
            pafs.FileSystem.from_uri(uri(closed.location))[0].delete_file(closed.path)
        self.closed.clear()


def publish_decoded(commit_id: uuid.UUID, staged: StagedPartition) -> list[DataFile]:
    """The Arrow writer's files of one partition under their final names; their temporary directory goes."""
    files = []
    attempt = uuid.uuid4().hex[:8]
    tmp_dirs = set()
    for n, written in enumerate(staged.files):
        files.append(
            publish(
                commit_id, attempt, written.path, n, written.table, written.location, staged, written.partition_values
            )
        )
        tmp_dirs.add((written.location, written.path.rsplit("/", 1)[0]))
    for location, tmp in tmp_dirs:
        fs, _ = pafs.FileSystem.from_uri(uri(location))
        fs.delete_dir(tmp)
    return files
