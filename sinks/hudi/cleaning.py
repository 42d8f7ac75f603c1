"""Hudi's cleaning beside the sink: old file slices deleted, each clean an instant on the timeline.

Copy-on-Write keeps every slice a commit replaced: a file group rewritten
once a minute leaves 1,440 old base files a day. Hudi's cleaner deletes the
slices no reader within the retention still needs, by one of its policies
(CleanPlanner, as Hudi 0.14 plans):

- ``KEEP_LATEST_COMMITS`` (N, the default 10): the earliest commit to retain
  is the Nth newest completed commit (or an earlier one still pending). A
  slice older than it is deleted unless it is its file group's newest, or
  the newest before that commit (a query as of the earliest retained commit
  reads it).
- ``KEEP_LATEST_BY_HOURS`` (H): the same, from the first commit of the last H
  hours.
- ``KEEP_LATEST_FILE_VERSIONS`` (N): each file group keeps its N newest slices.

On the timeline, as Hudi writes it (Avro container files, one record each):
``<instant>.clean.requested`` and ``<instant>.clean.inflight`` hold the plan
(HoodieCleanerPlan, version 2: full paths per partition), the files are
deleted, and ``<instant>.clean`` holds what was deleted
(HoodieCleanMetadata, version 2: file names per partition). A clean killed
half way is executed again from its plan at the next run, as Hudi's
``runAnyPendingClean`` does; deleting is idempotent.

Cleaning never races the sink: it deletes only slices of completed instants
that are neither their file group's newest nor needed within the retention,
and a commit reads only newest slices. Its instant is named between two of
the sink's commits (``BetweenCommits``), so it never takes a commit's
timestamp and the sink's next instant follows it.
"""

from __future__ import annotations

import io
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import fastavro
import pyarrow.fs as pafs

from sinks.hudi.plugin import KEEP_LATEST_BY_HOURS, KEEP_LATEST_COMMITS, KEEP_LATEST_FILE_VERSIONS
from sinks.hudi.settings import CleanerConfig
from sinks.hudi.table import CLEAN, COMMIT, COMPLETED, DATA_ACTIONS, INFLIGHT, REQUESTED, HudiTable, parse_base_file
from workers.failpoints import failpoint

if TYPE_CHECKING:
    from workers.maintenance import BetweenCommits

# Hudi's Avro records of a clean (hudi-common/src/main/avro, namespace org.apache.hudi.avro.model), as
# table version 6 writes them. Readers resolve them against their own versions: fields added since
# have defaults there.
_NS = "org.apache.hudi.avro.model"
CLEANER_PLAN_SCHEMA = fastavro.parse_schema(
    {
        "namespace": _NS,
        "type": "record",
        "name": "HoodieCleanerPlan",
        "fields": [
            {
                "name": "earliestInstantToRetain",
                "type": [
                    "null",
                    {
                        "type": "record",
                        "name": "HoodieActionInstant",
                        "fields": [
                            {"name": "timestamp", "type": "string"},
                            {"name": "action", "type": "string"},
                            {"name": "state", "type": "string"},
                        ],
                    },
                ],
                "default": None,
            },
            {"name": "policy", "type": "string"},
            {
                "name": "filesToBeDeletedPerPartition",
                "type": ["null", {"type": "map", "values": {"type": "array", "items": "string"}}],
                "default": None,
            },
            {"name": "version", "type": ["int", "null"], "default": 1},
            {
                "name": "filePathsToBeDeletedPerPartition",
                "type": [
                    "null",
                    {
                        "type": "map",
                        "values": {
                            "type": "array",
                            "items": {
                                "name": "HoodieCleanFileInfo",
                                "type": "record",
                                "fields": [
                                    {"name": "filePath", "type": ["null", "string"], "default": None},
                                    {"name": "isBootstrapBaseFile", "type": ["null", "boolean"], "default": None},
                                ],
                            },
                        },
                    },
                ],
                "default": None,
            },
            {"name": "partitionsToBeDeleted", "type": ["null", {"type": "array", "items": "string"}], "default": None},
        ],
    }
)
_PARTITION_METADATA = {
    "namespace": _NS,
    "type": "record",
    "name": "HoodieCleanPartitionMetadata",
    "fields": [
        {"name": "partitionPath", "type": "string"},
        {"name": "policy", "type": "string"},
        {"name": "deletePathPatterns", "type": {"type": "array", "items": "string"}},
        {"name": "successDeleteFiles", "type": {"type": "array", "items": "string"}},
        {"name": "failedDeleteFiles", "type": {"type": "array", "items": "string"}},
        {"name": "isPartitionDeleted", "type": ["null", "boolean"], "default": None},
    ],
}
CLEAN_METADATA_SCHEMA = fastavro.parse_schema(
    {
        "namespace": _NS,
        "type": "record",
        "name": "HoodieCleanMetadata",
        "fields": [
            {"name": "policy", "type": "string", "default": ""},
            {"name": "startCleanTime", "type": "string"},
            {"name": "timeTakenInMillis", "type": "long"},
            {"name": "totalFilesDeleted", "type": "int"},
            {"name": "earliestCommitToRetain", "type": "string"},
            {"name": "lastCompletedCommitTimestamp", "type": "string", "default": ""},
            {"name": "partitionMetadata", "type": {"type": "map", "values": _PARTITION_METADATA}},
            {"name": "version", "type": ["int", "null"], "default": 1},
            {
                "name": "bootstrapPartitionMetadata",
                "type": ["null", {"type": "map", "values": "HoodieCleanPartitionMetadata"}],
                "default": None,
            },
        ],
    }
)
# CleanPlanV2MigrationHandler.VERSION, CleanMetadataV2MigrationHandler.VERSION.
PLAN_VERSION = 2
METADATA_VERSION = 2


