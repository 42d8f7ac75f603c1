"""Control-topic events, Avro-encoded (fastavro) with a version field.

One record type with optional fields carries all the events, so the schema
evolves by adding fields with defaults at the end of the record: events are
written without their schema, so a reader of version N decodes what a writer
of version N+1 sends and ignores the trailing fields it does not know. A
field of a nested record (a data file's, say) therefore goes at the end of
the event too, keyed by what it belongs to. An event type is added at the
end of the enum: an older reader cannot decode it and skips it, as it must,
since it would not know what to do with it.
"""

from __future__ import annotations

import io
import uuid
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

import fastavro

SCHEMA_VERSION = 10


class EventType(StrEnum):
    START_COMMIT = "START_COMMIT"
    END_COMMIT = "END_COMMIT"
    WRITE_STATUS = "WRITE_STATUS"
    ACK_COMMIT = "ACK_COMMIT"
    # Version 3: what a participant has staged for the open commit so far, so
    # the coordinator can end it before its interval (DESIGN step 2).
    STAGING_PROGRESS = "STAGING_PROGRESS"


_SCHEMA = fastavro.parse_schema(
    {
        "type": "record",
        "name": "ControlEvent",
        "namespace": "sinkadmin.control",
        "fields": [
            {"name": "version", "type": "int"},
            {"name": "type", "type": {"type": "enum", "name": "EventType", "symbols": [e.value for e in EventType]}},
            {"name": "connector", "type": "string"},
            {"name": "commit_id", "type": "string"},
            {"name": "epoch", "type": "long"},
            {
                "name": "offsets",
                "type": {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "StartOffset",
                        "fields": [
                            {"name": "topic", "type": "string"},
                            {"name": "partition", "type": "int"},
                            {"name": "offset", "type": "long"},
                        ],
                    },
                },
                "default": [],
            },
            {"name": "task_index", "type": ["null", "int"], "default": None},
            {"name": "task_epoch", "type": ["null", "long"], "default": None},
            {
                "name": "partitions",
                "type": {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "PartitionStatus",
                        "fields": [
                            {"name": "topic", "type": "string"},
                            {"name": "partition", "type": "int"},
                            {"name": "start", "type": "long"},
                            {"name": "end", "type": "long"},
                            {"name": "records", "type": "long"},
                            {"name": "dead_lettered", "type": "long", "default": 0},
                            {"name": "skipped", "type": "long", "default": 0},
                            {"name": "max_timestamp", "type": ["null", "long"], "default": None},
                        ],
                    },
                },
                "default": [],
            },
            {
                "name": "files",
                "type": {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "DataFile",
                        "fields": [
                            {"name": "table", "type": "string"},
                            {"name": "path", "type": "string"},
                            {"name": "topic", "type": "string"},
                            {"name": "partition", "type": "int"},
                            {"name": "records", "type": "long"},
                            {"name": "bytes", "type": "long"},
                        ],
                    },
                },
                "default": [],
            },
            {"name": "error", "type": ["null", "string"], "default": None},
            # True when the error is passing (storage, Spark): the commit is
            # retried; false when a record cannot be converted.
            {"name": "retriable", "type": "boolean", "default": False},
            {"name": "snapshot_ids", "type": {"type": "map", "values": "long"}, "default": {}},
            # Version 2: each data file's Iceberg partition (JSON), by path.
            {"name": "file_partitions", "type": {"type": "map", "values": "string"}, "default": {}},
            # Version 3, STAGING_PROGRESS: a partition's staging is full (it
            # is paused), so the commit should end now.
            {"name": "end_requested", "type": "boolean", "default": False},
            # Version 4, WRITE_STATUS: the error is a service the sink writes
            # to that cannot be reached (the catalog): retried for as long as
            # it lasts, shown as a warning, never failing the connector.
            {"name": "unavailable", "type": "boolean", "default": False},
            # Version 5: each data file's temporary path, by final path, for
            # sinks whose commit moves the files to their names (files sink).
            {"name": "file_sources", "type": {"type": "map", "values": "string"}, "default": {}},
            # Version 6, STAGING_PROGRESS with end_requested: why the task
            # asks for the END, as the ledger records it (connectors.models.CommitEnd;
            # an older task's request is "staging-full") and in words.
            {"name": "end_cause", "type": ["null", "string"], "default": None},
            {"name": "end_reason", "type": ["null", "string"], "default": None},
            # Version 7: WRITE_STATUS, how long the task's write took;
            # ACK_COMMIT, the longest of the commit's writes, which the tasks
            # size their next commits by (workers.participant).
            {"name": "write_seconds", "type": ["null", "double"], "default": None},
            # Version 8, START_COMMIT: the previous commit ended before its
            # interval because a task held all it may stage (a backlog), so
            # each task says when it has read its partitions to their ends
            # (STAGING_PROGRESS, end_cause "caught-up"), and the commit ends
            # once all have, instead of waiting out the interval.
            {"name": "catch_up", "type": "boolean", "default": False},
            # Version 9, START_COMMIT: each table the coordinator has
            # committed to, as its last commit there left it (TableVersion):
            # its version and its metadata file, by table name.
            {"name": "table_versions", "type": {"type": "map", "values": "string"}, "default": {}},
            {"name": "table_metadata", "type": {"type": "map", "values": "string"}, "default": {}},
            # Version 10: each data file's first and last record offsets, for sinks that tag their files by
            # them (the files sink's S3 object tags): [first, last] per file, in the order of ``files`` ([]
            # where unknown), or none at all when no file's are known.
            {
                "name": "file_offsets",
                "type": {"type": "array", "items": {"type": "array", "items": "long"}},
                "default": [],
            },
        ],
    }
)


