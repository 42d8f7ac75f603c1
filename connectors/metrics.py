"""Prometheus metrics at ``/metrics``, read from the control plane's rows at each scrape.

The ledger, the task rows and the workers' slots are in Postgres, written by
whichever process did the work; a scrape of any web process sees them all,
so nothing is counted in memory (a per-process registry would lose counts at
every restart and differ between web processes). Counters are sums over the
ledger: they only go down if a connector or its ledger is deleted, which
Prometheus treats as a reset. The figures the UI shows (lag, health) come
from the same functions as its pages. No rate is served: Prometheus's
``rate()`` over the counters gives one over the range a query picks, which
should span at least two commit intervals for the reason the UI's records/s
window does (``connectors.ui.figures``).

Access: ``SINKADMIN_METRICS_TOKEN`` set, a bearer token; otherwise HTTP basic
auth of any active user, as the API's reads;
``SINKADMIN_METRICS_PUBLIC=true`` opens it (a scraper on a private network).
"""

from __future__ import annotations

import base64
import hmac
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any, cast

from django.conf import settings
from django.contrib.auth import authenticate
from django.db.models import Count, F, Q, Sum
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from connectors.actions import runtime as runtime_state
from connectors.models import Commit, CommitEnd, CommitState, MaintenanceRun
from connectors.ui.figures import connectors_for_summary, summarize
from connectors.ui.health import Health

# Seconds from a commit's start to its table commit.
COMMIT_SECONDS_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600)


class ControlPlaneCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        yield from _ledger_metrics()
        yield from _maintenance_metrics()
        yield from _connector_metrics(timezone.now())
        yield from _worker_metrics()


def _ledger_metrics() -> Iterator[Metric]:
    records = CounterMetricFamily(
        "sinkadmin_connector_committed_records", "Records committed to the tables.", labels=["connector"]
    )
    size = CounterMetricFamily(
        "sinkadmin_connector_committed_bytes", "Bytes of data files committed.", labels=["connector"]
    )
    files = CounterMetricFamily(
        "sinkadmin_connector_committed_files", "Data files committed to the tables.", labels=["connector"]
    )
    dead = CounterMetricFamily(
        "sinkadmin_connector_dead_lettered_records",
        "Records sent to the dead-letter topic (errors.tolerance=all).",
        labels=["connector"],
    )
    commits = CounterMetricFamily(
        "sinkadmin_connector_commits", "Commits decided, by outcome.", labels=["connector", "outcome"]
    )
    skipped = CounterMetricFamily(
        "sinkadmin_connector_skipped_offsets",
        "Offsets passed over below a partition's log start: retention deleted their records before they were "
        "committed (sinkadmin.offsets.out-of-range=skip).",
        labels=["connector"],
    )
    for name, total in (
        Commit.objects.filter(ended_by=CommitEnd.SKIPPED)
        .values_list("connector_name")
        .annotate(total=Sum("skipped"))
        .order_by("connector_name")
    ):
        skipped.add_metric([name], total or 0)
    # A skip is a ledger entry, not a commit: it has no duration and writes nothing.
    decided = (
        Commit.objects.filter(state__in=[CommitState.COMMITTED, CommitState.ABORTED])
        .exclude(ended_by=CommitEnd.SKIPPED)
        .values("connector_name", "state")
        .annotate(
            n=Count("id"),
            records=Sum("records"),
            size=Sum("bytes"),
            files=Sum("files_count"),
            dead=Sum("dead_lettered"),
        )
        .order_by("connector_name", "state")
    )
    for row in decided:
        name = row["connector_name"]
        commits.add_metric([name, row["state"].lower()], row["n"])
        if row["state"] == CommitState.COMMITTED:
            records.add_metric([name], row["records"] or 0)
            size.add_metric([name], row["size"] or 0)
            files.add_metric([name], row["files"] or 0)
            dead.add_metric([name], row["dead"] or 0)
    yield from (records, size, files, dead, commits, skipped)

    duration = HistogramMetricFamily(
        "sinkadmin_connector_commit_duration_seconds",
        "Seconds from a commit's start to its table commit.",
        labels=["connector"],
    )
    # Counted in the database, bucket by bucket: a ledger holds a commit a
    # second per connector, and a scrape must not read them back.
    committed = (
        Commit.objects.filter(state=CommitState.COMMITTED, committed_at__isnull=False)
        .exclude(ended_by=CommitEnd.SKIPPED)
        .annotate(seconds=F("committed_at") - F("started_at"))
        .values("connector_name")
        .annotate(
            n=Count("id"),
            total=Sum("seconds"),
            **{
                f"le_{i}": Count("id", filter=Q(seconds__lte=timedelta(seconds=le)))
                for i, le in enumerate(COMMIT_SECONDS_BUCKETS)
            },
        )
        .order_by("connector_name")
    )
    for timing in committed:
        counts: dict[str, Any] = dict(timing)
        buckets = [(str(le), counts[f"le_{i}"]) for i, le in enumerate(COMMIT_SECONDS_BUCKETS)]
        buckets.append(("+Inf", counts["n"]))
        duration.add_metric([counts["connector_name"]], buckets, counts["total"].total_seconds())
    yield duration


