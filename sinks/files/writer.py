"""The files sink's data plane: a commit's staged records become files under temporary names.

One function decodes one staged partition (``FilesJob.decode``): Spark's
Python workers run it (the spark data plane, one Spark job per task and
commit) or the participant does (arrow). Records are decoded with the same
JSON decoder as the Iceberg sink, so the same records are bad on every sink
and plane; each record then goes to its directory (the partitioner), and
files are closed when ``flush.size`` or ``rotate.interval.ms`` says, when a
record brings a new schema, and at the end of the commit. Each file is
written under ``<topics.dir>/+tmp/<commit>/...`` and named for its final
place (``FilesSettings.file_name``: ``<topic>+<partition>+<first>+<last>.<ext>``,
or the S3 sink's ``<topic>+<partition>+<first>.<ext>``), which the
coordinator's commit moves it to (``sinks.files.committer``).
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from connectors.config import SinkConfig
from sinks.files.layout import default_directory, field_directory
from sinks.files.settings import FilesSettings
from workers.events import DataFile
from workers.failpoints import failpoint
from workers.json_decoder import Decoded
from workers.record_runs import RecordRuns
from workers.spark_writer import read_staged_chunks
from workers.staging import StagedPartition
from workers.writes import BadRecord, RawStagedWriter, avro_schema, bad_outcome, bad_records, sample_values

CHUNK_BYTES = 1 << 20
TMP_DIR = "+tmp"


def tmp_root(settings: FilesSettings, root: str, commit_id: uuid.UUID | str) -> str:
    """Where a commit's files are written before its commit moves them."""
    return f"{settings.topics_path(root)}/{TMP_DIR}/{commit_id}"


def topic_root(settings: FilesSettings, root: str, topic: str) -> str:
    return f"{settings.topics_path(root)}/{topic}"


def _safe(value: str) -> str:
    # A field value names a directory: a separator or a parent reference in
    # it must not make another one (Hive's escaping of partition values), nor
    # may a NUL, which no file system, nor PostgreSQL's jsonb of the commit's
    # files, holds.
    return (
        value.replace("%", "%25").replace("/", "%2F").replace("\\", "%5C").replace("\x00", "%00")
        if value not in (".", "..")
        else "%2E" * len(value)
    )


@dataclass
class _OpenFile:
    directory: str
    first: int
    base_ts: int | None
    tmp_path: str
    last: int = -1
    records: int = 0
    writer: Any = None
    pending: list[pa.Table] = field(default_factory=list)
    pending_bytes: int = 0


