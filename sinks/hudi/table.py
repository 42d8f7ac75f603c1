"""Apache Hudi Copy-on-Write tables on a pyarrow filesystem, written from the format itself.

No Hudi writer runs in Python, so the on-disk format is written here as Hudi
0.x lays it out and its readers (hudi-rs among them) read it: table version 6,
timeline layout 1.

- ``.hoodie/hoodie.properties`` names the table, its record key, partition
  and precombine fields.
- A commit is an instant ``yyyyMMddHHmmssSSS`` (UTC) on the timeline:
  ``<instant>.commit.requested`` and ``<instant>.inflight`` when it starts,
  ``<instant>.commit`` (HoodieCommitMetadata as JSON) when it is complete.
  Readers take base files of completed instants only.
- Data are base files ``<fileId>_<writeToken>_<instant>.parquet`` with the
  five ``_hoodie_*`` meta columns. Copy-on-Write: a commit that touches a file
  group writes a new version of its whole base file (old rows merged with the
  new ones); the newest completed version is the file group's content.

Here each partition path has one file group, rewritten by every commit that
touches it: correct and simple, at the price of write amplification on large
partitions (file sizing comes with the sink).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from workers.writes import avro_schema

TABLE_VERSION = 6
TIMELINE_LAYOUT_VERSION = 1
META_COLUMNS = (
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_record_key",
    "_hoodie_partition_path",
    "_hoodie_file_name",
)
HOODIE = ".hoodie"


@dataclass(frozen=True)
class HudiTableSpec:
    """What ``hoodie.properties`` says of a table, in the Hudi Kafka Connect sink's terms."""

    name: str
    record_key_fields: tuple[str, ...]
    partition_fields: tuple[str, ...] = ()
    precombine_field: str | None = None
    hive_style_partitioning: bool = False

    def properties(self) -> dict[str, str]:
        found = {
            "hoodie.table.name": self.name,
            "hoodie.table.type": "COPY_ON_WRITE",
            "hoodie.table.version": str(TABLE_VERSION),
            "hoodie.timeline.layout.version": str(TIMELINE_LAYOUT_VERSION),
            "hoodie.table.base.file.format": "PARQUET",
            "hoodie.table.recordkey.fields": ",".join(self.record_key_fields),
            "hoodie.table.partition.fields": ",".join(self.partition_fields),
            "hoodie.table.keygenerator.class": (
                "org.apache.hudi.keygen.ComplexKeyGenerator"
                if len(self.record_key_fields) > 1 or len(self.partition_fields) > 1
                else "org.apache.hudi.keygen.SimpleKeyGenerator"
            ),
            "hoodie.populate.meta.fields": "true",
            "hoodie.datasource.write.hive_style_partitioning": str(self.hive_style_partitioning).lower(),
            "hoodie.datasource.write.partitionpath.urlencode": "false",
            "hoodie.datasource.write.drop.partition.columns": "false",
            "hoodie.table.timeline.timezone": "UTC",
            "hoodie.metadata.enable": "false",
        }
        if self.precombine_field:
            found["hoodie.table.precombine.field"] = self.precombine_field
        return found


def instant_time(moment: datetime | None = None) -> str:
    """A timeline instant: UTC, to the millisecond, as Hudi prints it."""
    moment = (moment or datetime.now(UTC)).astimezone(UTC)
    return moment.strftime("%Y%m%d%H%M%S") + f"{moment.microsecond // 1000:03d}"


@dataclass
class WriteStat:
    """One base file a commit wrote: an entry of HoodieCommitMetadata.partitionToWriteStats."""

    file_id: str
    path: str
    partition_path: str
    previous_commit: str
    records: int
    inserts: int
    updates: int
    deletes: int
    size: int

    def as_json(self) -> dict[str, Any]:
        return {
            "fileId": self.file_id,
            "path": self.path,
            "prevCommit": self.previous_commit,
            "numWrites": self.records,
            "numInserts": self.inserts,
            "numUpdateWrites": self.updates,
            "numDeletes": self.deletes,
            "totalWriteBytes": self.size,
            "fileSizeInBytes": self.size,
            "partitionPath": self.partition_path,
        }


