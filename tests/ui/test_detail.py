"""The connector detail page: the commit in flight as a state machine, tasks, partitions, errors."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from connectors import actions
from connectors.actions import PartitionRange
from connectors.actions import runtime as runtime_state
from connectors.models import Connector, CoordinatorPhase, CoordinatorStatus, TaskState
from tests.ui.conftest import LedgerFor, beat_coordinator, heartbeating_tasks, runtime_task

pytestmark = pytest.mark.django_db


def live(alice: Client, name: str = "orders-sink") -> str:
    response = alice.get(reverse("connector-live", args=[name]))
    assert response.status_code == 200
    return response.content.decode()


def steps(html: str) -> list[tuple[str, str]]:
    return re.findall(r'<li class="(\w+)"[^>]*>\s*<span class="step-name">\d+\. ([\w ]+)</span>', html)


def partition_cells(html: str, key: str) -> list[str]:
    """The partitions table's committed cell for ``key``, as text pieces (the figure, what is applying)."""
    row = re.search(rf'<tr data-partition="{re.escape(key)}">(.*?)</tr>', html, re.S)
    assert row is not None, f"no row for {key}"
    cell = re.findall(r'<td class="num">(.*?)</td>', row.group(1), re.S)[1]
    return [re.sub(r"<[^>]+>", "", piece).strip() for piece in re.split(r"<br>", cell) if piece.strip()]


def test_a_connector_without_coordinator_says_so(alice: Client, make_connector: Callable[..., Connector]) -> None:
    make_connector("orders-sink")
    html = live(alice)
    assert "No coordinator has run for this connector yet" in html
    assert 'data-phase="none"' in html


def test_the_commit_moves_through_its_states(alice: Client, make_connector: Callable[..., Connector]) -> None:
    connector = make_connector(
        "orders-sink",
        **{"iceberg.control.commit.interval-ms": "2000", "iceberg.control.commit.timeout-ms": "20000"},
    )
    epoch = actions.take_coordinator_lease(connector.pk, "worker-a")
    actions.seed_offsets(connector.pk, epoch, {("orders", 0): 0, ("orders", 1): 0})
    commit_id = uuid.uuid4()
    started = timezone.now() - timedelta(seconds=7)
    # Staging: the participants stage records until the interval ends.
    beat_coordinator(
        connector,
        phase=CoordinatorPhase.STAGING,
        commit_id=commit_id,
        commit_started_at=timezone.now() - timedelta(seconds=1),
        partitions_expected=[["orders", 0], ["orders", 1]],
        partitions_reported=[],
    )
    html = live(alice)
    assert 'data-phase="staging"' in html
    assert steps(html) == [
        ("active", "Started"),
        ("pending", "Write statuses"),
        ("pending", "Committing"),
        ("pending", "Acknowledged"),
    ]
    assert re.search(r"1\.\d s of the 2\.0 s commit interval", html)
    assert "0 of 2 partitions reported" in html
    # The interval has ended 5 s ago: the coordinator asked both partitions;
    # one has answered (as the runtime records it).
    beat_coordinator(
        connector,
        phase=CoordinatorPhase.COLLECTING,
        commit_id=commit_id,
        commit_started_at=started,
        partitions_expected=[["orders", 0], ["orders", 1]],
        partitions_reported=[["orders", 0]],
    )
    html = live(alice)
    assert 'data-phase="collecting"' in html
    assert steps(html) == [
        ("done", "Started"),
        ("active", "Write statuses"),
        ("pending", "Committing"),
        ("pending", "Acknowledged"),
    ]
    assert "1 of 2 partitions reported" in html
    assert re.search(r'class="reported">✓ orders/0', html)
    assert re.search(r'class="pending">⋯ orders/1', html)
    assert re.search(r"5\.\d s of the 20\.0 s commit timeout since the interval ended", html)

    actions.prepare_commit(
        connector.pk,
        epoch=epoch,
        commit_id=commit_id,
        started_at=started,
        ranges=[PartitionRange("orders", 0, 0, 40, 40), PartitionRange("orders", 1, 0, 2, 2)],
        files=[
            {
                "table": "db.orders",
                "path": "/w/f1.parquet",
                "topic": "orders",
                "partition": 0,
                "records": 40,
                "bytes": 4000,
            }
        ],
        watermark=None,
        complete=True,
    )
    beat_coordinator(connector, partitions_reported=[["orders", 0], ["orders", 1]])
    html = live(alice)
    assert 'data-phase="committing"' in html
    assert steps(html)[2] == ("active", "Committing")
    assert "42 records in 1 files" in html
    # Prepared, not yet applied: the partitions say what readers can see, and what is being applied.
    assert partition_cells(html, "orders/0") == ["0", "applying to 40"]

    actions.mark_committed(commit_id, {"db.orders": 777})
    html = live(alice)
    assert 'data-phase="acknowledged"' in html
    assert partition_cells(html, "orders/0") == ["40"]
    assert [state for state, _ in steps(html)] == ["done"] * 4

    beat_coordinator(connector, phase=CoordinatorPhase.IDLE, commit_id=None)
    html = live(alice)
    assert 'data-phase="idle"' in html
    assert "Last commit" in html and str(commit_id)[:8] in html


