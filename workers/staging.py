"""Staged records of one partition for one commit, with bounded memory (I7).

Records are buffered in memory up to the sink's ``chunk_bytes`` (at most
``sinkadmin.staging.buffer-bytes``); then the chunk is handed to the
partition's sink and the buffer starts over, so memory does not grow with the
size of the commit. Two sinks exist: a raw staging file that
Spark decodes at the end of the commit, and the Arrow writer
(``sinks.iceberg.arrow_writer``) that decodes each chunk at once and appends it to
the commit's data files.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

import pyarrow as pa
import pyarrow.parquet as pq

STAGING_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.int64()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
        # Set when the record could not be decoded before Spark (e.g. Avro).
        ("error", pa.string()),
    ]
)

# How raw staging files are written. Uncompressed, no dictionaries (but the
# topic's) and no statistics: a file lives for one commit and is read once,
# whole; all three would only cost CPU on both sides (hashing and comparing
# 1 KB values took most of what a record cost). bench/staging_costs.py
# measures these against other encodings (docs/benchmarks.md, "Measurements
# behind the runtime's design").
STAGING_PARQUET_OPTIONS: dict[str, Any] = {
    "compression": "none",
    "use_dictionary": ["topic"],
    "write_statistics": False,
}

Headers = list[tuple[str, bytes | None]]


def staged_headers(
    headers: Sequence[tuple[str, str | bytes | None]] | Mapping[str, str | bytes | None] | None,
) -> Headers | None:
    """A consumed message's headers as the tasks stage them: (name, bytes) pairs, a value librdkafka gives as
    text encoded again; None when it has none."""
    if not headers:
        return None
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    return [(k, v.encode() if isinstance(v, str) else v) for k, v in pairs]


@dataclass
class RecordChunk:
    """Raw records of one partition, in offset order, as plain lists (cheap to append to)."""

    topic: str
    partition: int
    offsets: list[int] = field(default_factory=list)
    timestamps: list[int | None] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    headers: list[Headers | None] = field(default_factory=list)
    errors: list[str | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.offsets)

    def extend(self, other: RecordChunk, first: int, last: int) -> None:
        """Append ``other``'s records [first, last)."""
        whole = first == 0 and last == len(other)
        columns: tuple[tuple[list[Any], list[Any]], ...] = (
            (self.offsets, other.offsets),
            (self.timestamps, other.timestamps),
            (self.keys, other.keys),
            (self.values, other.values),
            (self.headers, other.headers),
            (self.errors, other.errors),
        )
        for mine, theirs in columns:
            mine.extend(theirs if whole else theirs[first:last])

    def take(self, positions: list[int]) -> RecordChunk:
        return RecordChunk(
            self.topic,
            self.partition,
            [self.offsets[i] for i in positions],
            [self.timestamps[i] for i in positions],
            [self.keys[i] for i in positions],
            [self.values[i] for i in positions],
            [self.headers[i] for i in positions] if self.headers else [None] * len(positions),
            [self.errors[i] for i in positions],
        )

    def raw_table(self) -> pa.Table:
        """The records in STAGING_SCHEMA, as Spark and the dead-letter sink read them."""
        n = len(self.offsets)
        headers: list[Any] = [[{"key": k, "value": v} for k, v in h] if h else None for h in self.headers]
        return pa.table(
            [
                pa.array([self.topic] * n, pa.string()),
                pa.array([self.partition] * n, pa.int32()),
                pa.array(self.offsets, pa.int64()),
                pa.array(self.timestamps, pa.int64()),
                pa.array(self.keys, pa.binary()),
                pa.array(self.values, pa.binary()),
                pa.array(headers, STAGING_SCHEMA.field("headers").type),
                pa.array(self.errors, pa.string()),
            ],
            schema=STAGING_SCHEMA,
        )


@dataclass
class StagedFile:
    """A data file the Arrow writer wrote for a commit, under a temporary name until the commit's end is known."""

    table: str
    # The table's location, under which the file is published.
    location: str
    # On the location's filesystem, as pyarrow names it there (no scheme).
    path: str
    records: int
    # Its Iceberg partition (sinks.iceberg.tables.partition_values_json).
    partition_values: str | None = None


@dataclass
class StagedPartition:
    """The result of staging one partition: offsets [start, end) and what they became."""

    topic: str
    partition: int
    start: int
    end: int
    records: int
    # Raw records in STAGING_SCHEMA: all of them for Spark to decode, or
    # only the undecodable ones (for the dead-letter topic) when the Arrow
    # writer decoded the rest.
    path: Path | None
    max_timestamp: int | None
    # Set when the Arrow writer decoded the records: its data files, the
    # records it could not decode, and those written to no table.
    decoded: bool = False
    files: list[StagedFile] = field(default_factory=list)
    bad: list[Any] = field(default_factory=list)
    skipped: int = 0
    # Records the connector's transforms dropped before staging (within [start, end), not staged).
    dropped: int = 0