@dataclass
class HudiTable:
    """A Copy-on-Write table at ``base`` (a path on ``fs``, no trailing slash)."""

    fs: pafs.FileSystem
    base: str
    spec: HudiTableSpec
    _timeline: list[pafs.FileInfo] = field(default_factory=list, repr=False)

    @classmethod
    def create_or_load(cls, fs: pafs.FileSystem, base: str, spec: HudiTableSpec) -> HudiTable:
        """The table at ``base``, created with ``spec`` if it is not there; an existing table must have
        the same record key and partition fields (they cannot change under written data)."""
        table = cls(fs, base.rstrip("/"), spec)
        path = f"{table.base}/{HOODIE}/hoodie.properties"
        if fs.get_file_info(path).type == pafs.FileType.File:
            with fs.open_input_stream(path) as stream:
                found = _parse_properties(stream.read().decode())
            for key in ("hoodie.table.recordkey.fields", "hoodie.table.partition.fields"):
                if found.get(key, "") != spec.properties()[key]:
                    raise ValueError(
                        f"the Hudi table at {base} has {key}={found.get(key, '')!r}, not {spec.properties()[key]!r}"
                    )
            return table
        fs.create_dir(f"{table.base}/{HOODIE}", recursive=True)
        text = "".join(f"{k}={v}\n" for k, v in sorted(spec.properties().items()))
        _write_atomically(fs, path, text.encode())
        return table

    # The timeline.

    def completed(self) -> list[str]:
        """Completed commit instants, oldest first."""
        names = [i.base_name for i in self._list(f"{self.base}/{HOODIE}") if i.type == pafs.FileType.File]
        return sorted(n.removesuffix(".commit") for n in names if n.endswith(".commit") and n[:1].isdigit())

    def start(self, instant: str) -> None:
        """Put ``instant`` on the timeline as requested and inflight: its files are invisible until complete."""
        for suffix in (".commit.requested", ".inflight"):
            with self.fs.open_output_stream(f"{self.base}/{HOODIE}/{instant}{suffix}") as stream:
                stream.write(b"")

    def complete(self, instant: str, stats: Sequence[WriteStat], schema: pa.Schema) -> None:
        """Make ``instant``'s base files the table's content: one rename of its commit metadata."""
        by_partition: dict[str, list[dict[str, Any]]] = {}
        for stat in stats:
            by_partition.setdefault(stat.partition_path, []).append(stat.as_json())
        data = [f for f in schema if f.name not in META_COLUMNS]
        metadata = {
            "partitionToWriteStats": by_partition,
            "compacted": False,
            "extraMetadata": {"schema": json.dumps(avro_schema(pa.schema(data), f"{self.spec.name}_record"))},
            "operationType": "UPSERT",
        }
        # (Its .requested and .inflight stay, as Hudi keeps them for every completed instant.)
        _write_atomically(self.fs, f"{self.base}/{HOODIE}/{instant}.commit", json.dumps(metadata).encode())

    def roll_back(self, keep: Sequence[str] = ()) -> list[str]:
        """Remove the base files and timeline entries of instants that never completed (a writer
        died mid-commit), except ``keep`` (instants being written now). Returns the instants removed."""
        completed = set(self.completed())
        started = {
            i.base_name.split(".", 1)[0]
            for i in self._list(f"{self.base}/{HOODIE}")
            if i.base_name.endswith((".inflight", ".commit.requested"))
        }
        undone = sorted(started - completed - set(keep))
        for info in self._list(self.base, recursive=True):
            if info.type == pafs.FileType.File and f"/{HOODIE}/" not in info.path + "/":
                parsed = _parse_base_file(info.base_name)
                if parsed is not None and parsed[2] not in completed and parsed[2] not in keep:
                    self.fs.delete_file(info.path)
        for instant in undone:
            for suffix in (".inflight", ".commit.requested"):
                path = f"{self.base}/{HOODIE}/{instant}{suffix}"
                if self.fs.get_file_info(path).type == pafs.FileType.File:
                    self.fs.delete_file(path)
        return undone

    # Data.

    def latest_base_file(self, partition_path: str) -> tuple[str, str] | None:
        """The partition's file group (its id) and newest completed base file, if any."""
        completed = set(self.completed())
        newest: tuple[str, str, str] | None = None
        for info in self._list(self._partition_dir(partition_path)):
            parsed = _parse_base_file(info.base_name)
            if parsed is not None and parsed[2] in completed and (newest is None or parsed[2] > newest[2]):
                newest = (parsed[0], info.path, parsed[2])
        return (newest[0], newest[1]) if newest else None

    def write_partition(
        self, instant: str, partition_path: str, upserts: pa.Table, deletes: Sequence[str] = (), task: int = 0
    ) -> WriteStat:
        """Write ``instant``'s version of a partition's file group: its last completed version with
        ``upserts`` merged in by record key (the greater precombine value wins; on a tie the new
        record) and the keys in ``deletes`` removed."""
        keys = _record_keys(upserts, self.spec.record_key_fields)
        rows = _latest_per_key(upserts.append_column("_key", keys), self.spec.precombine_field)
        latest = self.latest_base_file(partition_path)
        file_id, previous, old = f"{uuid.uuid4()}-0", "null", None
        if latest is not None:
            file_id, path = latest
            previous = path.rsplit("_", 1)[-1].removesuffix(".parquet")
            old = pq.read_table(path, filesystem=self.fs)
        inserts = len(rows)
        updates = 0
        if old is not None:
            old_keys = old.column("_hoodie_record_key")
            new_keys = rows.column("_key")
            replaced = pc.is_in(new_keys, value_set=old_keys)
            if self.spec.precombine_field:
                # An update older (by precombine) than the stored record loses to it.
                stored = dict(
                    zip(old_keys.to_pylist(), old.column(self.spec.precombine_field).to_pylist(), strict=True)
                )
                newer = [
                    not r or stored[k] is None or (v is not None and v >= stored[k])
                    for k, v, r in zip(
                        new_keys.to_pylist(),
                        rows.column(self.spec.precombine_field).to_pylist(),
                        replaced.to_pylist(),
                        strict=True,
                    )
                ]
                rows = rows.filter(pa.array(newer))
                replaced = pc.is_in(rows.column("_key"), value_set=old_keys)
            updates = pc.sum(replaced.cast(pa.int64())).as_py() or 0
            inserts = len(rows) - updates
            gone = pa.concat_arrays([rows.column("_key").combine_chunks(), pa.array(list(deletes), pa.string())])
            kept = old.filter(pc.invert(pc.is_in(old_keys, value_set=gone)))
        name = f"{file_id}_{task}-0-0_{instant}.parquet"
        fresh = self._with_meta(rows, instant, partition_path, name, task)
        merged = fresh if old is None else pa.concat_tables([_renamed(kept, name), fresh], promote_options="default")
        deleted = 0 if old is None else len(old) - len(kept) - updates
        path = f"{self._partition_dir(partition_path)}/{name}"
        self.fs.create_dir(self._partition_dir(partition_path), recursive=True)
        pq.write_table(merged, path, filesystem=self.fs, compression="zstd")
        return WriteStat(
            file_id=file_id,
            path=f"{partition_path}/{name}" if partition_path else name,
            partition_path=partition_path,
            previous_commit=previous,
            records=len(merged),
            inserts=inserts,
            updates=updates,
            deletes=deleted,
            size=self.fs.get_file_info(path).size or 0,
        )

    def _with_meta(self, rows: pa.Table, instant: str, partition_path: str, name: str, task: int) -> pa.Table:
        n = len(rows)
        meta = {
            "_hoodie_commit_time": pa.array([instant] * n, pa.string()),
            "_hoodie_commit_seqno": pa.array([f"{instant}_{task}_{i}" for i in range(n)], pa.string()),
            "_hoodie_record_key": rows.column("_key").cast(pa.string()),
            "_hoodie_partition_path": pa.array([partition_path] * n, pa.string()),
            "_hoodie_file_name": pa.array([name] * n, pa.string()),
        }
        data = rows.drop_columns(["_key"])
        return pa.table(
            [*meta.values(), *data.columns],
            schema=pa.schema(
                [pa.field(k, pa.string(), nullable=False) for k in meta]
                + [f for f in data.schema if f.name not in META_COLUMNS]
            ),
        )

    def _partition_dir(self, partition_path: str) -> str:
        return f"{self.base}/{partition_path}" if partition_path else self.base

    def _list(self, path: str, recursive: bool = False) -> list[pafs.FileInfo]:
        return list(self.fs.get_file_info(pafs.FileSelector(path, allow_not_found=True, recursive=recursive)))