def test_a_commit_past_its_timeout_is_flagged(alice: Client, make_connector: Callable[..., Connector]) -> None:
    connector = make_connector(
        "orders-sink", **{"iceberg.control.commit.interval-ms": "1000", "iceberg.control.commit.timeout-ms": "1000"}
    )
    actions.take_coordinator_lease(connector.pk, "worker-a")
    beat_coordinator(
        connector,
        phase=CoordinatorPhase.COLLECTING,
        commit_id=uuid.uuid4(),
        commit_started_at=timezone.now() - timedelta(seconds=3),
        partitions_expected=[["orders", 0]],
        partitions_reported=[],
    )
    html = live(alice)
    assert "timed out, the partitions that answered are committed" in html
    assert 'value="100"' in html


def test_a_long_interval_is_staging_not_a_timed_out_commit(
    alice: Client, make_connector: Callable[..., Connector]
) -> None:
    # The defaults: a 5 min interval and a 30 s timeout. 45 s into the
    # interval the participants are still staging; the timeout has not begun.
    connector = make_connector("orders-sink")
    actions.take_coordinator_lease(connector.pk, "worker-a")
    beat_coordinator(
        connector,
        phase=CoordinatorPhase.STAGING,
        commit_id=uuid.uuid4(),
        commit_started_at=timezone.now() - timedelta(seconds=45),
        partitions_expected=[["orders", 0]],
        partitions_reported=[],
    )
    html = live(alice)
    assert 'data-phase="staging"' in html
    assert "timed out" not in html
    assert re.search(r"45\.\d s of the 5 min 00 s commit interval", html)
    assert 'value="15"' in html  # 45 s of 300 s


def test_partitions_show_committed_end_staged_and_lag(
    alice: Client, make_connector: Callable[..., Connector], commit_ledger: LedgerFor
) -> None:
    connector = make_connector("orders-sink")
    commit = commit_ledger(connector, {("orders", 0): 1000})
    committed = commit({("orders", 0): 250})
    runtime_task(
        connector, 0, partitions=[("orders", 0)], partition_status={"orders/0": {"end_offset": 1400, "staged": 90}}
    )
    html = live(alice)
    row = re.search(r'<tr data-partition="orders/0">(.*?)</tr>', html, re.S)
    assert row
    figures = [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)]
    assert figures[:5] == ["0", "1,250", "1,400", "90", "150"]
    assert str(committed.commit_id)[:8] in figures[5]


def test_errors_show_the_cause_first_and_the_trace_on_demand(
    alice: Client, make_connector: Callable[..., Connector]
) -> None:
    connector = make_connector("orders-sink")
    trace = 'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: bad'
    runtime_task(
        connector, 0, state=TaskState.FAILED, error_message="Record at orders/0@17 is not JSON", error_trace=trace
    )
    actions.fail_connector(connector.pk, "Catalog unreachable\nconnection refused by 10.0.0.1:5432", "CatalogTrace")
    html = live(alice)
    assert re.search(r'<p class="cause">Catalog unreachable</p>', html)
    assert re.search(r'<p class="cause">Record at orders/0@17 is not JSON</p>', html)
    # When it first happened and how often, for the connector (through the action).
    first = Connector.objects.get(pk=connector.pk).first_failed_at
    assert first is not None
    assert f"first failed {first:%Y-%m-%d %H:%M:%S} UTC · 1 failure since" in html
    actions.fail_connector(connector.pk, "Catalog unreachable again", "CatalogTrace")
    again = Connector.objects.get(pk=connector.pk)
    assert again.first_failed_at == first and again.failure_count == 2
    # Full text is folded away, under the headline.
    details = re.search(r'<details id="trace-task-0">(.*?)</details>', html, re.S)
    assert details and "ValueError: bad" in details.group(1)
    assert "connection refused by 10.0.0.1:5432" in re.search(
        r'<details id="trace-connector">(.*?)</details>', html, re.S
    ).group(1)  # type: ignore[union-attr]


