"""Apache Hudi Copy-on-Write tables on a pyarrow filesystem, written from the format itself.

No Hudi writer runs in Python, so the on-disk format is written here as Hudi
0.x lays it out and its readers (hudi-rs, Spark's Hudi reader) read it: table
version 6, timeline layout 1.

- ``.hoodie/hoodie.properties`` names the table, its record key, partition
  and precombine fields, and its checksum (CRC32 of ``<database>.<table>``, as
  HoodieTableConfig.generateChecksum computes it).
- A commit is an instant ``yyyyMMddHHmmssSSS`` (UTC) on the timeline:
  ``<instant>.commit.requested`` and ``<instant>.inflight`` when it starts,
  ``<instant>.commit`` (HoodieCommitMetadata as JSON) when it is complete.
  Readers take base files of completed instants only; a failed instant's
  files are removed all the same (``roll_back``), as Hudi's writers do.
- Data are base files ``<fileId>_<writeToken>_<instant>.parquet`` with the
  five ``_hoodie_*`` meta columns first. Copy-on-Write: a commit that touches
  a file group writes a new version (slice) of its whole base file, old rows
  merged with the new ones; the newest completed slice is the file group's
  content, older slices stay until cleaning.
- Every partition directory holds a ``.hoodie_partition_metadata``.

Upserts place a record key in one of N file groups of its partition by
Hudi's bucket index hash (``bucket``), so an update always finds the file
group that holds its key without an index lookup.
"""

from __future__ import annotations

import json
import uuid
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
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
PARTITION_METADATA = ".hoodie_partition_metadata"
# Hudi's partition path for a null or missing partition field (0.14's KeyGenUtils).
DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
# Columns the participants add to the records they hand to the commit (never written to the table).
DELETE = "_sinkadmin_delete"  # the record deletes its key (a tombstone or a delete marker)
TOMBSTONE = "_sinkadmin_tombstone"  # a null value: deletes whatever came before it
SEQUENCE = "_sinkadmin_sequence"  # the record's place in the commit's stream (topic, partition, offset order)
WORK_COLUMNS = (DELETE, TOMBSTONE, SEQUENCE)
# extraMetadata keys: the connector's commit id, and the offsets as Hudi's own tools read them.
COMMIT_ID_KEY = "sinkadmin.commit.id"
KAFKA_OFFSETS_KEY = "kafka.commit.offsets"
CHECKPOINT_KEY = "deltastreamer.checkpoint.key"


# Timeline actions and states (HoodieTimeline's names).
COMMIT = "commit"
CLEAN = "clean"
REPLACE_COMMIT = "replacecommit"
REQUESTED = "requested"
INFLIGHT = "inflight"
COMPLETED = "completed"
# Actions whose completed instants add base files.
DATA_ACTIONS = (COMMIT, REPLACE_COMMIT)


@dataclass(frozen=True, order=True)
class TimelineEntry:
    """One file of the timeline: ``<instant>.<action>[.requested|.inflight]`` (a commit in flight is
    ``<instant>.inflight``, timeline layout 1)."""

    instant: str
    action: str
    state: str

    @property
    def file_name(self) -> str:
        if self.state == COMPLETED:
            return f"{self.instant}.{self.action}"
        if self.action == COMMIT and self.state == INFLIGHT:
            return f"{self.instant}.inflight"
        return f"{self.instant}.{self.action}.{self.state}"


def parse_timeline_name(name: str) -> TimelineEntry | None:
    instant, _, rest = name.partition(".")
    if not instant.isdigit() or not rest:
        return None
    parts = rest.split(".")
    if parts == [INFLIGHT]:
        return TimelineEntry(instant, COMMIT, INFLIGHT)
    if len(parts) == 1:
        return TimelineEntry(instant, parts[0], COMPLETED)
    if len(parts) == 2 and parts[1] in (REQUESTED, INFLIGHT):
        return TimelineEntry(instant, parts[0], parts[1])
    return None  # (a checksum, a temporary file: not an entry)


