"""Table maintenance beside the sink: compaction by Spark, snapshot expiry, orphan removal.

A streaming sink writes at least one file per partition and one snapshot per
commit: at a 1 s interval over 16 partitions, ~57,000 files and 3,600
snapshots an hour. Each coordinator maintains its connector's tables every
``sinkadmin.maintenance.interval-ms``, one table after the other:

1. **Compaction.** Small files (under three quarters of the target size) of
   one table partition, at least ``min-input-files`` of them, are packed
   into bins of about the target size. One Spark job rewrites the bins, a
   Spark task each (``RewriteJob``): its Python worker reads the files as a
   reader of the table does (pyiceberg's scan, projected to the current
   schema) and writes one file. One REPLACE snapshot then swaps the small
   files for the new ones: readers see the same rows, and incremental readers
   know that no data changed.
2. **Snapshot expiry** by age and count; the files that only expired
   snapshots referenced (the compacted small files, manifests, manifest
   lists) are deleted.
3. **Orphan removal**: files under the table's location that no snapshot or
   metadata references, older than a window (files of commits that never
   completed, of compactions killed before their snapshot).

Only the slow parts run in the maintenance thread: the Spark job, reading
manifests, listing and deleting files. Snapshot commits (the replace and the
expiry) are handed to the coordinator's own thread and run between two of
its commits (``BetweenCommits``), so maintenance never races the sink for
the table: the coordinator is the one writer of its tables' snapshots.

Exactly-once holds across a run killed at any point: a replace snapshot
carries the same rows as the files it replaces and no ``sinkadmin.connector``
property, so the sink's idempotence check (``tables.snapshot_of_commit``)
walks past it; files written and never committed are orphans that a later
run removes; the latest snapshot of each connector is never expired, so the
ledger can still be rebuilt from the tables (DESIGN I2).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import queue
import random
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import pyarrow as pa

from connectors.config.validation import MaintenanceConfig
from workers.failpoints import failpoint
from workers.spark_writer import raised_briefly

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.io import FileIO
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata

log = logging.getLogger(__name__)

T = TypeVar("T")

# Snapshot summary property of a compaction's replace snapshot (the run's id).
PROP_MAINTENANCE_RUN = "sinkadmin.maintenance-run"

# Small means under this share of the target size (Iceberg's rewrite_data_files default).
SMALL_FILE_RATIO = 0.75


# --- planning (pure: unit-tested without servers) ---------------------------------------


@dataclass(frozen=True)
class Candidate:
    """A live data file as compaction sees it."""

    path: str
    size: int
    records: int
    spec_id: int
    partition: tuple[Any, ...]
    # Parquet, of the table's current partition spec, and with no delete
    # files applying to it: a rewrite of it is a plain copy of its rows.
    rewritable: bool = True
    data_file: Any = field(default=None, compare=False, repr=False)


def plan_rewrite(candidates: Iterable[Candidate], target_bytes: int, min_input_files: int) -> list[list[Candidate]]:
    """Bins of small files to rewrite into one file each.

    Per table partition: if it has at least ``min_input_files`` small
    rewritable files, they are packed, largest first, into bins of at most
    ``target_bytes`` (first fit). A bin of one file would only copy it and is
    left out.
    """
    small_limit = target_bytes * SMALL_FILE_RATIO
    groups: dict[tuple[int, tuple[Any, ...]], list[Candidate]] = defaultdict(list)
    for c in candidates:
        if c.rewritable and c.size < small_limit:
            groups[(c.spec_id, c.partition)].append(c)
    bins: list[list[Candidate]] = []
    for key in sorted(groups, key=repr):
        files = groups[key]
        if len(files) < min_input_files:
            continue
        packed: list[tuple[int, list[Candidate]]] = []
        for c in sorted(files, key=lambda f: (-f.size, f.path)):
            for index, (size, members) in enumerate(packed):
                if size + c.size <= target_bytes:
                    members.append(c)
                    packed[index] = (size + c.size, members)
                    break
            else:
                packed.append((c.size, [c]))
        bins.extend(members for _, members in packed if len(members) > 1)
    return bins


@dataclass(frozen=True)
class SnapshotInfo:
    snapshot_id: int
    timestamp_ms: int
    # sinkadmin.connector of the snapshot's summary, if a connector wrote it,
    # and the partitions ("topic/partition") whose offsets its commit holds.
    connector: str | None = None
    partitions: tuple[str, ...] = ()


def snapshots_to_expire(
    snapshots: Sequence[SnapshotInfo],
    current_lineage: Sequence[int],
    protected: Iterable[int],
    now_ms: int,
    max_age_ms: int,
    min_to_keep: int,
) -> list[int]:
    """The snapshots expiry removes: older than ``max_age_ms``, and none of those it must keep.

    Kept whatever their age: the ``min_to_keep`` latest of the current
    lineage (newest first in ``current_lineage``), ``protected`` ones (branch
    and tag heads), and, for each connector, its latest snapshot and the
    latest one holding each partition's offsets. A lost ledger is rebuilt
    from those (DESIGN I2): a commit's summary has only the partitions that
    had records in it, so a partition idle for a month has its offsets in a
    month-old snapshot, which must stay.
    """
    keep = set(current_lineage[:min_to_keep]) | set(protected)
    latest: dict[tuple[str, str], SnapshotInfo] = {}
    for s in snapshots:
        if s.connector is None:
            continue
        for key in [(s.connector, ""), *((s.connector, p) for p in s.partitions)]:
            seen = latest.get(key)
            if seen is None or (s.timestamp_ms, s.snapshot_id) > (seen.timestamp_ms, seen.snapshot_id):
                latest[key] = s
    keep |= {s.snapshot_id for s in latest.values()}
    cutoff = now_ms - max_age_ms
    return sorted(s.snapshot_id for s in snapshots if s.timestamp_ms < cutoff and s.snapshot_id not in keep)


def snapshot_info(snapshot: Any) -> SnapshotInfo:
    """What expiry needs of a pyiceberg snapshot: when, and which connector's commit of which partitions."""
    from workers.tables import PROP_CONNECTOR, PROP_OFFSETS

    props = snapshot.summary.additional_properties if snapshot.summary is not None else {}
    try:
        offsets = json.loads(props.get(PROP_OFFSETS, "{}"))
        partitions = tuple(sorted(f"{topic}/{p}" for topic, parts in offsets.items() for p in parts))
    except (ValueError, AttributeError):
        partitions = ()  # (not ours to read: another writer's property of that name)
    return SnapshotInfo(snapshot.snapshot_id, snapshot.timestamp_ms, props.get(PROP_CONNECTOR), partitions)


