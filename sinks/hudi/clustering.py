"""Hudi's clustering beside the sink: small file groups rewritten into large ones, one replacecommit.

``bulk_insert`` opens new file groups every commit, and ``insert`` opens some
whenever its small files are full: a streaming table collects small files.
Clustering packs a partition's small base files (under
``hoodie.clustering.plan.strategy.small.file.limit``) into groups of at most
``max.bytes.per.group``, as Hudi's size-based plan strategy does; one Spark job
(a task per group) rewrites each group into new file groups of about
``target.file.max.bytes``, keeping every record's ``_hoodie_commit_time`` and
sequence number (Hudi's ``preserve.commit.metadata``); a replacecommit then
makes the new file groups the table's and drops the replaced ones, which
cleaning deletes once no retained commit reads them. Upsert tables are not
clustered: their bucket index fixes the file groups a key lives in (Hudi
does not cluster a simple bucket index either).

On the timeline, as Hudi writes a clustering: ``<instant>.replacecommit.requested``
(Avro HoodieRequestedReplaceMetadata, operation ``cluster``, with the plan),
``.replacecommit.inflight`` (empty), and ``<instant>.replacecommit``
(HoodieReplaceCommitMetadata, JSON, with ``partitionToReplaceFileIds``).

How it shares the table with the sink, and why readers see the same rows:

1. **Request**, on the coordinator's thread between two commits: the
   instant is named and the plan put on the timeline. From then on the
   sink's inserts leave the planned file groups alone (as Hudi's
   UpsertPartitioner skips file groups in pending clustering) and name
   their instants after it.
2. **Rewrite**, in the maintenance thread, one Spark job: the new files are
   written under ``.hoodie/.temp``, which no reader lists, with their final
   names.
3. **Complete**, on the coordinator's thread between two commits: if this
   coordinator still holds the connector, the plan is still requested, and
   every planned file group still has the slice that was read, the
   replacecommit goes inflight, the files are renamed into their partitions
   and the replacecommit completes. Otherwise the clustering is rolled back.

Readers take base files of completed instants only (Spark's Hudi reader,
and hudi-rs 0.5, which the tests read with): the new files are read from
the moment the replacecommit completes, which also drops the replaced file
groups. The renames and the completion happen in one turn in which no
commit of the sink completes, and nothing is renamed into a partition
before the checks above have passed.

A clustering cut before its completion is rolled back: by the sink's next
commit if it was in flight (its files may be in the partitions), by the
next maintenance run if it was only requested (its files are aside).
"""

from __future__ import annotations

import base64
import io
import json
import logging
import math
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import fastavro
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from sinks.hudi.table import (
    COMPLETED,
    HOODIE,
    INFLIGHT,
    REPLACE_COMMIT,
    REQUESTED,
    FileSlice,
    HudiTable,
    HudiTableSpec,
    TimelineEntry,
    WriteStat,
)
from workers.failpoints import failpoint
from workers.record_runs import widened

if TYPE_CHECKING:
    from sinks.hudi.settings import ClusteringConfig
    from workers.maintenance import BetweenCommits

log = logging.getLogger(__name__)

CLUSTER = "CLUSTER"  # WriteOperationType.CLUSTER.name(), as Hudi's requested metadata and replacecommit name it
# Hudi's classes whose behaviour this clustering has: the size-based plan, rewritten with no sort.
PLAN_STRATEGY = "org.apache.hudi.client.clustering.plan.strategy.SparkSizeBasedClusteringPlanStrategy"
EXECUTION_STRATEGY = "org.apache.hudi.client.clustering.run.strategy.SparkSortAndSizeExecutionStrategy"

