"""Table maintenance's decisions, without servers: which files compaction packs together,
which snapshots expire, which files are orphans, and how its snapshot commits reach the
coordinator's thread only between two of the sink's commits."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from tests.test_coordinator import TP0, Channel, Clock, Committer, Ledger, start_and_end, status
from workers.coordinator import Coordinator, CoordinatorSettings, Phase
from workers.events import EventType
from workers.maintenance import (
    BetweenCommits,
    Candidate,
    ListedFile,
    SnapshotInfo,
    Stopped,
    file_key,
    orphan_files,
    plan_rewrite,
    snapshots_to_expire,
)

KB = 1024


def small(path: str, size: int = KB, partition: tuple[Any, ...] = (), **extra: Any) -> Candidate:
    return Candidate(path=path, size=size, records=10, spec_id=0, partition=partition, **extra)


# --- compaction -------------------------------------------------------------------------


def test_small_files_of_a_partition_are_packed_into_bins_of_at_most_the_target() -> None:
    files = [small(f"f{i}", size) for i, size in enumerate([40 * KB, 30 * KB, 30 * KB, 20 * KB, 10 * KB, 10 * KB])]
    bins = plan_rewrite(files, target_bytes=64 * KB, min_input_files=5)
    # Largest first, each into the first bin it fits: 40+20, 30+30, 10+10.
    assert sorted(sorted(c.size // KB for c in b) for b in bins) == [[10, 10], [20, 40], [30, 30]]
    assert sorted(c.path for b in bins for c in b) == sorted(f.path for f in files)


def test_a_partition_with_fewer_small_files_than_min_input_files_is_left_alone() -> None:
    files = [small(f"a{i}", partition=("a",)) for i in range(4)] + [small(f"b{i}", partition=("b",)) for i in range(5)]
    bins = plan_rewrite(files, target_bytes=64 * KB, min_input_files=5)
    assert [sorted(c.path for c in b) for b in bins] == [[f"b{i}" for i in range(5)]]


def test_files_of_different_partitions_or_specs_never_share_a_bin() -> None:
    files = [small(f"a{i}", partition=("a",)) for i in range(3)] + [small(f"b{i}", partition=("b",)) for i in range(3)]
    files += [Candidate(f"s{i}", KB, 10, spec_id=1, partition=("a",)) for i in range(3)]
    bins = plan_rewrite(files, target_bytes=64 * KB, min_input_files=2)
    assert sorted(sorted(c.path[0] + str(c.spec_id) for c in b) for b in bins) == [
        ["a0"] * 3,
        ["b0"] * 3,
        ["s1"] * 3,
    ]


def test_large_files_and_files_with_deletes_or_of_an_old_spec_are_not_rewritten() -> None:
    files = [small(f"f{i}") for i in range(5)]
    files.append(small("big", size=60 * KB))  # over three quarters of the target: not small
    files.append(small("deleted", rewritable=False))
    bins = plan_rewrite(files, target_bytes=64 * KB, min_input_files=5)
    assert sorted(c.path for b in bins for c in b) == [f"f{i}" for i in range(5)]


def test_a_bin_of_one_file_would_only_copy_it_and_is_left_out() -> None:
    files = [small(f"f{i}", size=40 * KB) for i in range(5)]  # no two fit under 64 KB
    assert plan_rewrite(files, target_bytes=64 * KB, min_input_files=5) == []


# --- expiry -----------------------------------------------------------------------------

DAY = 86_400_000
NOW = 100 * DAY


def test_snapshots_older_than_the_age_expire_but_the_latest_ones_are_kept() -> None:
    snapshots = [SnapshotInfo(i, NOW - (10 - i) * DAY) for i in range(10)]  # 9 is the newest, a day old
    lineage = [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]
    assert snapshots_to_expire(snapshots, lineage, set(), NOW, 5 * DAY, 1) == [0, 1, 2, 3, 4]
    assert snapshots_to_expire(snapshots, lineage, set(), NOW, 5 * DAY, 8) == [0, 1]
    assert snapshots_to_expire(snapshots, lineage, {3}, NOW, 5 * DAY, 1) == [0, 1, 2, 4]


def test_each_connectors_latest_snapshot_is_kept_for_the_ledger_whatever_its_age() -> None:
    snapshots = [
        SnapshotInfo(1, NOW - 9 * DAY, "orders"),
        SnapshotInfo(2, NOW - 8 * DAY, "orders"),
        SnapshotInfo(3, NOW - 7 * DAY, "refunds"),
        SnapshotInfo(4, NOW - 6 * DAY),  # a compaction's
        SnapshotInfo(5, NOW - 5 * DAY, "orders"),
        SnapshotInfo(6, NOW - 4 * DAY),
    ]
    expired = snapshots_to_expire(snapshots, [6, 5, 4, 3, 2, 1], set(), NOW, DAY, 1)
    assert expired == [1, 2, 4]


def test_the_latest_snapshot_holding_each_partitions_offsets_is_kept_however_old() -> None:
    # Partition 1 has been idle since snapshot 2: a ledger rebuilt from the
    # tables finds its offsets only there.
    snapshots = [
        SnapshotInfo(1, NOW - 9 * DAY, "orders", ("o/0", "o/1")),
        SnapshotInfo(2, NOW - 8 * DAY, "orders", ("o/0", "o/1")),
        SnapshotInfo(3, NOW - 7 * DAY, "orders", ("o/0",)),
        SnapshotInfo(4, NOW - 6 * DAY, "orders", ("o/0",)),
    ]
    assert snapshots_to_expire(snapshots, [4, 3, 2, 1], set(), NOW, DAY, 1) == [1, 3]


def test_a_snapshots_partitions_are_read_from_its_offsets_summary() -> None:
    from types import SimpleNamespace

    from workers.maintenance import snapshot_info

    def snapshot(props: dict[str, str]) -> Any:
        summary = SimpleNamespace(additional_properties=props)
        return SimpleNamespace(snapshot_id=7, timestamp_ms=NOW, summary=summary)

    ours = snapshot({"sinkadmin.connector": "c", "sinkadmin.offsets": '{"o":{"0":[0,5],"1":[3,9]}}'})
    assert snapshot_info(ours) == SnapshotInfo(7, NOW, "c", ("o/0", "o/1"))
    assert snapshot_info(snapshot({"sinkadmin.offsets": "not json"})) == SnapshotInfo(7, NOW, None, ())


# --- orphans ----------------------------------------------------------------------------


def test_orphans_are_unreferenced_files_older_than_the_window() -> None:
    listed = [
        ListedFile("/lake/t/data/old-orphan.parquet", 10, 1000.0),
        ListedFile("/lake/t/data/young-orphan.parquet", 10, 9000.0),
        ListedFile("/lake/t/data/committed.parquet", 10, 1000.0),
        ListedFile("s3://bucket/t/data/committed.parquet", 10, 1000.0),
    ]
    referenced = {file_key("file:///lake/t/data/committed.parquet"), file_key("s3a://bucket/t/data/committed.parquet")}
    found = orphan_files(listed, referenced, now_s=10_000.0, older_than_s=3600.0)
    assert [f.location for f in found] == ["/lake/t/data/old-orphan.parquet"]


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("file:/lake/x.parquet", "/lake/x.parquet"),
        ("file:///lake/x.parquet", "/lake/x.parquet"),
        ("s3a://b/x", "s3://b/x"),
    ],
)
def test_one_file_has_one_key_however_it_is_spelled(one: str, other: str) -> None:
    assert file_key(one) == file_key(other)


# --- between commits --------------------------------------------------------------------


def test_work_handed_to_the_coordinator_runs_in_its_thread_and_its_result_comes_back() -> None:
    between = BetweenCommits()
    ran_in: list[str] = []

    def work() -> int:
        ran_in.append(threading.current_thread().name)
        return 42

    results: list[int] = []
    waiter = threading.Thread(target=lambda: results.append(between.run(work, poll_s=0.01)), name="maintenance")
    waiter.start()
    while not between.run_waiting():
        pass
    waiter.join(5)
    assert results == [42] and ran_in == [threading.current_thread().name]


def test_an_error_of_the_work_is_raised_in_the_maintenance_thread() -> None:
    between = BetweenCommits()
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            between.run(lambda: 1 / 0, poll_s=0.01)
        except ZeroDivisionError as exc:
            errors.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    while not between.run_waiting():
        pass
    waiter.join(5)
    assert len(errors) == 1


def test_work_waiting_when_the_coordinator_stops_never_runs() -> None:
    between = BetweenCommits()
    between.stopped.set()
    ran: list[int] = []
    with pytest.raises(Stopped):
        between.run(lambda: ran.append(1), poll_s=0.01)
    assert not between.run_waiting() and ran == []


class Maintenance:
    """Counts when the coordinator gives maintenance its turn, and in which phase."""

    def __init__(self, coordinator: Coordinator | None = None) -> None:
        self.coordinator = coordinator
        self.turns: list[Phase] = []
        self.pending = 0

    def between_commits(self) -> bool:
        assert self.coordinator is not None
        self.turns.append(self.coordinator.phase)
        if self.pending:
            self.pending -= 1
            return True
        return False


def test_maintenance_gets_its_turn_only_between_commits_and_never_before_a_prepared_commit_is_applied() -> None:
    clock, channel, ledger, committer = Clock(), Channel(), Ledger(), Committer()
    maintenance = Maintenance()
    coordinator = Coordinator(
        CoordinatorSettings("c", epoch=1, commit_interval_s=10, commit_timeout_s=30),
        channel,
        ledger,
        committer,
        partitions=lambda: [TP0],
        clock=clock,
        maintenance=maintenance,
    )
    maintenance.coordinator = coordinator
    maintenance.pending = 1
    assert coordinator.step(0) is True  # its turn, before the first START
    assert channel.sent == [] and maintenance.turns == [Phase.IDLE]

    start = start_and_end(coordinator, clock, channel)
    committer.out = "cannot reach the catalog"
    channel.inbox.append(status(start, TP0, 0, 5))
    coordinator.step(0)
    assert coordinator._unapplied is not None  # prepared; the tables do not have it yet
    turns = len(maintenance.turns)
    maintenance.pending = 1
    for _ in range(3):
        coordinator.step(0)
    assert len(maintenance.turns) == turns, "maintenance ran while a prepared commit waited"

    committer.out = None
    clock.now += 60
    coordinator.step(0)
    assert coordinator._unapplied is None and len(committer.commits) == 1
    coordinator.step(0)
    assert maintenance.turns[-1] is Phase.IDLE and maintenance.pending == 0
    assert all(phase is Phase.IDLE for phase in maintenance.turns)
    assert channel.last(EventType.ACK_COMMIT).commit_id == start.commit_id


# --- copying a file as it is -------------------------------------------------------------


def test_a_file_is_copied_as_it_is_only_when_its_columns_are_the_tables_own() -> None:
    import pyarrow as pa
    from pyiceberg.io.pyarrow import schema_to_pyarrow
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
    from pyiceberg.schema import Schema
    from pyiceberg.table import TableProperties
    from pyiceberg.table.metadata import new_table_metadata
    from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
    from pyiceberg.types import LongType, NestedField, StringType, StructType

    from workers.maintenance import RewriteJob

    schema = Schema(
        NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType(), required=False)
    )
    mapping = schema.name_mapping.model_dump_json()
    metadata = new_table_metadata(
        schema,
        UNPARTITIONED_PARTITION_SPEC,
        UNSORTED_SORT_ORDER,
        "file:///lake/t",
        {TableProperties.DEFAULT_NAME_MAPPING: mapping},
    )
    job = RewriteJob("run", metadata, {}, ())
    target = schema_to_pyarrow(metadata.schema())
    ids = {"id": b"1", "name": b"2"}

    def with_ids(fields: dict[str, pa.DataType], given: dict[str, bytes] | None) -> pa.Schema:
        return pa.schema(
            [pa.field(n, t, metadata={b"PARQUET:field_id": given[n]} if given else None) for n, t in fields.items()]
        )

    written = {"name": pa.large_string(), "id": pa.int64()}
    assert job.reads_as_is(with_ids(written, None), target)  # by the name mapping, in any order
    assert job.reads_as_is(with_ids(written, ids), target)  # by their own ids
    assert not job.reads_as_is(with_ids(written, {"id": b"2", "name": b"1"}), target)  # swapped ids
    assert not job.reads_as_is(with_ids({"id": pa.int64()}, None), target)  # an older schema
    assert not job.reads_as_is(with_ids({"id": pa.int32(), "name": pa.string()}, None), target)  # promoted
    nested = {"id": pa.int64(), "name": pa.struct([("first", pa.string())])}
    nested_schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "name", StructType(NestedField(3, "first", StringType(), required=False)), required=False),
    )
    assert not job.reads_as_is(with_ids(nested, None), schema_to_pyarrow(nested_schema))


class Session:
    """A Spark session as the rewriter uses it: a job's collect() fails with ``error``, else gives ``rows``."""

    def __init__(self, rows: list[dict[str, Any]], error: str | None = None) -> None:
        self.rows, self.error, self.jobs = rows, error, 0

    def range(self, *_: Any) -> Session:
        return self

    def mapInArrow(self, *_: Any) -> Session:
        return self

    def collect(self) -> list[dict[str, Any]]:
        self.jobs += 1
        if self.error:
            raise RuntimeError(self.error)
        return self.rows