@dataclass(frozen=True)
class ListedFile:
    location: str
    size: int
    mtime_s: float


def orphan_files(
    listed: Iterable[ListedFile], referenced: set[str], now_s: float, older_than_s: float
) -> list[ListedFile]:
    """Listed files that nothing references and that are older than the window (``referenced``: ``file_key``s)."""
    cutoff = now_s - older_than_s
    return [f for f in listed if file_key(f.location) not in referenced and f.mtime_s < cutoff]


def file_key(location: str) -> str:
    """One spelling per file: ``file:/x``, ``file:///x`` and ``/x`` are one file, as are ``s3a://`` and ``s3://``."""
    from pyiceberg.io.pyarrow import PyArrowFileIO

    scheme, _, path = PyArrowFileIO.parse_location(location)
    scheme = {"s3a": "s3", "s3n": "s3", "gcs": "gs"}.get(scheme, scheme)
    return f"{scheme}://{path}" if scheme != "file" else path


def _hidden(relative: str) -> bool:
    # As Iceberg's DeleteOrphanFiles: paths under _ or . names are another
    # tool's (Spark's _SUCCESS, checkpoints, a writer's temporary files).
    return any(part.startswith(("_", ".")) for part in relative.split("/"))


# --- the Spark job ------------------------------------------------------------------------