def partition_path(spec: HudiTableSpec, values: Sequence[Any]) -> str:
    """A record's partition path from its partition fields' values (hive-style ``f=v`` if configured)."""
    parts = ["default" if v is None else str(v) for v in values]
    if spec.hive_style_partitioning:
        parts = [f"{name}={v}" for name, v in zip(spec.partition_fields, parts, strict=True)]
    return "/".join(parts)


def _record_keys(rows: pa.Table, fields: tuple[str, ...]) -> pa.Array:
    """The record key column: the field's text (SimpleKeyGenerator), or ``f1:v1,f2:v2`` (ComplexKeyGenerator)."""
    if len(fields) == 1:
        return rows.column(fields[0]).cast(pa.string()).combine_chunks()
    columns = [rows.column(f).cast(pa.string()).to_pylist() for f in fields]
    return pa.array(
        [",".join(f"{f}:{v}" for f, v in zip(fields, values, strict=True)) for values in zip(*columns, strict=True)]
    )


def _latest_per_key(rows: pa.Table, precombine: str | None) -> pa.Table:
    """One row per record key: the greatest precombine value, or the last one written."""
    best: dict[Any, int] = {}
    keys = rows.column("_key").to_pylist()
    values: list[Any] = rows.column(precombine).to_pylist() if precombine else [None] * len(rows)
    for i in range(len(rows)):
        at = best.get(keys[i])
        if (
            at is None
            or precombine is None
            or values[at] is None
            or (values[i] is not None and values[i] >= values[at])
        ):
            best[keys[i]] = i
    return rows.take(pa.array(sorted(best.values()), pa.int64()))


def _renamed(rows: pa.Table, name: str) -> pa.Table:
    # Records carried into the new version keep their commit time and sequence number.
    index = rows.schema.get_field_index("_hoodie_file_name")
    return rows.set_column(index, rows.schema.field(index), pa.array([name] * len(rows), pa.string()))


def _parse_base_file(name: str) -> tuple[str, str, str] | None:
    """``(fileId, writeToken, instant)`` of a base file's name."""
    if not name.endswith(".parquet"):
        return None
    parts = name.removesuffix(".parquet").split("_")
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 and parts[2].isdigit() else None


def _parse_properties(text: str) -> dict[str, str]:
    found = {}
    for line in text.splitlines():
        if line.strip() and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            found[key.strip()] = value.strip()
    return found


def _write_atomically(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    # A reader never sees half a timeline entry: written aside (where Hudi keeps
    # its temporary files, which readers skip), then renamed.
    folder, _, name = path.rpartition("/")
    temporary = f"{folder}/.temp/{name}.{uuid.uuid4().hex[:8]}"
    fs.create_dir(f"{folder}/.temp", recursive=True)
    with fs.open_output_stream(temporary) as stream:
        stream.write(data)
    fs.move(temporary, path)