_NS = "org.apache.hudi.avro.model"
REQUESTED_REPLACE_SCHEMA = fastavro.parse_schema(
    {
        "namespace": _NS,
        "type": "record",
        "name": "HoodieRequestedReplaceMetadata",
        "fields": [
            {"name": "operationType", "type": ["null", "string"], "default": None},
            {
                "name": "clusteringPlan",
                "type": [
                    {
                        "type": "record",
                        "name": "HoodieClusteringPlan",
                        "fields": [
                            {
                                "name": "inputGroups",
                                "type": [
                                    "null",
                                    {
                                        "type": "array",
                                        "items": {
                                            "type": "record",
                                            "name": "HoodieClusteringGroup",
                                            "fields": [
                                                {
                                                    "name": "slices",
                                                    "type": [
                                                        "null",
                                                        {
                                                            "type": "array",
                                                            "items": {
                                                                "type": "record",
                                                                "name": "HoodieSliceInfo",
                                                                "fields": [
                                                                    {
                                                                        "name": "dataFilePath",
                                                                        "type": ["null", "string"],
                                                                        "default": None,
                                                                    },
                                                                    {
                                                                        "name": "deltaFilePaths",
                                                                        "type": [
                                                                            "null",
                                                                            {"type": "array", "items": "string"},
                                                                        ],
                                                                        "default": None,
                                                                    },
                                                                    {"name": "fileId", "type": ["null", "string"]},
                                                                    {
                                                                        "name": "partitionPath",
                                                                        "type": ["null", "string"],
                                                                        "default": None,
                                                                    },
                                                                    {
                                                                        "name": "bootstrapFilePath",
                                                                        "type": ["null", "string"],
                                                                        "default": None,
                                                                    },
                                                                    {
                                                                        "name": "version",
                                                                        "type": ["int", "null"],
                                                                        "default": 1,
                                                                    },
                                                                ],
                                                            },
                                                        },
                                                    ],
                                                    "default": None,
                                                },
                                                {
                                                    "name": "metrics",
                                                    "type": ["null", {"type": "map", "values": "double"}],
                                                    "default": None,
                                                },
                                                {"name": "numOutputFileGroups", "type": ["int", "null"], "default": 1},
                                                {"name": "version", "type": ["int", "null"], "default": 1},
                                            ],
                                        },
                                    },
                                ],
                                "default": None,
                            },
                            {
                                "name": "strategy",
                                "type": [
                                    {
                                        "type": "record",
                                        "name": "HoodieClusteringStrategy",
                                        "fields": [
                                            {"name": "strategyClassName", "type": ["null", "string"], "default": None},
                                            {
                                                "name": "strategyParams",
                                                "type": ["null", {"type": "map", "values": "string"}],
                                                "default": None,
                                            },
                                            {"name": "version", "type": ["int", "null"], "default": 1},
                                        ],
                                    },
                                    "null",
                                ],
                            },
                            {
                                "name": "extraMetadata",
                                "type": ["null", {"type": "map", "values": "string"}],
                                "default": None,
                            },
                            {"name": "version", "type": ["int", "null"], "default": 1},
                        ],
                    },
                    "null",
                ],
            },
            {"name": "extraMetadata", "type": ["null", {"type": "map", "values": "string"}], "default": None},
            {"name": "version", "type": ["int", "null"], "default": 1},
        ],
    }
)


@dataclass(frozen=True)
class ClusteringGroup:
    """Small file groups of one partition, rewritten into ``outputs`` new ones by one Spark task."""

    partition: str
    inputs: tuple[FileSlice, ...]
    outputs: int

    @property
    def size(self) -> int:
        return sum(s.size for s in self.inputs)

    @classmethod
    def of(cls, partition: str, inputs: Iterable[FileSlice], config: ClusteringConfig) -> ClusteringGroup:
        """A group of ``inputs``, written into as many files of the target size as its bytes fill."""
        members = tuple(inputs)
        size = sum(s.size for s in members)
        return cls(partition, members, max(1, math.ceil(size / config.target_file_max_bytes)))


# --- planning (pure: unit-tested without a table) -----------------------------------------


