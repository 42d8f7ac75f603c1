"""The UI in a real browser: headless Chromium (Debian's ``chromium``) driven by Playwright.

The main story runs against the real runtime: the embedded Kafka broker, a
Spark Connect server, a fresh Iceberg warehouse, and the supervisor,
coordinator and tasks in threads of the test process (``runtime_in_threads``).
Step by step: log in, create a connector for a real topic through the form
(an invalid config first, rejected at its field), produce records, see it
Healthy with its task running, watch the commit in flight refresh live, find
it COMMITTED in the history with its records count, pause it (no commit
while records wait) and resume it (they land), then edit it through the
diff and see the new config run two tasks.

A second story covers what the runtime cannot be made to do on demand: a
task failing with a trace, partial commits, a long history for the charts,
pausing the live refresh. Its rows come from the ledger functions and are
written as the runtime writes them.

A third part checks that the figures tell the truth, on rows written the
same way: no partition shows more committed than its end offset when a
task's last look at the log's end predates what the ledger has committed
since; the create form's validation lists the required fields left empty;
records/s states its window and reads 0 once a window passes without a
commit.

Screenshots of each page go to ``var/screenshots/`` for a reviewer.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.utils import timezone
from playwright import sync_api as playwright_api

from connectors import actions
from connectors.forms import field_id
from connectors.models import Commit, CommitState, Connector, CoordinatorPhase, DesiredState, TaskState
from tests.conftest import sink_config
from tests.integration.helpers import caught_up, create_topic, json_records, produce, wait_until
from tests.ui.conftest import (
    CONFIG,
    PASSWORD,
    LedgerFor,
    age_ledger,
    beat_coordinator,
    heartbeating_tasks,
    runtime_in_threads,
    runtime_task,
)
from workers import runtime

CHROMIUM = os.environ.get("SINKADMIN_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = Path(settings.BASE_DIR) / "var" / "screenshots"
VENDOR = Path(settings.BASE_DIR) / "static" / "vendor"
LAPTOP: playwright_api.ViewportSize = {"width": 1366, "height": 900}
TABLET: playwright_api.ViewportSize = {"width": 820, "height": 1180}
# What an action or an assertion waits for, a click's navigation included: CI runs this lane beside the
# Spark one on two cores, where a page's first load after logging in took more than 10 s (twice).
ACTION_MS = 30_000
# Waits on the runtime: the first Spark write of a session takes a while.
RUNTIME_MS = 120_000

PARTITIONS = 2
FIRST_BATCH = 600
PAUSED_BATCH = 250
# Long enough for the commit in flight to be seen (the page refreshes every 3 s).
INTERVAL_MS = 6000
# The first write of a Spark session is slow: the first commit must not time out.
COMMIT_TIMEOUT_MS = 60_000
PARTITION_BY = ("iceberg.table.db.orders.partition-by", "truncate(1000, id)")

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not shutil.which(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium")
    missing = [f for f in ("htmx.min.js", "chart.umd.min.js") if not (VENDOR / f).exists()]
    if missing:
        pytest.fail(f"static/vendor lacks {missing}: run `npm ci --ignore-scripts && npm run vendor`")
    # Playwright's sync API runs an event loop in this thread; the ORM calls
    # the steps make between page actions are plain synchronous calls.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    playwright_api.expect.set_options(timeout=ACTION_MS)
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()
    os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


class Problems:
    """Console errors, uncaught exceptions and failed requests of one page: there must be none."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def watch(self, page: playwright_api.Page) -> None:
        page.on("console", lambda m: self.items.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
        page.on("pageerror", lambda e: self.items.append(f"page error: {e}"))
        page.on("requestfailed", self._request_failed)

    def _request_failed(self, request: playwright_api.Request) -> None:
        # Leaving a page cancels its pending live refresh; that is not a failure.
        if request.failure != "net::ERR_ABORTED":
            self.items.append(f"request failed: {request.url} {request.failure}")


@pytest.fixture
def page(browser: playwright_api.Browser) -> Iterator[tuple[playwright_api.Page, Problems]]:
    context = browser.new_context(viewport=LAPTOP)
    context.set_default_timeout(ACTION_MS)
    page = context.new_page()
    problems = Problems()
    problems.watch(page)
    yield page, problems
    context.close()


def shoot(page: playwright_api.Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def expect(locator: playwright_api.Locator) -> playwright_api.LocatorAssertions:
    return playwright_api.expect(locator)


def log_in(page: playwright_api.Page, base: str) -> None:
    page.goto(f"{base}/")
    expect(page.get_by_role("heading", name="sinkadmin")).to_be_visible()  # the login page
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Connectors")).to_be_visible()


def set_field(page: playwright_api.Page, key: str, value: str) -> None:
    """Type a config value into its field, unfolding its group's options first if they are folded."""
    field = page.locator(f"#{field_id(key)}")
    if not field.is_visible():
        page.locator(f"details:has(#{field_id(key)}):not([open]) > summary").first.click()
    if field.evaluate("e => e.tagName") == "SELECT":
        field.select_option(value)
    else:
        field.fill(value)


def create_with_a_rejected_config_first(page: playwright_api.Page, base: str, config: dict[str, str]) -> None:
    page.get_by_role("link", name="New connector").first.click()
    page.get_by_role("link", name="Iceberg tables").click()  # the plugin first
    expect(page.get_by_role("heading", name="New connector")).to_be_visible()
    page.locator("#id_name").fill("orders-sink")
    for key, value in config.items():
        if key != "iceberg.tables":
            set_field(page, key, value)
    set_field(page, "iceberg.tables", "orders")  # no namespace: invalid

    # Live validation puts the error at the field while the user types.
    errors = page.locator("#errors-cfg-iceberg-tables")
    expect(errors).to_contain_text("must be namespace.table")
    expect(page.locator("#cfg-iceberg-tables")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#validation-summary")).to_contain_text("1 to fix before saving")

    # A per-table setting through the key/value editor.
    page.get_by_role("button", name="+ Add property").click()
    page.locator("#kv-rows tr").last.locator("input[name=extra-key]").fill(PARTITION_BY[0])
    page.locator("#kv-rows tr").last.locator("input[name=extra-value]").fill(PARTITION_BY[1])
    expect(page.locator("#errors-extra")).to_contain_text("'db.orders' is not one of iceberg.tables")
    shoot(page, "create-form")

    # Saving anyway is refused by the server, with the error at the same field.
    page.get_by_role("button", name="Create connector").click()
    expect(page.locator("#errors-cfg-iceberg-tables")).to_contain_text("must be namespace.table")
    assert not Connector.objects.filter(name="orders-sink").exists()

    page.locator("#cfg-iceberg-tables").fill(config["iceberg.tables"])
    expect(page.locator("#validation-summary")).to_contain_text("No problems found")
    expect(page.locator("#errors-cfg-iceberg-tables")).to_be_empty()
    page.get_by_role("button", name="Create connector").click()
    expect(page.locator(".messages")).to_contain_text("Connector orders-sink created")
    assert page.url == f"{base}/connectors/orders-sink/"
    assert Connector.objects.get(name="orders-sink").config == {**config, PARTITION_BY[0]: PARTITION_BY[1]}


def other_connectors_to_sort() -> None:
    clicks = actions.create_connector(
        "clicks-sink", {"connector.class": "iceberg", "topics": "clicks", "iceberg.tables": "web.clicks"}
    )
    actions.fail_connector(
        clicks.pk, "Catalog web unreachable: connection refused (127.0.0.1:8181)", "Traceback ...\nConnectionError"
    )
    actions.create_connector(
        "payments-sink",
        {"connector.class": "iceberg", "topics.regex": "payments-.*", "iceberg.tables": "fin.payments"},
        initial_state=DesiredState.PAUSED,
    )


def card(page: playwright_api.Page, title: str) -> playwright_api.Locator:
    """The figure of one card of the detail page."""
    return page.locator(".card", has=page.get_by_text(title, exact=True)).locator("dd")


def see_it_running(page: playwright_api.Page, base: str) -> None:
    page.goto(f"{base}/connectors/orders-sink/")
    # Nothing reloads the page: the live refresh shows the runtime taking the connector.
    expect(page.locator("#health-badge")).to_have_text("Healthy", timeout=RUNTIME_MS)
    expect(page.locator("#health-badge + .reason")).to_have_text("all 1 tasks running")
    expect(card(page, "Tasks running")).to_have_text("1 of 1")
    task = page.locator("#tasks tbody tr")
    expect(task).to_have_count(1)
    expect(task.locator(".badge")).to_have_text("RUNNING")
    expect(task).to_contain_text(runtime.worker_id())
    expect(page.locator("#partitions tbody tr[data-partition]")).to_have_count(PARTITIONS)


def watch_a_commit_in_flight(page: playwright_api.Page, topic: str) -> str:
    """Screenshot the commit in flight, follow it to the ledger; returns its short id."""
    panel = page.locator("#current-commit")
    in_flight = page.locator(
        '#current-commit:is([data-phase="staging"], [data-phase="collecting"]) .partition-chips li.pending'
    )
    # The screenshot must show the commit in flight: take it again if a refresh swapped the page meanwhile.
    for _ in range(10):
        expect(in_flight.first).to_be_visible(timeout=RUNTIME_MS)
        refreshed = page.locator("#refreshed-at").inner_text()
        shoot(page, "detail-mid-commit")
        if page.locator("#refreshed-at").inner_text() == refreshed and in_flight.count():
            break
    else:
        pytest.fail("the live refresh never held a commit in flight still for a screenshot")
    expect(panel.locator(".partition-chips li")).to_have_count(PARTITIONS)
    pending = in_flight.count()
    expect(panel).to_contain_text(f"{PARTITIONS - pending} of {PARTITIONS} partitions reported")
    expect(panel.locator("[aria-current=step]")).to_be_visible()
    commit_id = panel.locator("header code").inner_text()

    # The same page, not reloaded, shows the commit in the ledger once it is acknowledged.
    ends = {(topic, p): FIRST_BATCH // PARTITIONS for p in range(PARTITIONS)}
    wait_until(caught_up("orders-sink", ends), RUNTIME_MS / 1000, "the first batch to be committed")
    expect(page.locator("#recent-title + .table-wrap .state-COMMITTED").first).to_be_visible()
    expect(card(page, "Lag")).to_have_text("0 records")
    return commit_id


def records_shown(rows: playwright_api.Locator) -> list[int]:
    """The Records column (the 4th data cell) of the given history rows."""
    return [int(text.replace(",", "")) for text in rows.locator("td:nth-of-type(4)").all_inner_texts()]


def wait_for_charts(page: playwright_api.Page, *charts: str) -> None:
    """Until each chart is drawn: Chart.js is a deferred script, the rows can be there before it ran."""
    for chart in charts:
        page.wait_for_function(f"() => window.Chart !== undefined && Chart.getChart('{chart}') !== undefined")


def read_the_history(page: playwright_api.Page, base: str, in_flight: str) -> None:
    page.goto(f"{base}/connectors/orders-sink/")
    page.get_by_role("link", name="Commit history").first.click()
    # The commit seen in flight is the one in the history, COMMITTED with every record produced.
    commit = Commit.objects.get(connector_name="orders-sink")
    assert str(commit.commit_id).startswith(in_flight)
    row = page.locator("#commits tbody tr")
    expect(row).to_have_count(1)
    expect(row).to_have_attribute("data-commit", str(commit.commit_id))
    expect(row.locator(".badge")).to_have_text("COMMITTED")
    assert records_shown(row) == [FIRST_BATCH]
    expect(row).to_contain_text(f"db.orders: {commit.snapshot_ids['db.orders']}")
    expect(row).to_contain_text("full")
    wait_for_charts(page, "chart-records")
    assert page.evaluate("Chart.getChart('chart-records').data.datasets[0].data") == [FIRST_BATCH]
    shoot(page, "commit-history")

    # Its offset ranges and files, per partition.
    row.get_by_role("link").first.click()
    expect(page.locator("h1")).to_contain_text(str(commit.commit_id))
    ranges = page.locator("#commit-partitions tbody tr")
    expect(ranges).to_have_count(PARTITIONS)
    for partition in commit.partitions.all():
        shown = ranges.filter(has_text=f"{partition.topic}/{partition.partition}")
        expect(shown.locator("td.num")).to_have_text(["0", f"{FIRST_BATCH // PARTITIONS}", f"{partition.records}", "0"])
        expect(shown).to_contain_text(".parquet")
    shoot(page, "commit-detail")


def pause_and_resume_from_the_list(page: playwright_api.Page, base: str, bootstrap: str, topic: str) -> None:
    page.goto(f"{base}/")
    row = page.locator('tr[data-connector="orders-sink"]')
    expect(row.locator(".badge")).to_have_text("Healthy")
    expect(row.locator("td.num").first).to_have_text("1/1")
    # Unhealthy first: the failed connector heads the list.
    expect(page.locator("tr[data-connector]").first).to_have_attribute("data-connector", "clicks-sink")
    shoot(page, "list")

    row.get_by_role("button", name="Pause orders-sink").click()
    expect(page.locator(".messages")).to_contain_text("Connector orders-sink paused")
    expect(page.locator('tr[data-connector="orders-sink"] .badge')).to_have_text("Paused")
    assert Connector.objects.get(name="orders-sink").desired_state == DesiredState.PAUSED

    # Paused, the runtime finishes the commit in flight and starts no other: new records wait.
    page.get_by_role("link", name="orders-sink", exact=True).click()
    expect(page.locator("#health-badge")).to_have_text("Paused")
    expect(page.locator("#current-commit")).to_have_attribute("data-phase", "idle", timeout=RUNTIME_MS)
    commits = Commit.objects.filter(connector_name="orders-sink").count()
    ends = produce(bootstrap, topic, json_records(FIRST_BATCH, PAUSED_BATCH), PARTITIONS)
    # (The Lag card does not count them: a task reads end offsets only while it stages a commit.)
    page.wait_for_timeout(INTERVAL_MS + 3000)  # longer than a commit interval
    expect(page.locator("#current-commit")).to_have_attribute("data-phase", "idle")
    expect(page.locator("#health-badge")).to_have_text("Paused")
    assert Commit.objects.filter(connector_name="orders-sink").count() == commits

    page.goto(f"{base}/")
    page.locator('tr[data-connector="orders-sink"]').get_by_role("button", name="Resume orders-sink").click()
    expect(page.locator(".messages")).to_contain_text("Connector orders-sink resumed")
    expect(page.locator('tr[data-connector="orders-sink"] .badge')).not_to_have_text("Paused")
    assert Connector.objects.get(name="orders-sink").desired_state == DesiredState.RUNNING

    # Resumed, the waiting records land in the next commit.
    wait_until(caught_up("orders-sink", ends), RUNTIME_MS / 1000, "the records produced while paused")
    page.get_by_role("link", name="orders-sink", exact=True).click()
    page.get_by_role("link", name="Commit history").first.click()
    rows = page.locator("#commits tbody tr:has(.state-COMMITTED)")
    expect(rows).to_have_count(Commit.objects.filter(connector_name="orders-sink", state=CommitState.COMMITTED).count())
    assert records_shown(rows.first) == [PAUSED_BATCH]
    assert sum(records_shown(rows)) == FIRST_BATCH + PAUSED_BATCH

    # Search narrows the list as the user types.
    page.goto(f"{base}/")
    page.get_by_label("Search name, table or topic").fill("fin.pay")
    expect(page.locator("tr[data-connector]")).to_have_count(1)
    expect(page.locator("tr[data-connector]")).to_have_attribute("data-connector", "payments-sink")


def edit_through_the_diff(page: playwright_api.Page, base: str) -> None:
    page.goto(f"{base}/connectors/orders-sink/")
    page.get_by_role("link", name="Edit config").click()
    page.locator("#cfg-tasks-max").fill("2")
    page.get_by_role("button", name="Review changes").click()
    diff = page.locator("#config-diff")
    expect(diff.locator('tr[data-key="tasks.max"]')).to_contain_text("added")
    expect(diff.locator('tr[data-key="tasks.max"] ins')).to_have_text("2")
    expect(diff.locator("tbody tr")).to_have_count(1)
    shoot(page, "edit-diff")
    assert "tasks.max" not in Connector.objects.get(name="orders-sink").config  # not applied yet
    page.get_by_role("button", name="Apply 1 change").click()
    expect(page.locator(".messages")).to_contain_text("Config of orders-sink updated")
    assert Connector.objects.get(name="orders-sink").config["tasks.max"] == "2"


def see_the_new_config_run(page: playwright_api.Page) -> None:
    # The runtime restarts the connector with the new config: one partition per task.
    expect(card(page, "Tasks running")).to_have_text("2 of 2", timeout=RUNTIME_MS)
    expect(page.locator("#health-badge")).to_have_text("Healthy", timeout=RUNTIME_MS)
    expect(page.locator("#tasks tbody tr .badge")).to_have_text(["RUNNING", "RUNNING"])


def test_a_user_runs_a_connector_from_the_browser(
    page: tuple[playwright_api.Page, Problems],
    live_server: object,
    alice_user: User,
    lake: dict[str, str],
    kafka_bootstrap: str,
    topic_name: str,
) -> None:
    browser_page, problems = page
    base = str(live_server.url)  # type: ignore[attr-defined]
    create_topic(kafka_bootstrap, topic_name, PARTITIONS)
    log_in(browser_page, base)
    config = sink_config(
        topic_name,
        "db.orders",
        **{
            "iceberg.control.commit.interval-ms": str(INTERVAL_MS),
            "iceberg.control.commit.timeout-ms": str(COMMIT_TIMEOUT_MS),
        },
    )
    create_with_a_rejected_config_first(browser_page, base, config)
    other_connectors_to_sort()
    produce(kafka_bootstrap, topic_name, json_records(0, FIRST_BATCH), PARTITIONS)
    with runtime_in_threads() as crashes:
        see_it_running(browser_page, base)
        in_flight = watch_a_commit_in_flight(browser_page, topic_name)
        read_the_history(browser_page, base, in_flight)
        pause_and_resume_from_the_list(browser_page, base, kafka_bootstrap, topic_name)
        edit_through_the_diff(browser_page, base)
        see_the_new_config_run(browser_page)
    assert crashes == []
    assert problems.items == []


def a_long_ledger_and_a_commit_in_flight(commit_ledger: LedgerFor) -> uuid.UUID:
    connector = Connector.objects.get(name="orders-sink")
    commit = commit_ledger(connector, {("orders", 0): 0, ("orders", 1): 0, ("orders", 2): 0})
    now = timezone.now()
    for i in range(12):
        # mark_committed stamps "now": spacing the starts gives each commit its own duration.
        commit(
            {("orders", 0): 900 + 37 * i, ("orders", 1): 400 + 11 * (i % 4), ("orders", 2): 120 * (i % 3)},
            started_at=now - timedelta(seconds=96 - 7 * i),
            watermark=now - timedelta(seconds=100 - 6 * i),
            complete=i != 7,
            snapshot=5_804_113_000 + i,
        )
    for index, partitions in enumerate(([("orders", 0), ("orders", 1)], [("orders", 2)])):
        status = {f"{t}/{p}": {"end_offset": 20000 + 1000 * p, "staged": 150 + p} for t, p in partitions}
        runtime_task(connector, index, partitions=partitions, partition_status=status)
    in_flight = uuid.uuid4()
    beat_coordinator(
        connector,
        phase=CoordinatorPhase.COLLECTING,
        commit_id=in_flight,
        commit_started_at=timezone.now() - timedelta(seconds=12),
        partitions_expected=[["orders", 0], ["orders", 1], ["orders", 2]],
        partitions_reported=[["orders", 0], ["orders", 2]],
    )
    return in_flight


def pause_the_live_refresh_and_see_a_task_fail(page: playwright_api.Page, base: str) -> None:
    connector = Connector.objects.get(name="orders-sink")
    page.goto(f"{base}/connectors/orders-sink/")
    panel = page.locator("#current-commit")
    expect(panel).to_have_attribute("data-phase", "collecting")
    expect(panel).to_contain_text("2 of 3 partitions reported")
    expect(panel.locator(".partition-chips li.pending")).to_have_text(["⋯ orders/1 pending"])
    expect(page.locator("#health-badge")).to_have_text("Healthy")

    # The last partition reports: the page shows it without a reload.
    beat_coordinator(connector, partitions_reported=[["orders", 0], ["orders", 1], ["orders", 2]])
    expect(panel).to_contain_text("3 of 3 partitions reported")

    # Paused refresh keeps the page as it is.
    page.get_by_role("button", name="Pause live refresh").click()
    expect(page.locator("[data-live-toggle]")).to_have_text("Resume live refresh")
    beat_coordinator(connector, phase=CoordinatorPhase.IDLE, commit_id=None)
    page.wait_for_timeout(4000)
    expect(page.locator("#current-commit")).to_have_attribute("data-phase", "collecting")
    page.get_by_role("button", name="Resume live refresh").click()
    expect(page.locator("#current-commit")).to_have_attribute("data-phase", "idle")

    # A failing task shows its cause at once and its trace on demand.
    runtime_task(
        connector,
        2,
        state=TaskState.FAILED,
        error_message="Record orders/1@20417 is not valid JSON: Expecting value at line 1 column 1",
        error_trace='Traceback (most recent call last):\n  File "workers/participant.py", line 88\nJSONDecodeError',
    )
    expect(page.locator("#health-badge")).to_have_text("Degraded")
    trace = page.locator("#trace-task-2")
    expect(trace.locator("pre")).not_to_be_visible()
    trace.locator("summary").click()
    expect(trace.locator("pre")).to_contain_text("JSONDecodeError")
    page.wait_for_timeout(3500)  # one refresh later the trace is still open
    expect(page.locator("#trace-task-2 pre")).to_be_visible()
    page.set_viewport_size(TABLET)
    shoot(page, "detail-tablet")
    page.set_viewport_size(LAPTOP)


def read_a_long_history(page: playwright_api.Page, base: str) -> None:
    page.goto(f"{base}/connectors/orders-sink/")
    page.get_by_role("link", name="Commit history").first.click()
    rows = page.locator("#commits tbody tr")
    expect(rows).to_have_count(12)
    newest = Commit.objects.filter(connector_name="orders-sink").order_by("-started_at").first()
    assert newest is not None
    newest_row = page.locator(f'tr[data-commit="{newest.commit_id}"]')
    expect(newest_row).to_contain_text(f"{newest.records:,}")
    expect(page.locator("#commits")).to_contain_text("partial")
    wait_for_charts(page, "chart-records", "chart-duration", "chart-lag")
    assert page.evaluate("Chart.getChart('chart-records').data.datasets[0].data.length") == 12
    shoot(page, "commit-history-charts")

    newest_row.get_by_role("link").first.click()
    expect(page.locator("#commit-partitions tbody tr")).to_have_count(3)
    expect(page.locator("#commit-partitions")).to_contain_text("orders+0+")


def test_failures_partial_commits_and_a_long_history_in_the_browser(
    page: tuple[playwright_api.Page, Problems],
    live_server: object,
    alice_user: User,
    commit_ledger: LedgerFor,
) -> None:
    browser_page, problems = page
    base = str(live_server.url)  # type: ignore[attr-defined]
    actions.create_connector("orders-sink", CONFIG)
    log_in(browser_page, base)
    a_long_ledger_and_a_commit_in_flight(commit_ledger)
    pause_the_live_refresh_and_see_a_task_fail(browser_page, base)
    read_a_long_history(browser_page, base)
    assert problems.items == []


def figure(text: str) -> int | None:
    """A count as the page shows it: ``15,000`` or ``—``."""
    text = text.strip()
    return None if text in ("", "—") else int(text.replace(",", ""))


def partition_figures(page: playwright_api.Page) -> dict[str, tuple[int | None, int | None, int | None]]:
    """Committed, end offset and lag of each row of the partitions table, as the page shows them."""
    shown = {}
    for row in page.locator("#partitions tbody tr[data-partition]").all():
        # Task, committed (and what is applying, on a line of its own), end offset, staged, lag.
        cells = row.locator("td.num").all_inner_texts()
        committed = cells[1].splitlines()[0]
        shown[str(row.get_attribute("data-partition"))] = (figure(committed), figure(cells[2]), figure(cells[4]))
    return shown


def test_no_partition_shows_more_committed_than_its_end_offset(
    page: tuple[playwright_api.Page, Problems], live_server: object, alice_user: User, commit_ledger: LedgerFor
) -> None:
    browser_page, problems = page
    base = str(live_server.url)  # type: ignore[attr-defined]
    connector = actions.create_connector("orders-sink", CONFIG)
    log_in(browser_page, base)
    commit = commit_ledger(connector, {("orders", 0): 0, ("orders", 1): 0})
    # The task reports the ends of the log it last saw, then reads on; the ledger commits what it read
    # since: orders/0 to 15,000, past the 13,058 the task reported; orders/1 to 4,000 of 5,200.
    heartbeating_tasks(
        connector,
        {("orders", 0): {"end_offset": 13_058, "staged": 0}, ("orders", 1): {"end_offset": 5_200, "staged": 0}},
    )
    commit({("orders", 0): 9_000, ("orders", 1): 4_000})
    commit({("orders", 0): 6_000})
    beat_coordinator(connector, phase=CoordinatorPhase.IDLE, commit_id=None)

    browser_page.goto(f"{base}/connectors/orders-sink/")
    expect(browser_page.locator("#partitions tbody tr[data-partition]")).to_have_count(2)
    for _ in range(2):  # as the page is served, then as the live refresh swaps it
        shown = partition_figures(browser_page)
        for key, (committed, end, lag) in shown.items():
            assert committed is not None and end is not None and lag is not None, key
            assert committed <= end and lag == end - committed, (key, committed, end, lag)
        assert shown == {"orders/0": (15_000, 15_000, 0), "orders/1": (4_000, 5_200, 1_200)}
        expect(card(browser_page, "Lag")).to_have_text("1,200 records")
        refreshed = browser_page.locator("#refreshed-at").inner_text()
        expect(browser_page.locator("#refreshed-at")).not_to_have_text(refreshed)
    shoot(browser_page, "detail-end-offsets")
    assert problems.items == []


def test_the_validation_panel_lists_the_required_fields_left_empty(
    page: tuple[playwright_api.Page, Problems], live_server: object, alice_user: User
) -> None:
    browser_page, problems = page
    base = str(live_server.url)  # type: ignore[attr-defined]
    log_in(browser_page, base)
    browser_page.get_by_role("link", name="New connector").first.click()
    browser_page.get_by_role("link", name="Iceberg tables").click()
    summary = browser_page.locator("#validation-summary")
    missing = {
        "name": "A name is required",
        "topics": "Must configure one of topics or topics.regex",
        "iceberg.tables": 'Missing required configuration "iceberg.tables"',
    }

    def lists_what_is_missing(name_error: str) -> None:
        expect(summary.locator(".summary-bad")).to_have_text("3 to fix before saving")
        items = summary.locator(".summary-list li")
        expect(items).to_have_count(3)
        for key, message in {**missing, "name": name_error}.items():
            expect(
                items.filter(has=browser_page.locator("code", has_text=re.compile(rf"^{re.escape(key)}$")))
            ).to_contain_text(message)
        expect(summary).not_to_contain_text("No problems found")

    # Nothing is checked before the user types: the panel says so, and not that all is well.
    expect(summary).to_contain_text("Not checked yet")
    expect(summary).not_to_contain_text("No problems found")

    # The live validation runs as the user types: a name typed and taken back leaves all three empty.
    name = browser_page.locator("#id_name")
    name.press_sequentially("o")
    name.press("Backspace")
    lists_what_is_missing(missing["name"])
    expect(browser_page.locator("#errors-name")).to_contain_text("A name is required")
    expect(browser_page.locator("#errors-cfg-topics")).to_contain_text(missing["topics"])
    expect(browser_page.locator("#errors-cfg-iceberg-tables")).to_contain_text(missing["iceberg.tables"])
    shoot(browser_page, "create-form-empty")

    # Saving anyway: the server's answer says the same, and nothing is created.
    browser_page.get_by_role("button", name="Create connector").click()
    expect(browser_page.get_by_role("heading", name="New connector")).to_be_visible()
    lists_what_is_missing("This field is required.")
    assert not Connector.objects.exists()
    assert problems.items == []


def test_rates_state_their_window_and_read_0_when_idle(
    page: tuple[playwright_api.Page, Problems], live_server: object, alice_user: User, commit_ledger: LedgerFor
) -> None:
    browser_page, problems = page
    base = str(live_server.url)  # type: ignore[attr-defined]
    # Commits every 10 s: its rate is over the last minute (six intervals).
    connector = actions.create_connector("orders-sink", {**CONFIG, "iceberg.control.commit.interval-ms": "10000"})
    log_in(browser_page, base)
    commit = commit_ledger(connector, {("orders", 0): 0, ("orders", 1): 0})
    commit({("orders", 0): 600, ("orders", 1): 300})  # a burst: 900 records, 900 / 60 s
    beat_coordinator(connector, phase=CoordinatorPhase.IDLE, commit_id=None)

    browser_page.goto(f"{base}/")
    heading = browser_page.locator("#rate-heading")
    expect(heading).to_contain_text("Records/s")
    expect(heading.locator(".window")).to_have_text("last 1 min")
    rate_cell = browser_page.locator('tr[data-connector="orders-sink"] td.num').nth(1)
    expect(rate_cell).to_have_text("15.0/s")

    browser_page.get_by_role("link", name="orders-sink", exact=True).click()
    rate_card = browser_page.locator(".card", has=browser_page.get_by_text("Records/s", exact=True))
    expect(rate_card.locator("dt .window")).to_have_text("last 1 min")
    expect(rate_card.locator("dd")).to_have_text("15.0/s")
    shoot(browser_page, "detail-rate-burst")

    # A minute later, nothing committed since: the live refresh shows 0 over the same stated window.
    age_ledger(connector, timedelta(seconds=61))
    expect(rate_card.locator("dd")).to_have_text("0/s")
    expect(rate_card.locator("dt .window")).to_have_text("last 1 min")
    expect(card(browser_page, "Last commit")).to_contain_text("1 min")
    shoot(browser_page, "detail-rate-idle")

    browser_page.goto(f"{base}/")
    expect(rate_cell).to_have_text("0/s")
    expect(heading.locator(".window")).to_have_text("last 1 min")
    shoot(browser_page, "list-rate-idle")
    assert problems.items == []


def test_the_login_page_rejects_a_wrong_password(
    page: tuple[playwright_api.Page, Problems], live_server: object, alice_user: User
) -> None:
    browser_page, problems = page
    browser_page.goto(f"{live_server.url}/connectors/x/")  # type: ignore[attr-defined]
    browser_page.get_by_label("Username").fill("alice")
    browser_page.get_by_label("Password").fill("wrong")
    browser_page.get_by_role("button", name="Log in").click()
    expect(browser_page.locator(".errorlist")).to_contain_text("enter a correct username and password")
    assert re.search(r"/accounts/login/", browser_page.url)
    shoot(browser_page, "login")
    assert problems.items == []