def test_a_failure_quoting_a_nul_character_is_stored_and_shown_with_it_escaped(
    alice: Client, make_connector: Callable[..., Connector]
) -> None:
    """PostgreSQL's text holds no NUL: a task failed by a record whose reason quotes one (a Cast of "a\\u0000")
    is still failed, with its reason."""
    connector = make_connector("orders-sink")
    reason = "transforms.c (Cast$Value): field id: cannot cast 'a\x00' to int32"
    actions.fail_connector(connector.pk, reason, f"Trace\n{reason}", task_index=0)
    stored = Connector.objects.get(pk=connector.pk)
    assert stored.failure_message == "task 0: transforms.c (Cast$Value): field id: cannot cast 'a\\u0000' to int32"
    assert "\\u0000" in stored.failure_trace
    assert "cannot cast &#x27;a\\u0000&#x27; to int32" in live(alice)


def test_a_trace_without_message_shows_its_last_line_as_the_cause(
    alice: Client, make_connector: Callable[..., Connector]
) -> None:
    connector = make_connector("orders-sink")
    runtime_task(connector, 0, state=TaskState.FAILED, error_trace="Traceback\n  File y\nKeyError: 'id'\n")
    assert re.search(r"<p class=\"cause\">KeyError: &#x27;id&#x27;</p>", live(alice))


def test_the_detail_page_polls_its_live_part_and_masks_secrets(
    alice: Client, make_connector: Callable[..., Connector]
) -> None:
    make_connector("orders-sink", **{"sasl.password": "s3cr3t-value"})
    page = alice.get(reverse("connector-detail", args=["orders-sink"])).content.decode()
    assert f'hx-get="{reverse("connector-live", args=["orders-sink"])}"' in page
    assert "every 3s [sinkadminLive()]" in page
    assert "data-live-toggle" in page
    assert "s3cr3t-value" not in page
    assert "[hidden]" in page
    assert reverse("admin:connectors_connector_change", args=[Connector.objects.get().pk]) in page


def test_config_export_masks_secrets(alice: Client, make_connector: Callable[..., Connector]) -> None:
    make_connector("orders-sink", **{"sasl.password": "s3cr3t-value"})
    exported = alice.get(reverse("connector-config-export", args=["orders-sink", "properties"]))
    assert exported["Content-Disposition"] == 'attachment; filename="orders-sink.properties"'
    body = exported.content.decode()
    assert "sasl.password=[hidden]" in body and "topics=orders" in body
    assert "s3cr3t" not in body


def test_maintenance_runs_show_with_what_they_did_and_why_they_failed(
    alice: Client, make_connector: Callable[..., Connector]
) -> None:
    from connectors.actions import maintenance
    from connectors.models import MaintenanceOutcome

    connector = make_connector("orders-sink")
    page = alice.get(reverse("connector-detail", args=["orders-sink"])).content.decode()
    assert "Table maintenance" in page and "No maintenance run yet" in page

    done = maintenance.start_maintenance(connector.pk, 1, "db.orders")
    maintenance.record_maintenance(done, rewritten_files=1200, added_files=3, expired_snapshots=40)
    maintenance.record_maintenance(done, expired_files=1240, orphan_files=2, removed_bytes=5_000_000)
    maintenance.finish_maintenance(done, MaintenanceOutcome.SUCCEEDED)
    failed = maintenance.start_maintenance(connector.pk, 1, "db.orders")
    maintenance.finish_maintenance(
        failed, MaintenanceOutcome.FAILED, "compaction: RuntimeError: Spark at sc://x is unreachable\ntrace"
    )
    page = alice.get(reverse("connector-detail", args=["orders-sink"])).content.decode()
    table = page[page.index('id="maintenance-runs"') :]
    assert "1,200 → 3" in table and "1,242" in table and "4.8\xa0MB" in table
    assert "SUCCEEDED" in table and "FAILED" in table
    assert "compaction: RuntimeError: Spark at sc://x is unreachable" in table and "trace" not in table

    off = make_connector("quiet-sink", **{"sinkadmin.maintenance.enabled": "false"})
    page = alice.get(reverse("connector-detail", args=[off.name])).content.decode()
    assert "sinkadmin.maintenance.enabled=false" in page


