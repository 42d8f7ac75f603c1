"""The Hudi sink's commit: one instant per prepared commit, its file groups merged by Spark.

The coordinator, after the ledger has prepared a commit (DESIGN I4):

1. finds the commit's instant on the timeline (its ``.inflight`` or
   ``.commit`` carries the commit id): complete, it is done; in flight, the
   commit is rolled forward under that instant. Otherwise the instant is the
   ledger's prepare time (later than every instant on the timeline), so a
   successor rolling the same commit forward names it alike;
2. rolls back every other instant that never completed (its base files and
   markers), so hudi-rs, which does not filter them on table version 6,
   never reads them;
3. plans the commit's file groups from the participants' counts: for
   upserts one per touched bucket of each partition; for inserts the
   partition's small files first, then new file groups of the target size;
4. has Spark write each file group's new slice (``HudiMergeJob``, a Spark
   task per group of file groups), under names fixed by the plan, so a
   second writer of the same commit (a zombie, a roll forward) writes the
   same files;
5. completes the instant: ``<instant>.commit`` appears, naming the slices,
   with the commit id and the Kafka offsets in its extraMetadata.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from connectors.config import SinkConfig
from sinks.hudi.clustering import groups_in_clustering, settle
from sinks.hudi.settings import HudiSettings
from sinks.hudi.table import (
    CHECKPOINT_KEY,
    COMMIT_ID_KEY,
    COMPLETED,
    DATA_ACTIONS,
    KAFKA_OFFSETS_KEY,
    SEQUENCE,
    FileSlice,
    HudiTable,
    HudiTableSpec,
    WriteStat,
    bucket_file_id,
    bucket_of,
    new_file_id,
)
from sinks.hudi.writer import BUCKET, incoming_root
from workers.coordinator import PreparedCommit
from workers.failpoints import failpoint
from workers.record_runs import widened
from workers.spark_writer import UnitRunner, balanced_groups

log = logging.getLogger(__name__)
OFFSETS_KEY = "sinkadmin.offsets"
# What rebuilds a lost ledger from the timeline (as Iceberg snapshots' summaries do).
CONNECTOR_KEY = "sinkadmin.connector"
EPOCH_KEY = "sinkadmin.epoch"
RANGES_KEY = "sinkadmin.ranges"


@dataclass(frozen=True)
class Piece:
    """Rows of one incoming file for a file group: those of its partition path (and bucket), or for
    inserts the ``count`` of them from the ``first`` on, in the file's order."""

    path: str
    first: int = 0
    count: int = -1


@dataclass(frozen=True)
class FileGroupWrite:
    """One file group's new slice: where its rows come from and what it replaces."""

    partition_path: str
    file_id: str
    previous: FileSlice | None
    bucket: int | None
    pieces: tuple[Piece, ...]
    token: str


@dataclass(frozen=True)
class HudiMergeJob:
    """The Spark job of a commit: Spark task n writes the file groups of ``groups[n]`` (pickled to Spark's
    Python workers)."""

    base: str
    spec: HudiTableSpec
    instant: str
    upsert: bool
    groups: tuple[tuple[FileGroupWrite, ...], ...]

    @property
    def count(self) -> int:
        return len(self.groups)

    def run_unit(self, index: int) -> dict[str, Any]:
        failpoint("hudi.merge")  # (a test's executor dies here: some slices written, the instant not complete)
        table = HudiTable(pafs.LocalFileSystem(), self.base, self.spec)
        read: dict[str, pa.Table] = {}
        stats: list[dict[str, Any]] = []
        schema: pa.Schema | None = None
        for write in self.groups[index]:
            rows = self._rows(write, read)
            stat = table.write_slice(
                self.instant, write.partition_path, write.file_id, write.previous, rows, self.upsert, write.token
            )
            stats.append(stat.as_json())
            written = pq.read_schema(f"{table.partition_dir(write.partition_path)}/{stat.path.rsplit('/', 1)[-1]}")
            schema = written if schema is None else widened(schema, written)
        return {
            "stats": stats,
            "schema": base64.b64encode(schema.serialize().to_pybytes()).decode() if schema is not None else None,
        }

    def _rows(self, write: FileGroupWrite, read: dict[str, pa.Table]) -> pa.Table:
        parts = []
        for piece in write.pieces:
            if piece.path not in read:
                read[piece.path] = pq.read_table(piece.path)
            rows = read[piece.path]
            mine = pc.equal(rows.column("_hoodie_partition_path"), write.partition_path)
            if write.bucket is not None:
                mine = pc.and_(mine, pc.equal(rows.column(BUCKET), write.bucket))
            rows = rows.filter(mine)
            if piece.count >= 0:
                rows = rows.slice(piece.first, piece.count)
            parts.append(rows)
        rows = pa.concat_tables(parts, promote_options="permissive")
        # The stream's order: the pieces come in (topic, partition) order, each in offset order.
        rows = rows.set_column(rows.schema.get_field_index(SEQUENCE), SEQUENCE, pa.array(range(len(rows)), pa.int64()))
        return rows.drop_columns([BUCKET]) if BUCKET in rows.column_names else rows


