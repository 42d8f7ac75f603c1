"""Table maintenance's decisions, without servers: which snapshots expire, how Iceberg's
procedures are called and how their failures read, and how a sink's maintenance commits
(Hudi's) reach the coordinator's thread only between two of the sink's commits."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from sinks.iceberg.maintenance import (
    SnapshotInfo,
    SparkProcedures,
    file_key,
    snapshots_to_expire,
    sql_map,
    sql_timestamp,
)
from tests.test_coordinator import TP0, Channel, Clock, Committer, Ledger, start_and_end, status
from workers.coordinator import Coordinator, CoordinatorSettings, Phase
from workers.events import EventType
from workers.maintenance import BetweenCommits, Stopped

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

    from sinks.iceberg.maintenance import snapshot_info

    def snapshot(props: dict[str, str]) -> Any:
        summary = SimpleNamespace(additional_properties=props)
        return SimpleNamespace(snapshot_id=7, timestamp_ms=NOW, summary=summary)

    ours = snapshot({"sinkadmin.connector": "c", "sinkadmin.offsets": '{"o":{"0":[0,5],"1":[3,9]}}'})
    assert snapshot_info(ours) == SnapshotInfo(7, NOW, "c", ("o/0", "o/1"))
    assert snapshot_info(snapshot({"sinkadmin.offsets": "not json"})) == SnapshotInfo(7, NOW, None, ())


# --- orphans ----------------------------------------------------------------------------


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


# --- Iceberg's procedures ------------------------------------------------------------------


def test_procedure_arguments_are_sql_literals_of_what_they_mean() -> None:
    assert sql_timestamp(0) == "TIMESTAMP '1970-01-01T00:00:00.000+00:00'"
    assert sql_timestamp(1_800_000_000.25) == "TIMESTAMP '2027-01-15T08:00:00.250+00:00'"
    assert sql_map({"min-input-files": "5", "it's": "a\\b"}) == "map('min-input-files', '5', 'it\\'s', 'a\\\\b')"


class Conf(dict[str, str]):
    def set(self, key: str, value: str) -> None:
        self[key] = value


class Session:
    """A Spark session as the procedures use it: a statement's collect() fails with ``error``, else gives ``rows``."""

    def __init__(self, rows: list[dict[str, Any]], error: str | None = None) -> None:
        self.rows, self.error = rows, error
        self.statements: list[str] = []
        self.conf = Conf()

    def sql(self, statement: str) -> Session:
        self.statements.append(statement)
        return self

    def collect(self) -> list[Any]:
        from pyspark.sql import Row

        if self.error:
            raise RuntimeError(self.error)
        return [Row(**row) for row in self.rows]


PROPERTIES = {"uri": "postgresql+psycopg://u:pw@db:5432/lake", "warehouse": "file:///lake"}


def test_a_call_runs_on_the_connectors_catalog_in_a_session_of_that_catalogs_own() -> None:
    session = Session([{"rewritten_manifests_count": 3, "added_manifests_count": 1}])
    procedures = SparkProcedures("lake", PROPERTIES, session)
    rows = procedures.call("rewrite_manifests", "db.t")
    assert rows == [{"rewritten_manifests_count": 3, "added_manifests_count": 1}]
    assert session.statements == ["CALL `lake`.`system`.`rewrite_manifests`(table => '`db`.`t`')"]
    assert session.conf["spark.sql.catalog.lake.uri"] == "jdbc:postgresql://db:5432/lake"
    # One session for each catalog configuration: two catalogs named alike never meet in one.
    assert procedures.session_id == SparkProcedures("lake", dict(PROPERTIES)).session_id
    assert procedures.session_id != SparkProcedures("lake", {**PROPERTIES, "warehouse": "s3://b/"}).session_id


def test_a_call_that_meets_a_dropped_session_joins_again_and_runs_again(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    from workers import spark_writer

    settings.SPARK_REMOTE = "sc://spark:15002"
    dropped = Session([], error="[INVALID_HANDLE.SESSION_CLOSED] The handle 1 is invalid.")
    joined = Session([{"orphan_file_location": "file:/lake/t/data/x.parquet"}])
    sessions, urls = iter([dropped, joined]), []
    monkeypatch.setattr(spark_writer, "connect", lambda url: urls.append(url) or next(sessions))

    procedures = SparkProcedures("lake", PROPERTIES)
    rows = procedures.call("remove_orphan_files", "db.t", dry_run="true")
    assert rows == [{"orphan_file_location": "file:/lake/t/data/x.parquet"}]
    assert urls == [f"sc://spark:15002/;session_id={procedures.session_id}"] * 2
    assert len(dropped.statements) == len(joined.statements) == 1
    assert joined.conf == dropped.conf  # the catalog, mapped again in the session joined again


@pytest.mark.parametrize(
    ("answer", "table_format"),
    [
        # What Spark 3.5 answers without Iceberg's runtime or its SQL extensions, and without Hudi's.
        ("\n[PARSE_SYNTAX_ERROR] Syntax error at or near 'CALL'.(line 1, pos 0)\n\n== SQL ==\nCALL x", "Iceberg"),
        (
            "(org.apache.spark.SparkException) Cannot find catalog plugin class for catalog 'x': "
            "org.apache.iceberg.spark.SparkCatalog.",
            "Iceberg",
        ),
        (
            "(org.apache.spark.SparkClassNotFoundException) [DATA_SOURCE_NOT_FOUND] Failed to find the data source: "
            "iceberg. Please find packages at `https://spark.apache.org/third-party-projects.html`.",
            "Iceberg",
        ),
        ("[DATA_SOURCE_NOT_FOUND] Failed to find the data source: hudi. Please find packages", "Hudi"),
    ],
)
def test_a_spark_without_a_table_formats_runtime_is_named_with_what_it_needs(
    monkeypatch: pytest.MonkeyPatch, answer: str, table_format: str
) -> None:
    from workers import spark_writer

    with pytest.raises(spark_writer.SparkRuntimeMissing) as missing:
        SparkProcedures("lake", PROPERTIES, Session([], error=answer)).call("rewrite_data_files", "db.t")
    message = str(missing.value)
    assert message.startswith(f"Spark at {spark_writer.spark_endpoint()} has no {table_format} runtime (")
    runtime = "iceberg-spark-runtime-3.5_2.12" if table_format == "Iceberg" else "hudi-spark3.5-bundle_2.12"
    assert f":{runtime}:" in message and "spark.sql.extensions" in message


def test_a_call_that_fails_otherwise_fails_once_with_sparks_cause(monkeypatch: pytest.MonkeyPatch) -> None:

    broken = Session([], error="(org.apache.iceberg.exceptions.ValidationException) Cannot commit: disk full")
    with pytest.raises(RuntimeError, match=r"Spark job failed: .*Cannot commit: disk full"):
        SparkProcedures("lake", PROPERTIES, broken).call("rewrite_data_files", "db.t")
    assert len(broken.statements) == 1


def test_a_catalog_spark_cannot_open_fails_the_call_that_needs_it_not_the_coordinator() -> None:
    from sinks.iceberg.tables import SparkCatalogUnmappable

    procedures = SparkProcedures("lake", {"uri": "sqlite:////tmp/lake.db", "warehouse": "file:///lake"}, Session([]))
    with pytest.raises(SparkCatalogUnmappable, match="a SQL catalog on sqlite has no JDBC driver in Spark"):
        procedures.call("rewrite_manifests", "db.t")