@dataclass(frozen=True)
class BaseFile:
    """A base file of a completed instant: one slice of a file group."""

    partition: str
    file_id: str
    instant: str
    path: str  # relative to the table's base path
    size: int


@dataclass
class CleanPlan:
    policy: str
    earliest_to_retain: str | None
    last_completed: str
    # The action of the earliest commit to retain (a clustering's replacecommit, or a commit).
    earliest_action: str = COMMIT
    # Partition path -> base files to delete.
    files: dict[str, list[BaseFile]] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return sum(len(f) for f in self.files.values())


# --- planning (pure: unit-tested without a table) -----------------------------------------


def earliest_to_retain(
    completed: Sequence[str], pending: Sequence[str], config: CleanerConfig, now: datetime
) -> str | None:
    """The earliest completed commit whose view readers must still get (CleanerUtils.getEarliestCommitToRetain);
    None: nothing is old enough to clean by it. ``completed``, ``pending``: data instants, oldest first."""
    if config.policy == KEEP_LATEST_COMMITS:
        if len(completed) <= config.commits_retained:
            return None
        found = completed[len(completed) - config.commits_retained]
    elif config.policy == KEEP_LATEST_BY_HOURS:
        cutoff = (now - timedelta(hours=config.hours_retained)).astimezone(UTC).strftime("%Y%m%d%H%M%S") + "000"
        recent = [i for i in completed if i >= cutoff]
        if not recent:
            return None
        found = recent[0]
    else:
        return None
    if pending and pending[0] < found:
        # A commit still pending may complete later and be read as of the commit before it: that
        # one is the earliest to retain then (CleanerUtils: the last completed instant before it).
        earlier = [i for i in completed if i < pending[0]]
        return earlier[-1] if earlier else None
    return found


def plan_clean(
    files: Iterable[BaseFile],
    completed: Sequence[str],
    pending: Sequence[str],
    config: CleanerConfig,
    now: datetime,
    replaced: Mapping[tuple[str, str], str] | None = None,
) -> CleanPlan:
    """The slices to delete (CleanPlanner's policies; see the module's docstring).

    ``files``: base files of completed instants; ``completed`` and ``pending``:
    the data instants (commits and replacecommits), oldest first; ``replaced``:
    file groups a clustering replaced, with its instant. A replaced file group
    goes whole once its replacement is older than the earliest commit to
    retain (with KEEP_LATEST_FILE_VERSIONS, at once), as Hudi's
    ``getReplacedFilesEligibleToClean``.
    """
    replaced = replaced or {}
    earliest = earliest_to_retain(completed, pending, config, now)
    plan = CleanPlan(config.policy, earliest, completed[-1] if completed else "")
    groups: dict[tuple[str, str], list[BaseFile]] = defaultdict(list)
    for f in files:
        groups[(f.partition, f.file_id)].append(f)
    for (partition, file_id), slices in sorted(groups.items()):
        newest_first = sorted(slices, key=lambda s: s.instant, reverse=True)
        replaced_at = replaced.get((partition, file_id))
        if replaced_at is not None:
            gone = config.policy == KEEP_LATEST_FILE_VERSIONS or (earliest is not None and replaced_at < earliest)
            doomed = newest_first if gone else []
        elif config.policy == KEEP_LATEST_FILE_VERSIONS:
            doomed = newest_first[max(1, config.file_versions_retained) :]
        elif earliest is None:
            doomed = []
        else:
            before = next((s.instant for s in newest_first if s.instant < earliest), None)
            doomed = [
                s
                for s in newest_first[1:]
                if s.instant < earliest and s.instant != before and s.instant != newest_first[0].instant
            ]
        if doomed:
            plan.files.setdefault(partition, []).extend(sorted(doomed, key=lambda s: s.path))
    return plan


