"""The coordinator: one per connector, it runs the commit protocol.

START_COMMIT -> (interval, or earlier: a threshold) -> END_COMMIT -> collect
WRITE_STATUS -> prepare in the ledger -> commit every table -> COMMITTED ->
ACK_COMMIT.

The class holds the state machine only; the control channel, the ledger, the
table committer and the clock come in as collaborators, so tests drive every
transition without servers.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

from workers.events import ControlEvent, ControlPort, EventType, PartitionStatus, ack_commit, end_commit, start_commit
from workers.failpoints import failpoint

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


class Phase(StrEnum):
    IDLE = "idle"
    STAGING = "staging"
    COLLECTING = "collecting"
    COMMITTING = "committing"


class ConnectorFailed(Exception):
    """A record could not be converted with errors.tolerance=none: the connector stops."""


class Fenced(Exception):
    """Another coordinator took over (a newer epoch): this one must stop."""


@dataclass(frozen=True)
class PreparedCommit:
    commit_id: uuid.UUID
    epoch: int
    files: list[dict[str, Any]]
    # {"topic": {"partition": [start, end]}}
    offsets: dict[str, dict[str, list[int]]]
    watermark_ms: int | None


class LedgerPort(Protocol):
    def offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """Next offset per partition, seeding unknown ones; raises Fenced."""
        ...

    def pending(self) -> PreparedCommit | None: ...

    def prepare(
        self,
        commit_id: uuid.UUID,
        started_at: datetime,
        statuses: list[PartitionStatus],
        files: list[dict[str, Any]],
        watermark_ms: int | None,
        complete: bool,
        ended_by: str = "interval",
    ) -> PreparedCommit:
        """Compare-and-set; raises Fenced on a stale epoch, ValueError on an offset conflict.

        ``ended_by``: what ended the commit's staging (connectors.models.CommitEnd)."""
        ...

    def committed(self, commit_id: uuid.UUID, snapshot_ids: Mapping[str, int]) -> None: ...

    def aborted(
        self, commit_id: uuid.UUID, started_at: datetime, statuses: list[PartitionStatus], error: str
    ) -> None: ...

    def failed(self, message: str) -> None: ...

    def phase(
        self,
        phase: Phase,
        commit_id: uuid.UUID | None,
        started_at: datetime | None,
        control_offset: int | None,
        expected: list[TopicPartition],
        reported: list[TopicPartition],
    ) -> None: ...


class CommitterPort(Protocol):
    def commit(self, prepared: PreparedCommit) -> dict[str, int]:
        """Add the commit's files to every table, skipping tables that hold it; returns snapshot ids."""
        ...


@dataclass
class CoordinatorSettings:
    connector: str
    epoch: int
    commit_interval_s: float
    commit_timeout_s: float
    allow_empty: bool = False
    # END comes early once the commit's partitions have staged this many
    # records (0: no such threshold).
    max_records: int = 0


@dataclass
class _OpenCommit:
    commit_id: uuid.UUID
    started_at: datetime
    started_mono: float
    offsets: dict[TopicPartition, int]
    control_offset: int
    # When END is due: the interval runs from the previous END, as Iceberg's
    # sink counts it from one commit to the next, so a commit comes every
    # interval rather than every interval plus the time committing takes.
    end_due: float = 0.0
    # What the participants have staged so far (STAGING_PROGRESS), and why
    # one of them asked for the END (it cannot stage more): either ends the
    # commit early.
    staged_records: dict[TopicPartition, int] = field(default_factory=dict)
    end_requested: str | None = None
    ended_mono: float | None = None
    ended_by: str = "interval"
    statuses: dict[TopicPartition, PartitionStatus] = field(default_factory=dict)
    files: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    retriable: bool = False