def plan(
    table: HudiTable, settings: HudiSettings, files: Sequence[dict[str, Any]], instant: str, commit_id: str
) -> list[FileGroupWrite]:
    """The commit's file group writes, from the participants' files and their counts."""
    ordered = sorted(files, key=lambda f: (f["topic"], f["partition"], f["path"]))
    counts = [(f, json.loads(f["partition_values"] or "{}")) for f in ordered]
    partitions = sorted({p for _, c in counts for p in c})
    # (File groups a clustering has planned to replace take no inserts: Hudi's UpsertPartitioner skips them.)
    reserved = set() if settings.upsert else groups_in_clustering(table)
    writes: list[FileGroupWrite] = []
    for partition in partitions:
        slices = table.latest_slices(partition, before=instant)
        slices = {f: s for f, s in slices.items() if (partition, f) not in reserved}
        if settings.upsert:
            by_bucket = {bucket_of(s.file_id): s for s in slices.values()}
            touched = sorted({int(b) for _, c in counts for b in c.get(partition, {})})
            for bucket in touched:
                previous = by_bucket.get(bucket)
                file_id = previous.file_id if previous else bucket_file_id(bucket, f"{commit_id}/{partition}/{bucket}")
                pieces = tuple(Piece(f["path"]) for f, c in counts if str(bucket) in c.get(partition, {}))
                writes.append(FileGroupWrite(partition, file_id, previous, bucket, pieces, ""))
        else:
            writes.extend(_insert_writes(settings, partition, slices, counts, commit_id))
    return [
        FileGroupWrite(w.partition_path, w.file_id, w.previous, w.bucket, w.pieces, f"{n}-0-0")
        for n, w in enumerate(writes)
    ]


def _insert_writes(
    settings: HudiSettings,
    partition: str,
    slices: dict[str, FileSlice],
    counts: list[tuple[dict[str, Any], dict[str, dict[str, int]]]],
    commit_id: str,
) -> list[FileGroupWrite]:
    """Inserts fill the partition's small files up to the target size, then new file groups of that size
    (as Hudi's UpsertPartitioner assigns inserts)."""
    sources = [(f, sum(c[partition].values())) for f, c in counts if partition in c]
    total = sum(n for _, n in sources)
    record_bytes = max(1.0, sum(f["bytes"] for f, _ in sources) / max(1, sum(f["records"] for f, _ in sources)) * 1.5)
    per_file = max(1, int(settings.max_file_size / record_bytes))
    targets: list[tuple[str, FileSlice | None, int]] = []
    if settings.operation == "insert" and settings.small_file_limit > 0:
        for found in sorted(slices.values(), key=lambda s: (s.size, s.file_id)):
            if found.size < settings.small_file_limit:
                room = int((settings.max_file_size - found.size) / record_bytes)
                if room > 0:
                    targets.append((found.file_id, found, room))
    left = total - sum(room for _, _, room in targets)
    for n in range(max(0, math.ceil(left / per_file))):
        targets.append((new_file_id(f"{commit_id}/{partition}/{n}"), None, per_file))
    writes = []
    # Cut the partition's rows, file after file, into the targets' room.
    source, taken = 0, 0
    for file_id, previous, capacity in targets:
        pieces = []
        room = capacity
        while room > 0 and source < len(sources):
            f, n = sources[source]
            take = min(room, n - taken)
            pieces.append(Piece(f["path"], taken, take))
            room -= take
            taken += take
            if taken == n:
                source, taken = source + 1, 0
        if pieces:
            writes.append(FileGroupWrite(partition, file_id, previous, None, tuple(pieces), ""))
    return writes