def plan_clustering(slices: Mapping[str, Iterable[FileSlice]], config: ClusteringConfig) -> list[ClusteringGroup]:
    """Groups to cluster, as Hudi's size-based plan strategy makes them: per partition, its small
    slices, largest first, packed into groups of at most ``max_bytes_per_group``; a group of one file
    would only copy it and is left out; at most ``max_num_groups`` in all, partitions in order."""
    groups: list[ClusteringGroup] = []
    for partition in sorted(slices):
        small = sorted(
            (s for s in slices[partition] if s.size < config.small_file_limit), key=lambda s: (-s.size, s.file_id)
        )
        current: list[FileSlice] = []
        packed: list[list[FileSlice]] = []
        for found in small:
            if current and sum(s.size for s in current) + found.size > config.max_bytes_per_group:
                packed.append(current)
                current = []
            current.append(found)
        if current:
            packed.append(current)
        groups.extend(ClusteringGroup.of(partition, members, config) for members in packed if len(members) > 1)
    return groups[: config.max_num_groups]


def requested_record(groups: Sequence[ClusteringGroup], config: ClusteringConfig) -> dict[str, Any]:
    """HoodieRequestedReplaceMetadata of a clustering: its plan."""
    return {
        "operationType": CLUSTER,
        "clusteringPlan": {
            "inputGroups": [
                {
                    "slices": [
                        {
                            "dataFilePath": s.path,
                            "deltaFilePaths": [],
                            "fileId": s.file_id,
                            "partitionPath": g.partition,
                            "bootstrapFilePath": "",
                            "version": 1,
                        }
                        for s in g.inputs
                    ],
                    "metrics": {"TOTAL_IO_MB": g.size / 1048576, "TOTAL_FILE_SIZE": float(g.size)},
                    "numOutputFileGroups": g.outputs,
                    "version": 1,
                }
                for g in groups
            ],
            "strategy": {
                "strategyClassName": EXECUTION_STRATEGY,
                "strategyParams": {
                    "hoodie.clustering.plan.strategy.class": PLAN_STRATEGY,
                    "hoodie.clustering.plan.strategy.target.file.max.bytes": str(config.target_file_max_bytes),
                },
                "version": 1,
            },
            "extraMetadata": {},
            "version": 1,
        },
        "extraMetadata": {},
        "version": 1,
    }


def planned_groups(record: Mapping[str, Any]) -> set[tuple[str, str]]:
    """(partition path, file id) of each file group a requested clustering will replace."""
    plan = record.get("clusteringPlan") or {}
    return {
        (str(s.get("partitionPath") or ""), str(s.get("fileId")))
        for group in plan.get("inputGroups") or []
        for s in group.get("slices") or []
    }


def read_requested(table: HudiTable, instant: str) -> dict[str, Any]:
    records = list(fastavro.reader(io.BytesIO(table.read_entry(instant, REPLACE_COMMIT, REQUESTED))))
    record = records[0] if records else None
    if not isinstance(record, dict):
        raise ValueError(f"{instant}.replacecommit.requested holds no HoodieRequestedReplaceMetadata")
    return record


def pending_clusterings(table: HudiTable) -> list[str]:
    """Instants of replacecommits requested and not completed, oldest first."""
    entries = [e for e in table.timeline() if e.action == REPLACE_COMMIT]
    done = {e.instant for e in entries if e.state == COMPLETED}
    return sorted({e.instant for e in entries} - done)


def groups_in_clustering(table: HudiTable) -> set[tuple[str, str]]:
    """File groups a pending clustering will replace: the sink's inserts write none of them."""
    found: set[tuple[str, str]] = set()
    for instant in pending_clusterings(table):
        try:
            found |= planned_groups(read_requested(table, instant))
        except (OSError, ValueError):
            continue  # (no plan readable: nothing is reserved by it)
    return found


# --- the Spark job ------------------------------------------------------------------------


def staging_root(base: str, instant: str = "") -> str:
    """Where a clustering's files wait for its completion: under .hoodie, which no reader lists."""
    return f"{base.rstrip('/')}/{HOODIE}/.temp/sinkadmin/clustering/{instant}".rstrip("/")


def output_file_id(instant: str, partition: str, group: int, output: int) -> str:
    """The same ids for the same plan: a clustering's Spark task retried writes the same files."""
    return f"{uuid.uuid5(uuid.NAMESPACE_URL, f'cluster/{instant}/{partition}/{group}/{output}')}-0"


