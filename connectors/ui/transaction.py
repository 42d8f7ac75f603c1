"""The coordinator's current commit, as the state machine the detail page draws.

Steps follow the commit protocol (DESIGN "The commit protocol"): the
coordinator starts a commit and the participants stage records for the
commit interval (staging); when the interval ends it asks for one write
status per partition and waits for them up to the commit timeout
(collecting), prepares the commit in the ledger and commits the tables
(committing), then marks the ledger entry COMMITTED (acknowledged). The
live phase comes from ``CoordinatorStatus``; the ledger entry of the same
commit id says how far committing got, so a page refreshed between two
coordinator updates still tells the truth.

The commit timeout counts from the end of the interval, which is the
commit's start plus the interval: the elapsed time is shown against the
interval while staging and against the timeout after.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings

from connectors.config import resolve_plugin
from connectors.models import Commit, CommitState, Connector, CoordinatorPhase, CoordinatorStatus, DesiredState

DONE, ACTIVE, PENDING, FAILED = "done", "active", "pending", "failed"


@dataclass(frozen=True)
class Step:
    name: str
    state: str
    detail: str = ""


@dataclass(frozen=True)
class CommitProgress:
    phase: str
    steps: list[Step] = field(default_factory=list)
    commit_id: str | None = None
    started_at: datetime | None = None
    # Since the start while staging, since the end of the interval after.
    elapsed: timedelta | None = None
    timeout: timedelta | None = None
    interval: timedelta | None = None
    expected: list[str] = field(default_factory=list)
    reported: list[str] = field(default_factory=list)
    ledger_entry: Commit | None = None
    coordinator_stale: bool = False
    coordinator_worker: str = ""

    @property
    def pending(self) -> list[str]:
        reported = set(self.reported)
        return [p for p in self.expected if p not in reported]

    @property
    def timed_out(self) -> bool:
        if self.phase == "staging":
            return False
        return self.elapsed is not None and self.timeout is not None and self.elapsed > self.timeout

    @property
    def elapsed_percent(self) -> int:
        limit = self.interval if self.phase == "staging" else self.timeout
        if self.elapsed is None or not limit:
            return 0
        return min(100, int(100 * self.elapsed / limit))


def partition_label(entry: Any) -> str:
    """``topic/partition`` from the shapes a partition list may hold in JSON."""
    if isinstance(entry, (list, tuple)) and len(entry) == 2:
        return f"{entry[0]}/{entry[1]}"
    if isinstance(entry, dict) and "topic" in entry and "partition" in entry:
        return f"{entry['topic']}/{entry['partition']}"
    return str(entry)


def _milliseconds(connector: Connector, name: str, fallback_ms: int) -> timedelta:
    plugin = resolve_plugin(connector.connector_class)
    raw = (plugin.with_mapped_keys(connector.config) if plugin else connector.config).get(name)
    if not raw:
        key = plugin.key(name) if plugin else None
        raw = key.default if key and key.default else str(fallback_ms)
    try:
        return timedelta(milliseconds=int(raw))
    except ValueError:
        return timedelta(milliseconds=fallback_ms)


def commit_timeout(connector: Connector) -> timedelta:
    plugin = resolve_plugin(connector.connector_class)
    return _milliseconds(connector, plugin.commit_timeout_key if plugin else "sinkadmin.commit.timeout-ms", 30_000)


def commit_interval(connector: Connector) -> timedelta:
    plugin = resolve_plugin(connector.connector_class)
    if plugin is None:
        return _milliseconds(connector, "sinkadmin.commit.interval-ms", 300_000)
    override = _milliseconds(connector, plugin.interval_override_key, -1) if plugin.interval_override_key else None
    if override is not None and override > timedelta(0):
        return override
    return _milliseconds(connector, plugin.commit_interval_key, 300_000)


def current_commit(connector: Connector, coordinator: CoordinatorStatus | None, now: datetime) -> CommitProgress:
    if coordinator is None:
        return CommitProgress(phase="none")
    silence = timedelta(seconds=settings.HEARTBEAT_TIMEOUT_SECONDS)
    # Silence is news only where a coordinator should be running: a failed
    # connector's (it says why it failed) and a stopped one's stop on purpose.
    should_run = connector.failed_at is None and connector.desired_state != DesiredState.STOPPED
    stale = should_run and (coordinator.heartbeat_at is None or now - coordinator.heartbeat_at > silence)
    if coordinator.phase == CoordinatorPhase.IDLE or coordinator.commit_id is None:
        return _idle(connector, stale, coordinator.worker_id)

    entry = Commit.objects.filter(commit_id=coordinator.commit_id).first()
    expected = [partition_label(p) for p in coordinator.partitions_expected or []]
    reported = [partition_label(p) for p in coordinator.partitions_reported or []]
    started_at = coordinator.commit_started_at
    interval = commit_interval(connector)
    staging = coordinator.phase == CoordinatorPhase.STAGING and entry is None
    elapsed = None
    if started_at is not None:
        elapsed = now - started_at if staging else max(timedelta(0), now - (started_at + interval))
    base = CommitProgress(
        phase="collecting",
        commit_id=str(coordinator.commit_id),
        started_at=started_at,
        elapsed=elapsed,
        timeout=commit_timeout(connector),
        interval=interval,
        expected=expected,
        reported=reported,
        ledger_entry=entry,
        coordinator_stale=stale,
        coordinator_worker=coordinator.worker_id,
    )
    started = Step("Started", DONE, f"{len(expected)} partitions asked for a write status")
    statuses_detail = f"{len(reported)} of {len(expected)} reported"

    if entry is not None and entry.state == CommitState.ABORTED:
        steps = [started, Step("Write statuses", DONE, statuses_detail), Step("Committing", FAILED, entry.error)]
        return replace(base, phase="aborted", steps=[*steps, Step("Acknowledged", PENDING)])
    if entry is not None and entry.state == CommitState.COMMITTED:
        return replace(
            base,
            phase="acknowledged",
            steps=[
                started,
                Step("Write statuses", DONE, statuses_detail),
                Step("Committing", DONE, _entry_detail(entry)),
                Step("Acknowledged", DONE, "ledger entry COMMITTED"),
            ],
        )
    if coordinator.phase == CoordinatorPhase.COMMITTING or entry is not None:
        return replace(
            base,
            phase="committing",
            steps=[
                started,
                Step("Write statuses", DONE, statuses_detail),
                Step("Committing", ACTIVE, _entry_detail(entry) if entry else "writing table snapshots"),
                Step("Acknowledged", PENDING),
            ],
        )
    if staging:
        return replace(
            base,
            phase="staging",
            steps=[
                Step("Started", ACTIVE, f"{len(expected)} partitions staging records until the interval ends"),
                Step("Write statuses", PENDING, "asked for when the interval ends"),
                Step("Committing", PENDING),
                Step("Acknowledged", PENDING),
            ],
        )
    return replace(
        base,
        steps=[
            started,
            Step("Write statuses", ACTIVE, statuses_detail),
            Step("Committing", PENDING),
            Step("Acknowledged", PENDING),
        ],
    )


def _idle(connector: Connector, stale: bool, worker: str) -> CommitProgress:
    last = connector.commits.exclude(state=CommitState.PREPARED).first()
    steps: list[Step] = []
    if last is not None and last.state == CommitState.COMMITTED:
        steps = [
            Step("Started", DONE),
            Step("Write statuses", DONE, f"{last.partitions.count()} partitions"),
            Step("Committing", DONE, _entry_detail(last)),
            Step("Acknowledged", DONE, "ledger entry COMMITTED"),
        ]
    return CommitProgress(
        phase="idle",
        steps=steps,
        commit_id=str(last.commit_id) if last else None,
        started_at=last.started_at if last else None,
        ledger_entry=last,
        coordinator_stale=stale,
        coordinator_worker=worker,
    )


def _entry_detail(entry: Commit) -> str:
    return f"{entry.records} records in {entry.files_count} files"