class PartitionFiles(RecordRuns):
    """The open files of one staged partition's records, one per directory, in offset order."""

    def __init__(
        self,
        config: SinkConfig,
        settings: FilesSettings,
        commit_id: uuid.UUID,
        topic: str,
        partition: int,
        value_schemas: Sequence[str] = (),
    ) -> None:
        super().__init__(config, value_schemas, ignore_nulls=settings.null_values == "ignore")
        self.settings = settings
        self.commit_id = commit_id
        self.topic = topic
        self.partition = partition
        self.fs, self.root = settings.storage.filesystem()
        self.attempt = uuid.uuid4().hex[:8]
        self.open: dict[str, _OpenFile] = {}
        self.closed: list[DataFile] = []
        self.bad: list[BadRecord] = []
        self.skipped = 0
        self.row_group_bytes = config.buffer_bytes
        self._made: set[str] = set()

    def schema_changing(self) -> None:
        # Records with a new schema start new files, as the Confluent sinks do.
        self.close_all()

    # Placing.

    def write(
        self,
        offsets: Sequence[int],
        timestamps: Sequence[int | None],
        values: Sequence[bytes | None],
        errors: Sequence[str | None],
    ) -> None:
        if self.schema is None:
            self.settle(sample_values(values, errors))
        done = 0
        while done < len(values):
            decoded, count = self.decode(values[done:], errors[done:])
            run = slice(done, done + count)
            self._write_decoded(offsets[run], timestamps[run], values[run], errors[run], decoded)
            done += count

    def _write_decoded(
        self,
        offsets: Sequence[int],
        timestamps: Sequence[int | None],
        values: Sequence[bytes | None],
        errors: Sequence[str | None],
        decoded: Decoded,
    ) -> None:
        # The sink's own refusals: a null value it must fail on, a record it cannot place.
        refusals: list[tuple[int, str]] = []
        if self.settings.null_values == "fail" and self.decoder is not None:
            refusals += [
                (i, "null value (a tombstone) with behavior.on.null.values=fail")
                for i, v in enumerate(values)
                if v is None and errors[i] is None
            ]
        else:
            self.skipped += decoded.skipped
        rows, positions = decoded.columns, decoded.positions
        directories, times, refused = self._place(rows, positions, timestamps)
        if refused:
            refusals += refused
            keep = [n for n in range(len(positions)) if directories[n] is not None]
            rows = rows.take(pa.array(keep, pa.int64()))
            positions = [positions[n] for n in keep]
            times = [times[n] for n in keep] if times is not None else None
            directories = [directories[n] for n in keep]
        self.bad.extend(bad_records(self.topic, self.partition, offsets, decoded.bad, refusals))
        if not positions:
            return
        by_directory: dict[str, list[int]] = {}
        for n, directory in enumerate(directories):
            assert directory is not None
            by_directory.setdefault(directory, []).append(n)
        record_offsets = np.asarray([offsets[i] for i in positions], dtype=np.int64)
        for directory, picks in by_directory.items():
            self._append(directory, rows, np.asarray(picks, dtype=np.int64), record_offsets, times, values, positions)

    def _place(
        self, rows: pa.Table, positions: Sequence[int], timestamps: Sequence[int | None]
    ) -> tuple[list[str | None], list[int] | None, list[tuple[int, str]]]:
        """Each decoded record's directory (None: refused, with why), and its time if the layout uses one."""
        s = self.settings
        n = len(positions)
        needs_time = s.time is not None or s.rotate_interval_ms > 0
        times: list[int] | None = None
        refused: list[tuple[int, str]] = []
        if needs_time:
            times, why = self._times(rows, positions, timestamps)
            refused += why
        if s.partitioner == "field":
            columns = [self._field(rows, name) for name in s.partition_fields]
            directories: list[str | None] = []
            for j in range(n):
                values = tuple(c[j] for c in columns)
                missing = [name for name, v in zip(s.partition_fields, values, strict=True) if v is None]
                if missing:
                    refused.append((positions[j], f"partition field {missing[0]!r} is missing or null"))
                    directories.append(None)
                else:
                    directories.append(
                        field_directory(
                            s.partition_fields,
                            tuple(_safe(str(v)) if isinstance(v, str) else v for v in values),
                            s.directory_delim,
                        )
                    )
        elif s.time is not None:
            assert times is not None
            spans: dict[int, str] = {}
            directories = []
            for t in times:
                if t < 0:
                    directories.append(None)
                    continue
                start = s.time.bucket(t)
                if start not in spans:
                    spans[start] = s.time.directory(start).replace("/", s.directory_delim)
                directories.append(spans[start])
        else:
            directories = [default_directory(self.partition)] * n
        if times is not None:
            refused_positions = {p for p, _ in refused}
            directories = [None if positions[j] in refused_positions else d for j, d in enumerate(directories)]
        return directories, times, sorted(set(refused))

    def _times(
        self, rows: pa.Table, positions: Sequence[int], timestamps: Sequence[int | None]
    ) -> tuple[list[int], list[tuple[int, str]]]:
        s = self.settings
        if s.timestamp_extractor == "Wallclock":
            return [int(time.time() * 1000)] * len(positions), []
        if s.timestamp_extractor == "Record":
            found = [timestamps[i] for i in positions]
            refused = [
                (positions[j], "the record has no timestamp (timestamp.extractor=Record)")
                for j, t in enumerate(found)
                if t is None or t < 0
            ]
            return [t if t is not None and t >= 0 else -1 for t in found], refused
        values = self._field(rows, s.timestamp_field, as_millis=True)
        refused = []
        times = []
        for j, v in enumerate(values):
            if not isinstance(v, int) or v < 0:
                refused.append((positions[j], f"timestamp field {s.timestamp_field!r} is missing or not a time"))
                times.append(-1)
            else:
                times.append(v)
        return times, refused

    @staticmethod
    def _field(rows: pa.Table, name: str, as_millis: bool = False) -> list[Any]:
        """A (possibly nested, a.b) field's values per row; None where missing."""
        head, *rest = name.split(".")
        if head not in rows.column_names:
            return [None] * rows.num_rows
        column: Any = (
            rows.column(head).combine_chunks() if rows.num_rows else pa.array([], rows.schema.field(head).type)
        )
        for part in rest:
            if not pa.types.is_struct(column.type) or column.type.get_field_index(part) < 0:
                return [None] * rows.num_rows
            column = pc.struct_field(column, part)
        if as_millis:
            column = _as_millis(column)
        return column.to_pylist()

    # Files.

    def _append(
        self,
        directory: str,
        rows: pa.Table,
        picks: np.ndarray,
        offsets: np.ndarray,
        times: list[int] | None,
        values: Sequence[bytes | None],
        positions: Sequence[int],
    ) -> None:
        s = self.settings
        start = 0
        while start < len(picks):
            opened = self.open.get(directory)
            first_time = times[picks[start]] if times is not None else None
            if opened is None:
                opened = self._open_file(directory, int(offsets[picks[start]]), first_time)
            room = s.flush_size - opened.records
            end = min(len(picks), start + room)
            if s.rotate_interval_ms > 0 and times is not None and opened.base_ts is not None:
                limit = opened.base_ts + s.rotate_interval_ms
                late = np.nonzero(np.asarray([times[p] for p in picks[start:end]], dtype=np.int64) >= limit)[0]
                if len(late):
                    end = start + int(late[0])
            if end > start:
                taken = picks[start:end]
                self._write_rows(opened, rows.take(pa.array(taken)), [values[positions[p]] for p in taken])
                opened.records += len(taken)
                opened.last = int(offsets[taken[-1]])
            if opened.records >= s.flush_size or end < len(picks):
                # Full, or the next record is past the rotation interval.
                self._close(directory)
            start = end

    def _open_file(self, directory: str, first: int, base_ts: int | None) -> _OpenFile:
        s = self.settings
        folder = f"{tmp_root(s, self.root, self.commit_id)}/{self.topic}/{directory}"
        if folder not in self._made:
            # Local and HDFS stores need the directory; on S3 this creates nothing (sinks.files.s3).
            self.fs.create_dir(folder, recursive=True)
            self._made.add(folder)
        name = f"{self.topic}{s.file_delim}{self.partition}{s.file_delim}{first:0{s.pad_width}d}-{self.attempt}.{s.extension}"
        opened = self.open[directory] = _OpenFile(directory, first, base_ts, f"{folder}/{name}")
        return opened

    def _write_rows(self, opened: _OpenFile, rows: pa.Table, values: list[bytes | None]) -> None:
        fmt = self.settings.format
        if fmt == "json":
            if opened.writer is None:
                stream = self.fs.open_output_stream(opened.tmp_path, compression=None)
                opened.writer = _GzipFile(stream, self.settings.compression_level) if self.settings.gzipped else stream
            opened.writer.write(b"".join(self._json_line(v) for v in values))
            return
        if fmt == "avro":
            if opened.writer is None:
                opened.writer = _AvroFile(
                    self.fs.open_output_stream(opened.tmp_path, compression=None), rows.schema, self.settings.avro_codec
                )
            opened.writer.write(rows)
            return
        opened.pending.append(rows)
        opened.pending_bytes += rows.nbytes
        if opened.pending_bytes >= self.row_group_bytes:
            self._flush_parquet(opened)

    def _json_line(self, value: bytes | None) -> bytes:
        # The record's value as Kafka Connect's JsonConverter (schemas.enable=false) writes it.
        cfg = self.config
        if value is None:
            return b"null\n"
        if cfg.value_converter == "string":
            return json.dumps(value.decode("utf-8", "replace")).encode() + b"\n"
        if cfg.value_converter == "bytearray":
            return json.dumps(base64.b64encode(value).decode()).encode() + b"\n"
        if cfg.value_converter == "json" and cfg.schemas_enable:
            return json.dumps(json.loads(value)["payload"], separators=(",", ":")).encode() + b"\n"
        return value.strip().replace(b"\n", b" ") + b"\n"

    def _flush_parquet(self, opened: _OpenFile) -> None:
        if not opened.pending:
            return
        rows = pa.concat_tables(opened.pending, promote_options="none")
        if opened.writer is None:
            codec = self.settings.parquet_codec
            opened.writer = pq.ParquetWriter(
                opened.tmp_path,
                rows.schema,
                compression="none" if codec in ("none", "uncompressed") else codec,
                filesystem=self.fs,
            )
        opened.writer.write_table(rows, row_group_size=rows.num_rows)
        opened.pending, opened.pending_bytes = [], 0

    def _close(self, directory: str) -> None:
        opened = self.open.pop(directory)
        if self.settings.format == "parquet":
            self._flush_parquet(opened)
        failpoint("files.before_close")  # (a test's process dies here: a file written, not finished)
        if opened.writer is not None:
            opened.writer.close()
        s = self.settings
        name = s.file_name(self.topic, self.partition, opened.first, opened.last)
        final = f"{topic_root(s, self.root, self.topic)}/{directory}/{name}"
        self.closed.append(
            DataFile(
                table=self.topic,
                path=s.storage.uri(final),
                topic=self.topic,
                partition=self.partition,
                records=opened.records,
                bytes=self.fs.get_file_info(opened.tmp_path).size,
                partition_values=directory,
                staged_path=opened.tmp_path,
                first_offset=opened.first,
                last_offset=opened.last,
            )
        )

    def close_all(self) -> None:
        for directory in list(self.open):
            self._close(directory)

    def discard(self) -> None:
        for opened in self.open.values():
            if opened.writer is not None:
                opened.writer.close()
                self.fs.delete_file(opened.tmp_path)
        self.open.clear()
        for written in self.closed:
            if written.staged_path:
                self.fs.delete_file(written.staged_path)
        self.closed.clear()