@dataclass(frozen=True)
class DataFile:
    table: str
    path: str
    topic: str
    partition: int
    records: int
    bytes: int
    # The file's Iceberg partition (sinks.iceberg.tables.partition_values_json);
    # None when the committer reads it from the file's bounds.
    partition_values: str | None = None
    # Where the file was written, if the commit moves it to ``path`` (the files
    # sink); None when it is written under its final name.
    staged_path: str | None = None
    # The offsets of the file's first and last records (the files sink's), if known.
    first_offset: int | None = None
    last_offset: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "path": self.path,
            "topic": self.topic,
            "partition": self.partition,
            "records": self.records,
            "bytes": self.bytes,
            "partition_values": self.partition_values,
            "staged_path": self.staged_path,
            "first_offset": self.first_offset,
            "last_offset": self.last_offset,
        }


@dataclass(frozen=True)
class TableVersion:
    """A table as a commit left it: what tasks write by (``sinks.iceberg.tables.table_version``:
    identity, schema, spec, location) and the metadata file the commit made current.

    A task whose copy of the table has ``version``, while the catalog still
    points at ``metadata_location``, writes with its copy: nothing has
    changed the table since that commit (``sinks.iceberg.writer.TableWriter``).
    """

    version: str
    metadata_location: str


@dataclass(frozen=True)
class PartitionStatus:
    """What one participant wrote for one commit: offsets [start, end)."""

    topic: str
    partition: int
    start: int
    end: int
    records: int
    dead_lettered: int = 0
    skipped: int = 0
    max_timestamp: int | None = None


