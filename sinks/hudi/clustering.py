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
    WriteStat,
    parse_base_file,
)
from workers.failpoints import failpoint
from workers.record_runs import widened

if TYPE_CHECKING:
    from sinks.hudi.settings import ClusteringConfig
    from workers.maintenance import BetweenCommits

log = logging.getLogger(__name__)

CLUSTER = "cluster"  # WriteOperationType.CLUSTER, as the requested metadata names it
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
        for members in packed:
            if len(members) > 1:
                total = sum(s.size for s in members)
                outputs = max(1, math.ceil(total / config.target_file_max_bytes))
                groups.append(ClusteringGroup(partition, tuple(members), outputs))
    return groups[: config.max_num_groups]


def requested_record(groups: Sequence[ClusteringGroup], base: str, config: ClusteringConfig) -> dict[str, Any]:
    """HoodieRequestedReplaceMetadata of a clustering: its plan."""
    return {
        "operationType": CLUSTER,
        "clusteringPlan": {
            "inputGroups": [
                {
                    "slices": [
                        {
                            "dataFilePath": s.path.removeprefix(base.rstrip("/") + "/"),
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
        self.turns.run(self.roll_back_left)
        groups = self.plan()
        if not groups:
            return None
        instant = self.turns.run(lambda: self._request(groups))
        try:
            outcomes = self.run_units(HudiClusterJob(self.table.base, self.table.spec, instant, tuple(groups)))
        except BaseException:
            # (Its files are aside; the plan is rolled back with them, so the sink may write those file
            # groups again. A stopped coordinator leaves it to the next run.)
            self.turns.run(lambda: self.roll_back(instant))
            raise
        stats = [WriteStat.from_json(s) for o in outcomes for s in o["stats"]]
        schema: pa.Schema | None = None
        for outcome in outcomes:
            found = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(outcome["schema"])))
            schema = found if schema is None else widened(schema, found)
        failpoint("hudi.clustered")  # (a test's coordinator dies here: files written aside, plan requested)
        self.turns.run(lambda: self._complete(instant, groups, stats, schema or pa.schema([])))
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

    def roll_back_left(self) -> list[str]:
        """Roll back clusterings a predecessor requested and never completed, and remove files any
        clustering left aside. Runs on the coordinator's thread: no clustering of its own is under way."""
        left = pending_clusterings(self.table)
        for instant in left:
            log.info("%s: rolling back the clustering %s, which never completed", self.table.base, instant)
            self.roll_back(instant)
        root = staging_root(self.table.base)
        for info in self.table.fs.get_file_info(pafs.FileSelector(root, allow_not_found=True)):
            if info.type == pafs.FileType.Directory:
                self.table.fs.delete_dir(info.path)
        return left

    def roll_back(self, instant: str) -> None:
        """Remove a clustering that did not complete: its files (aside, or already in place) and its
        timeline entries."""
        fs = self.table.fs
        staged = staging_root(self.table.base, instant)
        if fs.get_file_info(staged).type == pafs.FileType.Directory:
            fs.delete_dir(staged)
        for info in fs.get_file_info(pafs.FileSelector(self.table.base, allow_not_found=True, recursive=True)):
            parsed = parse_base_file(info.base_name)
            if parsed is not None and parsed[2] == instant and f"/{HOODIE}/" not in info.path:
                fs.delete_file(info.path)
        for entry in self.table.timeline():
            if entry.instant == instant and entry.action == REPLACE_COMMIT and entry.state != COMPLETED:
                fs.delete_file(f"{self.table.base}/{HOODIE}/{entry.file_name}")

    def _request(self, groups: Sequence[ClusteringGroup]) -> str:
        """On the coordinator's thread, between two commits: the clustering's instant and plan."""
        instant = self.table.next_instant()
        record = requested_record(groups, self.table.base, self.config)
        out = io.BytesIO()
        fastavro.writer(out, REQUESTED_REPLACE_SCHEMA, [record])
        self.table.write_entry(instant, REPLACE_COMMIT, REQUESTED, out.getvalue())
        return instant

    def _complete(
        self, instant: str, groups: Sequence[ClusteringGroup], stats: Sequence[WriteStat], schema: pa.Schema
    ) -> None:
        """On the coordinator's thread, between two commits: swap the new file groups in, or roll back."""
        why = self._conflict(instant, groups)
        if why is not None:
            self.roll_back(instant)
            raise ClusteringAborted(f"clustering {instant} rolled back: {why}")
        self.table.write_entry(instant, REPLACE_COMMIT, INFLIGHT, b"")
        staged = staging_root(self.table.base, instant)
        for stat in stats:
            self.table.ensure_partition(stat.partition_path, instant)
            name = stat.path.rsplit("/", 1)[-1]
            self.table.fs.move(f"{staged}/{name}", f"{self.table.partition_dir(stat.partition_path)}/{name}")
        failpoint("hudi.cluster_complete")  # (a test's coordinator dies here: files in place, instant inflight)
        replaced: dict[str, list[str]] = defaultdict(list)
        for group in groups:
            replaced[group.partition].extend(s.file_id for s in group.inputs)
        self.table.complete(instant, stats, schema, {}, operation=CLUSTER.upper(), replaced=replaced)
        self.table.fs.delete_dir(staged)

    def _conflict(self, instant: str, groups: Sequence[ClusteringGroup]) -> str | None:
        if not self.still_mine():
            return "another coordinator holds the connector now"
        if instant not in pending_clusterings(self.table):
            return "its plan is no longer on the timeline (a successor rolled it back)"
        for group in groups:
            current = self.table.latest_slices(group.partition)
            for read in group.inputs:
                now = current.get(read.file_id)
                if now is None or now.instant != read.instant:
                    return f"file group {read.file_id} of {group.partition or 'the table'} changed since it was read"
        return None
