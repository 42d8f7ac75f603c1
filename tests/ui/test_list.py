"""The connectors list: health rollup, figures from the ledger, order, search and filters."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from connectors import actions
from connectors.actions import runtime as runtime_state
from connectors.models import Commit, Connector, MaintenanceOutcome, MaintenanceRun, StackProcess, TaskState
from connectors.ui.figures import connectors_for_summary, rate_window, summarize
from connectors.ui.health import Health
from tests.ui.conftest import CONFIG, LedgerFor, beat_coordinator, heartbeating_tasks, runtime_task

pytestmark = pytest.mark.django_db


def row_of(html: str, name: str) -> str:
    match = re.search(rf'<tr class="row-\w+" data-connector="{re.escape(name)}">(.*?)</tr>', html, re.S)
    assert match, f"no row for {name}"
    return match.group(1)


def cells(row: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]


def summary_of(name: str, now=None):  # type: ignore[no-untyped-def]
    return summarize(connectors_for_summary(Connector.objects.filter(name=name)), now or timezone.now())[0]


def test_records_per_second_are_the_records_committed_in_the_window_and_0_when_idle(
    make_connector: Callable[..., Connector], commit_ledger: LedgerFor
) -> None:
    connector = make_connector("orders-sink", **{"iceberg.control.commit.interval-ms": "10000"})
    commit = commit_ledger(connector)
    first = commit({("orders", 0): 600})
    second = commit({("orders", 0): 300})
    assert first.committed_at is not None and second.committed_at is not None
    window = timedelta(minutes=1)  # six 10 s intervals
    # A burst within the window: its records over the whole window, not over the time it took.
    at_second = summary_of("orders-sink", second.committed_at)
    assert at_second.rate_window == window
    assert at_second.records_per_second == pytest.approx(900 / 60)
    # The window slides past the first commit, then past the second: idle, the rate reads 0.
    assert summary_of("orders-sink", first.committed_at + window).records_per_second == pytest.approx(300 / 60)
    assert summary_of("orders-sink", second.committed_at + window).records_per_second == 0
    # A commit after "now" is not in its window either.
    assert summary_of("orders-sink", first.committed_at).records_per_second == pytest.approx(600 / 60)


@pytest.mark.parametrize(
    ("config", "window"),
    [
        ({"iceberg.control.commit.interval-ms": "10000"}, timedelta(minutes=1)),
        # Whole intervals: 3 of 25 s, not a minute that holds 2 or 3 commits depending on where it falls.
        ({"iceberg.control.commit.interval-ms": "25000"}, timedelta(seconds=75)),
        ({"iceberg.control.commit.interval-ms": "45000"}, timedelta(seconds=90)),
        ({}, timedelta(minutes=10)),  # the default 5 min interval
        # The files sink's commit interval may be its rotate.schedule.interval.ms.
        (
            {"connector.class": "io.confluent.connect.s3.S3SinkConnector", "rotate.schedule.interval.ms": "600000"},
            timedelta(minutes=20),
        ),
    ],
)
def test_the_rate_window_is_whole_commit_intervals_at_least_two_and_a_minute(
    config: dict[str, str], window: timedelta
) -> None:
    assert rate_window(Connector(name="orders-sink", config={**CONFIG, **config})) == window


def test_each_connector_s_rate_uses_its_own_window(
    make_connector: Callable[..., Connector], commit_ledger: LedgerFor
) -> None:
    quick = make_connector("quick-sink", **{"iceberg.control.commit.interval-ms": "10000"})
    slow = make_connector("slow-sink")
    commit_ledger(quick)({("orders", 0): 120})
    commit_ledger(slow)({("orders", 0): 1200})
    # Five minutes on: the quick connector's minute holds no commit, the slow one's ten minutes still do.
    later = timezone.now() + timedelta(minutes=5)
    summaries = {s.connector.name: s for s in summarize(connectors_for_summary(), later)}
    assert summaries["quick-sink"].records_per_second == 0
    assert summaries["slow-sink"].records_per_second == pytest.approx(1200 / 600)


def test_the_list_states_the_rate_window_in_the_header_or_in_each_row(
    alice: Client, make_connector: Callable[..., Connector], commit_ledger: LedgerFor
) -> None:
    make_connector("orders-sink", **{"iceberg.control.commit.interval-ms": "10000"})
    make_connector("clicks-sink", **{"iceberg.control.commit.interval-ms": "30000"})
    commit_ledger(Connector.objects.get(name="orders-sink"))({("orders", 0): 90})

    def header(html: str) -> str:
        match = re.search(r'<th [^>]*id="rate-heading">(.*?)</th>', html, re.S)
        assert match
        return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", match.group(1))).strip()

    html = alice.get(reverse("connector-list")).content.decode()
    assert header(html) == "Records/s last 1 min"
    assert cells(row_of(html, "orders-sink"))[3] == "1.5/s"
    assert cells(row_of(html, "clicks-sink"))[3] == "—"  # no commit yet

    make_connector("slow-sink")
    html = alice.get(reverse("connector-list")).content.decode()
    assert header(html) == "Records/s over each row's window"
    assert cells(row_of(html, "orders-sink"))[3] == "1.5/s last 1 min"
    assert cells(row_of(html, "slow-sink"))[3] == "— last 10 min"


def test_a_connector_without_commits_has_no_rate_and_no_freshness(make_connector: Callable[..., Connector]) -> None:
    make_connector("orders-sink")
    summary = summary_of("orders-sink")
    assert summary.records_per_second is None
    assert summary.freshness is None
    assert summary.lag is None


def test_freshness_is_the_age_of_the_newest_committed_watermark(
    make_connector: Callable[..., Connector], commit_ledger: LedgerFor
) -> None:
    connector = make_connector("orders-sink")
    commit = commit_ledger(connector)
    now = timezone.now()
    commit({("orders", 0): 10}, watermark=now - timedelta(minutes=9))
    commit({("orders", 0): 10}, watermark=now - timedelta(minutes=4))
    summary = summary_of("orders-sink", now)
    assert summary.freshness == timedelta(minutes=4)
    assert summary.freshness_basis == "watermark"


def test_freshness_falls_back_to_the_last_commit_without_watermarks(
    make_connector: Callable[..., Connector], commit_ledger: LedgerFor
) -> None:
    connector = make_connector("orders-sink")
    committed = commit_ledger(connector)({("orders", 0): 10})
    now = timezone.now()
    summary = summary_of("orders-sink", now)
    assert committed.committed_at is not None
    assert summary.freshness_basis == "last commit"
    assert summary.freshness == now - committed.committed_at


def test_lag_is_end_offset_minus_the_committed_offset(
    alice: Client, make_connector: Callable[..., Connector], commit_ledger: LedgerFor
) -> None:
    connector = make_connector("orders-sink")
    commit = commit_ledger(connector, {("orders", 0): 100, ("orders", 1): 0})
    commit({("orders", 0): 50, ("orders", 1): 7})
    runtime_task(
        connector,
        0,
        partitions=[("orders", 0), ("orders", 1)],
        partition_status={"orders/0": {"end_offset": 200, "staged": 20}, "orders/1": {"end_offset": 7, "staged": 0}},
    )
    summary = summary_of("orders-sink")
    assert {p.key: p.lag for p in summary.partitions} == {"orders/0": 50, "orders/1": 0}
    assert summary.lag == 50

    html = alice.get(reverse("connector-list")).content.decode()
    assert cells(row_of(html, "orders-sink"))[4] == "50"


def test_a_partition_moved_between_tasks_uses_the_newest_end_offset(make_connector: Callable[..., Connector]) -> None:
    connector = make_connector("orders-sink")
    runtime_task(connector, 0, partition_status={"orders/0": {"end_offset": 120, "staged": 5}})
    runtime_task(
        connector, 1, partitions=[("orders", 0)], partition_status={"orders/0": {"end_offset": 150, "staged": 9}}
    )
    (row,) = summary_of("orders-sink").partitions
    assert (row.end_offset, row.staged, row.task_index) == (150, 9, 1)


def test_failing_tasks_are_not_shown_as_running(
    alice: Client, make_connector: Callable[..., Connector], commit_ledger: LedgerFor
) -> None:
    connector = make_connector("orders-sink")
    commit_ledger(connector)  # takes the coordinator lease
    beat_coordinator(connector)
    runtime_task(connector, 0)
    runtime_task(connector, 1, state=TaskState.FAILED, error_message="Cannot parse record at offset 17\nmore")
    summary = summary_of("orders-sink")
    assert summary.health is Health.DEGRADED
    assert "task 1: Cannot parse record at offset 17" in summary.rollup.reason
    assert (summary.tasks_running, summary.tasks_total) == (1, 2)

    html = alice.get(reverse("connector-list")).content.decode()
    row = row_of(html, "orders-sink")
    assert "Degraded" in row
    assert cells(row)[2] == "1/2"


def test_a_task_of_a_silent_worker_does_not_count_as_running(
    make_connector: Callable[..., Connector], commit_ledger: LedgerFor
) -> None:
    connector = make_connector("orders-sink")
    commit_ledger(connector)
    beat_coordinator(connector)
    runtime_task(connector, 0)
    runtime_task(connector, 1, heartbeat_age=timedelta(minutes=10))
    summary = summary_of("orders-sink")
    assert summary.health is Health.DEGRADED
    assert summary.tasks_running == 1


def test_all_running_tasks_with_a_live_coordinator_are_healthy(
    make_connector: Callable[..., Connector], commit_ledger: LedgerFor
) -> None:
    connector = make_connector("orders-sink")
    commit_ledger(connector)
    beat_coordinator(connector)
    runtime_task(connector, 0)
    assert summary_of("orders-sink").health is Health.HEALTHY


def test_records_dead_lettered_by_recent_commits_are_a_warning_not_healthy(
    make_connector: Callable[..., Connector], commit_ledger: LedgerFor
) -> None:
    """errors.tolerance=all goes on past bad records; a connector whose recent commits dead-letter some is a
    warning that says how many, not "Healthy" (a QA run through make run saw a third of the records go there)."""
    connector = make_connector("orders-sink")
    commit = commit_ledger(connector)({("orders", 0): 10})
    beat_coordinator(connector)
    runtime_task(connector, 0)
    Commit.objects.filter(pk=commit.pk).update(dead_lettered=3)
    summary = summary_of("orders-sink")
    assert summary.health is Health.WARNING
    assert summary.rollup.reason.startswith("3 records dead-lettered in the last ") and "see the commits" in (
        summary.rollup.reason
    )
    # Once the window has passed them, the connector is healthy again.
    Commit.objects.filter(pk=commit.pk).update(committed_at=timezone.now() - timedelta(hours=1))
    assert summary_of("orders-sink").health is Health.HEALTHY


def test_a_table_whose_last_maintenance_run_failed_is_a_warning_until_a_run_succeeds(
    make_connector: Callable[..., Connector], commit_ledger: LedgerFor
) -> None:
    """Commits land, but a table left uncompacted (a Hudi merge-on-read table's log files, say) is not "Healthy":
    a QA run saw every compaction fail while the connector read as healthy."""
    connector = make_connector("orders-sink")
    commit_ledger(connector)
    beat_coordinator(connector)
    runtime_task(connector, 0)

    def run(table: str, outcome: str, minutes_ago: int, error: str = "") -> None:
        MaintenanceRun.objects.create(
            connector=connector,
            connector_name=connector.name,
            table_name=table,
            epoch=1,
            started_at=timezone.now() - timedelta(minutes=minutes_ago),
            ended_at=timezone.now(),
            outcome=outcome,
            error=error,
        )

    run("db.orders", MaintenanceOutcome.SUCCEEDED, 30)
    run("db.orders", MaintenanceOutcome.FAILED, 20, 'compaction: Spark job failed: For input string: "x"')
    run("db.orders", MaintenanceOutcome.RUNNING, 1)  # (one under way says nothing yet)
    run("db.returns", MaintenanceOutcome.SUCCEEDED, 10)
    summary = summary_of("orders-sink")
    assert summary.health is Health.WARNING
    assert (
        summary.rollup.reason == 'maintenance of db.orders failed: compaction: Spark job failed: For input string: "x"'
    )
    run("db.orders", MaintenanceOutcome.SUCCEEDED, 0)
    assert summary_of("orders-sink").health is Health.HEALTHY


def test_a_running_task_that_reports_something_failing_in_it_is_a_warning_until_a_heartbeat_clears_it(
    make_connector: Callable[..., Connector], commit_ledger: LedgerFor
) -> None:
    connector = make_connector("orders-sink")
    commit_ledger(connector)
    beat_coordinator(connector)
    task = runtime_task(connector, 0)
    task.generation = connector.generation
    task.save()
    failing = "checkpoints failing: cannot reach https://mirror:hunter2@target.example:9093"
    assert runtime_state.task_alive(task.pk, task.epoch, partition_status={}, warning=failing) == "RUNNING"
    summary = summary_of("orders-sink")
    assert summary.health is Health.WARNING
    assert summary.tasks_running == 1
    # (Shown as the other reasons are: a password in it hidden.)
    assert summary.rollup.reason.startswith("task 0: checkpoints failing: cannot reach https://mirror:")
    assert "hunter2" not in summary.rollup.reason
    runtime_state.task_alive(task.pk, task.epoch, partition_status={})
    assert summary_of("orders-sink").health is Health.HEALTHY


def test_unhealthy_connectors_come_first(alice: Client, make_connector: Callable[..., Connector]) -> None:
    for name in ("a-paused", "b-failed", "c-stopped", "d-running"):
        make_connector(name)
    actions.pause_connector("a-paused")
    actions.fail_connector(Connector.objects.get(name="b-failed").pk, "Catalog unreachable: connection refused")
    actions.stop_connector("c-stopped")
    html = alice.get(reverse("connector-list")).content.decode()
    order = re.findall(r'data-connector="([^"]+)"', html)
    # d-running has no coordinator yet: unassigned, a state that needs a look before paused and stopped.
    assert order == ["b-failed", "d-running", "a-paused", "c-stopped"]
    assert "Catalog unreachable: connection refused" in row_of(html, "b-failed")


def test_search_matches_names_tables_and_topics(alice: Client, make_connector: Callable[..., Connector]) -> None:
    make_connector("orders-sink")
    make_connector("clicks-sink", topics="clicks", **{"iceberg.tables": "web.clickstream"})
    names = lambda q: re.findall(  # noqa: E731
        r'data-connector="([^"]+)"', alice.get(reverse("connector-list"), {"q": q}).content.decode()
    )
    assert names("clicks-") == ["clicks-sink"]
    assert names("clickstream") == ["clicks-sink"]
    assert names("orders") == ["orders-sink"]
    assert names("nothing-like-this") == []


def test_a_files_sink_is_listed_and_searched_by_its_directory(alice: Client, db: None) -> None:
    actions.create_connector(
        "archive-sink",
        {
            "connector.class": "io.confluent.connect.s3.S3SinkConnector",
            "topics": "clicks",
            "s3.bucket.name": "archive",
            "topics.dir": "raw",
            "format.class": "json",
            "flush.size": "1000",
        },
    )
    html = alice.get(reverse("connector-list"), {"q": "s3://archive"}).content.decode()
    assert re.findall(r'data-connector="([^"]+)"', html) == ["archive-sink"]
    assert "s3://archive/raw" in row_of(html, "archive-sink")
    detail = alice.get(reverse("connector-detail", args=["archive-sink"])).content.decode()
    assert "<code>s3://archive/raw</code>" in detail


def test_the_state_filter_keeps_only_that_health(alice: Client, make_connector: Callable[..., Connector]) -> None:
    make_connector("orders-sink")
    make_connector("clicks-sink")
    actions.pause_connector("clicks-sink")
    html = alice.get(reverse("connector-list"), {"state": "paused"}).content.decode()
    assert re.findall(r'data-connector="([^"]+)"', html) == ["clicks-sink"]
    assert "Paused (1)" in html


def test_htmx_refreshes_get_only_the_table(alice: Client, make_connector: Callable[..., Connector]) -> None:
    make_connector("orders-sink")
    partial = alice.get(reverse("connector-list"), headers={"HX-Request": "true"})
    assert b"<html" not in partial.content
    assert b'data-connector="orders-sink"' in partial.content
    assert "HX-Request" in partial["Vary"]


def test_a_connector_whose_last_commit_was_aborted_is_degraded_with_the_reason_until_one_lands(
    alice: Client, make_connector: Callable[..., Connector], commit_ledger: LedgerFor
) -> None:
    connector = make_connector("orders-sink")
    commit = commit_ledger(connector)
    commit({("orders", 0): 10})
    beat_coordinator(connector)
    runtime_task(connector, 0)
    commit.abort("task 0 could not write its files: table db.orders does not exist\nTraceback ...")  # type: ignore[attr-defined]
    summary = summary_of("orders-sink")
    reason = "the last commit was aborted: task 0 could not write its files: table db.orders does not exist"
    assert (summary.health, summary.rollup.reason) == (Health.DEGRADED, reason)
    assert reason in row_of(alice.get(reverse("connector-list")).content.decode(), "orders-sink")

    commit({("orders", 0): 5}, started_at=timezone.now())  # the next commit lands
    assert summary_of("orders-sink").health is Health.HEALTHY


def test_an_end_offset_seen_before_the_last_records_were_read_is_not_shown_below_them(
    make_connector: Callable[..., Connector], commit_ledger: LedgerFor
) -> None:
    connector = make_connector("orders-sink")
    commit = commit_ledger(connector, {("orders", 0): 0})
    commit({("orders", 0): 15_000})
    # The task's last look at the log's end came before it read the last records.
    runtime_task(connector, 0, partitions=[("orders", 0)], partition_status={"orders/0": {"end_offset": 13_058}})
    (row,) = summary_of("orders-sink").partitions
    assert (row.committed, row.end_offset, row.lag) == (15_000, 15_000, 0)


def test_the_workers_section_shows_make_runs_processes_their_deaths_and_restarts(alice: Client) -> None:
    runtime_state.stack_started("laptop")
    for name, pid in (("spark-connect", 4101), ("worker", 4102)):
        runtime_state.stack_process_started("laptop", name, pid, f"/srv/var/log/{name}.log")
    # The Spark Connect server died and came back; the worker died and waits out its back-off.
    runtime_state.stack_process_exited("laptop", "spark-connect", -9)
    runtime_state.stack_process_started("laptop", "spark-connect", 4203, "/srv/var/log/spark-connect.log")
    runtime_state.stack_process_exited("laptop", "worker", 1)
    html = alice.get(reverse("connector-list")).content.decode()

    assert "make run on laptop" in html
    spark = re.search(r'<tr data-process="spark-connect">(.*?)</tr>', html, re.S)
    worker = re.search(r'<tr data-process="worker">(.*?)</tr>', html, re.S)
    assert spark is not None and worker is not None
    cells = [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", spark.group(1), re.S)]
    assert cells[:3] == ["spark-connect", "running", "4203"]
    assert cells[4] == "1" and cells[5].startswith("exit -9,")
    assert cells[6] == "/srv/var/log/spark-connect.log"
    assert "<strong>restarting</strong>" in worker.group(1) and "exit 1," in worker.group(1)
    assert "Not heard from" not in html

    StackProcess.objects.update(seen_at=timezone.now() - timedelta(minutes=5))
    assert "Not heard from for 5\xa0minutes" in alice.get(reverse("connector-list")).content.decode()


def committed_minutes_ago(
    make_connector: Callable[..., Connector], commit_ledger: LedgerFor, end_offset: int
) -> tuple[Connector, datetime]:
    """A running connector whose one commit took orders/0 to 10, with a watermark 9 min 35 s old, and whose
    task sees the partition end at ``end_offset``; and the time now."""
    connector = make_connector("orders-sink")
    commit = commit_ledger(connector, {("orders", 0): 0})
    now = timezone.now()
    commit({("orders", 0): 10}, watermark=now - timedelta(minutes=9, seconds=35))
    beat_coordinator(connector)
    heartbeating_tasks(connector, {("orders", 0): {"end_offset": end_offset, "staged": 0}})
    return connector, now


def test_a_connector_caught_up_is_current_however_old_its_watermark(
    alice: Client, make_connector: Callable[..., Connector], commit_ledger: LedgerFor
) -> None:
    # Every record the partition has is committed, and its task runs: nothing is left to write.
    _, now = committed_minutes_ago(make_connector, commit_ledger, end_offset=10)
    summary = summary_of("orders-sink", now)
    assert summary.lag == 0
    assert (summary.freshness, summary.freshness_basis) == (timedelta(0), "caught up")
    assert cells(row_of(alice.get(reverse("connector-list")).content.decode(), "orders-sink"))[5] == "current"
    live = alice.get(reverse("connector-live", args=["orders-sink"])).content.decode()
    assert re.search(r"<dt>Freshness</dt><dd>Current <span", live)
    assert "behind" not in re.search(r"<dt>Freshness</dt><dd>(.*?)</dd>", live, re.S).group(1)  # type: ignore[union-attr]


def test_a_connector_with_records_to_write_is_as_old_as_its_watermark(
    make_connector: Callable[..., Connector], commit_ledger: LedgerFor
) -> None:
    _, now = committed_minutes_ago(make_connector, commit_ledger, end_offset=12)
    summary = summary_of("orders-sink", now)
    assert (summary.freshness, summary.freshness_basis) == (timedelta(minutes=9, seconds=35), "watermark")


def test_a_caught_up_connector_whose_tasks_do_not_run_is_not_called_current(
    make_connector: Callable[..., Connector], commit_ledger: LedgerFor
) -> None:
    # The end offsets a stopped or failed task last saw may be old: they do not prove the tables current.
    connector, now = committed_minutes_ago(make_connector, commit_ledger, end_offset=10)
    actions.fail_connector(connector.pk, "boom")
    assert summary_of("orders-sink", now).freshness_basis == "watermark"