# Counters summed over maintenance runs: name, help, what is summed.
MAINTENANCE_TOTALS: tuple[tuple[str, str, Any], ...] = (
    ("sinkadmin_maintenance_rewritten_files", "Small files compaction replaced.", F("rewritten_files")),
    ("sinkadmin_maintenance_added_files", "Files compaction wrote in their place.", F("added_files")),
    ("sinkadmin_maintenance_expired_snapshots", "Snapshots expired.", F("expired_snapshots")),
    (
        "sinkadmin_maintenance_deleted_files",
        "Files deleted: those only expired snapshots referenced, and orphans.",
        F("expired_files") + F("orphan_files"),
    ),
    (
        "sinkadmin_maintenance_removed_bytes",
        "Bytes of the deleted orphan files and Hudi's cleaned files.",
        F("removed_bytes"),
    ),
)


def _maintenance_metrics() -> Iterator[Metric]:
    runs = CounterMetricFamily(
        "sinkadmin_maintenance_runs",
        "Table maintenance runs, by outcome (RUNNING: under way).",
        labels=["connector", "table", "outcome"],
    )
    for row in (
        MaintenanceRun.objects.values("connector_name", "table_name", "outcome")
        .annotate(n=Count("id"))
        .order_by("connector_name", "table_name", "outcome")
    ):
        runs.add_metric([row["connector_name"], row["table_name"], row["outcome"]], row["n"])
    yield runs
    families = [CounterMetricFamily(name, text, labels=["connector", "table"]) for name, text, _ in MAINTENANCE_TOTALS]
    sums = {f"total_{n}": Sum(expression) for n, (_, _, expression) in enumerate(MAINTENANCE_TOTALS)}
    for totals in (
        MaintenanceRun.objects.values("connector_name", "table_name")
        .annotate(**sums)
        .order_by("connector_name", "table_name")
    ):
        sums_of = cast(dict[str, Any], totals)  # (the sums' keys are made here)
        for n, family in enumerate(families):
            family.add_metric([sums_of["connector_name"], sums_of["table_name"]], sums_of[f"total_{n}"] or 0)
    yield from families


def _connector_metrics(now: datetime) -> Iterator[Metric]:
    lag = GaugeMetricFamily(
        "sinkadmin_partition_lag_records",
        "Records in the partition not yet committed: the end offset a task last saw minus its committed offset.",
        labels=["connector", "topic", "partition"],
    )
    tasks = GaugeMetricFamily(
        "sinkadmin_connector_tasks", "Tasks by Kafka Connect state.", labels=["connector", "state"]
    )
    health = GaugeMetricFamily(
        "sinkadmin_connector_health",
        "1 for the connector's health, as the UI shows it.",
        labels=["connector", "health"],
    )
    age = GaugeMetricFamily(
        "sinkadmin_connector_last_commit_age_seconds", "Seconds since the last commit landed.", labels=["connector"]
    )
    for summary in summarize(connectors_for_summary(), now):
        name = summary.connector.name
        for row in summary.partitions:
            if row.lag is not None:
                lag.add_metric([name, row.topic, str(row.partition)], row.lag)
        states: dict[str, int] = {}
        for task in summary.status.tasks:
            states[task.state.value] = states.get(task.state.value, 0) + 1
        for state, count in sorted(states.items()):
            tasks.add_metric([name, state], count)
        for value in Health:
            health.add_metric([name, value.value], 1 if summary.health is value else 0)
        if summary.last_commit_at is not None:
            age.add_metric([name], (now - summary.last_commit_at).total_seconds())
    yield from (lag, tasks, health, age)


def _worker_metrics() -> Iterator[Metric]:
    slots = GaugeMetricFamily("sinkadmin_worker_slots", "Slots a live worker advertises.", labels=["worker"])
    used = GaugeMetricFamily("sinkadmin_worker_slots_used", "Slots its runners hold.", labels=["worker"])
    free = GaugeMetricFamily("sinkadmin_worker_slots_free", "Slots free.", labels=["worker"])
    for worker in runtime_state.workers():
        slots.add_metric([worker.name], worker.slots)
        used.add_metric([worker.name], worker.used)
        free.add_metric([worker.name], worker.free)
    yield from (slots, used, free)


REGISTRY = CollectorRegistry(auto_describe=False)
REGISTRY.register(ControlPlaneCollector())


def _allowed(request: HttpRequest) -> bool:
    header = request.headers.get("Authorization", "")
    if settings.METRICS_TOKEN:
        return hmac.compare_digest(header.encode(), f"Bearer {settings.METRICS_TOKEN}".encode())
    if settings.METRICS_PUBLIC:
        return True
    if not header.startswith("Basic "):
        return False
    try:
        username, _, password = base64.b64decode(header.removeprefix("Basic ")).decode().partition(":")
    except (ValueError, UnicodeDecodeError):
        return False
    user = authenticate(request, username=username, password=password)
    return user is not None and user.is_active


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    if not _allowed(request):
        response = HttpResponse("Authentication required.\n", status=401, content_type="text/plain")
        if not settings.METRICS_TOKEN:
            response["WWW-Authenticate"] = 'Basic realm="sinkadmin metrics"'
        return response
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)