# --- the timeline's Avro ------------------------------------------------------------------


def avro_bytes(schema: Any, record: Mapping[str, Any]) -> bytes:
    """One record as an Avro container file, as Hudi's TimelineMetadataUtils.serializeAvroMetadata writes it."""
    out = io.BytesIO()
    fastavro.writer(out, schema, [dict(record)])
    return out.getvalue()


def read_avro(data: bytes) -> dict[str, Any]:
    records = list(fastavro.reader(io.BytesIO(data)))
    if len(records) != 1:
        raise ValueError(f"a timeline entry holds {len(records)} records, not one")
    record = records[0]
    if not isinstance(record, dict):
        raise ValueError("a timeline entry's record is not a record")
    return record


def plan_record(plan: CleanPlan, base: str) -> dict[str, Any]:
    """HoodieCleanerPlan, version 2: full paths per partition."""
    return {
        "earliestInstantToRetain": (
            {"timestamp": plan.earliest_to_retain, "action": plan.earliest_action, "state": "COMPLETED"}
            if plan.earliest_to_retain
            else None
        ),
        "policy": plan.policy,
        "filesToBeDeletedPerPartition": {},
        "version": PLAN_VERSION,
        "filePathsToBeDeletedPerPartition": {
            partition: [{"filePath": f"{base}/{f.path}", "isBootstrapBaseFile": False} for f in files]
            for partition, files in plan.files.items()
        },
        "partitionsToBeDeleted": [],
    }


def plan_from_record(record: Mapping[str, Any], base: str) -> CleanPlan:
    """A plan read back from its timeline entry (a clean to finish)."""
    earliest = record.get("earliestInstantToRetain") or {}
    plan = CleanPlan(str(record.get("policy") or ""), earliest.get("timestamp"), "")
    prefix = base.rstrip("/") + "/"
    for partition, infos in (record.get("filePathsToBeDeletedPerPartition") or {}).items():
        for info in infos:
            path = str(info.get("filePath") or "")
            if not path:
                continue
            relative = path.removeprefix("file:").removeprefix(prefix)
            parsed = parse_base_file(relative.rsplit("/", 1)[-1])
            file_id, instant = (parsed[0], parsed[2]) if parsed else ("", "")
            plan.files.setdefault(partition, []).append(BaseFile(partition, file_id, instant, relative, 0))
    return plan


# --- running a clean ----------------------------------------------------------------------


@dataclass
class CleanOutcome:
    instant: str
    deleted: int = 0
    failed: int = 0
    removed_bytes: int = 0


