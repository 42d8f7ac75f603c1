"""Figures of the connectors list and the detail page, computed from the ledger.

- records/s: records of the commits that finished in the connector's rate
  window, divided by the window, which the page states beside the figure
  ("last 1 min"). No commit in the window reads 0.

  Records become readable a commit at a time, so the ledger's record count
  rises in steps, one per commit interval. A rate over a window shorter than
  the interval reads 0 between two commits of a busy connector and a spike
  when one lands; Kafka Connect's ``sink-record-*-rate`` metrics avoid the
  same jitter by sampling (two samples of ``metrics.sample.window.ms``, 30 s
  by default: about a minute). Here the window (``rate_window``) is a whole
  number of commit intervals, at least two and at least ``RATE_MIN_WINDOW``
  (a minute, as Connect's): two intervals always hold a commit of a
  connector committing on time, so 0 means that nothing was committed, not
  that the next commit is due; whole intervals hold the same number of
  commits wherever the window falls, so a steady flow reads steady; and the
  minute keeps a connector committing every second from reading every
  hiccup. The cost is that a connector gone idle reads 0 only once a whole
  window has passed (10 min at the default 5 min interval), which the stated
  window tells. Prometheus gets counters (``connectors.metrics``), for
  ``rate()`` over a range chosen the same way.
- freshness: age of the newest committed watermark (every record older than
  it is in the tables); when records carry no timestamps, age of the last
  commit instead. Both say how far behind "now" the tables are, while there
  are records to write. A connector caught up (``caught_up``: every
  partition's committed offset is its log end, nothing staged, its tasks
  running to see the ends) is current, 0 behind, however old its last
  record: an idle topic leaves nothing out of the tables.
- lag: per partition, the end offset a task last saw minus the ledger's next
  offset (``PartitionOffset``): records in Kafka not yet in a table,
  including those staged for the commit in flight.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Max, Prefetch, Q, QuerySet, Sum

from connectors.api.status import ConnectorStatus, State, connector_status
from connectors.models import (
    Commit,
    CommitEnd,
    CommitState,
    Connector,
    ConnectorTask,
    CoordinatorStatus,
    MaintenanceOutcome,
    MaintenanceRun,
    PartitionOffset,
)
from connectors.ui.health import Health, HealthRollup, rollup
from connectors.ui.transaction import commit_interval

# A rate's window spans at least this, and at least RATE_MIN_INTERVALS commit intervals.
RATE_MIN_WINDOW = timedelta(minutes=1)
RATE_MIN_INTERVALS = 2


@dataclass(frozen=True)
class PartitionRow:
    topic: str
    partition: int
    task_index: int | None
    # Every record before it is readable in the sink (the end of the last COMMITTED commit).
    committed: int | None
    end_offset: int | None
    staged: int | None
    last_commit_id: str | None
    # The end of a prepared commit being applied (its records not yet readable), if any.
    applying: int | None = None

    @property
    def key(self) -> str:
        return f"{self.topic}/{self.partition}"

    @property
    def lag(self) -> int | None:
        if self.committed is None or self.end_offset is None:
            return None
        return max(0, self.end_offset - self.committed)


@dataclass(frozen=True)
class ConnectorSummary:
    connector: Connector
    status: ConnectorStatus
    rollup: HealthRollup
    tasks_running: int
    tasks_total: int
    # Records committed in the last ``rate_window``, per second; None before the first commit.
    records_per_second: float | None
    rate_window: timedelta
    lag: int | None
    freshness: timedelta | None
    freshness_basis: str
    last_commit_at: datetime | None
    partitions: list[PartitionRow] = field(default_factory=list)

    @property
    def health(self) -> Health:
        return self.rollup.health


def connectors_for_summary(queryset: QuerySet[Connector] | None = None) -> QuerySet[Connector]:
    """The connectors with everything ``summarize`` reads, in a fixed number of queries."""
    queryset = queryset if queryset is not None else Connector.objects.all()
    return queryset.select_related("coordinator").prefetch_related(
        Prefetch("tasks", queryset=ConnectorTask.objects.order_by("task_index")),
        Prefetch("offsets", queryset=PartitionOffset.objects.select_related("last_commit")),
    )


def rate_window(connector: Connector) -> timedelta:
    """The window records/s is averaged over: whole commit intervals, at least ``RATE_MIN_INTERVALS`` of
    them and at least ``RATE_MIN_WINDOW`` (why: the module's docstring)."""
    interval = commit_interval(connector)
    if interval <= timedelta(0):
        return RATE_MIN_WINDOW
    return interval * max(RATE_MIN_INTERVALS, math.ceil(RATE_MIN_WINDOW / interval))


def summarize(connectors: Iterable[Connector], now: datetime) -> list[ConnectorSummary]:
    connectors = list(connectors)
    windows = {c.pk: rate_window(c) for c in connectors}
    ledger = _ledger_figures(windows, now)
    summaries = []
    for connector in connectors:
        tasks = list(connector.tasks.all())
        status = connector_status(connector, now=now)
        partitions = partition_rows(tasks, list(connector.offsets.all()))
        figures = ledger.get(connector.pk, {})
        watermark = figures.get("watermark")
        last_commit_at = figures.get("last_commit_at")
        if caught_up(status, partitions):
            freshness, basis = timedelta(0), CAUGHT_UP
        elif watermark is not None:
            freshness, basis = now - watermark, "watermark"
        elif last_commit_at is not None:
            freshness, basis = now - last_commit_at, "last commit"
        else:
            freshness, basis = None, ""
        window = windows[connector.pk]
        summaries.append(
            ConnectorSummary(
                connector=connector,
                status=status,
                rollup=rollup(
                    connector,
                    status,
                    figures.get("last_abort"),
                    (figures.get("window_dead_lettered") or 0, windows[connector.pk]),
                    figures.get("maintenance_failed", ()),
                ),
                tasks_running=sum(1 for t in status.tasks if t.state is State.RUNNING),
                tasks_total=len(status.tasks) or connector.tasks_max,
                records_per_second=(
                    None if last_commit_at is None else (figures.get("window_records") or 0) / window.total_seconds()
                ),
                rate_window=window,
                lag=total_lag(partitions),
                freshness=freshness,
                freshness_basis=basis,
                last_commit_at=last_commit_at,
                partitions=partitions,
            )
        )
    return summaries


# The basis of a freshness of 0: nothing is left to write.
CAUGHT_UP = "caught up"


def caught_up(status: ConnectorStatus, partitions: Sequence[PartitionRow]) -> bool:
    """Whether the tables hold every record the source has: each partition's committed offset is the
    log end its task last saw, nothing is staged for a commit, and every task runs (or is paused), so
    the ends it reports are current, not the last a stopped or failed task saw."""
    if status.connector.state not in (State.RUNNING, State.PAUSED) or not status.tasks or not partitions:
        return False
    if any(task.state not in (State.RUNNING, State.PAUSED) for task in status.tasks):
        return False
    return all(p.lag == 0 and not p.staged for p in partitions)


def ordered_for_list(summaries: Sequence[ConnectorSummary]) -> list[ConnectorSummary]:
    """Unhealthy first, then by name."""
    return sorted(summaries, key=lambda s: (s.health.rank, s.connector.name))


def coordinator_of(connector: Connector) -> CoordinatorStatus | None:
    try:
        return connector.coordinator
    except CoordinatorStatus.DoesNotExist:
        return None


def _ledger_figures(windows: dict[int, timedelta], now: datetime) -> dict[int, dict[str, Any]]:
    """Per connector: records committed in its rate window (``windows``), its last commit, its newest
    watermark and, when its latest decided commit was aborted, why."""
    if not windows:
        return {}
    connector_ids = list(windows)
    # Each connector's records in its own window: one condition per distinct window, few on a page.
    by_window: dict[timedelta, list[int]] = {}
    for connector_id, window in windows.items():
        by_window.setdefault(window, []).append(connector_id)
    in_window = Q()
    for window, ids in by_window.items():
        in_window |= Q(connector_id__in=ids, committed_at__gt=now - window)
    # One grouped query for all connectors on the page instead of one per row.
    rows = (
        Commit.objects.filter(connector_id__in=connector_ids, state=CommitState.COMMITTED)
        .exclude(ended_by=CommitEnd.SKIPPED)  # (a ledger entry, not a commit of records)
        .values("connector_id")
        .annotate(
            window_records=Sum("records", filter=in_window & Q(committed_at__lte=now)),
            window_dead_lettered=Sum("dead_lettered", filter=in_window & Q(committed_at__lte=now)),
            last_commit_at=Max("committed_at"),
            watermark=Max("watermark"),
        )
    )
    figures = {row["connector_id"]: dict(row) for row in rows}
    # The latest decided commit of each connector (Postgres's DISTINCT ON):
    # aborted, its error says what keeps the connector from committing.
    latest = (
        Commit.objects.filter(connector_id__in=connector_ids, state__in=[CommitState.COMMITTED, CommitState.ABORTED])
        .order_by("connector_id", "-started_at", "-id")
        .distinct("connector_id")
        .values("connector_id", "state", "error")
    )
    for row in latest:
        if row["state"] == CommitState.ABORTED:
            figures.setdefault(row["connector_id"], {})["last_abort"] = row["error"] or "no reason recorded"
    # The latest ended maintenance run of each table: failed, the table is not being maintained (a merge-on-read
    # table's log files left uncompacted, small files piling up), though the connector commits.
    maintained = (
        MaintenanceRun.objects.filter(connector_id__in=connector_ids)
        .exclude(outcome=MaintenanceOutcome.RUNNING)
        .order_by("connector_id", "table_name", "-started_at", "-id")
        .distinct("connector_id", "table_name")
        .values("connector_id", "table_name", "outcome", "error")
    )
    failures: dict[int, list[str]] = {}
    for run in maintained:
        if run["outcome"] == MaintenanceOutcome.FAILED:
            failures.setdefault(run["connector_id"], []).append(
                f"maintenance of {run['table_name']} failed: {run['error'] or 'no reason recorded'}"
            )
    for connector_id, failed in failures.items():
        figures.setdefault(connector_id, {})["maintenance_failed"] = failed
    return figures


def _split_key(key: str) -> tuple[str, int] | None:
    topic, _, partition = key.rpartition("/")
    try:
        return topic, int(partition)
    except ValueError:
        return None


def _as_int(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def partition_rows(tasks: Sequence[ConnectorTask], offsets: Sequence[PartitionOffset]) -> list[PartitionRow]:
    """Every partition the ledger or a task knows, with committed and end offsets side by side."""
    owner: dict[tuple[str, int], int] = {}
    live: dict[tuple[str, int], dict[str, Any]] = {}
    for task in tasks:
        for assigned in task.assigned_partitions or []:
            if isinstance(assigned, (list, tuple)) and len(assigned) == 2:
                owner[(str(assigned[0]), int(assigned[1]))] = task.task_index
        for key, status in (task.partition_status or {}).items():
            parsed = _split_key(key)
            if parsed is None or not isinstance(status, dict):
                continue
            # A partition that moved between tasks may still be listed by its
            # old task; end offsets only grow, so the largest is the newest.
            end = _as_int(status.get("end_offset"))
            seen = live.get(parsed)
            if seen is None or (end is not None and end >= (_as_int(seen.get("end_offset")) or -1)):
                live[parsed] = {"end_offset": end, "staged": _as_int(status.get("staged"))}
            owner.setdefault(parsed, task.task_index)
    committed = {(o.topic, o.partition): o for o in offsets}
    keys = sorted(set(owner) | set(live) | set(committed))
    rows = []
    for key in keys:
        offset = committed.get(key)
        status = live.get(key, {})
        rows.append(
            PartitionRow(
                topic=key[0],
                partition=key[1],
                task_index=owner.get(key),
                committed=offset.committed_offset if offset else None,
                end_offset=_end_offset(_as_int(status.get("end_offset")), offset),
                staged=_as_int(status.get("staged")),
                last_commit_id=str(offset.last_commit.commit_id) if offset and offset.last_commit else None,
                applying=offset.next_offset if offset and offset.next_offset > offset.committed_offset else None,
            )
        )
    return rows


def _end_offset(reported: int | None, offset: PartitionOffset | None) -> int | None:
    """The partition's end as a task last saw it, and never below what the ledger has read of it: the
    log holds every record the ledger has, so an end below that is one the task saw before it read them."""
    if reported is None or offset is None:
        return reported
    return max(reported, offset.next_offset)


def total_lag(partitions: Iterable[PartitionRow]) -> int | None:
    lags = [p.lag for p in partitions if p.lag is not None]
    return sum(lags) if lags else None