def _as_millis(column: pa.Array) -> pa.Array:
    """A time field as epoch milliseconds: numbers as they are, times and ISO-8601 texts converted."""
    if pa.types.is_integer(column.type):
        return column.cast(pa.int64())
    if pa.types.is_floating(column.type):
        return pc.cast(pc.floor(column), pa.int64(), safe=False)
    if pa.types.is_timestamp(column.type):
        return pc.cast(column.cast(pa.timestamp("ms", tz=column.type.tz)), pa.int64())
    if pa.types.is_date(column.type):
        return pc.cast(column.cast(pa.timestamp("ms")), pa.int64())
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        parsed = []
        for text in column.to_pylist():
            try:
                parsed.append(_iso_millis(text) if text is not None else None)
            except ValueError:
                parsed.append(None)
        return pa.array(parsed, pa.int64())
    return pa.nulls(len(column), pa.int64())


def _iso_millis(text: str) -> int:
    from datetime import UTC, datetime

    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


class _GzipFile:
    """A gzip stream written to a file (s3.compression.type=gzip), as the S3 sink writes JSON files: one gzip
    member, at ``level`` (-1: zlib's default), its header's time left at 0 so that a file's bytes depend on its
    records only."""

    def __init__(self, stream: Any, level: int) -> None:
        import gzip

        self.stream = stream
        self.gzip = gzip.GzipFile(fileobj=stream, mode="wb", compresslevel=level, mtime=0)

    def write(self, data: bytes) -> None:
        self.gzip.write(data)

    def close(self) -> None:
        # (Closing the gzip stream writes its trailer; the file under it is closed apart.)
        self.gzip.close()
        self.stream.close()


