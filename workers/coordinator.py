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
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, cast

from workers.events import (
    ControlEvent,
    ControlPort,
    EventType,
    PartitionStatus,
    TableVersion,
    ack_commit,
    end_commit,
    start_commit,
)
from workers.failpoints import failpoint

if TYPE_CHECKING:
    from workers.sink import VersionedCommitter

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

# What ends a commit because a task holds all it may stage for it
# (connectors.models.CommitEnd): more is waiting than one commit takes, so
# the next commit is a catch-up commit (_early_end). Not max-records: that
# is a size the user asked for, which a steady stream can reach every
# interval with nothing waiting.
BACKLOG_ENDS = frozenset({"write-target", "staging-full"})
CAUGHT_UP = "caught-up"


class Phase(StrEnum):
    IDLE = "idle"
    STAGING = "staging"
    COLLECTING = "collecting"
    COMMITTING = "committing"


class ConnectorFailed(Exception):
    """A record could not be converted with errors.tolerance=none: the connector stops."""


class Fenced(Exception):
    """Another coordinator took over (a newer epoch): this one must stop."""


class SinkUnavailable(Exception):
    """A service the sink writes to (the catalog) cannot be reached; the message says which and why.

    An outage, not a fault of the connector's: the commit is retried, with
    a back-off, for as long as it lasts, and the connector shows a warning
    meanwhile; it never fails for it.
    """


class CommitNotApplied(Exception):
    """A prepared commit the sink could not apply, for a reason that is not an outage (a table dropped or
    altered since the write, files gone): the coordinator crashes with it, naming the commit, where it
    failed and why, and the way out. It is retried at every start (its offsets are in the ledger) until
    the repeated crashes fail the connector (connectors.actions.runtime.MAX_CRASHES)."""

    def __init__(self, connector: str, commit_id: uuid.UUID, reason: str, destination: str | None = None) -> None:
        self.connector = connector
        self.commit_id = commit_id
        self.reason = reason
        self.destination = destination
        where = f" to {destination}" if destination else ""
        super().__init__(
            f"prepared commit {commit_id} cannot be applied{where}: {reason}. Fix the table or the config and "
            f"restart the connector; or stop it and abandon the commit (POST /connectors/{connector}/commits/"
            f"{commit_id}/abandon), which rewinds its partitions' offsets so that its records are written again"
        )


class OffsetsOutOfRange(Exception):
    """Committed offsets the source partitions no longer have (see ``check_offsets``): the connector stops."""


@dataclass(frozen=True)
class OffsetCheck:
    """What ``check_offsets`` found: partitions to move to their log start, and those that must stop the connector."""

    skips: dict[TopicPartition, tuple[int, int]]
    problems: list[str]


def check_offsets(
    offsets: Mapping[TopicPartition, int], logs: Mapping[TopicPartition, tuple[int, int]], policy: str
) -> OffsetCheck:
    """Compare the ledger's next offsets with the partitions' logs, ``(log start, log end)`` each.

    Below the log start, retention deleted records before they were
    committed: ``policy`` "skip" moves on to the log start (the ledger
    records the skipped offsets), "fail" stops the connector. Above the log
    end the topic was recreated or truncated: its offsets are another log's,
    and which of its records are new only a person can say, so that always
    stops the connector, never stalls it silently.
    """
    skips: dict[TopicPartition, tuple[int, int]] = {}
    problems: list[str] = []
    for tp, offset in sorted(offsets.items()):
        if tp not in logs:
            continue
        start, end = logs[tp]
        topic, partition = tp
        if offset > end:
            problems.append(
                f"{topic}/{partition}: the committed offset {offset} is above the log end {end}: the topic was "
                f"recreated or truncated, and nothing has been read from it since. To read it from offset {start}, "
                f"stop the connector, set the partition's offset to {start} (PATCH /connectors/<name>/offsets) and "
                "resume it."
            )
        elif offset < start:
            if policy == "skip":
                skips[tp] = (offset, start)
            else:
                problems.append(
                    f"{topic}/{partition}: the committed offset {offset} is below the log start {start}: retention "
                    f"deleted offsets {offset} to {start - 1} before they were committed. Set "
                    "sinkadmin.offsets.out-of-range=skip to move on to the log start (the skipped offsets are "
                    "recorded in the commit ledger), or set the partition's offset with the offsets API."
                )
    return OffsetCheck(skips, problems)