REWRITTEN = [{"bin": 0, "files": json.dumps([["file:///t/data/new.parquet", 123]])}]


def test_a_rewrite_that_meets_a_dropped_session_joins_again_and_runs_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from workers import spark_writer
    from workers.maintenance import RewriteJob, SparkRewriter

    dropped = Session([], error="PythonException: ModuleNotFoundError: No module named 'workers'")
    joined = Session(REWRITTEN)
    sessions, forgotten = iter([dropped, joined]), []
    monkeypatch.setattr(spark_writer, "spark_session", lambda: next(sessions))
    monkeypatch.setattr(spark_writer, "forget_session", forgotten.append)

    job = RewriteJob(run_id="r", metadata=None, io_properties={}, bins=((),))  # type: ignore[arg-type]
    assert SparkRewriter().rewrite(job) == {0: [("file:///t/data/new.parquet", 123)]}
    assert forgotten == [dropped] and dropped.jobs == 1 and joined.jobs == 1


def test_a_rewrite_that_fails_otherwise_fails_once_with_sparks_cause(monkeypatch: pytest.MonkeyPatch) -> None:
    from workers import spark_writer
    from workers.maintenance import RewriteJob, SparkRewriter

    broken = Session([], error='Traceback (most recent call last):\n  File "x", line 1\nOSError: disk full')
    monkeypatch.setattr(spark_writer, "spark_session", lambda: broken)
    job = RewriteJob(run_id="r", metadata=None, io_properties={}, bins=((),))  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="Spark job failed: OSError: disk full"):
        SparkRewriter().rewrite(job)
    assert broken.jobs == 1