def balanced(writes: Sequence[FileGroupWrite], tasks: int) -> tuple[tuple[FileGroupWrite, ...], ...]:
    """The writes in at most ``tasks`` groups of about equal work (by the rows they read: its pieces',
    and a hundred bytes a row of the slice it replaces), one Spark task each."""
    work = [sum(max(p.count, 1) for p in w.pieces) + (w.previous.size // 100 if w.previous else 0) for w in writes]
    return tuple(tuple(writes[i] for i in group) for group in balanced_groups(work, tasks))


def kafka_offsets(offsets: dict[str, dict[str, int]]) -> dict[str, str]:
    """The consumed offsets as Hudi's tools read them: Hudi's Kafka Connect coordinator
    (``kafka.commit.offsets``: ``partition=offset,...``) and HoodieStreamer
    (``deltastreamer.checkpoint.key``: ``topic,partition:offset,...``), for a connector of one topic."""
    if len(offsets) != 1:
        return {}
    ((topic, ends),) = offsets.items()
    ordered = sorted(ends.items(), key=lambda kv: int(kv[0]))
    return {
        KAFKA_OFFSETS_KEY: ",".join(f"{p}={o}" for p, o in ordered),
        CHECKPOINT_KEY: topic + "," + ",".join(f"{p}:{o}" for p, o in ordered),
    }


class HudiCommitter:
    """The coordinator's CommitterPort for the Hudi sink."""

    # A merge job's Spark tasks at most: file groups are spread over them.
    MAX_TASKS = 16
    # Incoming directories of commits that were never prepared go once this old.
    ORPHAN_AGE_S = 3600.0

    def __init__(self, connector: str, config: SinkConfig) -> None:
        self.connector = connector
        self.config = config
        self.settings: HudiSettings = config.settings
        self._run_units = UnitRunner(config)
        self._swept_at: float | None = None

    def close(self) -> None:
        pass

    @property
    def ident(self) -> str:
        return f"{self.settings.database}.{self.settings.table_name}"

    def commit(self, prepared: PreparedCommit) -> dict[str, int]:
        fs, base = self.settings.filesystem()
        table = HudiTable.create_or_load(fs, base, self.settings.spec())
        commit_id = str(prepared.commit_id)
        found = table.find(commit_id)
        if found is not None and found[1]:
            self._cleanup(fs, prepared)
            return {self.ident: int(found[0])}
        # A clustering a predecessor was completing is finished first (its files may be in place).
        settle(table, requested=False)
        removed = table.roll_back(keep=[found[0]] if found else [])
        if removed:
            log.info("%s: rolled back instants that never completed: %s", self.connector, ", ".join(removed))
        instant = found[0] if found else self._instant(table, prepared)
        previous = table.completed()
        offsets = self._offsets(table, previous, prepared)
        extra = {
            COMMIT_ID_KEY: commit_id,
            CONNECTOR_KEY: self.connector,
            EPOCH_KEY: str(prepared.epoch),
            RANGES_KEY: json.dumps(prepared.offsets, sort_keys=True),
            OFFSETS_KEY: json.dumps(offsets, sort_keys=True),
            **kafka_offsets(offsets),
        }
        table.start(instant, extra)
        writes = plan(table, self.settings, prepared.files, instant, commit_id)
        stats, schema = self._write(table, instant, writes)
        if schema is None and previous:
            schema = self._schema(table)
        failpoint("hudi.before_complete")  # (a test's coordinator dies here: slices written, instant in flight)
        table.complete(
            instant,
            stats,
            schema or pa.schema([]),
            extra,
            "UPSERT" if self.settings.upsert else self.settings.operation.upper(),
        )
        self._cleanup(fs, prepared)
        return {self.ident: int(instant)}

    def _instant(self, table: HudiTable, prepared: PreparedCommit) -> str:
        moment = (
            datetime.fromtimestamp(prepared.prepared_at_ms / 1000, tz=UTC)
            if prepared.prepared_at_ms is not None
            else datetime.now(UTC)
        )
        return table.next_instant(moment)

    def _offsets(self, table: HudiTable, completed: list[str], prepared: PreparedCommit) -> dict[str, dict[str, int]]:
        """Every partition's next offset after this commit: the last commit's, moved on by this one's."""
        found: dict[str, dict[str, int]] = {}
        if completed:
            extra = table.commit_metadata(completed[-1]).get("extraMetadata") or {}
            found = json.loads(extra.get(OFFSETS_KEY) or "{}")
        for topic, ranges in prepared.offsets.items():
            for partition, (_, end) in ranges.items():
                found.setdefault(topic, {})[str(partition)] = int(end)
        return found

    def _write(
        self, table: HudiTable, instant: str, writes: list[FileGroupWrite]
    ) -> tuple[list[WriteStat], pa.Schema | None]:
        if not writes:
            return [], None
        job = HudiMergeJob(table.base, table.spec, instant, self.settings.upsert, balanced(writes, self.MAX_TASKS))
        outcomes = self._run_units(job)
        stats = [WriteStat.from_json(s) for o in outcomes for s in o["stats"]]
        schema: pa.Schema | None = None
        for outcome in outcomes:
            if outcome["schema"]:
                found = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(outcome["schema"])))
                schema = found if schema is None else widened(schema, found)
        return stats, schema

    @staticmethod
    def _schema(table: HudiTable) -> pa.Schema | None:
        # An empty commit names the schema of the newest base file written before it (and not
        # cleaned since: a clustering may have replaced the last commit's files).
        for entry in reversed(table.timeline()):
            if entry.action not in DATA_ACTIONS or entry.state != COMPLETED:
                continue
            stats = table.commit_metadata(entry.instant, action=entry.action).get("partitionToWriteStats") or {}
            for stat in (s for written in stats.values() for s in written):
                path = f"{table.base}/{stat['path']}"
                if table.fs.get_file_info(path).type == pafs.FileType.File:
                    return pq.read_schema(path, filesystem=table.fs)
        return None

    def _cleanup(self, fs: pafs.FileSystem, prepared: PreparedCommit) -> None:
        done = incoming_root(self.settings, prepared.commit_id)
        if fs.get_file_info(done).type == pafs.FileType.Directory:
            fs.delete_dir(done)
        if self._swept_at is None or time.monotonic() - self._swept_at > self.ORPHAN_AGE_S:
            self._sweep(fs)

    def _sweep(self, fs: pafs.FileSystem) -> None:
        """Remove incoming rows of commits that were never prepared (aborted, superseded), once an hour old."""
        self._swept_at = time.monotonic()
        root = incoming_root(self.settings, "").rstrip("/")
        now = time.time()
        for info in fs.get_file_info(pafs.FileSelector(root, allow_not_found=True)):
            if info.type != pafs.FileType.Directory:
                continue
            newest = max(
                (
                    f.mtime.timestamp()
                    for f in fs.get_file_info(pafs.FileSelector(info.path, recursive=True))
                    if f.mtime
                ),
                default=info.mtime.timestamp() if info.mtime else 0.0,
            )
            if now - newest > self.ORPHAN_AGE_S:
                log.info("%s: removing %s, left by a commit that was never prepared", self.connector, info.path)
                fs.delete_dir(info.path)