@dataclass(frozen=True)
class PreparedCommit:
    commit_id: uuid.UUID
    epoch: int
    files: list[dict[str, Any]]
    # {"topic": {"partition": [start, end]}}
    offsets: dict[str, dict[str, list[int]]]
    watermark_ms: int | None
    # When the ledger prepared it (epoch ms): a sink that names its commits by
    # time (a Hudi instant) names a rolled-forward commit as its first try did.
    prepared_at_ms: int | None = None


class LedgerPort(Protocol):
    def offsets(self, partitions: list[TopicPartition], *, verify: bool = False) -> dict[TopicPartition, int]:
        """Next offset per partition, seeding unknown ones; raises Fenced.

        With ``verify`` the offsets are checked against the partitions' logs
        (``check_offsets``): skipped ahead as the connector's policy says, or
        OffsetsOutOfRange raised."""
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

    def failed(self, message: str, task_index: int | None = None) -> None:
        """The connector fails with ``message``; ``task_index``: the task whose write failed it, if one did."""
        ...

    def phase(
        self,
        phase: Phase,
        commit_id: uuid.UUID | None,
        started_at: datetime | None,
        control_offset: int | None,
        expected: list[TopicPartition],
        reported: list[TopicPartition],
        warning: str = "",
    ) -> None:
        """Live state for the UI and API; ``warning``: the outage commits are waiting out, if any."""
        ...


class MaintenancePort(Protocol):
    def between_commits(self) -> bool:
        """Run a piece of table maintenance that must not race the sink's commits (a snapshot of its
        own); True if there was one. Called only while no commit is open or waiting to be applied."""
        ...


class CommitterPort(Protocol):
    def commit(self, prepared: PreparedCommit) -> dict[str, int]:
        """Add the commit's files to every table, skipping tables that hold it; returns snapshot ids.

        Raises SinkUnavailable when a table's catalog cannot be reached."""
        ...

    def close(self) -> None:
        """Release what the committer holds (a catalog's connections): a worker process outlives it."""
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
    # The committer is a VersionedCommitter (Plugin.versioned_tables): what each commit left the
    # tables at goes with every START.
    versioned_tables: bool = False


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
    # When each partition's task last said it is still writing (STAGING_PROGRESS after END).
    heard: dict[TopicPartition, float] = field(default_factory=dict)
    end_requested: tuple[str, str] | None = None  # (connectors.models.CommitEnd, why)
    # The previous commit ended on a backlog (BACKLOG_ENDS): this one ends
    # as soon as every partition has been read to its log end (caught_up,
    # from the tasks' STAGING_PROGRESS), not after the interval.
    catch_up: bool = False
    caught_up: set[TopicPartition] = field(default_factory=set)
    ended_mono: float | None = None
    ended_by: str = "interval"
    statuses: dict[TopicPartition, PartitionStatus] = field(default_factory=dict)
    files: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    # The task that reported ``error`` (its WRITE_STATUS): a failure it causes is that task's.
    error_task: int | None = None
    retriable: bool = False
    # The error is an outage of a service the sink writes to (SinkUnavailable).
    unavailable: bool = False
    # The longest write of the tasks that answered (WRITE_STATUS), sent with
    # the ACK: the commit waited for it, and the tasks size their next
    # commits by it (workers.participant.TaskRunner._acknowledged).
    write_seconds: float | None = None