REWRITE_OUTPUT = pa.schema([("bin", pa.int32()), ("files", pa.string())])


@dataclass(frozen=True)
class RewriteJob:
    """One compaction's bins, as Spark's Python workers rewrite them (pickled with the job)."""

    run_id: str
    metadata: TableMetadata
    io_properties: Mapping[str, str]
    # The bins' data files (pyiceberg DataFile objects).
    bins: tuple[tuple[Any, ...], ...]

    def rewrite(self, index: int) -> list[tuple[str, int]]:
        """Rewrite bin ``index`` into one file beside its inputs; its (location, size)."""
        import pyarrow.parquet as pq
        from pyiceberg.expressions import AlwaysTrue
        from pyiceberg.io import load_file_io
        from pyiceberg.io.pyarrow import ArrowScan, schema_to_pyarrow
        from pyiceberg.table import FileScanTask

        files = self.bins[index]
        io = load_file_io(dict(self.io_properties), self.metadata.location)
        schema = self.metadata.schema()
        # Field ids in the file, as Iceberg's own writers put them; the
        # sink's files rely on the table's name mapping instead.
        target = schema_to_pyarrow(schema)
        codec = self.metadata.properties.get("write.parquet.compression-codec", "zstd")
        scan = ArrowScan(self.metadata, io, schema, AlwaysTrue())
        directory = files[0].file_path.rsplit("/", 1)[0]
        location = f"{directory}/{self.run_id}-{index:05d}-compacted.parquet"
        expected = sum(f.record_count for f in files)
        written = 0
        output = io.new_output(location)
        with output.create(overwrite=True) as stream, pq.ParquetWriter(stream, target, compression=codec) as writer:
            for f in files:
                # One file at a time: memory holds a batch, not the bin.
                with io.new_input(f.file_path).open() as source:
                    parquet = pq.ParquetFile(source)
                    if self.reads_as_is(parquet.schema_arrow, target):
                        batches = parquet.iter_batches(batch_size=65536, columns=target.names)
                    else:
                        batches = scan.to_record_batches([FileScanTask(f)])
                    for batch in batches:
                        writer.write_batch(batch.cast(target))
                        written += batch.num_rows
                failpoint("executor.rewrite")  # (a test's executor dies here: mid-compaction)
        if written != expected:
            raise RuntimeError(f"compaction read {written} rows from files that hold {expected}")
        return [(location, len(io.new_input(location)))]

    def reads_as_is(self, found: pa.Schema, target: pa.Schema) -> bool:
        """Whether the file's own columns are what a reader of the table sees, so it can be copied as it is.

        pyiceberg's scan resolves every column of every file through field
        ids or the table's name mapping (~8 ms a file, most of a small file's
        rewrite). That resolution is the identity when the file has exactly
        the table's top-level columns, each of a primitive type equal to the
        table's (string and binary in either Arrow width), and each carries,
        or the name mapping gives it, the id of the table's column of that
        name: the common case of files this sink wrote under the current
        schema. Any other file (older schema, nested columns, renamed or
        promoted columns) goes through pyiceberg's scan.
        """
        if sorted(found.names) != sorted(target.names):
            return False
        mapping = self.metadata.name_mapping()
        mapped = {name: f.field_id for f in (mapping.root if mapping is not None else []) for name in f.names}
        for column in found:
            wanted = target.field(column.name)
            if not _same_primitive(column.type, wanted.type):
                return False
            stated = (column.metadata or {}).get(b"PARQUET:field_id")
            field_id = int(stated) if stated is not None else mapped.get(column.name)
            if field_id is None or str(field_id).encode() != (wanted.metadata or {}).get(b"PARQUET:field_id"):
                return False
        return True


def _same_primitive(found: pa.DataType, wanted: pa.DataType) -> bool:
    if pa.types.is_nested(found) or pa.types.is_nested(wanted):
        return False
    widths = ((pa.string(), pa.large_string()), (pa.binary(), pa.large_binary()))
    return found.equals(wanted) or any(found in pair and wanted in pair for pair in widths)