class Coordinator:
    def __init__(
        self,
        settings: CoordinatorSettings,
        channel: ControlPort,
        ledger: LedgerPort,
        committer: CommitterPort,
        partitions: Callable[[], list[TopicPartition]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.channel = channel
        self.ledger = ledger
        self.committer = committer
        self.partitions = partitions
        self.clock = clock
        self.phase = Phase.IDLE
        self.current: _OpenCommit | None = None
        self.next_start = clock()
        # The previous END, while commits follow each other: the next END is
        # due an interval after it (or at once, when committing took longer).
        self.last_end: float | None = None
        self.commits_done = 0
        # Set while the connector is paused: the commit in flight finishes,
        # no new one starts.
        self.hold = False
        # Passing write errors in a row; past the limit the error is not
        # passing after all and the connector fails with it, visibly.
        self.retriable_failures = 0
        self._checked_pending = False

    # -- the loop calls step() ----------------------------------------------------------

    def step(self, poll_timeout: float = 0.2) -> bool:
        """Advance the protocol by at most one transition; True if something happened."""
        if self.phase is Phase.IDLE:
            if self._finish_pending():
                return True
            if self.clock() >= self.next_start and not self.hold:
                self._start()
                return True
            if self.hold:
                # After a pause the next commit gets a whole interval.
                self.last_end = None
            time.sleep(min(poll_timeout, max(0.0, self.next_start - self.clock())))
            return False
        assert self.current is not None
        worked = self._collect(poll_timeout)
        now = self.clock()
        if self.phase is Phase.STAGING:
            early = self._early_end(self.current) if now < self.current.end_due else None
            if early is not None:
                self.current.ended_by, why = early
                log.info("%s: commit %s ends early: %s", self.settings.connector, self.current.commit_id, why)
            if early is not None or now >= self.current.end_due:
                self._end()
                return True
        if self.phase is Phase.COLLECTING:
            assert self.current.ended_mono is not None
            if self.current.error is not None:
                self._abort(self.current.error)
                return True
            all_reported = set(self.current.statuses) >= set(self.current.offsets)
            if all_reported or now - self.current.ended_mono >= self.settings.commit_timeout_s:
                self._commit(complete=all_reported)
                return True
        return worked

    # -- transitions --------------------------------------------------------------------

    def _finish_pending(self) -> bool:
        """Roll a PREPARED commit forward (I4): commit it to the tables that lack it.

        Only a predecessor can leave one behind: this coordinator applies its
        own prepared commits in the same step or dies trying, so the ledger
        is asked once, at takeover, not on every idle step.
        """
        if self._checked_pending:
            return False
        self._checked_pending = True
        pending = self.ledger.pending()
        if pending is None:
            return False
        log.info("%s: rolling forward prepared commit %s", self.settings.connector, pending.commit_id)
        self._apply(pending)
        return True

    def _start(self) -> None:
        partitions = self.partitions()
        offsets = self.ledger.offsets(partitions)
        commit_id = uuid.uuid4()
        # The commit is published (with where on the control topic to read
        # from to see its START) before the START is sent: a task that
        # starts now either finds it in the ledger or receives the START
        # (runtime.run_task), and never waits out an interval.
        control_offset = self.channel.end_offset()
        now = self.clock()
        interval = self.settings.commit_interval_s
        end_due = now + interval if self.last_end is None else max(now, self.last_end + interval)
        self.current = _OpenCommit(commit_id, datetime.now(UTC), now, offsets, control_offset, end_due)
        self.phase = Phase.STAGING
        self._publish_phase()
        self.channel.send(start_commit(self.settings.connector, commit_id, self.settings.epoch, offsets))

    def _end(self) -> None:
        assert self.current is not None
        self.channel.send(end_commit(self.settings.connector, self.current.commit_id, self.settings.epoch))
        self.current.ended_mono = self.last_end = self.clock()
        self.phase = Phase.COLLECTING
        self._publish_phase()

    def _collect(self, timeout: float) -> bool:
        current = self.current
        assert current is not None
        if self.phase is Phase.STAGING:
            # Progress is read promptly, and the wait ends when END is due,
            # not up to a poll later.
            timeout = min(timeout, 0.05, max(0.0, current.end_due - self.clock()))
        events = self.channel.poll(timeout, self.settings.connector)
        changed = False
        for _, event in events:
            if event.commit_id != current.commit_id or event.epoch != self.settings.epoch:
                # A late status of an earlier commit, or one sent to an old
                # coordinator: its files are never committed (DESIGN step 6).
                continue
            if event.type is EventType.STAGING_PROGRESS:
                self._progress(current, event)
                continue
            if event.type is not EventType.WRITE_STATUS:
                continue
            if event.error:
                current.error = event.error
                current.retriable = event.retriable
                changed = True
                continue
            for status in event.partitions:
                key = (status.topic, status.partition)
                if key in current.statuses or current.offsets.get(key) != status.start:
                    # First status per partition wins; a start that is not
                    # the one we sent comes from a zombie participant.
                    continue
                current.statuses[key] = status
                current.files.extend(f.as_dict() for f in event.files if (f.topic, f.partition) == key)
                changed = True
        if changed:
            self._publish_phase()
        return changed

    def _progress(self, current: _OpenCommit, event: ControlEvent) -> None:
        for staged in event.partitions:
            key = (staged.topic, staged.partition)
            if current.offsets.get(key) == staged.start:  # (else a zombie's)
                current.staged_records[key] = staged.records
        if event.end_requested and current.end_requested is None:
            current.end_requested = f"task {event.task_index} paused a partition whose staging is full"

    def _early_end(self, current: _OpenCommit) -> tuple[str, str] | None:
        """What ends the commit before its interval (DESIGN step 2), and why, if anything does."""
        if current.end_requested is not None:
            return "staging-full", current.end_requested
        staged, max_records = sum(current.staged_records.values()), self.settings.max_records
        if 0 < max_records <= staged:
            return "max-records", f"{staged} records staged (sinkadmin.commit.max-records={max_records})"
        return None

    def _commit(self, complete: bool) -> None:
        current = self.current
        assert current is not None
        statuses = [s for s in current.statuses.values() if s.end > s.start]
        if not current.statuses and current.offsets:
            # Nobody answered in time: nothing to commit, but worth a line in
            # the history, or a dead task would be invisible there.
            self.ledger.aborted(
                current.commit_id, current.started_at, [], "no write status arrived before the commit timeout"
            )
            self.last_end = None
            self._idle()
            return
        if not current.files and not self.settings.allow_empty:
            if statuses:
                # Every record of the interval was dead-lettered or skipped:
                # the offsets must still advance, with no table snapshot.
                prepared = self._prepare(statuses, complete)
                if prepared is not None:
                    self.ledger.committed(prepared.commit_id, {})
            self._idle()
            return
        prepared = self._prepare(statuses, complete)
        if prepared is None:
            return
        self._apply(prepared)

    def _prepare(self, statuses: list[PartitionStatus], complete: bool) -> PreparedCommit | None:
        current = self.current
        assert current is not None
        stamps = [s.max_timestamp for s in current.statuses.values()]
        watermark = min(stamps) if stamps and all(t is not None for t in stamps) and complete else None  # type: ignore[type-var]
        self.phase = Phase.COMMITTING
        self._publish_phase()
        try:
            prepared = self.ledger.prepare(
                current.commit_id, current.started_at, statuses, current.files, watermark, complete, current.ended_by
            )
        except ValueError as exc:
            self._abort(f"ledger refused the commit: {exc}")
            return None
        failpoint("coordinator.after_prepare")
        return prepared

    MAX_RETRIABLE_FAILURES = 5

    def _apply(self, prepared: PreparedCommit) -> None:
        snapshot_ids = self.committer.commit(prepared)
        failpoint("coordinator.after_table_commit")
        self.ledger.committed(prepared.commit_id, snapshot_ids)
        self.channel.send(ack_commit(self.settings.connector, prepared.commit_id, self.settings.epoch, snapshot_ids))
        self.commits_done += 1
        self.retriable_failures = 0
        self._idle()

    def _abort(self, error: str) -> None:
        current = self.current
        assert current is not None
        log.warning("%s: commit %s aborted: %s", self.settings.connector, current.commit_id, error)
        self.ledger.aborted(current.commit_id, current.started_at, list(current.statuses.values()), error)
        if current.error is not None:
            self.retriable_failures = self.retriable_failures + 1 if current.retriable else 0
            if not current.retriable or self.retriable_failures >= self.MAX_RETRIABLE_FAILURES:
                # A record cannot be converted (errors.tolerance=none), or a
                # write error keeps coming back: stop, with the reason.
                self.ledger.failed(current.error)
                raise ConnectorFailed(current.error)
        # The offsets did not move: the tasks read the interval again, and
        # the retry gets a whole interval for it.
        self.last_end = None
        self._idle()

    def _idle(self) -> None:
        self.phase = Phase.IDLE
        self.current = None
        self.next_start = self.clock()
        self._publish_phase()

    def _publish_phase(self) -> None:
        current = self.current
        self.ledger.phase(
            self.phase,
            current.commit_id if current else None,
            current.started_at if current else None,
            current.control_offset if current else None,
            sorted(current.offsets) if current else [],
            sorted(current.statuses) if current else [],
        )