class ChunkSink(Protocol):
    """Where a partition's buffered records go when the buffer is full."""

    # How many buffered bytes make a chunk for this sink.
    chunk_bytes: int

    def write(self, chunk: RecordChunk) -> None: ...

    def finish(self, staged: StagedPartition) -> StagedPartition:
        """Close what is open and complete the description of the staged partition."""
        ...

    def discard(self) -> None: ...


class RawStagingFile:
    """Raw records in one Parquet file on local storage, for Spark to decode at the commit's end."""

    # The most a partition keeps buffered before spilling, whatever
    # sinkadmin.staging.buffer-bytes says. What is buffered when the commit
    # ends is spilled then, and its write waits for that: at 8 MiB, a 1 s
    # commit of the sink benchmark, less than that a partition, was spilled
    # whole at its END, holding Spark's start back by a large part of the
    # interval. Chunks of 2,000 ~1 KB records cost the same a record to
    # write and to read back as chunks of 8,000 (bench/staging_costs.py
    # --records); 1,000 cost more (docs/benchmarks.md, "Measurements behind
    # the runtime's design").
    SPILL_BYTES = 2 << 20

    def __init__(self, path: Path, chunk_bytes: int) -> None:
        self.path = path
        self.chunk_bytes = min(chunk_bytes, self.SPILL_BYTES)
        self.records = 0
        self._writer: pq.ParquetWriter | None = None

    def write(self, chunk: RecordChunk) -> None:
        if not len(chunk):
            return
        if self._writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(self.path, STAGING_SCHEMA, **STAGING_PARQUET_OPTIONS)
        self._writer.write_table(chunk.raw_table())
        self.records += len(chunk)

    def close(self) -> Path | None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        return self.path if self.records else None

    def finish(self, staged: StagedPartition) -> StagedPartition:
        staged.path = self.close()
        return staged

    def discard(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


@dataclass
class StagingBuffer:
    topic: str
    partition: int
    start: int
    sink: ChunkSink
    _chunk: RecordChunk = field(init=False)
    _buffered_bytes: int = 0
    records: int = 0
    staged_bytes: int = 0
    next_offset: int = -1
    max_timestamp: int | None = None
    # Records consumed and not staged: the connector's transforms dropped them.
    dropped: int = 0

    def __post_init__(self) -> None:
        self.next_offset = self.start
        self._chunk = RecordChunk(self.topic, self.partition)

    def extend(self, run: RecordChunk) -> None:
        """Append a run of this partition's records, in offset order, after ``next_offset``.

        Whole runs at a time (not record by record): the per-record Python
        work of staging is what limits a task's rate. A run is cut where the
        sink's chunk fills, so chunks keep about their size whatever the
        batch size.
        """
        n = len(run)
        if not n:
            return
        size = sum(map(len, filter(None, run.values))) + sum(map(len, filter(None, run.keys))) + 64 * n
        stamps = [t for t in run.timestamps if t is not None] if None in run.timestamps else run.timestamps
        latest = max(cast(list[int], stamps), default=None)
        if latest is not None and (self.max_timestamp is None or latest > self.max_timestamp):
            self.max_timestamp = latest
        self.records += n
        self.staged_bytes += size
        self.next_offset = run.offsets[-1] + 1
        # Where to cut is reckoned with the run's mean record size: exact
        # sizes per record would cost a Python step per record, and a chunk
        # only needs to be about the sink's size.
        mean = size / n
        first = 0
        while first < n:
            room = self.sink.chunk_bytes - self._buffered_bytes
            last = min(n, first + max(1, math.ceil(room / mean)))
            self._chunk.extend(run, first, last)
            self._buffered_bytes += round((last - first) * mean)
            if self._buffered_bytes >= self.sink.chunk_bytes:
                self.spill()
            first = last

    def skip(self, records: int, next_offset: int) -> None:
        """``records`` consumed up to ``next_offset`` were dropped (by the transforms) and not staged."""
        self.dropped += records
        self.next_offset = max(self.next_offset, next_offset)

    def spill(self) -> None:
        if not len(self._chunk):
            return
        chunk, self._chunk = self._chunk, RecordChunk(self.topic, self.partition)
        self._buffered_bytes = 0
        self.sink.write(chunk)

    def finish(self) -> StagedPartition:
        """Hand over what is buffered and describe what is staged: offsets [start, next_offset)."""
        self.spill()
        return self.sink.finish(
            StagedPartition(
                topic=self.topic,
                partition=self.partition,
                start=self.start,
                end=self.next_offset,
                records=self.records,
                path=None,
                max_timestamp=self.max_timestamp,
                dropped=self.dropped,
            )
        )

    def discard(self) -> None:
        self._chunk = RecordChunk(self.topic, self.partition)
        self.sink.discard()


def raw_staging_path(directory: Path, topic: str, partition: int, start: int, suffix: str = "") -> Path:
    return directory / f"{topic}+{partition}+{start}{suffix}.parquet"


def clear_directory(directory: Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)