@dataclass(frozen=True)
class HudiClusterJob:
    """A clustering's Spark job: task n rewrites ``groups[n]`` (pickled to Spark's Python workers)."""

    base: str
    spec: HudiTableSpec
    instant: str
    groups: tuple[ClusteringGroup, ...]

    @property
    def count(self) -> int:
        return len(self.groups)

    def run_unit(self, index: int) -> dict[str, Any]:
        group = self.groups[index]
        fs = pafs.LocalFileSystem()
        rows = pa.concat_tables(
            [pq.read_table(s.path, filesystem=fs) for s in group.inputs], promote_options="permissive"
        )
        expected = sum(pq.ParquetFile(s.path).metadata.num_rows for s in group.inputs)
        if len(rows) != expected:
            raise RuntimeError(f"clustering read {len(rows)} rows from files that hold {expected}")
        per_file = math.ceil(len(rows) / group.outputs) if len(rows) else 0
        folder = staging_root(self.base, self.instant)
        fs.create_dir(folder, recursive=True)
        stats = []
        for output in range(group.outputs):
            part = rows.slice(output * per_file, per_file)
            file_id = output_file_id(self.instant, group.partition, index, output)
            name = f"{file_id}_{index}-{output}-0_{self.instant}.parquet"
            column = part.schema.get_field_index("_hoodie_file_name")
            part = part.set_column(column, part.schema.field(column), pa.array([name] * len(part), pa.string()))
            staged = f"{folder}/{name}"
            pq.write_table(part, staged, filesystem=fs, compression="zstd")
            failpoint("hudi.clustering")  # (a test's executor dies here: some files written aside)
            stats.append(
                WriteStat(
                    file_id=file_id,
                    path=f"{group.partition}/{name}" if group.partition else name,
                    partition_path=group.partition,
                    previous_commit="null",
                    records=len(part),
                    inserts=len(part),
                    updates=0,
                    deletes=0,
                    size=fs.get_file_info(staged).size or 0,
                ).as_json()
            )
        return {"stats": stats, "schema": base64.b64encode(rows.schema.serialize().to_pybytes()).decode()}


def written(outcomes: Sequence[dict[str, Any]]) -> tuple[list[WriteStat], pa.Schema]:
    """What a clustering's Spark job wrote: its files, and their schema (the widest of its tasks')."""
    stats = [WriteStat.from_json(s) for o in outcomes for s in o["stats"]]
    schema: pa.Schema | None = None
    for outcome in outcomes:
        found = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(outcome["schema"])))
        schema = found if schema is None else widened(schema, found)
    return stats, schema if schema is not None else pa.schema([])


# --- settling clusterings left unfinished -------------------------------------------------


def finish(table: HudiTable, instant: str) -> bool:
    """Complete a clustering whose completion began (its inflight holds the replacecommit's metadata):
    the files still aside are renamed into place and the metadata written. False, having changed
    nothing, if a file is neither in place nor aside (its completion cannot have finished either).

    The coordinator that began it and a successor may both run this: each file is in one place at any
    moment (a rename), each completes with the same metadata, so whichever is second changes nothing.
    """
    if instant in table.completed(REPLACE_COMMIT):
        return True
    metadata = table.commit_metadata(instant, completed=False, action=REPLACE_COMMIT)
    stats = [
        WriteStat.from_json(s) for written in (metadata.get("partitionToWriteStats") or {}).values() for s in written
    ]
    if not metadata.get("partitionToReplaceFileIds"):
        return False
    staged = staging_root(table.base, instant)
    fs = table.fs
    moves = []
    for stat in stats:
        name = stat.path.rsplit("/", 1)[-1]
        final = f"{table.partition_dir(stat.partition_path)}/{name}"
        if fs.get_file_info(final).type != pafs.FileType.File:
            if fs.get_file_info(f"{staged}/{name}").type != pafs.FileType.File:
                return False
            moves.append((stat.partition_path, f"{staged}/{name}", final))
    for partition, source, final in moves:
        table.ensure_partition(partition, instant)
        try:
            fs.move(source, final)
        except OSError:
            if fs.get_file_info(final).type != pafs.FileType.File:
                raise  # (not moved by the other finisher either)
    failpoint("hudi.cluster_complete")  # (a test's coordinator dies here: files in place, instant inflight)
    table.write_entry(instant, REPLACE_COMMIT, COMPLETED, json.dumps(metadata).encode())
    if fs.get_file_info(staged).type == pafs.FileType.Directory:
        fs.delete_dir(staged)
    return True