@dataclass(frozen=True)
class HudiTableSpec:
    """What ``hoodie.properties`` says of a table, in the Hudi Kafka Connect sink's terms."""

    name: str
    record_key_fields: tuple[str, ...]
    partition_fields: tuple[str, ...] = ()
    precombine_field: str | None = None
    hive_style_partitioning: bool = False
    database: str = "default"

    @property
    def checksum(self) -> int:
        """HoodieTableConfig.generateChecksum: CRC32 of ``<database>.<table>`` in UTF-8."""
        return zlib.crc32(f"{self.database}.{self.name}".encode())

    def properties(self) -> dict[str, str]:
        found = {
            "hoodie.table.name": self.name,
            "hoodie.database.name": self.database,
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
                if self.partition_fields
                else "org.apache.hudi.keygen.NonpartitionedKeyGenerator"
            ),
            "hoodie.populate.meta.fields": "true",
            "hoodie.datasource.write.hive_style_partitioning": str(self.hive_style_partitioning).lower(),
            "hoodie.datasource.write.partitionpath.urlencode": "false",
            "hoodie.datasource.write.drop.partition.columns": "false",
            "hoodie.table.timeline.timezone": "UTC",
            "hoodie.archivelog.folder": "archived",
            "hoodie.table.checksum": str(self.checksum),
        }
        if self.precombine_field:
            found["hoodie.table.precombine.field"] = self.precombine_field
        return found


def instant_time(moment: datetime | None = None) -> str:
    """A timeline instant: UTC, to the millisecond, as Hudi prints it."""
    moment = (moment or datetime.now(UTC)).astimezone(UTC)
    return moment.strftime("%Y%m%d%H%M%S") + f"{moment.microsecond // 1000:03d}"


def instant_after(instant: str) -> str:
    """The instant one millisecond after ``instant``."""
    moment = datetime.strptime(instant[:14], "%Y%m%d%H%M%S").replace(tzinfo=UTC)
    return instant_time(moment + timedelta(milliseconds=int(instant[14:17]) + 1))


