"""Staged records of one partition for one commit, with bounded memory (I7).

Records are buffered in memory up to ``buffer_bytes`` and then spilled to a
Parquet file on local storage that Spark can read; memory does not grow with
the size of the commit. The raw key and value are staged as received: Spark
does the decoding.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

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


@dataclass
class StagedPartition:
    """The result of staging: a file Spark reads, and the offsets it covers."""

    topic: str
    partition: int
    start: int
    end: int
    records: int
    path: Path | None
    max_timestamp: int | None


@dataclass
class StagingBuffer:
    topic: str
    partition: int
    start: int
    directory: Path
    buffer_bytes: int
    _columns: dict[str, list[object]] = field(default_factory=lambda: {n: [] for n in STAGING_SCHEMA.names})
    _buffered_bytes: int = 0
    _writer: pq.ParquetWriter | None = None
    records: int = 0
    staged_bytes: int = 0
    next_offset: int = -1
    max_timestamp: int | None = None

    def __post_init__(self) -> None:
        self.next_offset = self.start

    @property
    def path(self) -> Path:
        return self.directory / f"{self.topic}+{self.partition}+{self.start}.parquet"

    def add(
        self,
        offset: int,
        timestamp: int | None,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes | None]] | None,
        error: str | None = None,
    ) -> None:
        cols = self._columns
        cols["topic"].append(self.topic)
        cols["partition"].append(self.partition)
        cols["offset"].append(offset)
        cols["timestamp"].append(timestamp)
        cols["key"].append(key)
        cols["value"].append(value)
        cols["headers"].append([{"key": k, "value": v} for k, v in headers] if headers else None)
        cols["error"].append(error)
        size = len(value or b"") + len(key or b"") + 64
        self._buffered_bytes += size
        self.staged_bytes += size
        self.records += 1
        self.next_offset = offset + 1
        if timestamp is not None and (self.max_timestamp is None or timestamp > self.max_timestamp):
            self.max_timestamp = timestamp
        if self._buffered_bytes >= self.buffer_bytes:
            self.spill()

    def spill(self) -> None:
        if not self._columns["offset"]:
            return
        table = pa.table(self._columns, schema=STAGING_SCHEMA)
        if self._writer is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            # Uncompressed: the file lives for one commit and Spark reads it
            # once; compression would only cost CPU on both sides.
            self._writer = pq.ParquetWriter(self.path, STAGING_SCHEMA, compression="none")
        self._writer.write_table(table)
        self._columns = {n: [] for n in STAGING_SCHEMA.names}
        self._buffered_bytes = 0

    def finish(self) -> StagedPartition:
        """Flush to disk and describe what is staged: offsets [start, next_offset)."""
        self.spill()
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        return StagedPartition(
            topic=self.topic,
            partition=self.partition,
            start=self.start,
            end=self.next_offset,
            records=self.records,
            path=self.path if self.records else None,
            max_timestamp=self.max_timestamp,
        )

    def discard(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self.path.unlink(missing_ok=True)


def clear_directory(directory: Path) -> None:
    shutil.rmtree(directory, ignore_errors=True)