def test_a_files_connector_has_no_table_maintenance_section(alice: Client, db: None) -> None:
    config = {
        "connector.class": "files",
        "topics": "clicks",
        "store.url": "/data/lake",
        "format.class": "parquet",
        "flush.size": "1000",
    }
    actions.create_connector("clicks-files", config)
    page = alice.get(reverse("connector-detail", args=["clicks-files"])).content.decode()
    assert "→ <code>file:///data/lake/topics</code>" in page
    assert "Table maintenance" not in page


def test_the_config_shows_why_a_key_is_ignored_beside_it(
    alice: Client, make_connector: Callable[..., Connector]
) -> None:
    from sinks.iceberg.settings import KEY_RULES

    make_connector(**{"iceberg.control.commit.threads": "8"})
    page = alice.get(reverse("connector-detail", args=["orders-sink"])).content.decode()
    row = re.search(r"<tr><td[^>]*>iceberg\.control\.commit\.threads</td>(.*?)</tr>", page, re.S)
    assert row is not None
    reason = KEY_RULES["iceberg.control.commit.threads"].ignored
    assert f"ignored: {reason}" in row.group(1) and "8" in row.group(1)
    # A key the sink takes as its own carries no note.
    topics = re.search(r"<tr><td[^>]*>topics</td>(.*?)</tr>", page, re.S)
    assert topics is not None and "ignored" not in topics.group(1)


NOT_JSON = "record orders/1@10 cannot be converted: the value is not JSON: 'x' (errors.tolerance=none)"


def test_a_failed_connector_shows_nothing_running_and_no_dead_coordinator(
    alice: Client, make_connector: Callable[..., Connector]
) -> None:
    connector = make_connector("orders-sink", **{"tasks.max": "2"})
    epoch = actions.take_coordinator_lease(connector.pk, "connectors@vm:11510")
    heartbeating_tasks(connector, {("orders", 0): {"end_offset": 10, "staged": 0}, ("orders", 1): {"end_offset": 12}})
    # Task 1's write met a record it cannot convert: the coordinator fails the connector and stops.
    actions.fail_connector(connector.pk, NOT_JSON, task_index=1)
    runtime_state.coordinator_stopped(connector.pk, epoch)
    html = live(alice)
    assert re.search(r"<dt>Tasks running</dt><dd>0 <span", html)
    assert "has not reported recently" not in html
    tasks = dict(re.findall(r'<th scope="row">(\d+)</th>\s*<td><span class="badge state-(\w+)"', html))
    assert tasks == {"0": "UNASSIGNED", "1": "FAILED"}
    # The failure is said where it belongs: the connector's, and task 1's with its restart button.
    assert re.search(r'<p class="cause">task 1: record orders/1@10 cannot be converted', html)
    assert re.search(r"<p class=\"cause\">record orders/1@10 cannot be converted", html)
    assert 'aria-label="Restart task 1"' in html


def test_a_silent_coordinator_of_a_running_connector_is_said(
    alice: Client, make_connector: Callable[..., Connector]
) -> None:
    connector = make_connector("orders-sink")
    actions.take_coordinator_lease(connector.pk, "connectors@vm:11510")
    CoordinatorStatus.objects.filter(connector=connector).update(heartbeat_at=timezone.now() - timedelta(minutes=5))
    assert "The coordinator (connectors@vm:11510) has not reported recently" in live(alice)
    actions.stop_connector("orders-sink")
    assert "has not reported recently" not in live(alice)