def java_string_hashes(keys: pa.Array) -> np.ndarray:
    """Java's ``String.hashCode`` of each key (int32 arithmetic over UTF-16 code units), vectorized."""
    texts = keys.to_pylist()
    if not texts:
        return np.zeros(0, dtype=np.int64)
    encoded = [t.encode("utf-16-le") for t in texts]
    lengths = np.fromiter((len(e) // 2 for e in encoded), dtype=np.int64, count=len(encoded))
    units = np.frombuffer(b"".join(encoded), dtype="<u2").astype(np.uint64)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    # Each code unit weighs 31^(units after it in its key); sums wrap modulo 2^64,
    # whose low 32 bits are Java's int arithmetic.
    ends = np.repeat(starts + lengths, lengths)
    after = ends - 1 - np.arange(len(units), dtype=np.int64)
    with np.errstate(over="ignore"):
        powers = np.cumprod(np.full(int(lengths.max()) if len(lengths) else 1, 31, dtype=np.uint64))
        powers = np.concatenate(([np.uint64(1)], powers[:-1]))
        weighted = units * powers[after] if len(units) else units
        sums = np.zeros(len(texts), dtype=np.uint64)
        nonempty = lengths > 0
        if nonempty.any():
            sums[nonempty] = np.add.reduceat(weighted, starts[nonempty])
    low = (sums & np.uint64(0xFFFFFFFF)).astype(np.int64)
    return np.where(low >= 1 << 31, low - (1 << 32), low)


def buckets(record_keys: pa.Array, num_buckets: int) -> np.ndarray:
    """Each record key's bucket, as Hudi's bucket index computes it for a simple key
    (BucketIdentifier.getBucketId: the hash of the one-element list of the key)."""
    hashes = java_string_hashes(record_keys)
    list_hash = (31 + hashes) & 0xFFFFFFFF  # List.hashCode, kept as an unsigned 32-bit pattern
    return (list_hash & 0x7FFFFFFF) % num_buckets


def bucket_file_id(bucket: int, seed: str) -> str:
    """A new file group of a bucket: Hudi's bucket file ids begin with the bucket's number."""
    return f"{bucket:08d}{str(uuid.uuid5(uuid.NAMESPACE_URL, seed))[8:]}-0"


def new_file_id(seed: str) -> str:
    """A new file group's id, the same for the same seed (a commit rolled forward twice names its files alike)."""
    return f"{uuid.uuid5(uuid.NAMESPACE_URL, seed)}-0"


def bucket_of(file_id: str) -> int | None:
    head = file_id[:8]
    return int(head) if head.isdigit() else None


@dataclass(frozen=True)
class FileSlice:
    """A file group's base file of one instant."""

    file_id: str
    path: str
    instant: str
    size: int


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

    @classmethod
    def from_json(cls, found: Mapping[str, Any]) -> WriteStat:
        return cls(
            file_id=found["fileId"],
            path=found["path"],
            partition_path=found["partitionPath"],
            previous_commit=found["prevCommit"],
            records=found["numWrites"],
            inserts=found["numInserts"],
            updates=found["numUpdateWrites"],
            deletes=found["numDeletes"],
            size=found["fileSizeInBytes"],
        )


@dataclass
class HudiTable:
    """A Copy-on-Write table at ``base`` (a path on ``fs``, no trailing slash)."""

    fs: pafs.FileSystem
    base: str
    spec: HudiTableSpec
    _made: set[str] = field(default_factory=set, repr=False)

    @classmethod
    def create_or_load(cls, fs: pafs.FileSystem, base: str, spec: HudiTableSpec) -> HudiTable:
        """The table at ``base``, created with ``spec`` if it is not there; an existing table must have
        the same name, record key and partition fields (they cannot change under written data)."""
        table = cls(fs, base.rstrip("/"), spec)
        found = table.stored_properties()
        if found is not None:
            for key in ("hoodie.table.name", "hoodie.table.recordkey.fields", "hoodie.table.partition.fields"):
                if found.get(key, "") != spec.properties()[key]:
                    raise ValueError(
                        f"the Hudi table at {base} has {key}={found.get(key, '')!r}, not {spec.properties()[key]!r}"
                    )
            if found.get("hoodie.table.type", "COPY_ON_WRITE") != "COPY_ON_WRITE":
                raise ValueError(f"the Hudi table at {base} is {found['hoodie.table.type']}, not COPY_ON_WRITE")
            return table
        fs.create_dir(f"{table.base}/{HOODIE}", recursive=True)
        text = "#Properties saved by sinkadmin\n" + "".join(f"{k}={v}\n" for k, v in sorted(spec.properties().items()))
        _write_atomically(fs, f"{table.base}/{HOODIE}/hoodie.properties", text.encode())
        return table

    def stored_properties(self) -> dict[str, str] | None:
        path = f"{self.base}/{HOODIE}/hoodie.properties"
        if self.fs.get_file_info(path).type != pafs.FileType.File:
            return None
        with self.fs.open_input_stream(path) as stream:
            return parse_properties(stream.read().decode())

    # The timeline.

    def timeline(self) -> list[TimelineEntry]:
        """Every entry of the active timeline, oldest instant first."""
        found = [
            parse_timeline_name(i.base_name)
            for i in self._list(f"{self.base}/{HOODIE}")
            if i.type == pafs.FileType.File
        ]
        return sorted(e for e in found if e is not None)

    def _timeline_names(self) -> list[str]:
        return [e.file_name for e in self.timeline()]

    def completed(self, action: str = COMMIT) -> list[str]:
        """Completed instants of ``action`` (the sink's commits, unless told), oldest first."""
        return [e.instant for e in self.timeline() if e.action == action and e.state == COMPLETED]

    def data_instants(self, entries: Sequence[TimelineEntry] | None = None) -> list[str]:
        """Completed instants that wrote base files: the sink's commits and clusterings' replacecommits."""
        entries = self.timeline() if entries is None else entries
        return sorted(e.instant for e in entries if e.action in DATA_ACTIONS and e.state == COMPLETED)

    def replaced_groups(self, entries: Sequence[TimelineEntry] | None = None) -> dict[tuple[str, str], str]:
        """(partition path, file id) of each file group a completed replacecommit replaced, and its instant."""
        entries = self.timeline() if entries is None else entries
        found = {}
        for e in entries:
            if e.action == REPLACE_COMMIT and e.state == COMPLETED:
                for partition, file_id in _replaced_by(self.fs, self.base, e.instant):
                    found[(partition, file_id)] = e.instant
        return found

    def instants(self, action: str | None = None) -> list[str]:
        """Instants on the timeline, completed or not, of ``action`` (None: of every action), oldest first."""
        return sorted({e.instant for e in self.timeline() if action is None or e.action == action})

    def write_entry(self, instant: str, action: str, state: str, data: bytes) -> None:
        """A timeline entry, written aside and renamed: a reader never meets half of one."""
        _write_atomically(self.fs, f"{self.base}/{HOODIE}/{TimelineEntry(instant, action, state).file_name}", data)

    def read_entry(self, instant: str, action: str, state: str) -> bytes:
        with self.fs.open_input_stream(f"{self.base}/{HOODIE}/{TimelineEntry(instant, action, state).file_name}") as f:
            data: bytes = f.read()
        return data

    def next_instant(self, moment: datetime | None = None) -> str:
        """The instant of ``moment`` (now), or the millisecond after the newest instant on the timeline
        if the clock is behind it: the timeline only grows, whatever the action."""
        instant = instant_time(moment)
        on_timeline = self.instants()
        return instant if not on_timeline or instant > on_timeline[-1] else instant_after(on_timeline[-1])

    def commit_metadata(self, instant: str, completed: bool = True, action: str = COMMIT) -> dict[str, Any]:
        """An instant's HoodieCommitMetadata (JSON): its ``.commit`` (or ``.replacecommit``), or
        (``completed=False``) its ``.inflight``."""
        text = self.read_entry(instant, action, COMPLETED if completed else INFLIGHT).decode()
        return json.loads(text) if text.strip() else {}

    def find(self, commit_id: str, newest: int = 20) -> tuple[str, bool] | None:
        """The instant (and whether it completed) that carries the connector's ``commit_id``, among the
        ``newest`` instants: a commit is looked for right after the one before it."""
        completed = set(self.completed())
        names = set(self._timeline_names())
        for instant in reversed(self.instants(COMMIT)[-newest:]):
            done = instant in completed
            if not done and f"{instant}.inflight" not in names:
                continue
            try:
                extra = self.commit_metadata(instant, completed=done).get("extraMetadata") or {}
            except (OSError, ValueError):
                continue
            if extra.get(COMMIT_ID_KEY) == commit_id:
                return instant, done
        return None

    def start(self, instant: str, extra: Mapping[str, str]) -> None:
        """Put ``instant`` on the timeline as requested and inflight (carrying ``extra``, so a successor
        finds whose it is): its files are invisible until it is complete."""
        requested = f"{self.base}/{HOODIE}/{instant}.commit.requested"
        if self.fs.get_file_info(requested).type != pafs.FileType.File:
            _write_atomically(self.fs, requested, b"")
        inflight = {
            "partitionToWriteStats": {},
            "compacted": False,
            "extraMetadata": dict(extra),
            "operationType": "UPSERT",
        }
        _write_atomically(self.fs, f"{self.base}/{HOODIE}/{instant}.inflight", json.dumps(inflight).encode())

    def metadata(
        self,
        stats: Sequence[WriteStat],
        schema: pa.Schema,
        extra: Mapping[str, str],
        operation: str = "UPSERT",
        replaced: Mapping[str, Sequence[str]] | None = None,
    ) -> dict[str, Any]:
        """HoodieCommitMetadata of an instant that wrote ``stats`` (HoodieReplaceCommitMetadata, naming the
        file groups it ``replaced`` per partition, if given)."""
        by_partition: dict[str, list[dict[str, Any]]] = {}
        for stat in stats:
            by_partition.setdefault(stat.partition_path, []).append(stat.as_json())
        data = [f for f in schema if f.name not in META_COLUMNS and f.name not in WORK_COLUMNS]
        metadata: dict[str, Any] = {
            "partitionToWriteStats": by_partition,
            "compacted": False,
            "extraMetadata": {
                "schema": json.dumps(avro_schema(pa.schema(data), f"{self.spec.name}_record")),
                **extra,
            },
            "operationType": operation,
        }
        if replaced is not None:
            # Readers drop these file groups as of the instant.
            metadata["partitionToReplaceFileIds"] = {p: list(ids) for p, ids in replaced.items()}
        return metadata

    def complete(
        self,
        instant: str,
        stats: Sequence[WriteStat],
        schema: pa.Schema,
        extra: Mapping[str, str],
        operation: str = "UPSERT",
    ) -> None:
        """Make ``instant``'s base files the table's content: one rename of its commit metadata."""
        metadata = self.metadata(stats, schema, extra, operation)
        # (Its .requested and .inflight stay, as Hudi keeps them for every completed instant.)
        self.write_entry(instant, COMMIT, COMPLETED, json.dumps(metadata).encode())

    def roll_back(self, keep: Sequence[str] = ()) -> list[str]:
        """Remove the base files and timeline entries of the sink's commits that never completed (a
        writer died mid-commit), except ``keep`` (instants being written now). Returns the instants
        removed. (Cleans and clusterings left unfinished are settled by their own code.)"""
        entries = self.timeline()
        completed = {e.instant for e in entries if e.action == COMMIT and e.state == COMPLETED}
        undone = sorted({e.instant for e in entries if e.action == COMMIT} - completed - set(keep))
        if not undone:
            return []
        self.remove_instants(undone, entries)
        return undone

    def remove_instants(self, instants: Sequence[str], entries: Sequence[TimelineEntry] | None = None) -> None:
        """Base files and timeline entries of instants that never completed, gone."""
        doomed = set(instants)
        for info in self._list(self.base, recursive=True):
            if info.type == pafs.FileType.File and f"/{HOODIE}/" not in info.path:
                parsed = parse_base_file(info.base_name)
                if parsed is not None and parsed[2] in doomed:
                    self.fs.delete_file(info.path)
        for entry in self.timeline() if entries is None else entries:
            if entry.instant in doomed and entry.state != COMPLETED:
                self.fs.delete_file(f"{self.base}/{HOODIE}/{entry.file_name}")

    # Data.

    def latest_slices(self, partition_path: str, before: str | None = None) -> dict[str, FileSlice]:
        """Each live file group of a partition (none a clustering replaced): its newest completed slice
        (older than ``before``, if given)."""
        entries = self.timeline()
        completed = set(self.data_instants(entries))
        replaced = {file_id for (partition, file_id) in self.replaced_groups(entries) if partition == partition_path}
        newest: dict[str, FileSlice] = {}
        for info in self._list(self.partition_dir(partition_path)):
            parsed = parse_base_file(info.base_name)
            if parsed is None or parsed[2] not in completed or (before is not None and parsed[2] >= before):
                continue
            if parsed[0] in replaced:
                continue
            file_id, _, instant = parsed
            if file_id not in newest or instant > newest[file_id].instant:
                newest[file_id] = FileSlice(file_id, info.path, instant, info.size or 0)
        return newest

    def partition_dir(self, partition_path: str) -> str:
        return f"{self.base}/{partition_path}" if partition_path else self.base

    def ensure_partition(self, partition_path: str, instant: str) -> None:
        """The partition's directory with its ``.hoodie_partition_metadata`` (HoodiePartitionMetadata)."""
        folder = self.partition_dir(partition_path)
        if folder in self._made:
            return
        path = f"{folder}/{PARTITION_METADATA}"
        if self.fs.get_file_info(path).type != pafs.FileType.File:
            self.fs.create_dir(folder, recursive=True)
            depth = len([p for p in partition_path.split("/") if p]) if partition_path else 0
            text = f"#partition metadata\ncommitTime={instant}\npartitionDepth={depth}\n"
            _write_atomically(self.fs, path, text.encode(), aside=f"{self.base}/{HOODIE}/.temp")
        self._made.add(folder)

    def write_slice(
        self,
        instant: str,
        partition_path: str,
        file_id: str,
        previous: FileSlice | None,
        incoming: pa.Table,
        upsert: bool,
        token: str,
    ) -> WriteStat:
        """Write ``instant``'s slice of a file group: its previous slice with the commit's records for it
        merged in (``upsert``: by record key, ``merge``), or appended (insert). Written aside and renamed,
        so a reader or a second writer of the same commit never meets half a file."""
        name = f"{file_id}_{token}_{instant}.parquet"
        old = pq.read_table(previous.path, filesystem=self.fs) if previous is not None else None
        if upsert:
            kept, fresh, updates, deletes = merge(old, incoming, self.spec.precombine_field)
        else:
            kept, fresh, updates, deletes = (
                old,
                incoming.drop_columns([c for c in WORK_COLUMNS if c in incoming.column_names]),
                0,
                0,
            )
        parts = [self._with_meta(fresh, instant, partition_path, name, token)]
        if kept is not None:
            parts.insert(0, _renamed(kept, name))
        merged = pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1 else parts[0]
        self.ensure_partition(partition_path, instant)
        path = f"{self.partition_dir(partition_path)}/{name}"
        temporary = f"{self.base}/{HOODIE}/.temp/{name}.{uuid.uuid4().hex[:8]}"
        self.fs.create_dir(f"{self.base}/{HOODIE}/.temp", recursive=True)
        pq.write_table(merged, temporary, filesystem=self.fs, compression="zstd")
        self.fs.move(temporary, path)
        return WriteStat(
            file_id=file_id,
            path=f"{partition_path}/{name}" if partition_path else name,
            partition_path=partition_path,
            previous_commit=previous.instant if previous is not None else "null",
            records=len(merged),
            inserts=len(fresh) - updates,
            updates=updates,
            deletes=deletes,
            size=self.fs.get_file_info(path).size or 0,
        )

    def _with_meta(self, rows: pa.Table, instant: str, partition_path: str, name: str, token: str) -> pa.Table:
        n = len(rows)
        task = token.split("-", 1)[0]
        meta = {
            "_hoodie_commit_time": pa.array([instant] * n, pa.string()),
            "_hoodie_commit_seqno": pa.array([f"{instant}_{task}_{i}" for i in range(n)], pa.string()),
            "_hoodie_record_key": rows.column("_hoodie_record_key").cast(pa.string()),
            "_hoodie_partition_path": pa.array([partition_path] * n, pa.string()),
            "_hoodie_file_name": pa.array([name] * n, pa.string()),
        }
        data = rows.drop_columns([c for c in (*META_COLUMNS, *WORK_COLUMNS) if c in rows.column_names])
        return pa.table(
            [*meta.values(), *data.columns],
            schema=pa.schema([pa.field(k, pa.string(), nullable=False) for k in meta] + list(data.schema)),
        )

    def _list(self, path: str, recursive: bool = False) -> list[pafs.FileInfo]:
        return list(self.fs.get_file_info(pafs.FileSelector(path, allow_not_found=True, recursive=recursive)))


# (base path, instant) -> the file groups a completed replacecommit replaced.
_REPLACED: dict[tuple[str, str], tuple[tuple[str, str], ...]] = {}
_REPLACED_KEPT = 4096


def _replaced_by(fs: pafs.FileSystem, base: str, instant: str) -> tuple[tuple[str, str], ...]:
    """The file groups a completed replacecommit replaced. Read once per process: a completed instant's
    metadata never changes, and every commit's planning asks for every replacecommit's."""
    found = _REPLACED.get((base, instant))
    if found is None:
        path = f"{base}/{HOODIE}/{TimelineEntry(instant, REPLACE_COMMIT, COMPLETED).file_name}"
        with fs.open_input_stream(path) as stream:
            text = stream.read().decode()
        replaced = (json.loads(text) if text.strip() else {}).get("partitionToReplaceFileIds") or {}
        found = tuple((partition, file_id) for partition, ids in replaced.items() for file_id in ids)
        if len(_REPLACED) >= _REPLACED_KEPT:
            _REPLACED.clear()
        _REPLACED[(base, instant)] = found
    return found


def merge(
    old: pa.Table | None, incoming: pa.Table, precombine: str | None
) -> tuple[pa.Table | None, pa.Table, int, int]:
    """Upsert the commit's records of one file group into its stored rows, by record key.

    Records apply in stream order (``SEQUENCE``), as DefaultHoodieRecordPayload
    orders them: a record replaces the stored one when its precombine value is
    at least the stored one's (with no precombine field, always); a delete
    marker removes it on the same terms; a tombstone removes it whatever its
    order, and what follows it in the stream applies to no row.

    Returns the stored rows that stay, the records that are written, how many of
    those replace a stored row, and how many stored rows were deleted.
    """
    if not pc.any(incoming.column(DELETE)).as_py():
        found = _merge_upserts(old, incoming, precombine)
        if found is not None:
            return found
    return _merge_in_order(old, incoming, precombine)


def _merge_in_order(
    old: pa.Table | None, incoming: pa.Table, precombine: str | None
) -> tuple[pa.Table | None, pa.Table, int, int]:
    """``merge`` record by record, in stream order: what deletes need."""
    keys = incoming.column("_hoodie_record_key").to_pylist()
    sequence = incoming.column(SEQUENCE).to_pylist()
    deleting = incoming.column(DELETE).to_pylist()
    tombstone = incoming.column(TOMBSTONE).to_pylist()
    order = incoming.column(precombine).to_pylist() if precombine else [None] * len(keys)
    stored: dict[str, Any] = {}
    if old is not None:
        old_keys = old.column("_hoodie_record_key").to_pylist()
        old_order = old.column(precombine).to_pylist() if precombine and precombine in old.column_names else None
        stored = {k: (old_order[i] if old_order is not None else None) for i, k in enumerate(old_keys)}
    # Per key: (present, its precombine value, the incoming row that holds it or None for the stored row).
    state: dict[str, tuple[bool, Any, int | None]] = {}
    for i in sorted(range(len(keys)), key=sequence.__getitem__):
        key = keys[i]
        if key not in state:
            state[key] = (True, stored[key], None) if key in stored else (False, None, None)
        present, current, _ = state[key]
        if tombstone[i]:
            state[key] = (False, None, None)
            continue
        wins = not present or precombine is None or current is None or _at_least(order[i], current)
        if wins:
            state[key] = (False, None, None) if deleting[i] else (True, order[i], i)
    written = sorted(i for present, _, i in state.values() if present and i is not None)
    fresh = incoming.take(pa.array(written, pa.int64()))
    fresh = fresh.drop_columns([c for c in WORK_COLUMNS if c in fresh.column_names])
    if old is None:
        return None, fresh, 0, 0
    changed = {k for k, (present, _, i) in state.items() if k in stored and (not present or i is not None)}
    updates = sum(1 for k, (present, _, i) in state.items() if k in stored and present and i is not None)
    deletes = sum(1 for k, (present, _, _) in state.items() if k in stored and not present)
    kept = old.filter(pc.invert(pc.is_in(old.column("_hoodie_record_key"), pa.array(sorted(changed), pa.string()))))
    return kept, fresh, updates, deletes


def _merge_upserts(
    old: pa.Table | None, incoming: pa.Table, precombine: str | None
) -> tuple[pa.Table | None, pa.Table, int, int] | None:
    """``merge`` for records that delete nothing, in columns: without deletes the stream order reduces
    to the greatest (precombine, sequence) per key, and the stored row loses to a greater or equal
    precombine value. None when the precombine values of the stored rows and the records do not compare
    as one type (``merge``'s row by row rule then decides)."""
    n = len(incoming)
    order = [("_hoodie_record_key", "ascending")]
    if precombine:
        order.append((precombine, "ascending"))
    order.append((SEQUENCE, "ascending"))
    ranked = pa.table(
        {
            "key": incoming.column("_hoodie_record_key"),
            "row": pa.array(np.arange(n, dtype=np.int64)),
            **({"order": incoming.column(precombine)} if precombine else {}),
            "seq": incoming.column(SEQUENCE),
        }
    )
    ranked = ranked.sort_by(
        [("key", "ascending"), *([("order", "ascending")] if precombine else []), ("seq", "ascending")]
    )
    ranked = ranked.append_column("rank", pa.array(np.arange(n, dtype=np.int64)))
    last = ranked.group_by("key", use_threads=False).aggregate([("rank", "max")])
    winners = ranked.take(last.column("rank_max"))
    if old is None or len(old) == 0:
        fresh = incoming.take(pa.array(np.sort(winners.column("row").to_numpy()), pa.int64()))
        return old, fresh.drop_columns([c for c in WORK_COLUMNS if c in fresh.column_names]), 0, 0
    stored_keys = old.column("_hoodie_record_key")
    if precombine and precombine in old.column_names:
        stored = pa.table({"key": stored_keys, "stored": old.column(precombine)})
        try:
            joined = winners.join(stored, "key", join_type="left outer", use_threads=False)
            beats = pc.or_kleene(
                pc.is_null(joined.column("stored")), pc.greater_equal(joined.column("order"), joined.column("stored"))
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return None
        joined = joined.filter(beats.fill_null(True))
        rows = np.sort(joined.column("row").to_numpy())
    else:
        rows = np.sort(winners.column("row").to_numpy())
    fresh = incoming.take(pa.array(rows, pa.int64()))
    fresh = fresh.drop_columns([c for c in WORK_COLUMNS if c in fresh.column_names])
    replaced = pc.is_in(stored_keys, value_set=fresh.column("_hoodie_record_key").combine_chunks())
    updates = pc.sum(replaced.cast(pa.int64())).as_py() or 0
    return old.filter(pc.invert(replaced)), fresh, updates, 0


def _at_least(value: Any, current: Any) -> bool:
    try:
        return bool(value >= current)
    except TypeError:
        # Types that do not compare (a field retyped across commits): the newer record wins.
        return True


def partition_path(spec: HudiTableSpec, values: Sequence[Any]) -> str:
    """A record's partition path from its partition fields' values (hive-style ``f=v`` if configured)."""
    parts = [DEFAULT_PARTITION if v is None or v == "" else str(v) for v in values]
    if spec.hive_style_partitioning:
        parts = [f"{name}={v}" for name, v in zip(spec.partition_fields, parts, strict=True)]
    return "/".join(parts)


def record_keys(rows: pa.Table, fields: Sequence[str]) -> pa.Array:
    """The record key column: the field's text (SimpleKeyGenerator), or ``f1:v1,f2:v2`` (ComplexKeyGenerator)."""
    if len(fields) == 1:
        return rows.column(fields[0]).cast(pa.string()).combine_chunks()
    columns = [rows.column(f).cast(pa.string()).to_pylist() for f in fields]
    return pa.array(
        [",".join(f"{f}:{v}" for f, v in zip(fields, values, strict=True)) for values in zip(*columns, strict=True)],
        pa.string(),
    )


def _renamed(rows: pa.Table, name: str) -> pa.Table:
    # Records carried into the new slice keep their commit time and sequence number.
    index = rows.schema.get_field_index("_hoodie_file_name")
    return rows.set_column(index, rows.schema.field(index), pa.array([name] * len(rows), pa.string()))


def parse_base_file(name: str) -> tuple[str, str, str] | None:
    """``(fileId, writeToken, instant)`` of a base file's name."""
    if not name.endswith(".parquet"):
        return None
    parts = name.removesuffix(".parquet").split("_")
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 and parts[2].isdigit() else None


def parse_properties(text: str) -> dict[str, str]:
    found = {}
    for line in text.splitlines():
        if line.strip() and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            found[key.strip()] = value.strip()
    return found


def _write_atomically(fs: pafs.FileSystem, path: str, data: bytes, aside: str | None = None) -> None:
    # A reader never sees half a timeline entry: written aside (where Hudi keeps
    # its temporary files, which readers skip), then renamed.
    folder, _, name = path.rpartition("/")
    aside = aside or f"{folder}/.temp"
    temporary = f"{aside}/{name}.{uuid.uuid4().hex[:8]}"
    fs.create_dir(aside, recursive=True)
    with fs.open_output_stream(temporary) as stream:
        stream.write(data)
    fs.move(temporary, path)