@dataclass(frozen=True)
class ControlEvent:
    type: EventType
    connector: str
    commit_id: uuid.UUID
    epoch: int
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    task_index: int | None = None
    task_epoch: int | None = None
    partitions: tuple[PartitionStatus, ...] = ()
    files: tuple[DataFile, ...] = ()
    error: str | None = None
    retriable: bool = False
    snapshot_ids: dict[str, int] = field(default_factory=dict)
    end_requested: bool = False
    unavailable: bool = False
    end_cause: str | None = None
    end_reason: str | None = None
    write_seconds: float | None = None
    catch_up: bool = False
    table_versions: dict[str, TableVersion] = field(default_factory=dict)

    def encode(self) -> bytes:
        record = {
            "version": SCHEMA_VERSION,
            "type": self.type.value,
            "connector": self.connector,
            "commit_id": str(self.commit_id),
            "epoch": self.epoch,
            "offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(self.offsets.items())],
            "task_index": self.task_index,
            "task_epoch": self.task_epoch,
            "partitions": [vars(p) for p in self.partitions],
            "files": [f.as_dict() for f in self.files],
            "error": self.error,
            "retriable": self.retriable,
            "snapshot_ids": self.snapshot_ids,
            "file_partitions": {f.path: f.partition_values for f in self.files if f.partition_values is not None},
            "end_requested": self.end_requested,
            "unavailable": self.unavailable,
            "file_sources": {f.path: f.staged_path for f in self.files if f.staged_path is not None},
            "end_cause": self.end_cause,
            "end_reason": self.end_reason,
            "write_seconds": self.write_seconds,
            "catch_up": self.catch_up,
            "table_versions": {name: t.version for name, t in self.table_versions.items()},
            "table_metadata": {name: t.metadata_location for name, t in self.table_versions.items()},
            "file_offsets": [
                [f.first_offset, f.last_offset] if f.first_offset is not None and f.last_offset is not None else []
                for f in self.files
            ]
            if any(f.first_offset is not None for f in self.files)
            else [],
        }
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, _SCHEMA, record)
        return buffer.getvalue()

    @classmethod
    def decode(cls, payload: bytes) -> ControlEvent:
        record: Any = fastavro.schemaless_reader(io.BytesIO(payload), _SCHEMA, _SCHEMA)
        if record["version"] > SCHEMA_VERSION:
            # Written by a newer sinkadmin: the fields we know are still valid.
            pass
        return cls(
            type=EventType(record["type"]),
            connector=record["connector"],
            commit_id=uuid.UUID(record["commit_id"]),
            epoch=record["epoch"],
            offsets={(o["topic"], o["partition"]): o["offset"] for o in record["offsets"]},
            task_index=record["task_index"],
            task_epoch=record["task_epoch"],
            partitions=tuple(PartitionStatus(**p) for p in record["partitions"]),
            files=tuple(
                DataFile(
                    **f,
                    partition_values=record["file_partitions"].get(f["path"]),
                    staged_path=record["file_sources"].get(f["path"]),
                    first_offset=offsets[0] if offsets else None,
                    last_offset=offsets[1] if offsets else None,
                )
                for f, offsets in zip(
                    record["files"], _aligned(record["file_offsets"], len(record["files"])), strict=True
                )
            ),
            error=record["error"],
            retriable=record["retriable"],
            snapshot_ids=dict(record["snapshot_ids"]),
            end_requested=record["end_requested"],
            unavailable=record["unavailable"],
            end_cause=record["end_cause"],
            end_reason=record["end_reason"],
            write_seconds=record["write_seconds"],
            catch_up=record["catch_up"],
            table_versions={
                name: TableVersion(version, record["table_metadata"][name])
                for name, version in record["table_versions"].items()
            },
        )


def _aligned(offsets: list[list[int]], files: int) -> list[list[int]]:
    """The files' [first, last] offsets, one per file: none known ([] each) unless the list is one per file."""
    return offsets if len(offsets) == files else [[]] * files


class ControlPort(Protocol):
    """The control channel as the coordinator and participants use it (``workers.kafka.ControlChannel``)."""

    def send(self, event: ControlEvent) -> int:
        """Send and wait for the broker; returns the event's offset on the control topic."""
        ...

    def poll(self, timeout: float, connector: str) -> list[tuple[int, ControlEvent]]:
        """Events of ``connector`` since the last poll, with their offsets."""
        ...

    def end_offset(self) -> int:
        """The offset the next event sent to the control topic will have (at least)."""
        ...


def start_commit(
    connector: str,
    commit_id: uuid.UUID,
    epoch: int,
    offsets: dict[tuple[str, int], int],
    catch_up: bool = False,
    table_versions: dict[str, TableVersion] | None = None,
) -> ControlEvent:
    return ControlEvent(
        EventType.START_COMMIT,
        connector,
        commit_id,
        epoch,
        offsets=offsets,
        catch_up=catch_up,
        table_versions=table_versions or {},
    )


def end_commit(connector: str, commit_id: uuid.UUID, epoch: int) -> ControlEvent:
    return ControlEvent(EventType.END_COMMIT, connector, commit_id, epoch)


def ack_commit(
    connector: str,
    commit_id: uuid.UUID,
    epoch: int,
    snapshot_ids: dict[str, int],
    write_seconds: float | None = None,
) -> ControlEvent:
    return ControlEvent(
        EventType.ACK_COMMIT, connector, commit_id, epoch, snapshot_ids=snapshot_ids, write_seconds=write_seconds
    )