@raised_briefly
def rewrite_bins(job: RewriteJob, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The function Spark's Python workers run: ``mapInArrow`` over ``range(len(job.bins))``, a bin each."""
    for batch in batches:
        for index in batch.column("id").to_pylist():
            files = json.dumps(job.rewrite(index))
            yield pa.RecordBatch.from_pylist([{"bin": index, "files": files}], schema=REWRITE_OUTPUT)


class SparkRewriter:
    """Runs a RewriteJob as one Spark job on the host's Spark (as the participants' data plane does)."""

    def __init__(self, session: Any = None) -> None:
        self._session = session

    def rewrite(self, job: RewriteJob) -> dict[int, list[tuple[str, int]]]:
        """Run ``job``; the process's shared session, found dropped by the server (idle past its
        timeout, or the server restarted), is joined again and the job run again, as a write does."""
        from workers.spark_writer import forget_session, session_lost, spark_failure, spark_session

        spark = self._session if self._session is not None else spark_session()
        try:
            rows = self._run(spark, job)
        except Exception as exc:
            if self._session is not None or not session_lost(exc):
                raise RuntimeError(spark_failure(exc)) from exc
            log.info("the Spark Connect session was lost before a rewrite: joining again")
            forget_session(spark)
            try:
                rows = self._run(spark_session(), job)
            except Exception as again:
                raise RuntimeError(spark_failure(again)) from again
        return {row["bin"]: [(path, size) for path, size in json.loads(row["files"])] for row in rows}

    @staticmethod
    def _run(spark: Any, job: RewriteJob) -> list[Any]:
        from pyspark.sql.pandas.types import from_arrow_schema

        frame = spark.range(0, len(job.bins), 1, len(job.bins))
        return list(frame.mapInArrow(functools.partial(rewrite_bins, job), from_arrow_schema(REWRITE_OUTPUT)).collect())


# --- between two commits ------------------------------------------------------------------


class Stopped(Exception):
    """The coordinator stopped while maintenance waited for it."""


class MaintenanceFailed(Exception):
    """One or more steps of a run failed (the message says which and why); the others ran."""


class BetweenCommits:
    """Work the maintenance thread hands to the coordinator's thread, which runs it between two commits."""

    def __init__(self) -> None:
        self._work: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self.stopped = threading.Event()

    def run(self, work: Callable[[], T], poll_s: float = 0.5) -> T:
        """Have ``work`` run by the coordinator between commits; its result (or exception) here."""
        future: Future[T] = Future()
        self._work.put((work, future))
        while True:
            if self.stopped.is_set() and future.cancel():
                raise Stopped("the coordinator stopped")
            try:
                return future.result(timeout=poll_s)
            except TimeoutError:
                continue

    @contextlib.contextmanager
    def served(self, poll_s: float = 0.01) -> Iterator[BetweenCommits]:
        """Its turns taken by a thread of its own, as an idle coordinator takes them: for maintenance
        that runs with no coordinator (a stopped connector's table, a benchmark, a test)."""
        stop = threading.Event()

        def serve() -> None:
            while not stop.is_set():
                if not self.run_waiting():
                    stop.wait(poll_s)

        thread = threading.Thread(target=serve, name="between-commits", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join(10)

    def run_waiting(self) -> bool:
        """Called by the coordinator when idle: run one waiting piece of work; True if there was one."""
        try:
            work, future = self._work.get_nowait()
        except queue.Empty:
            return False
        if not future.set_running_or_notify_cancel():
            return False
        try:
            future.set_result(work())
        except Exception as exc:
            # (The maintenance thread's failure, not the coordinator's.)
            future.set_exception(exc)
        return True


# --- one table ----------------------------------------------------------------------------


class MaintenanceLedger(Protocol):
    def start(self, table: str) -> int: ...

    def record(self, run_id: int, **figures: Any) -> None: ...

    def finish(self, run_id: int, error: str | None) -> None:
        """SUCCEEDED without ``error``, FAILED with it."""
        ...

    def interrupted(self, run_id: int) -> None: ...

    def current(self) -> bool:
        """Whether the coordinator whose runs these are still holds the connector (not superseded)."""
        ...

    def protected_files(self, tables: Iterable[str]) -> set[str]:
        """Files prepared commits will add to ``tables``: never orphans, however old."""
        ...


class Rewriter(Protocol):
    def rewrite(self, job: RewriteJob) -> dict[int, list[tuple[str, int]]]: ...


def candidates(table: Table) -> list[Candidate]:
    """The live data files of the table's current snapshot, for ``plan_rewrite``."""
    from pyiceberg.manifest import FileFormat

    spec_id = table.metadata.default_spec_id
    found = []
    for task in table.scan().plan_files():
        f = task.file
        found.append(
            Candidate(
                path=f.file_path,
                size=f.file_size_in_bytes,
                records=f.record_count,
                spec_id=f.spec_id,
                partition=tuple(f.partition[i] for i in range(len(f.partition))),
                rewritable=f.file_format == FileFormat.PARQUET and f.spec_id == spec_id and not task.delete_files,
                data_file=f,
            )
        )
    return found


class _Reachable:
    """The files snapshots reference, reading each manifest once however many snapshots share it."""

    def __init__(self, io: FileIO) -> None:
        self.io = io
        self._manifests: dict[str, set[str]] = {}

    def of(self, metadata: TableMetadata, snapshot_ids: Iterable[int] | None = None) -> set[str]:
        wanted = None if snapshot_ids is None else set(snapshot_ids)
        found: set[str] = set()
        for snapshot in metadata.snapshots:
            if wanted is not None and snapshot.snapshot_id not in wanted:
                continue
            found.add(snapshot.manifest_list)
            for manifest in snapshot.manifests(self.io):
                files = self._manifests.get(manifest.manifest_path)
                if files is None:
                    entries = manifest.fetch_manifest_entry(self.io, discard_deleted=True)
                    files = self._manifests[manifest.manifest_path] = {e.data_file.file_path for e in entries}
                found.add(manifest.manifest_path)
                found |= files
        return found


def metadata_files(table: Table) -> set[str]:
    """Metadata files that are not a snapshot's: the current and logged metadata, statistics."""
    metadata = table.metadata
    files = {table.metadata_location, *(entry.metadata_file for entry in metadata.metadata_log)}
    files |= {s.statistics_path for s in metadata.statistics}
    files |= {s.statistics_path for s in metadata.partition_statistics}
    return files


def list_files(io: FileIO, location: str) -> list[ListedFile]:
    """Every file under ``location`` but hidden ones (``_hidden``)."""
    import pyarrow.fs as pafs
    from pyiceberg.io.pyarrow import PyArrowFileIO

    if not isinstance(io, PyArrowFileIO):
        raise RuntimeError(f"orphan removal lists files with pyarrow; the table's FileIO is {type(io).__name__}")
    scheme, netloc, root = PyArrowFileIO.parse_location(location)
    fs = io.fs_by_scheme(scheme, netloc)
    listed = []
    for info in fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True)):
        if info.type != pafs.FileType.File or _hidden(info.path[len(root) :].lstrip("/")):
            continue
        where = info.path if scheme == "file" else f"{scheme}://{info.path}"
        mtime = info.mtime.timestamp() if info.mtime is not None else time.time()
        listed.append(ListedFile(where, info.size or 0, mtime))
    return listed


