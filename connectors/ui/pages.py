"""What the list and detail pages show, gathered in one place per page."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.http import Http404

from connectors.actions import runtime as runtime_state
from connectors.config import resolve_plugin
from connectors.config.secrets import hidden_config
from connectors.config.validation import config_notes
from connectors.models import Connector, ConnectorTask
from connectors.ui.config_text import ordered_keys
from connectors.ui.figures import (
    ConnectorSummary,
    connectors_for_summary,
    coordinator_of,
    ordered_for_list,
    summarize,
)
from connectors.ui.health import Health
from connectors.ui.history import ledger
from connectors.ui.transaction import current_commit

RECENT_COMMITS = 8


@dataclass(frozen=True)
class ConnectorList:
    rows: list[ConnectorSummary]
    total: int
    counts: dict[str, int]
    query: str
    state: str
    room: runtime_state.Room
    # `make run`'s processes, where it runs (their deaths and restarts).
    stacks: list[runtime_state.Stack]

    @property
    def rate_window(self) -> timedelta | None:
        """The rows' records/s window when they share one (the column's header states it), else None
        (each row states its own)."""
        windows = {row.rate_window for row in self.rows}
        return windows.pop() if len(windows) == 1 else None


def connector_list(query: str, state: str, now: datetime) -> ConnectorList:
    summaries = ordered_for_list(summarize(connectors_for_summary(), now))
    counts = {h.value: 0 for h in Health}
    for summary in summaries:
        counts[summary.health.value] += 1
    needle = query.strip().lower()
    rows = [
        s
        for s in summaries
        if (not state or s.health.value == state)
        and (
            not needle
            or needle in s.connector.name.lower()
            or any(needle in t.lower() for t in s.connector.destinations)
            or needle in ",".join(s.connector.config.get("topics", "").split()).lower()
        )
    ]
    return ConnectorList(
        rows=rows,
        total=len(summaries),
        counts=counts,
        query=query,
        state=state,
        room=runtime_state.room(now),
        stacks=runtime_state.stacks(now),
    )


RECENT_MAINTENANCE_RUNS = 10


def connector_detail(name: str, now: datetime) -> dict[str, Any]:
    connector = connectors_for_summary(Connector.objects.filter(name=name)).first()
    if connector is None:
        raise Http404(f"no connector named {name}")
    summary = summarize([connector], now)[0]
    coordinator = coordinator_of(connector)
    tasks = list(connector.tasks.all())
    statuses = {t.id: t for t in summary.status.tasks}
    shown = hidden_config(connector.config)
    notes = config_notes(connector.config)
    plugin = resolve_plugin(connector.connector_class)
    return {
        "connector": connector,
        "summary": summary,
        "progress": current_commit(connector, coordinator, now),
        "task_rows": [(task, statuses.get(task.task_index)) for task in tasks],
        "failed_tasks": [t for t in tasks if t.error_message or t.error_trace],
        "recent_commits": list(ledger(name).order_by("-started_at")[:RECENT_COMMITS]),
        "maintenance": plugin.maintenance if plugin is not None else "",
        "coordinated": plugin is None or plugin.coordinated,
        "maintenance_runs": list(connector.maintenance_runs.order_by("-started_at", "-id")[:RECENT_MAINTENANCE_RUNS]),
        "source": _source(connector),
        "heartbeats": heartbeats(tasks),
        # Each key with its value and, for a key accepted and ignored, why (the validator's notes).
        "config_rows": [(key, shown[key], notes.get(key, [])) for key in ordered_keys(shown)],
        "now": now,
    }


@dataclass(frozen=True)
class HeartbeatShown:
    """The heartbeats a connector's tasks replicate (a Kafka mirror's): which topics, and when the latest
    replicated one was emitted (None: none yet)."""

    topics: tuple[str, ...]
    at: datetime | None


def heartbeats(tasks: list[ConnectorTask]) -> HeartbeatShown | None:
    """From the tasks' partition status: a partition that carries heartbeats reports ``heartbeat_ms``."""
    topics: set[str] = set()
    times: list[int] = []
    for task in tasks:
        for key, status in (task.partition_status or {}).items():
            if isinstance(status, dict) and "heartbeat_ms" in status:
                topics.add(key.rsplit("/", 1)[0])
                if isinstance(status["heartbeat_ms"], int):
                    times.append(status["heartbeat_ms"])
    if not topics:
        return None
    return HeartbeatShown(tuple(sorted(topics)), datetime.fromtimestamp(max(times) / 1000, tz=UTC) if times else None)


def _source(connector: Connector) -> str:
    if connector.config.get("topics.regex"):
        return f"topics matching {connector.config['topics.regex']}"
    return f"topics {connector.config.get('topics', '—')}"