class Coordinator:
    def __init__(
        self,
        settings: CoordinatorSettings,
        channel: ControlPort,
        ledger: LedgerPort,
        committer: CommitterPort,
        partitions: Callable[[], list[TopicPartition]],
        clock: Callable[[], float] = time.monotonic,
        maintenance: MaintenancePort | None = None,
        keep_alive: Callable[[str], AbstractContextManager[object]] = lambda _: nullcontext(),
    ) -> None:
        self.settings = settings
        self.channel = channel
        self.ledger = ledger
        self.committer = committer
        self.partitions = partitions
        self.clock = clock
        self.maintenance = maintenance
        # Around a call into the sink that takes as long as its Spark job (a commit applied to the tables, a
        # maintenance run), during which the loop cannot heartbeat: the runtime heartbeats meanwhile.
        self.keep_alive = keep_alive
        self.phase = Phase.IDLE
        self.current: _OpenCommit | None = None
        self.next_start = clock()
        # The previous END, while commits follow each other: the next END is
        # due an interval after it (or at once, when committing took longer);
        # and whether a backlog ended it (the next commit is a catch-up commit).
        self.last_end: float | None = None
        self.last_end_on_backlog = False
        self.commits_done = 0
        # Set while the connector is paused: the commit in flight finishes,
        # no new one starts.
        self.hold = False
        # Passing write errors in a row; past the limit the error is not
        # passing after all and the connector fails with it, visibly.
        self.retriable_failures = 0
        self._checked_pending = False
        # When the ledger's offsets were last checked against the source's
        # logs (None: at the next START). Checked at takeover, after an
        # aborted commit (a task may have met an offset out of range) and
        # every OFFSET_CHECK_SECONDS, not at every START: it costs two
        # requests per partition.
        self._offsets_checked_at: float | None = None
        # While a service the sink writes to is out (SinkUnavailable): why,
        # how many attempts in a row met it, and a prepared commit the
        # tables still lack, applied again once the back-off is over.
        self.outage: str | None = None
        self.outages = 0
        self._unapplied: PreparedCommit | None = None
        # Each table as this coordinator's latest commit to it left it
        # (workers.sink.VersionedCommitter), sent with every START.
        self.table_versions: dict[str, TableVersion] = {}
        # How long the commit in flight waits for write statuses: the
        # configured timeout, doubled after each commit that some task did
        # not answer in time (see _timed_out).
        self.commit_timeout_s = settings.commit_timeout_s

    # -- the loop calls step() ----------------------------------------------------------

    def step(self, poll_timeout: float = 0.2) -> bool:
        """Advance the protocol by at most one transition; True if something happened."""
        if self.phase is Phase.IDLE:
            if self._finish_pending():
                return True
            if self._unapplied is not None:
                # Nothing new starts before the tables hold the prepared commit (I4).
                if self.clock() >= self.next_start:
                    self._apply(self._unapplied)
                    return True
                time.sleep(min(poll_timeout, max(0.0, self.next_start - self.clock())))
                return False
            if self.maintenance is not None:
                with self.keep_alive("maintaining its tables"):
                    maintained = self.maintenance.between_commits()
                if maintained:
                    # (A maintenance snapshot: between two of the sink's, never racing one.)
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
            if all_reported:
                self.commit_timeout_s = self.settings.commit_timeout_s
                self._commit(complete=True)
                return True
            if self._gave_up_waiting(self.current, now):
                self._timed_out(self.current)
                self._commit(complete=False)
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

    # The wait for write statuses grows, after commits that timed out, up to
    # this many times iceberg.control.commit.timeout-ms.
    MAX_TIMEOUT_FACTOR = 8

    def _gave_up_waiting(self, current: _OpenCommit, now: float) -> bool:
        """The wait for write statuses is over: a partition that has not answered has been silent for
        the timeout, or the wait reached its limit (MAX_TIMEOUT_FACTOR times the setting).

        A task whose write is still under way says so every few seconds
        (``STAGING_PROGRESS`` after END), so a slow write (Spark starting up,
        busy with other connectors' jobs) is waited for; a task that died, or
        hangs with its control loop, is silent and the others are committed at
        the timeout, as before.
        """
        assert current.ended_mono is not None
        if now - current.ended_mono >= self.settings.commit_timeout_s * self.MAX_TIMEOUT_FACTOR:
            return True
        missing = set(current.offsets) - set(current.statuses)
        return any(
            now - max(current.ended_mono, current.heard.get(key, current.ended_mono)) >= self.commit_timeout_s
            for key in missing
        )

    def _timed_out(self, current: _OpenCommit) -> None:
        """Some task did not answer in time: the next commit waits twice as long, up to MAX_TIMEOUT_FACTOR.

        A task whose writes outlast the timeout (Spark busy with many
        connectors' jobs, a machine short of CPU) has its write superseded by
        the next START and is never caught up under a fixed timeout: every
        retry writes the same records again and misses again, a livelock
        that costs the whole machine. Waiting longer lets the writes land;
        the first commit every task answers in time restores the configured
        timeout. A task that died costs the others at most the longer waits
        until the supervisor has replaced it.
        """
        missing = sorted(set(current.offsets) - set(current.statuses))
        waited = self.commit_timeout_s
        base = self.settings.commit_timeout_s
        self.commit_timeout_s = min(waited * 2, base * self.MAX_TIMEOUT_FACTOR)
        log.warning(
            "%s: commit %s: no write status within %.1f s for %s; the next commit waits %.1f s",
            self.settings.connector,
            current.commit_id,
            waited,
            ", ".join(f"{t}/{p}" for t, p in missing[:5])
            + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""),
            self.commit_timeout_s,
        )

    OFFSET_CHECK_SECONDS = 30.0

    def _start(self) -> None:
        partitions = self.partitions()
        checked_at = self._offsets_checked_at
        verify = checked_at is None or self.clock() - checked_at >= self.OFFSET_CHECK_SECONDS
        try:
            offsets = self.ledger.offsets(partitions, verify=verify)
        except OffsetsOutOfRange as exc:
            self.ledger.failed(str(exc))
            raise ConnectorFailed(str(exc)) from None
        if verify:
            self._offsets_checked_at = self.clock()
        commit_id = uuid.uuid4()
        # The commit is published (with where on the control topic to read
        # from to see its START) before the START is sent: a task that
        # starts now either finds it in the ledger or receives the START
        # (runtime.run_task), and never waits out an interval.
        control_offset = self.channel.end_offset()
        now = self.clock()
        interval = self.settings.commit_interval_s
        end_due = now + interval if self.last_end is None else max(now, self.last_end + interval)
        # (A retry after an abort, or the first commit after a pause, is not
        # one: last_end is None then.)
        catch_up = self.last_end is not None and self.last_end_on_backlog
        self.current = _OpenCommit(
            commit_id, datetime.now(UTC), now, offsets, control_offset, end_due, catch_up=catch_up
        )
        self.phase = Phase.STAGING
        self._publish_phase()
        self.channel.send(
            start_commit(
                self.settings.connector, commit_id, self.settings.epoch, offsets, catch_up, dict(self.table_versions)
            )
        )

    def _end(self) -> None:
        assert self.current is not None
        self.channel.send(end_commit(self.settings.connector, self.current.commit_id, self.settings.epoch))
        self.current.ended_mono = self.last_end = self.clock()
        self.last_end_on_backlog = self.current.ended_by in BACKLOG_ENDS
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
                current.error_task = event.task_index
                current.retriable = event.retriable
                current.unavailable = event.unavailable
                changed = True
                continue
            accepted = False
            for status in event.partitions:
                key = (status.topic, status.partition)
                if key in current.statuses or current.offsets.get(key) != status.start:
                    # First status per partition wins; a start that is not
                    # the one we sent comes from a zombie participant.
                    continue
                current.statuses[key] = status
                current.files.extend(f.as_dict() for f in event.files if (f.topic, f.partition) == key)
                changed = accepted = True
            if accepted and event.write_seconds is not None:
                current.write_seconds = max(current.write_seconds or 0.0, event.write_seconds)
        if changed:
            self._publish_phase()
        return changed

    def _progress(self, current: _OpenCommit, event: ControlEvent) -> None:
        for staged in event.partitions:
            key = (staged.topic, staged.partition)
            if current.offsets.get(key) == staged.start:  # (else a zombie's)
                current.staged_records[key] = staged.records
                if event.end_cause == CAUGHT_UP:
                    current.caught_up.add(key)
                if self.phase is Phase.COLLECTING:
                    current.heard[key] = self.clock()  # (its write is under way)
        if event.end_requested and current.end_requested is None:
            current.end_requested = (
                event.end_cause or "staging-full",
                event.end_reason or f"task {event.task_index} paused a partition whose staging is full",
            )

    def _early_end(self, current: _OpenCommit) -> tuple[str, str] | None:
        """What ends the commit before its interval (DESIGN step 2), and why, if anything does."""
        if current.end_requested is not None:
            return current.end_requested
        staged, max_records = sum(current.staged_records.values()), self.settings.max_records
        if 0 < max_records <= staged:
            return "max-records", f"{staged} records staged (sinkadmin.commit.max-records={max_records})"
        if current.catch_up and current.offsets and current.caught_up >= current.offsets.keys():
            # The backlog is read: what arrives from now on is paced by the
            # interval again, from this END. Waiting it out instead held the
            # backlog's last records back a whole interval (1M records at
            # 10 s: the second of two commits ended 10 s after the first).
            return CAUGHT_UP, f"the tasks read all {len(current.offsets)} partitions to their ends after a backlog"
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

    # Back-off while a service the sink writes to is out: an interval per
    # attempt that met it, up to this.
    MAX_OUTAGE_BACKOFF_S = 30.0

    def _apply(self, prepared: PreparedCommit) -> None:
        try:
            with self.keep_alive(f"applying commit {prepared.commit_id}"):
                snapshot_ids = self.committer.commit(prepared)
        except SinkUnavailable as exc:
            # Prepared, so rolled forward whatever happens (I4): by this
            # coordinator once the service answers, or by its successor.
            self._unapplied = prepared
            self._out(str(exc))
            return
        except CommitNotApplied:
            raise
        except Exception as exc:
            raise CommitNotApplied(self.settings.connector, prepared.commit_id, f"{type(exc).__name__}: {exc}") from exc
        self._unapplied = None
        self.outage, self.outages = None, 0
        if self.settings.versioned_tables:
            self.table_versions.update(cast("VersionedCommitter", self.committer).table_versions)
        failpoint("coordinator.after_table_commit")
        self.ledger.committed(prepared.commit_id, snapshot_ids)
        current = self.current
        # (None for a predecessor's commit rolled forward: nobody waits on its writes.)
        write_seconds = (
            current.write_seconds if current is not None and current.commit_id == prepared.commit_id else None
        )
        self.channel.send(
            ack_commit(self.settings.connector, prepared.commit_id, self.settings.epoch, snapshot_ids, write_seconds)
        )
        self.commits_done += 1
        self.retriable_failures = 0
        self._idle()

    def _abort(self, error: str) -> None:
        current = self.current
        assert current is not None
        log.warning("%s: commit %s aborted: %s", self.settings.connector, current.commit_id, error)
        self.ledger.aborted(current.commit_id, current.started_at, list(current.statuses.values()), error)
        self._offsets_checked_at = None
        if current.unavailable:
            self._out(error)
            return
        if current.error is not None:
            self.retriable_failures = self.retriable_failures + 1 if current.retriable else 0
            if not current.retriable or self.retriable_failures >= self.MAX_RETRIABLE_FAILURES:
                # A record cannot be converted (errors.tolerance=none), or a
                # write error keeps coming back: stop, with the reason.
                self.ledger.failed(current.error, current.error_task)
                raise ConnectorFailed(current.error)
        # The offsets did not move: the tasks read the interval again, and
        # the retry gets a whole interval for it.
        self.last_end = None
        self._idle()

    def _out(self, reason: str) -> None:
        """A service the sink writes to is out: wait, then try again; never a failure (SinkUnavailable)."""
        self.outages += 1
        self.outage = reason
        backoff = min(self.settings.commit_interval_s * self.outages, self.MAX_OUTAGE_BACKOFF_S)
        log.warning(
            "%s: %s (attempt %d; next in %.1f s)",
            self.settings.connector,
            reason.partition("\n")[0],
            self.outages,
            backoff,
        )
        self.last_end = None
        self._idle()
        self.next_start = self.clock() + backoff

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
            self.outage or "",
        )