@dataclass(frozen=True)
class Rewrite:
    """A compaction's rewritten files, waiting for their replace snapshot."""

    run_id: str
    replaced: list[Any]  # pyiceberg DataFiles
    added: list[tuple[str, Any]]  # (location, partition record)
    rewritten_bytes: int
    added_bytes: int


# What expiry did: the expired snapshot ids, and the table's metadata before and after.
Expiry = tuple[list[int], "TableMetadata", "TableMetadata"]


@dataclass
class RunFigures:
    rewritten_files: int = 0
    rewritten_bytes: int = 0
    added_files: int = 0
    added_bytes: int = 0
    replace_snapshot_id: int | None = None
    expired_snapshots: int = 0
    expired_files: int = 0
    orphan_files: int = 0
    removed_bytes: int = 0


class TableMaintenance:
    """One maintenance run of one table (see the module's docstring)."""

    def __init__(
        self,
        config: MaintenanceConfig,
        catalog: Catalog,
        table_name: str,
        rewriter: Rewriter,
        between_commits: BetweenCommits,
        ledger: MaintenanceLedger,
        run_id: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.catalog = catalog
        self.table_name = table_name
        self.rewriter = rewriter
        self.between_commits = between_commits
        self.ledger = ledger
        self.run_id = run_id
        self.clock = clock
        self.figures = RunFigures()
        self._manifests: _Reachable | None = None

    def run(self) -> RunFigures:
        """Every step; one that fails does not keep the others from running (a Spark outage
        must not stop expiry), and the run then fails with what failed."""
        failures: list[str] = []
        rewrite = None
        try:
            rewrite = self.rewrite()
        except Stopped:
            raise
        except Exception as exc:
            failures.append(f"compaction: {type(exc).__name__}: {exc}")
        try:
            # Both snapshot commits in one turn of the coordinator's: each
            # turn waits for the commit in flight to end.
            snapshot_id, expiry = self.between_commits.run(lambda: self._commit_snapshots(rewrite))
            if rewrite is not None:
                self._record_rewrite(rewrite, snapshot_id)
            self._clean_expired(*expiry)
        except Stopped:
            raise
        except Exception as exc:
            failures.append(f"{'replace and ' if rewrite else ''}expiry: {type(exc).__name__}: {exc}")
        try:
            self.remove_orphans()
        except Stopped:
            raise
        except Exception as exc:
            failures.append(f"orphan removal: {type(exc).__name__}: {exc}")
        if failures:
            raise MaintenanceFailed("; ".join(failures))
        return self.figures

    def compact(self) -> None:
        """Compaction alone: the rewrite, and its replace snapshot between two commits."""
        rewrite = self.rewrite()
        if rewrite is not None:
            self._record_rewrite(rewrite, self.between_commits.run(lambda: self._replace(rewrite)))

    def _record(self, **figures: Any) -> None:
        for name, value in figures.items():
            setattr(self.figures, name, value)
        self.ledger.record(self.run_id, **figures)

    # -- compaction --------------------------------------------------------------------------

    def rewrite(self) -> Rewrite | None:
        """The Spark job that rewrites the small files (in the maintenance thread); None if there are too few."""
        table = self.catalog.load_table(self.table_name)
        if table.current_snapshot() is None:
            return None
        bins = plan_rewrite(candidates(table), self.config.target_file_size_bytes, self.config.min_input_files)
        if not bins:
            return None
        job = RewriteJob(
            run_id=f"maintenance-{self.run_id}-{uuid.uuid4().hex[:8]}",
            metadata=table.metadata,
            io_properties=dict(table.io.properties),
            bins=tuple(tuple(c.data_file for c in b) for b in bins),
        )
        log.info("%s: compacting %d files into %d", self.table_name, sum(len(b) for b in bins), len(bins))
        written = self.rewriter.rewrite(job)
        failpoint("maintenance.before_replace")
        return Rewrite(
            run_id=job.run_id,
            replaced=[c.data_file for b in bins for c in b],
            added=[(path, b[0].data_file.partition) for index, b in enumerate(bins) for path, _ in written[index]],
            rewritten_bytes=sum(c.size for b in bins for c in b),
            added_bytes=sum(size for files in written.values() for _, size in files),
        )

    def _commit_snapshots(self, rewrite: Rewrite | None) -> tuple[int | None, Expiry]:
        """The replace, if there is one, and the expiry (in the coordinator's thread, between commits)."""
        snapshot_id = None
        if rewrite is not None:
            snapshot_id = self._replace(rewrite)
            failpoint("maintenance.after_replace")
        return snapshot_id, self._expire()

    def _replace(self, rewrite: Rewrite) -> int:
        from workers.tables import replace_files

        return replace_files(
            self.catalog, self.table_name, rewrite.replaced, rewrite.added, {PROP_MAINTENANCE_RUN: rewrite.run_id}
        )

    def _record_rewrite(self, rewrite: Rewrite, snapshot_id: int | None) -> None:
        self._record(
            rewritten_files=len(rewrite.replaced),
            rewritten_bytes=rewrite.rewritten_bytes,
            added_files=len(rewrite.added),
            added_bytes=rewrite.added_bytes,
            replace_snapshot_id=snapshot_id,
        )

    # -- expiry ------------------------------------------------------------------------------

    def _clean_expired(self, expired: list[int], before: TableMetadata, after: TableMetadata) -> None:
        """Delete the files only the expired snapshots referenced (in the maintenance thread)."""
        if not expired:
            return
        table = self.catalog.load_table(self.table_name)
        reachable = self._reachable(table.io)
        kept = {file_key(location) for location in reachable.of(after)}
        unreferenced = {location for location in reachable.of(before, expired) if file_key(location) not in kept}
        removed = self._delete(table.io, sorted(unreferenced))
        self._record(
            expired_snapshots=len(expired),
            expired_files=len(removed),
            removed_bytes=self.figures.removed_bytes + sum(size for _, size in removed),
        )

    def _expire(self) -> Expiry:
        """Expire snapshots (in the coordinator's thread); what was expired, and the metadata before and after."""
        from pyiceberg.table.snapshots import ancestors_of

        table = self.catalog.load_table(self.table_name)
        metadata = table.metadata
        current = table.current_snapshot()
        lineage = [s.snapshot_id for s in ancestors_of(current, metadata)] if current is not None else []
        infos = [snapshot_info(s) for s in metadata.snapshots]
        protected = {ref.snapshot_id for ref in metadata.refs.values()}
        expired = snapshots_to_expire(
            infos,
            lineage,
            protected,
            int(self.clock() * 1000),
            self.config.max_snapshot_age_ms,
            self.config.min_snapshots_to_keep,
        )
        if not expired:
            return [], metadata, metadata
        table.maintenance.expire_snapshots().by_ids(expired).commit()
        return expired, metadata, self.catalog.load_table(self.table_name).metadata

    # -- orphans -----------------------------------------------------------------------------

    def remove_orphans(self) -> None:
        table = self.catalog.load_table(self.table_name)
        # Listed before the references are read: a file written after the
        # listing is not in it, and one committed before the reading is
        # referenced, so no file is taken for an orphan while it is being
        # committed, whatever the window.
        listed = list_files(table.io, table.metadata.location)
        table = self.catalog.load_table(self.table_name)
        referenced = self._reachable(table.io).of(table.metadata) | metadata_files(table)
        referenced |= self.ledger.protected_files([self.table_name])
        keys = {file_key(location) for location in referenced}
        orphans = orphan_files(listed, keys, self.clock(), self.config.orphan_older_than_ms / 1000)
        removed = self._delete(table.io, [f.location for f in orphans])
        self._record(
            orphan_files=len(removed),
            removed_bytes=self.figures.removed_bytes + sum(size for _, size in removed),
        )

    def _reachable(self, io: FileIO) -> _Reachable:
        # One per run: manifests never change, so expiry and orphan removal read each once.
        if self._manifests is None:
            self._manifests = _Reachable(io)
        return self._manifests

    def _delete(self, io: FileIO, locations: Sequence[str]) -> list[tuple[str, int]]:
        removed = []
        for location in locations:
            try:
                size = len(io.new_input(location))
                io.delete(location)
            except FileNotFoundError:
                continue
            removed.append((location, size))
        if removed:
            log.info("%s: deleted %d files no snapshot references", self.table_name, len(removed))
        return removed


# --- the connector's maintenance thread ---------------------------------------------------


class MaintainedTables(Protocol):
    """What a sink's maintenance does to its tables, run by the connector's ``Maintainer``."""

    def existing(self) -> list[str]:
        """The connector's tables that exist now (one not yet created has nothing to maintain)."""
        ...

    def maintain(self, table: str, run_id: int, turns: BetweenCommits) -> None:
        """One run on one table, its figures recorded under ``run_id``; timeline or snapshot commits go
        through ``turns``. Raises when a step failed (``Stopped`` when the coordinator stops)."""
        ...


class IcebergTables:
    """The Iceberg sink's tables: compaction, snapshot expiry, orphan removal (``TableMaintenance``)."""

    def __init__(
        self,
        config: MaintenanceConfig,
        tables: Callable[[], list[str]],
        catalog: Callable[[], Catalog],
        rewriter: Rewriter,
        ledger: MaintenanceLedger,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.tables = tables
        self.catalog = catalog
        self.rewriter = rewriter
        self.ledger = ledger
        self.clock = clock

    def existing(self) -> list[str]:
        catalog = self.catalog()
        return [name for name in self.tables() if catalog.table_exists(name)]

    def maintain(self, table: str, run_id: int, turns: BetweenCommits) -> None:
        TableMaintenance(
            self.config, self.catalog(), table, self.rewriter, turns, self.ledger, run_id, self.clock
        ).run()


class Maintainer:
    """Maintains a connector's tables every interval, in a thread beside its coordinator.

    The coordinator calls ``between_commits()`` whenever it is idle (see
    ``BetweenCommits``) and ``close()`` when it stops.
    """

    def __init__(
        self,
        connector: str,
        config: MaintenanceConfig,
        tables: MaintainedTables,
        ledger: MaintenanceLedger,
        last_run: float | None,
        release: Callable[[], None] = lambda: None,
    ) -> None:
        self.connector = connector
        self.config = config
        self.tables = tables
        self.ledger = ledger
        self.queue = BetweenCommits()
        interval = config.interval_ms / 1000
        # Not at once: coordinators start together (a deploy, a worker's
        # restart, twenty connectors created at once), and their first
        # catalog connections and commits come first; a run is spread over
        # 30-60 s after start (at most one to two intervals). A coordinator
        # that restarts keeps to the interval since the last run.
        settle = time.time() + min(interval, 30.0) * (1 + random.random())
        self.next_run = settle if last_run is None else max(settle, last_run + interval)
        # Called after each run: the thread holds no database connection
        # through the hour between runs (Postgres's connections are the
        # limit to watch with many runners).
        self.release = release
        self.runs = 0
        self._thread = threading.Thread(target=self._loop, name=f"maintenance-{connector}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def between_commits(self) -> bool:
        return self.queue.run_waiting()

    def close(self, timeout: float = 5.0) -> None:
        self.queue.stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _loop(self) -> None:
        try:
            while not self.queue.stopped.wait(max(0.0, min(1.0, self.next_run - time.time()))):
                if time.time() < self.next_run:
                    continue
                try:
                    self.run_once()
                except Exception as exc:
                    # (The catalog is out, say: the coordinator shows that;
                    # the next interval tries again.)
                    log.warning("%s: maintenance could not run: %s", self.connector, exc)
                finally:
                    self.release()
                self.next_run = time.time() + self.config.interval_ms / 1000
        finally:
            self.release()

    def run_once(self) -> None:
        """Maintain each table once; a table's failure is recorded and the next one goes on."""
        for name in self.tables.existing():
            if self.queue.stopped.is_set():
                return
            run_id = self.ledger.start(name)
            try:
                self.tables.maintain(name, run_id, self.queue)
            except Stopped:
                self.ledger.interrupted(run_id)
                return
            except Exception as exc:
                log.warning("%s: maintenance of %s failed: %s", self.connector, name, exc, exc_info=True)
                self.ledger.finish(
                    run_id, str(exc) if isinstance(exc, MaintenanceFailed) else f"{type(exc).__name__}: {exc}"
                )
                continue
            self.ledger.finish(run_id, None)
        self.runs += 1