class _AvroFile:
    """An Avro object container file written record by record (fastavro), its schema from the columns'."""

    def __init__(self, stream: Any, schema: pa.Schema, codec: str) -> None:
        import fastavro

        self.stream = stream
        self.schema = fastavro.parse_schema(avro_schema(schema))
        self.writer = fastavro.write.Writer(stream, self.schema, codec=codec)

    def write(self, rows: pa.Table) -> None:
        for record in rows.to_pylist():
            self.writer.write(record)

    def close(self) -> None:
        self.writer.flush()
        self.stream.close()


@dataclass(frozen=True)
class FilesJob:
    """A task's share of one commit for the files sink (pickled to Spark's Python workers)."""

    config: SinkConfig
    commit_id: uuid.UUID
    staged: tuple[StagedPartition, ...] = ()
    # The registry schemas (Avro, as text) the task's values were decoded with.
    value_schemas: tuple[str, ...] = ()

    def decode(self, staged: StagedPartition) -> dict[str, Any]:
        assert staged.path is not None
        failpoint("executor.decode")  # (a test's executor dies or stalls here: mid-write)
        files = PartitionFiles(
            self.config, self.config.settings, self.commit_id, staged.topic, staged.partition, self.value_schemas
        )
        try:
            for chunk in read_staged_chunks(staged.path, CHUNK_BYTES):
                files.write(chunk.offsets, chunk.timestamps, chunk.values, chunk.errors)
            files.close_all()
        except BaseException:
            files.discard()
            raise
        return {
            "files": [f.as_dict() for f in files.closed],
            "bad": bad_outcome(files.bad),
            "skipped": files.skipped,
        }


class FilesWriter(RawStagedWriter):
    """The participants' WritePort for the files sink: records are staged raw, and written at the commit's end."""

    def unavailable(self, exc: BaseException) -> str | None:
        from sinks.files.committer import storage_outage

        return storage_outage(exc, self.config.settings)

    def job(
        self, commit_id: uuid.UUID, staged: tuple[StagedPartition, ...], value_schemas: tuple[str, ...]
    ) -> FilesJob:
        return FilesJob(self.config, commit_id, staged, value_schemas)