def recovered_commits(connector: str, config: SinkConfig) -> list[Any]:
    """Every commit of ``connector`` on the table's timeline (for rebuilding a lost ledger, DESIGN I2)."""
    import uuid

    from connectors.actions.ledger import RecoveredCommit

    settings: HudiSettings = config.settings
    fs, base = settings.filesystem()
    table = HudiTable(fs, base, settings.spec())
    if table.stored_properties() is None:
        return []
    found = []
    for instant in table.completed():
        extra = table.commit_metadata(instant).get("extraMetadata") or {}
        if extra.get(CONNECTOR_KEY) != connector or COMMIT_ID_KEY not in extra:
            continue
        ranges = json.loads(extra.get(RANGES_KEY) or "{}")
        found.append(
            RecoveredCommit(
                commit_id=uuid.UUID(extra[COMMIT_ID_KEY]),
                epoch=int(extra.get(EPOCH_KEY, 0)),
                committed_at=datetime.strptime(instant[:17] + "000", "%Y%m%d%H%M%S%f").replace(tzinfo=UTC),
                snapshot_ids={f"{settings.database}.{settings.table_name}": int(instant)},
                ranges={(topic, int(p)): (r[0], r[1]) for topic, parts in ranges.items() for p, r in parts.items()},
                watermark=None,
            )
        )
    return found