class HudiCleaner:
    """One table's cleaning: finish a clean a predecessor left, then plan and run a new one."""

    def __init__(self, table: HudiTable, config: CleanerConfig, turns: BetweenCommits, clock: Any = time.time) -> None:
        self.table = table
        self.config = config
        self.turns = turns
        self.clock = clock
        # Cleans left in flight whose plan cannot be read (why, by instant): this run goes on without
        # them; its own plan takes whatever old slices they did not delete.
        self.unreadable: dict[str, str] = {}

    def run(self) -> list[CleanOutcome]:
        done = []
        for instant in self.pending():
            try:
                done.append(self._finish(instant))
            except (OSError, ValueError) as exc:
                self.unreadable[instant] = f"{type(exc).__name__}: {exc}"
        plan = self.plan()
        if plan.count:
            instant = self.turns.run(lambda: self._request(plan))
            failpoint("hudi.clean_requested")  # (a test's coordinator dies here: planned, nothing deleted)
            done.append(self._execute(instant, plan))
        return done

    def pending(self) -> list[str]:
        entries = [e for e in self.table.timeline() if e.action == CLEAN]
        complete = {e.instant for e in entries if e.state == COMPLETED}
        return sorted({e.instant for e in entries} - complete)

    def plan(self) -> CleanPlan:
        timeline = [e for e in self.table.timeline() if e.action in DATA_ACTIONS]
        completed = sorted({e.instant for e in timeline if e.state == COMPLETED})
        pending = sorted({e.instant for e in timeline} - set(completed))
        now = datetime.fromtimestamp(self.clock(), tz=UTC)
        files = self.base_files(set(completed))
        plan = plan_clean(files, completed, pending, self.config, now, self.table.replaced_groups())
        plan.earliest_action = next((e.action for e in timeline if e.instant == plan.earliest_to_retain), COMMIT)
        return plan

    def base_files(self, completed: set[str]) -> list[BaseFile]:
        """Base files of completed instants, in every partition."""
        fs, base = self.table.fs, self.table.base
        found = []
        selector = pafs.FileSelector(base, allow_not_found=True, recursive=True)
        for info in fs.get_file_info(selector):
            relative = info.path[len(base) + 1 :]
            if info.type != pafs.FileType.File or any(p.startswith(".") for p in relative.split("/")):
                continue  # (.hoodie, partition metadata, temporary files)
            parsed = parse_base_file(info.base_name)
            if parsed is None or parsed[2] not in completed:
                continue
            partition = relative.rpartition("/")[0]
            found.append(BaseFile(partition, parsed[0], parsed[2], relative, info.size or 0))
        return found

    def _request(self, plan: CleanPlan) -> str:
        """On the coordinator's thread, between two commits: name the clean's instant and put its plan on
        the timeline, requested then inflight."""
        instant = self.table.next_instant(datetime.fromtimestamp(self.clock(), tz=UTC))
        data = avro_bytes(CLEANER_PLAN_SCHEMA, plan_record(plan, self.table.base))
        self.table.write_entry(instant, CLEAN, REQUESTED, data)
        self.table.write_entry(instant, CLEAN, INFLIGHT, data)
        return instant

    def _finish(self, instant: str) -> CleanOutcome:
        names = {e.state: e for e in self.table.timeline() if e.action == CLEAN and e.instant == instant}
        state = INFLIGHT if INFLIGHT in names else REQUESTED
        plan = plan_from_record(read_avro(self.table.read_entry(instant, CLEAN, state)), self.table.base)
        if state == REQUESTED:
            self.table.write_entry(instant, CLEAN, INFLIGHT, self.table.read_entry(instant, CLEAN, REQUESTED))
        return self._execute(instant, plan)

    def _execute(self, instant: str, plan: CleanPlan) -> CleanOutcome:
        started = self.clock()
        outcome = CleanOutcome(instant)
        partitions: dict[str, dict[str, Any]] = {}
        fs, base = self.table.fs, self.table.base
        for partition, files in sorted(plan.files.items()):
            deleted: list[str] = []
            failed: list[str] = []
            for f in files:
                name = f.path.rsplit("/", 1)[-1]
                path = f"{base}/{f.path}"
                info = fs.get_file_info(path)
                try:
                    if info.type == pafs.FileType.File:
                        fs.delete_file(path)
                        outcome.removed_bytes += info.size or 0
                    # (Gone already: deleted by the run this one finishes.)
                    deleted.append(name)
                except OSError:
                    failed.append(name)
                failpoint("hudi.cleaning")  # (a test's coordinator dies here: some slices deleted)
            outcome.deleted += len(deleted)
            outcome.failed += len(failed)
            partitions[partition] = {
                "partitionPath": partition,
                "policy": plan.policy,
                "deletePathPatterns": [f.path.rsplit("/", 1)[-1] for f in files],
                "successDeleteFiles": deleted,
                "failedDeleteFiles": failed,
                "isPartitionDeleted": False,
            }
        completed = self.table.completed()
        metadata = {
            "policy": plan.policy,
            "startCleanTime": instant,
            "timeTakenInMillis": int((self.clock() - started) * 1000),
            "totalFilesDeleted": outcome.deleted,
            "earliestCommitToRetain": plan.earliest_to_retain or "",
            "lastCompletedCommitTimestamp": plan.last_completed or (completed[-1] if completed else ""),
            "partitionMetadata": partitions,
            "version": METADATA_VERSION,
            "bootstrapPartitionMetadata": {},
        }
        self.table.write_entry(instant, CLEAN, COMPLETED, avro_bytes(CLEAN_METADATA_SCHEMA, metadata))
        return outcome