def drop_plan(table: HudiTable, instant: str) -> None:
    """A clustering that will not complete: its requested plan and its files aside, gone."""
    requested = f"{table.base}/{HOODIE}/{TimelineEntry(instant, REPLACE_COMMIT, REQUESTED).file_name}"
    if table.fs.get_file_info(requested).type == pafs.FileType.File:
        table.fs.delete_file(requested)
    staged = staging_root(table.base, instant)
    if table.fs.get_file_info(staged).type == pafs.FileType.Directory:
        table.fs.delete_dir(staged)


def settle(table: HudiTable, requested: bool) -> tuple[list[str], list[str]]:
    """Settle clusterings left unfinished by a coordinator that died or lost the connector; returns
    (finished, rolled back).

    One being completed (inflight) is finished (``finish``), or rolled back with its files if a file
    is lost. One only requested (with ``requested``: a run of the maintenance, which has none of its
    own under way then) is rolled back: its plan and the files aside. Files in the partitions are left
    alone then: the coordinator that requested it may be completing it still, and one completed is
    whole (``finish``).
    """
    finished, rolled_back = [], []
    entries = [e for e in table.timeline() if e.action == REPLACE_COMMIT]
    done = {e.instant for e in entries if e.state == COMPLETED}
    inflight = {e.instant for e in entries if e.state == INFLIGHT} - done
    for instant in sorted({e.instant for e in entries} - done):
        if instant in inflight:
            if finish(table, instant):
                finished.append(instant)
                continue
            table.remove_instants([instant])
        elif not requested:
            continue
        drop_plan(table, instant)
        rolled_back.append(instant)
    if requested:
        # Files a clustering's Spark tasks wrote aside after it was rolled back (a stale coordinator's).
        pending = set(pending_clusterings(table))
        for info in table.fs.get_file_info(pafs.FileSelector(staging_root(table.base), allow_not_found=True)):
            if info.type == pafs.FileType.Directory and info.base_name not in pending:
                table.fs.delete_dir(info.path)
    if finished or rolled_back:
        log.info("%s: clusterings left unfinished: finished %s, rolled back %s", table.base, finished, rolled_back)
    return finished, rolled_back


# --- running a clustering -----------------------------------------------------------------


class ClusteringAborted(Exception):
    """The table moved under a clustering (or this coordinator lost the connector): rolled back."""


@dataclass
class ClusterOutcome:
    instant: str
    replaced_files: int = 0
    replaced_bytes: int = 0
    added_files: int = 0
    added_bytes: int = 0


class HudiClusterer:
    """One table's clustering (see the module's docstring)."""

    def __init__(
        self,
        table: HudiTable,
        config: ClusteringConfig,
        turns: BetweenCommits,
        run_units: Callable[[HudiClusterJob], list[dict[str, Any]]],
        still_mine: Callable[[], bool] = lambda: True,
    ) -> None:
        self.table = table
        self.config = config
        self.turns = turns
        self.run_units = run_units
        self.still_mine = still_mine

    def run(self) -> ClusterOutcome | None:
        planned = self.plan()
        if not planned:
            return None
        requested = self.turns.run(lambda: self._request(planned))
        if requested is None:
            return None
        instant, groups = requested
        try:
            outcomes = self.run_units(HudiClusterJob(self.table.base, self.table.spec, instant, tuple(groups)))
        except BaseException:
            # (Its files are aside; the plan is rolled back with them, so the sink may write those file
            # groups again. A stopped coordinator leaves it to the next run.)
            self.turns.run(lambda: drop_plan(self.table, instant))
            raise
        stats, schema = written(outcomes)
        failpoint("hudi.clustered")  # (a test's coordinator dies here: files written aside, plan requested)
        if not self.still_mine():
            # (Checked here, on the maintenance thread: the database is its to ask. A successor rolls
            # the plan back.)
            raise ClusteringAborted(
                f"clustering {instant} left to the successor: another coordinator holds the connector"
            )
        self.turns.run(lambda: self._complete(instant, groups, stats, schema))
        return ClusterOutcome(
            instant,
            replaced_files=sum(len(g.inputs) for g in groups),
            replaced_bytes=sum(g.size for g in groups),
            added_files=len(stats),
            added_bytes=sum(s.size for s in stats),
        )

    def plan(self) -> list[ClusteringGroup]:
        reserved = groups_in_clustering(self.table)
        by_partition: dict[str, list[FileSlice]] = defaultdict(list)
        for partition in self.partitions():
            for found in self.table.latest_slices(partition).values():
                if (partition, found.file_id) not in reserved:
                    by_partition[partition].append(found)
        return plan_clustering(by_partition, self.config)

    def partitions(self) -> list[str]:
        """Partition paths: the directories that hold a partition metadata file."""
        base = self.table.base
        found = []
        selector = pafs.FileSelector(base, allow_not_found=True, recursive=True)
        for info in self.table.fs.get_file_info(selector):
            relative = info.path[len(base) + 1 :]
            if info.base_name == ".hoodie_partition_metadata" and not relative.startswith(f"{HOODIE}/"):
                found.append(relative.rpartition("/")[0])
        return sorted(found)

    def _request(self, planned: Sequence[ClusteringGroup]) -> tuple[str, list[ClusteringGroup]] | None:
        """On the coordinator's thread, between two commits: the clustering's instant and plan, with the
        slices the sink rewrote since planning left out (its inserts fill small files first, the very
        ones planned). From here on the sink's inserts leave the planned file groups alone."""
        groups = []
        for group in planned:
            current = self.table.latest_slices(group.partition)
            kept = [s for s in group.inputs if current.get(s.file_id) == s]
            if len(kept) > 1:
                groups.append(ClusteringGroup.of(group.partition, kept, self.config))
        if not groups:
            return None
        instant = self.table.next_instant()
        out = io.BytesIO()
        fastavro.writer(out, REQUESTED_REPLACE_SCHEMA, [requested_record(groups, self.config)])
        self.table.write_entry(instant, REPLACE_COMMIT, REQUESTED, out.getvalue())
        return instant, groups

    def _complete(
        self, instant: str, groups: Sequence[ClusteringGroup], stats: Sequence[WriteStat], schema: pa.Schema
    ) -> None:
        """On the coordinator's thread, between two commits: swap the new file groups in, or roll back.

        The replacecommit's metadata goes into its inflight first: from then on the clustering is
        finished by whoever meets it (``finish``), never rolled back while its files are all there."""
        why = self._conflict(instant, groups)
        if why is not None:
            drop_plan(self.table, instant)
            raise ClusteringAborted(f"clustering {instant} rolled back: {why}")
        replaced: dict[str, list[str]] = defaultdict(list)
        for group in groups:
            replaced[group.partition].extend(s.file_id for s in group.inputs)
        metadata = self.table.metadata(stats, schema, {}, CLUSTER, replaced)
        self.table.write_entry(instant, REPLACE_COMMIT, INFLIGHT, json.dumps(metadata).encode())
        if not finish(self.table, instant):
            raise ClusteringAborted(f"clustering {instant}: its files are gone (a successor rolled it back)")

    def _conflict(self, instant: str, groups: Sequence[ClusteringGroup]) -> str | None:
        if instant not in pending_clusterings(self.table):
            return "its plan is no longer on the timeline (a successor rolled it back)"
        for group in groups:
            current = self.table.latest_slices(group.partition)
            for read in group.inputs:
                now = current.get(read.file_id)
                if now is None or now.instant != read.instant:
                    return f"file group {read.file_id} of {group.partition or 'the table'} changed since it was read"
        return None
