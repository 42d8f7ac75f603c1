"""The coordinator's state machine, driven without servers: a fake clock,
an in-memory control channel, ledger and committer."""

from __future__ import annotations

import contextlib
import io
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

import fastavro
import pytest

from workers import events
from workers.coordinator import (
    ConnectorFailed,
    Coordinator,
    CoordinatorSettings,
    Fenced,
    OffsetsOutOfRange,
    Phase,
    PreparedCommit,
    SinkUnavailable,
    check_offsets,
)
from workers.events import ControlEvent, DataFile, EventType, PartitionStatus, TableVersion

TP0, TP1 = ("orders", 0), ("orders", 1)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Channel:
    def __init__(self) -> None:
        self.sent: list[ControlEvent] = []
        self.inbox: list[ControlEvent] = []

    def send(self, event: ControlEvent) -> int:
        self.sent.append(event)
        return len(self.sent) - 1

    def poll(self, timeout: float, connector: str) -> list[tuple[int, ControlEvent]]:
        events, self.inbox = self.inbox, []
        return [(i, e) for i, e in enumerate(events) if e.connector == connector]

    def seek(self, offset: int | None) -> None:
        pass

    def end_offset(self) -> int:
        return len(self.sent)

    def last(self, kind: EventType) -> ControlEvent:
        return [e for e in self.sent if e.type is kind][-1]


class Ledger:
    def __init__(self, epoch: int = 1) -> None:
        self.epoch = epoch
        self.next_offsets: dict[tuple[str, int], int] = {TP0: 0, TP1: 0}
        self.prepared: list[PreparedCommit] = []
        self.committed_ids: list[uuid.UUID] = []
        self.aborted_errors: list[str] = []
        self.failure: str | None = None
        self.failed_task: int | None = None
        self.pending_commit: PreparedCommit | None = None
        self.current_epoch = epoch
        self.ended_by: list[str] = []
        # The source's logs, (start, end) per partition; unset: in range.
        self.logs: dict[tuple[str, int], tuple[int, int]] = {}
        self.verified: list[bool] = []
        self.warning = ""  # as last published

    def offsets(self, partitions: list[tuple[str, int]], *, verify: bool = False) -> dict[tuple[str, int], int]:
        self.verified.append(verify)
        offsets = {tp: self.next_offsets.setdefault(tp, 0) for tp in partitions}
        if verify:
            check = check_offsets(offsets, self.logs, "fail")
            if check.problems:
                raise OffsetsOutOfRange("\n".join(check.problems))
        return offsets

    def pending(self) -> PreparedCommit | None:
        return self.pending_commit

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
        self.ended_by.append(ended_by)
        if self.current_epoch != self.epoch:
            raise Fenced("stale")
        for s in statuses:
            if self.next_offsets[(s.topic, s.partition)] != s.start:
                raise ValueError("gap")
        for s in statuses:
            self.next_offsets[(s.topic, s.partition)] = s.end
        prepared = PreparedCommit(commit_id, self.epoch, files, {}, watermark_ms)
        self.prepared.append(prepared)
        self.pending_commit = prepared
        return prepared

    def committed(self, commit_id: uuid.UUID, snapshot_ids: Mapping[str, int]) -> None:
        self.committed_ids.append(commit_id)
        self.pending_commit = None

    def aborted(self, commit_id: uuid.UUID, started_at: datetime, statuses: list[PartitionStatus], error: str) -> None:
        self.aborted_errors.append(error)

    def failed(self, message: str, task_index: int | None = None) -> None:
        self.failure = message
        self.failed_task = task_index

    def phase(self, *args: Any) -> None:
        self.warning = args[6] if len(args) > 6 else ""


class Committer:
    def __init__(self) -> None:
        self.commits: list[PreparedCommit] = []
        self.out: str | None = None  # set: the catalog cannot be reached

    def commit(self, prepared: PreparedCommit) -> dict[str, int]:
        if self.out is not None:
            raise SinkUnavailable(self.out)
        self.commits.append(prepared)
        return {"db.orders": len(self.commits)}


def world_with(committer: Committer) -> tuple[Coordinator, Clock, Channel, Ledger, Committer]:
    clock, channel, ledger = Clock(), Channel(), Ledger()
    coordinator = Coordinator(
        CoordinatorSettings(
            "c",
            epoch=1,
            commit_interval_s=10,
            commit_timeout_s=30,
            versioned_tables=isinstance(committer, VersionedCommitter),
        ),
        channel,
        ledger,
        committer,
        partitions=lambda: [TP0, TP1],
        clock=clock,
    )
    return coordinator, clock, channel, ledger, committer


@pytest.fixture
def world() -> tuple[Coordinator, Clock, Channel, Ledger, Committer]:
    return world_with(Committer())


def status(
    commit: ControlEvent, tp: tuple[str, int], start: int, end: int, files: int = 1, **extra: Any
) -> ControlEvent:
    return ControlEvent(
        EventType.WRITE_STATUS,
        "c",
        commit.commit_id,
        commit.epoch,
        partitions=(PartitionStatus(tp[0], tp[1], start, end, end - start, max_timestamp=end),),
        files=tuple(DataFile("db.orders", f"/f{tp[1]}-{i}", tp[0], tp[1], end - start, 10) for i in range(files)),
        **extra,
    )


def start_and_end(coordinator: Coordinator, clock: Clock, channel: Channel) -> ControlEvent:
    coordinator.step(0)
    start = channel.last(EventType.START_COMMIT)
    clock.now += 10
    coordinator.step(0)
    assert coordinator.phase is Phase.COLLECTING
    return start


def test_it_starts_with_the_ledger_offsets_and_ends_after_the_interval(world: Any) -> None:
    coordinator, clock, channel, ledger, _ = world
    ledger.next_offsets = {TP0: 5, TP1: 7}
    coordinator.step(0)
    start = channel.last(EventType.START_COMMIT)
    assert start.offsets == {TP0: 5, TP1: 7}
    assert coordinator.phase is Phase.STAGING
    clock.now += 9.9
    coordinator.step(0)
    assert coordinator.phase is Phase.STAGING
    clock.now += 0.1
    coordinator.step(0)
    assert channel.last(EventType.END_COMMIT).commit_id == start.commit_id


def test_while_staging_it_waits_for_events_no_longer_than_until_the_end_is_due(world: Any) -> None:
    coordinator, clock, channel, _, _ = world
    waits: list[float] = []
    poll = channel.poll

    def recorded(timeout: float, connector: str) -> list[tuple[int, ControlEvent]]:
        waits.append(timeout)
        return poll(timeout, connector)

    channel.poll = recorded  # type: ignore[method-assign]
    coordinator.step(0.2)
    start = channel.last(EventType.START_COMMIT)
    coordinator.step(0.2)
    clock.now += 9.98
    coordinator.step(0.2)
    assert waits == [0.05, pytest.approx(0.02)]
    assert coordinator.phase is Phase.STAGING
    clock.now += 0.02
    coordinator.step(0.2)
    assert waits[-1] == 0 and channel.last(EventType.END_COMMIT).commit_id == start.commit_id


def answer_all(coordinator: Coordinator, channel: Channel, start: ControlEvent, records: int = 10) -> None:
    channel.inbox = [status(start, TP0, 0, records), status(start, TP1, 0, records)]
    coordinator.step(0)
    assert coordinator.phase is Phase.IDLE


def next_commit_ends_after(coordinator: Coordinator, clock: Clock, channel: Channel, seconds: float) -> ControlEvent:
    """Start the next commit and check that its END comes ``seconds`` after its START, not before."""
    coordinator.step(0)
    start = channel.last(EventType.START_COMMIT)
    clock.now += seconds - 0.1
    coordinator.step(0)
    assert coordinator.phase is Phase.STAGING
    clock.now += 0.1
    coordinator.step(0)
    assert channel.last(EventType.END_COMMIT).commit_id == start.commit_id
    return start


def test_commits_follow_each_other_an_interval_apart_end_to_end(world: Any) -> None:
    # Committing takes time (here 3 s of a 10 s interval); the interval runs
    # from the previous END, so a commit comes every interval, as with
    # Iceberg's sink, not every interval plus the commit's own time.
    coordinator, clock, channel, _, _ = world
    first = start_and_end(coordinator, clock, channel)
    clock.now += 3
    answer_all(coordinator, channel, first)
    assert next_commit_ends_after(coordinator, clock, channel, 7).commit_id != first.commit_id


def test_after_a_commit_slower_than_the_interval_the_next_ends_at_once(world: Any) -> None:
    # The records that came during the slow commit were read ahead: they are
    # the next commit's, and waiting another interval would only delay them.
    coordinator, clock, channel, _, _ = world
    first = start_and_end(coordinator, clock, channel)
    clock.now += 12
    answer_all(coordinator, channel, first)
    coordinator.step(0)
    second = channel.last(EventType.START_COMMIT)
    coordinator.step(0)
    assert channel.last(EventType.END_COMMIT).commit_id == second.commit_id


@pytest.mark.parametrize("interruption", ["abort", "pause"])
def test_after_an_abort_or_a_pause_the_next_commit_gets_a_whole_interval(world: Any, interruption: str) -> None:
    coordinator, clock, channel, _, _ = world
    first = start_and_end(coordinator, clock, channel)
    clock.now += 12
    if interruption == "abort":
        channel.inbox = [
            ControlEvent(EventType.WRITE_STATUS, "c", first.commit_id, 1, error="disk full", retriable=True)
        ]
        coordinator.step(0)
    else:
        coordinator.hold = True
        answer_all(coordinator, channel, first)
        coordinator.step(0)
        coordinator.hold = False
    assert next_commit_ends_after(coordinator, clock, channel, 10).commit_id != first.commit_id


def test_a_commit_is_in_the_ledger_before_its_start_is_sent_so_a_starting_task_cannot_miss_both(
    world: Any,
) -> None:
    # A task that starts reads the control topic's end, then the ledger: the
    # commit is either there (and the task reads from its offset), or its
    # START comes after that end (runtime.run_task).
    coordinator, _, channel, ledger, _ = world
    channel.sent.append(ControlEvent(EventType.ACK_COMMIT, "c", uuid.uuid4(), 1))  # an earlier event
    published: list[tuple[Phase, int | None, int]] = []
    ledger.phase = lambda phase, commit_id, started_at, control_offset, *_: published.append(
        (phase, control_offset, len(channel.sent))
    )
    coordinator.step(0)
    start = channel.last(EventType.START_COMMIT)
    start_offset = channel.sent.index(start)
    phase, control_offset, sent_when_published = published[-1]
    assert phase is Phase.STAGING and sent_when_published == start_offset  # published, then sent
    assert control_offset is not None and control_offset <= start_offset


def progress(
    commit: ControlEvent,
    tp: tuple[str, int],
    start: int,
    records: int,
    epoch: int = 1,
    end_requested: bool = False,
    end_cause: str | None = None,
) -> ControlEvent:
    return ControlEvent(
        EventType.STAGING_PROGRESS,
        "c",
        commit.commit_id,
        epoch,
        partitions=(PartitionStatus(tp[0], tp[1], start, start + records, records),),
        end_requested=end_requested,
        end_cause=end_cause,
        end_reason=f"task 0 staged {records} records" if end_cause else None,
    )


def test_a_commit_ends_before_its_interval_once_its_partitions_staged_max_records(world: Any) -> None:
    coordinator, clock, channel, ledger, _ = world
    coordinator.settings.max_records = 100
    coordinator.step(0)
    start = channel.last(EventType.START_COMMIT)
    clock.now += 1
    # Counts are a partition's total so far: the later report replaces the earlier.
    channel.inbox = [progress(start, TP0, 0, 40), progress(start, TP0, 0, 60), progress(start, TP1, 0, 39)]
    coordinator.step(0)
    assert coordinator.phase is Phase.STAGING
    channel.inbox = [progress(start, TP1, 0, 40)]
    coordinator.step(0)
    assert coordinator.phase is Phase.COLLECTING
    assert channel.last(EventType.END_COMMIT).commit_id == start.commit_id
    # The interval still runs from this END: the next commit gets a whole one.
    answer_all(coordinator, channel, start, records=60)
    second = next_commit_ends_after(coordinator, clock, channel, 10)
    assert second.commit_id != start.commit_id
    channel.inbox = [status(second, TP0, 60, 70), status(second, TP1, 60, 70)]
    coordinator.step(0)
    assert ledger.ended_by == ["max-records", "interval"]  # as the ledger records it


def test_a_partition_whose_staging_is_full_ends_the_commit_at_once(world: Any) -> None:
    coordinator, _, channel, ledger, _ = world
    coordinator.step(0)
    start = channel.last(EventType.START_COMMIT)
    channel.inbox = [progress(start, TP1, 0, 5, end_requested=True)]
    coordinator.step(0)
    assert channel.last(EventType.END_COMMIT).commit_id == start.commit_id
    answer_all(coordinator, channel, start)
    assert ledger.ended_by == ["staging-full"]


def test_a_task_that_staged_a_writes_worth_ends_the_commit_at_once_and_the_ledger_says_why(world: Any) -> None:
    coordinator, _, channel, ledger, _ = world
    coordinator.step(0)
    start = channel.last(EventType.START_COMMIT)
    channel.inbox = [progress(start, TP1, 0, 5, end_requested=True, end_cause="write-target")]
    coordinator.step(0)
    assert channel.last(EventType.END_COMMIT).commit_id == start.commit_id
    answer_all(coordinator, channel, start)
    assert ledger.ended_by == ["write-target"]


def after_a_backlog(coordinator: Coordinator, channel: Channel, cause: str) -> tuple[ControlEvent, ControlEvent]:
    """A first commit that a task's request ended early (``cause``), committed; the next one's START."""
    coordinator.step(0)
    first = channel.last(EventType.START_COMMIT)
    channel.inbox = [progress(first, TP0, 0, 10, end_requested=True, end_cause=cause)]
    coordinator.step(0)
    answer_all(coordinator, channel, first)
    coordinator.step(0)
    return first, channel.last(EventType.START_COMMIT)


def test_after_a_backlog_the_next_commit_ends_once_every_partition_is_read_to_its_end(world: Any) -> None:
    # A task held its write target: more was waiting than a commit takes.
    # The next commit is a catch-up commit, and it ends when the tasks have
    # read the backlog to its end, not an interval later; the one after it
    # gets its whole interval again.
    coordinator, clock, channel, ledger, _ = world
    first, second = after_a_backlog(coordinator, channel, "write-target")
    assert second.catch_up and not first.catch_up
    clock.now += 1
    channel.inbox = [progress(second, TP0, 10, 5, end_cause="caught-up")]
    coordinator.step(0)
    assert coordinator.phase is Phase.STAGING  # TP1 is still being read
    channel.inbox = [progress(second, TP1, 10, 3, end_cause="caught-up")]
    coordinator.step(0)
    assert channel.last(EventType.END_COMMIT).commit_id == second.commit_id
    channel.inbox = [status(second, TP0, 10, 15), status(second, TP1, 10, 13)]
    coordinator.step(0)
    assert ledger.ended_by == ["write-target", "caught-up"]
    third = next_commit_ends_after(coordinator, clock, channel, 10)
    assert not third.catch_up


@pytest.mark.parametrize("previous", ["interval", "max-records", "abort"])
def test_only_a_commit_that_a_backlog_ended_makes_the_next_a_catch_up_commit(world: Any, previous: str) -> None:
    # max-records is a size the user asked for, reached every interval by a
    # steady stream with nothing waiting; a retry after an abort gets a
    # whole interval. A task's word that it caught up changes nothing then.
    coordinator, clock, channel, _, _ = world
    coordinator.settings.max_records = 20
    coordinator.step(0)
    first = channel.last(EventType.START_COMMIT)
    if previous == "max-records":
        channel.inbox = [progress(first, TP0, 0, 20)]
        coordinator.step(0)
    else:
        clock.now += 10
        coordinator.step(0)
    if previous == "abort":
        channel.inbox = [
            ControlEvent(EventType.WRITE_STATUS, "c", first.commit_id, 1, error="disk full", retriable=True)
        ]
        coordinator.step(0)
    else:
        answer_all(coordinator, channel, first)
    coordinator.step(0)
    second = channel.last(EventType.START_COMMIT)
    offset = 0 if previous == "abort" else 10
    channel.inbox = [
        progress(second, TP0, offset, 1, end_cause="caught-up"),
        progress(second, TP1, offset, 1, end_cause="caught-up"),
    ]
    coordinator.step(0)
    assert not second.catch_up and coordinator.phase is Phase.STAGING


def test_a_catch_up_commit_ignores_caught_up_words_of_a_zombie_or_another_commit(world: Any) -> None:
    coordinator, _, channel, _, _ = world
    first, second = after_a_backlog(coordinator, channel, "staging-full")
    assert second.catch_up
    channel.inbox = [
        progress(first, TP0, 10, 5, end_cause="caught-up"),  # the previous commit's
        progress(second, TP1, 3, 5, end_cause="caught-up"),  # not where this commit starts
        progress(second, TP0, 10, 5, end_cause="caught-up"),
    ]
    coordinator.step(0)
    assert coordinator.phase is Phase.STAGING


def test_a_status_sent_before_the_end_counts_once_the_commit_ends(world: Any) -> None:
    # A task that staged a write's worth writes it without waiting for the
    # END (workers.participant._staged): its request and its status may both
    # be read before the END is sent, or its status before the other task's.
    coordinator, clock, channel, ledger, committer = world
    coordinator.step(0)
    start = channel.last(EventType.START_COMMIT)
    channel.inbox = [
        progress(start, TP0, 0, 10, end_requested=True, end_cause="write-target"),
        status(start, TP0, 0, 10),
    ]
    coordinator.step(0)
    assert channel.last(EventType.END_COMMIT).commit_id == start.commit_id
    assert coordinator.phase is Phase.COLLECTING and not committer.commits  # TP1 has not answered
    channel.inbox = [status(start, TP1, 0, 4)]
    coordinator.step(0)
    assert ledger.next_offsets == {TP0: 10, TP1: 4} and ledger.ended_by == ["write-target"]
    assert {f["path"] for f in committer.commits[0].files} == {"/f0-0", "/f1-0"}
    # A status before an END that the interval brings: the same.
    coordinator.step(0)
    second = channel.last(EventType.START_COMMIT)
    channel.inbox = [status(second, TP0, 10, 20), status(second, TP1, 4, 8)]
    coordinator.step(0)
    assert coordinator.phase is Phase.STAGING and len(committer.commits) == 1
    clock.now += 10
    coordinator.step(0)
    coordinator.step(0)
    assert len(committer.commits) == 2 and ledger.next_offsets == {TP0: 20, TP1: 8}


def test_progress_of_another_commit_or_from_a_zombie_does_not_end_a_commit(world: Any) -> None:
    coordinator, clock, channel, _, _ = world
    coordinator.settings.max_records = 10
    first = start_and_end(coordinator, clock, channel)
    answer_all(coordinator, channel, first)
    coordinator.step(0)
    second = channel.last(EventType.START_COMMIT)
    channel.inbox = [
        progress(first, TP0, 10, 50, end_requested=True),  # the previous commit's
        progress(second, TP0, 10, 50, epoch=0, end_requested=True),  # a replaced coordinator's
        progress(second, TP1, 3, 50),  # not where this commit starts
    ]
    coordinator.step(0)
    assert coordinator.phase is Phase.STAGING


def test_it_commits_once_every_partition_reported(world: Any) -> None:
    coordinator, clock, channel, ledger, committer = world
    start = start_and_end(coordinator, clock, channel)
    channel.inbox = [status(start, TP0, 0, 10)]
    coordinator.step(0)
    assert not committer.commits
    channel.inbox = [status(start, TP1, 0, 4)]
    coordinator.step(0)
    assert len(committer.commits) == 1
    assert {f["path"] for f in committer.commits[0].files} == {"/f0-0", "/f1-0"}
    assert ledger.next_offsets == {TP0: 10, TP1: 4}
    assert channel.last(EventType.ACK_COMMIT).commit_id == start.commit_id
    assert coordinator.phase is Phase.IDLE
    assert committer.commits[0].watermark_ms == 4


def test_the_tables_commit_runs_inside_keep_alive_so_a_long_spark_write_keeps_its_coordinator_alive(
    world: Any,
) -> None:
    coordinator, clock, channel, _, committer = world
    inside: list[tuple[str, int]] = []

    @contextlib.contextmanager
    def keep_alive(what: str) -> Iterator[None]:
        inside.append((what, len(committer.commits)))
        yield
        inside.append(("done", len(committer.commits)))

    coordinator.keep_alive = keep_alive
    start = start_and_end(coordinator, clock, channel)
    channel.inbox = [status(start, TP0, 0, 10), status(start, TP1, 0, 4)]
    coordinator.step(0)
    # (The commit applied between entering and leaving it.)
    assert inside == [(f"applying commit {start.commit_id}", 0), ("done", 1)]


def test_the_ack_carries_the_commits_longest_write(world: Any) -> None:
    coordinator, clock, channel, _, _ = world
    start = start_and_end(coordinator, clock, channel)
    channel.inbox = [
        status(start, TP0, 0, 10, write_seconds=1.0),
        status(start, TP0, 0, 10, write_seconds=9.0),  # a second status of TP0: not taken, nor its time
        status(start, TP1, 0, 4, write_seconds=2.5),
    ]
    coordinator.step(0)
    assert channel.last(EventType.ACK_COMMIT).write_seconds == 2.5


def test_on_timeout_it_commits_the_partitions_that_answered(world: Any) -> None:
    coordinator, clock, channel, ledger, committer = world
    start = start_and_end(coordinator, clock, channel)
    channel.inbox = [status(start, TP0, 0, 10)]
    coordinator.step(0)
    clock.now += 30
    coordinator.step(0)
    assert ledger.next_offsets == {TP0: 10, TP1: 0}
    assert [f["path"] for f in committer.commits[0].files] == ["/f0-0"]
    assert committer.commits[0].watermark_ms is None


def test_late_and_stale_statuses_are_discarded(world: Any) -> None:
    coordinator, clock, channel, ledger, committer = world
    first = start_and_end(coordinator, clock, channel)
    channel.inbox = [status(first, TP0, 0, 10), status(first, TP1, 0, 10)]
    coordinator.step(0)
    second = start_and_end(coordinator, clock, channel)
    late = status(first, TP0, 10, 20)
    zombie_epoch = ControlEvent(
        EventType.WRITE_STATUS, "c", second.commit_id, 0, partitions=late.partitions, files=late.files
    )
    wrong_start = status(second, TP1, 3, 20)
    channel.inbox = [late, zombie_epoch, wrong_start, status(second, TP0, 10, 15), status(second, TP1, 10, 12)]
    coordinator.step(0)
    assert ledger.next_offsets == {TP0: 15, TP1: 12}
    assert [f["path"] for f in committer.commits[-1].files] == ["/f0-0", "/f1-0"]


def test_the_first_status_per_partition_wins(world: Any) -> None:
    coordinator, clock, channel, ledger, committer = world
    start = start_and_end(coordinator, clock, channel)
    channel.inbox = [status(start, TP0, 0, 10), status(start, TP0, 0, 12, files=2), status(start, TP1, 0, 1)]
    coordinator.step(0)
    assert ledger.next_offsets[TP0] == 10
    assert len(committer.commits[0].files) == 2


def test_an_empty_interval_commits_nothing(world: Any) -> None:
    coordinator, clock, channel, ledger, committer = world
    start = start_and_end(coordinator, clock, channel)
    channel.inbox = [status(start, TP0, 0, 0, files=0), status(start, TP1, 0, 0, files=0)]
    coordinator.step(0)
    assert not committer.commits and not ledger.prepared
    assert coordinator.phase is Phase.IDLE


def test_records_that_all_went_to_the_dead_letter_topic_still_advance_offsets(world: Any) -> None:
    coordinator, clock, channel, ledger, committer = world
    start = start_and_end(coordinator, clock, channel)
    channel.inbox = [status(start, TP0, 0, 3, files=0), status(start, TP1, 0, 0, files=0)]
    coordinator.step(0)
    assert not committer.commits
    assert ledger.next_offsets[TP0] == 3 and ledger.committed_ids == [start.commit_id]


def test_a_prepared_commit_is_rolled_forward_before_anything_new_starts(world: Any) -> None:
    coordinator, _, channel, ledger, committer = world
    leftover = PreparedCommit(uuid.uuid4(), 0, [{"table": "db.orders", "path": "/old"}], {}, None)
    ledger.pending_commit = leftover
    coordinator.step(0)
    assert committer.commits == [leftover]
    assert ledger.committed_ids == [leftover.commit_id]
    assert not [e for e in channel.sent if e.type is EventType.START_COMMIT]
    coordinator.step(0)
    assert channel.last(EventType.START_COMMIT)


def test_a_fenced_coordinator_stops_at_prepare(world: Any) -> None:
    coordinator, clock, channel, ledger, committer = world
    start = start_and_end(coordinator, clock, channel)
    ledger.current_epoch = 2
    channel.inbox = [status(start, TP0, 0, 10), status(start, TP1, 0, 10)]
    with pytest.raises(Fenced):
        coordinator.step(0)
    assert not committer.commits


def test_a_conversion_error_fails_the_connector_without_committing(world: Any) -> None:
    coordinator, clock, channel, ledger, committer = world
    start = start_and_end(coordinator, clock, channel)
    channel.inbox = [ControlEvent(EventType.WRITE_STATUS, "c", start.commit_id, 1, error="record orders/0@3 ...")]
    with pytest.raises(ConnectorFailed):
        coordinator.step(0)
    assert ledger.failure == "record orders/0@3 ..." and not committer.commits


def test_a_conversion_error_fails_the_task_that_reported_it(world: Any) -> None:
    # As in Kafka Connect, the task that met the record is the one that fails: the ledger is told which.
    coordinator, clock, channel, ledger, _ = world
    start = start_and_end(coordinator, clock, channel)
    channel.inbox = [
        status(start, TP0, 0, 10),
        ControlEvent(EventType.WRITE_STATUS, "c", start.commit_id, 1, task_index=1, error="record orders/1@3 ..."),
    ]
    with pytest.raises(ConnectorFailed):
        coordinator.step(0)
    assert (ledger.failure, ledger.failed_task) == ("record orders/1@3 ...", 1)


def test_a_passing_write_error_aborts_the_commit_and_starts_over(world: Any) -> None:
    coordinator, clock, channel, ledger, _ = world
    start = start_and_end(coordinator, clock, channel)
    channel.inbox = [ControlEvent(EventType.WRITE_STATUS, "c", start.commit_id, 1, error="disk full", retriable=True)]
    coordinator.step(0)
    assert ledger.aborted_errors == ["disk full"] and ledger.failure is None
    assert coordinator.phase is Phase.IDLE
    coordinator.step(0)
    assert channel.last(EventType.START_COMMIT).commit_id != start.commit_id


def _with_offsets(event: ControlEvent, offsets: list[list[int]]) -> bytes:
    """``event`` encoded with its files' offsets replaced by ``offsets``."""
    record = fastavro.schemaless_reader(io.BytesIO(event.encode()), events._SCHEMA, events._SCHEMA)
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, events._SCHEMA, {**record, "file_offsets": offsets})  # type: ignore[dict-item]
    return buffer.getvalue()


def test_events_round_trip_through_avro() -> None:
    event = ControlEvent(
        EventType.WRITE_STATUS,
        "c",
        uuid.uuid4(),
        3,
        offsets={TP0: 1},
        task_index=2,
        task_epoch=4,
        partitions=(PartitionStatus("orders", 0, 1, 5, 4, dead_lettered=1, skipped=0, max_timestamp=99),),
        files=(
            DataFile("db.orders", "/p", "orders", 0, 3, 100, partition_values='{"spec-id":0,"values":[3]}'),
            DataFile("db.orders", "/q", "orders", 0, 2, 80),
        ),
        error=None,
        retriable=False,
        write_seconds=1.75,
    )
    assert ControlEvent.decode(event.encode()) == event
    # The files sink's files carry their first and last offsets (a file may have none known: the order holds).
    files = replace(
        event,
        files=(
            DataFile("orders", "/a", "orders", 0, 3, 10, staged_path="/t/a", first_offset=5, last_offset=8),
            DataFile("orders", "/b", "orders", 0, 1, 10),
            DataFile("orders", "/c", "orders", 1, 2, 10, first_offset=0, last_offset=1),
        ),
    )
    assert ControlEvent.decode(files.encode()) == files
    # Offsets that are not one per file (a writer that knew no file's, or another layout) are unknown.
    assert [f.first_offset for f in events.ControlEvent.decode(_with_offsets(files, [[1, 2]])).files] == [None] * 3
    progress = ControlEvent(
        EventType.STAGING_PROGRESS,
        "c",
        uuid.uuid4(),
        3,
        task_index=1,
        partitions=(PartitionStatus("orders", 0, 1, 5, 4),),
        end_requested=True,
        end_cause="write-target",
        end_reason="task 1 staged 64 MiB, what its writer writes in 2 s",
    )
    assert ControlEvent.decode(progress.encode()) == progress
    start = events.start_commit(
        "c", uuid.uuid4(), 3, {TP0: 7}, catch_up=True, table_versions={"db.orders": TableVersion("v1", "/m/1.json")}
    )
    assert ControlEvent.decode(start.encode()) == start


def test_a_write_error_that_keeps_coming_back_fails_the_connector(world: Any) -> None:
    coordinator, clock, channel, ledger, _ = world
    for attempt in range(Coordinator.MAX_RETRIABLE_FAILURES):
        start = start_and_end(coordinator, clock, channel)
        channel.inbox = [
            ControlEvent(
                EventType.WRITE_STATUS, "c", start.commit_id, 1, error="schema cannot be created", retriable=True
            )
        ]
        if attempt < Coordinator.MAX_RETRIABLE_FAILURES - 1:
            coordinator.step(0)
            assert ledger.failure is None
        else:
            with pytest.raises(ConnectorFailed):
                coordinator.step(0)
    assert ledger.failure == "schema cannot be created"


def test_a_commit_nobody_answered_is_recorded_as_aborted(world: Any) -> None:
    coordinator, clock, channel, ledger, committer = world
    start_and_end(coordinator, clock, channel)
    clock.now += 30
    coordinator.step(0)
    assert ledger.aborted_errors == ["no write status arrived before the commit timeout"]
    assert not committer.commits and coordinator.phase is Phase.IDLE


def collecting_for(coordinator: Coordinator, clock: Clock, channel: Channel, seconds: float) -> ControlEvent:
    """End the next commit and check that it waits ``seconds`` for statuses, not less; TP1's never come."""
    coordinator.step(0)
    clock.now += 10
    coordinator.step(0)
    start = channel.last(EventType.START_COMMIT)
    at = start.offsets[TP0]
    channel.inbox = [status(start, TP0, at, at + 10)]
    clock.now += seconds - 0.1
    coordinator.step(0)
    assert coordinator.phase is Phase.COLLECTING
    clock.now += 0.1
    coordinator.step(0)
    assert coordinator.phase is Phase.IDLE
    clock.now += 10  # (a whole interval after the partial commit)
    return start


def test_after_a_commit_that_timed_out_the_next_waits_twice_as_long_up_to_a_limit(world: Any) -> None:
    # A task whose writes outlast the timeout (a machine short of CPU) would
    # otherwise miss every retry of the same records.
    coordinator, clock, channel, ledger, committer = world
    for waited in (30, 60, 120, 240, 240):
        collecting_for(coordinator, clock, channel, waited)
    assert len(committer.commits) == 5 and ledger.next_offsets == {TP0: 50, TP1: 0}
    # Once every task answers in time, the configured timeout is back.
    coordinator.step(0)
    clock.now += 10
    coordinator.step(0)
    start = channel.last(EventType.START_COMMIT)
    channel.inbox = [status(start, TP0, 50, 60), status(start, TP1, 0, 10)]
    coordinator.step(0)
    assert coordinator.phase is Phase.IDLE and ledger.next_offsets == {TP0: 60, TP1: 10}
    clock.now += 10
    collecting_for(coordinator, clock, channel, 30)


def still_writing(commit: ControlEvent, tp: tuple[str, int], start: int, end: int) -> ControlEvent:
    """What a task whose write of ``commit`` is under way says every few seconds (participant._still_writing)."""
    return ControlEvent(
        EventType.STAGING_PROGRESS,
        "c",
        commit.commit_id,
        commit.epoch,
        partitions=(PartitionStatus(tp[0], tp[1], start, end, end - start),),
    )


def test_a_task_that_says_it_is_still_writing_is_waited_for_past_the_timeout_and_committed_whole(
    world: Any,
) -> None:
    # Forty tasks warming Spark up at once took 22-28 s, and a first commit outlasted the 30 s
    # timeout; given up on, its records were written again by the next commit.
    coordinator, clock, channel, ledger, committer = world
    coordinator.step(0)
    clock.now += 10
    coordinator.step(0)
    start = channel.last(EventType.START_COMMIT)
    channel.inbox = [status(start, TP0, 0, 10)]
    coordinator.step(0)
    for _ in range(10):  # 50 s of a write under way, past the 30 s timeout
        clock.now += 5
        channel.inbox = [still_writing(start, TP1, 0, 7)]
        coordinator.step(0)
        assert coordinator.phase is Phase.COLLECTING
    channel.inbox = [status(start, TP1, 0, 7)]
    coordinator.step(0)
    assert coordinator.phase is Phase.IDLE and ledger.next_offsets == {TP0: 10, TP1: 7}
    # Answered in time: the next commit waits the configured timeout, not twice as long.
    assert len(committer.commits) == 1 and coordinator.commit_timeout_s == 30


def test_a_task_that_stops_saying_so_is_given_up_on_at_the_timeout_and_no_wait_outlasts_the_limit(
    world: Any,
) -> None:
    coordinator, clock, channel, ledger, _ = world
    coordinator.step(0)
    clock.now += 10
    coordinator.step(0)
    start = channel.last(EventType.START_COMMIT)
    channel.inbox = [status(start, TP0, 0, 10), still_writing(start, TP1, 0, 7)]
    clock.now += 20
    coordinator.step(0)
    # Silent since: 29.9 s later it is still waited for, at 30 s it is not.
    clock.now += 29.9
    coordinator.step(0)
    assert coordinator.phase is Phase.COLLECTING
    clock.now += 0.1
    coordinator.step(0)
    assert coordinator.phase is Phase.IDLE and ledger.next_offsets == {TP0: 10, TP1: 0}
    # A task that says it is writing forever (a hung job) is waited for 8 timeouts at most.
    coordinator.step(0)
    clock.now += 10
    coordinator.step(0)
    start = channel.last(EventType.START_COMMIT)
    channel.inbox = [status(start, TP0, 10, 20)]
    coordinator.step(0)
    waited = 0.0
    while coordinator.phase is Phase.COLLECTING:
        channel.inbox = [still_writing(start, TP1, 0, 7)]
        clock.now += 5
        waited += 5
        coordinator.step(0)
    assert waited == 240 and ledger.next_offsets == {TP0: 20, TP1: 0}
    # A progress event with a start that is not the one sent (a zombie's) keeps nobody waiting.
    clock.now += 10
    coordinator.step(0)
    clock.now += 10
    coordinator.step(0)
    start = channel.last(EventType.START_COMMIT)
    channel.inbox = [still_writing(start, TP1, 5, 7), status(start, TP0, 20, 30)]
    coordinator.step(0)
    clock.now += coordinator.commit_timeout_s
    coordinator.step(0)
    assert coordinator.phase is Phase.IDLE and ledger.next_offsets == {TP0: 30, TP1: 0}


# How many fields each event version added at the end (workers.events).
FIELDS_ADDED = {2: 1, 3: 1, 4: 1, 5: 1, 6: 2, 7: 1, 8: 1, 9: 2, 10: 1}


@pytest.mark.parametrize("version", [1, 2, 5])
def test_a_reader_of_an_earlier_event_version_still_decodes_a_status(version: int) -> None:
    # Events are written without their schema; fields added at the end
    # (version 2: file_partitions, 3: end_requested, ... 6: end_cause and
    # end_reason, 7: write_seconds, 8: catch_up, 9: table_versions, 10: file_offsets) are trailing bytes to an older reader, and a type added at
    # the end of the enum is one it cannot decode, so it skips that event
    # (as ControlChannel.poll does).
    assert max(FIELDS_ADDED) == events.SCHEMA_VERSION
    current = events._SCHEMA
    added = sum(FIELDS_ADDED[v] for v in range(version + 1, events.SCHEMA_VERSION + 1))
    symbols = [e.value for e in EventType if e is not EventType.STAGING_PROGRESS]
    earlier_fields = [
        {**f, "type": {**f["type"], "symbols": symbols}} if f["name"] == "type" else f for f in current["fields"]
    ]
    earlier = fastavro.parse_schema({**current, "name": f"V{version}", "fields": earlier_fields[:-added]})
    event = ControlEvent(
        EventType.WRITE_STATUS,
        "c",
        uuid.uuid4(),
        3,
        files=(DataFile("db.orders", "/p", "orders", 0, 3, 100, partition_values='{"spec-id":0,"values":[3]}'),),
        error="late",
    )
    record = fastavro.schemaless_reader(io.BytesIO(event.encode()), earlier, earlier)
    assert record["files"][0]["path"] == "/p" and record["error"] == "late"
    progress = ControlEvent(EventType.STAGING_PROGRESS, "c", uuid.uuid4(), 3, end_requested=True)
    with pytest.raises(IndexError):  # the enum symbol's index is past the reader's symbols
        fastavro.schemaless_reader(io.BytesIO(progress.encode()), earlier, earlier)


def test_check_offsets_skips_below_the_log_start_only_when_told_and_never_past_the_log_end() -> None:
    offsets = {TP0: 5, TP1: 50, ("other", 0): 7}
    logs = {TP0: (20, 40), TP1: (0, 30), ("other", 0): (7, 7)}
    failing = check_offsets(offsets, logs, "fail")
    assert failing.skips == {}
    assert [p.split(":")[0] for p in failing.problems] == ["orders/0", "orders/1"]
    assert "committed offset 5 is below the log start 20" in failing.problems[0]
    assert "deleted offsets 5 to 19 before they were committed" in failing.problems[0]
    assert "committed offset 50 is above the log end 30: the topic was recreated" in failing.problems[1]
    skipping = check_offsets(offsets, logs, "skip")
    assert skipping.skips == {TP0: (5, 20)}
    assert len(skipping.problems) == 1 and skipping.problems[0].startswith("orders/1:")
    # A partition at its log's end, or whose log is unknown (deleted since listed), is left alone.
    assert check_offsets({TP0: 40, TP1: 9}, {TP0: (40, 40)}, "fail") == check_offsets({}, {}, "fail")


def test_offsets_are_checked_at_takeover_after_an_abort_and_every_so_often(
    world: tuple[Coordinator, Clock, Channel, Ledger, Committer],
) -> None:
    coordinator, clock, channel, ledger, _ = world
    coordinator.step()  # START 1: takeover
    clock.now += 10
    coordinator.step()  # END
    start = channel.last(EventType.START_COMMIT)
    channel.inbox = [status(start, TP0, 0, 5), status(start, TP1, 0, 5)]
    coordinator.step()
    coordinator.step()  # START 2
    assert ledger.verified == [True, False]
    clock.now += 10
    coordinator.step()  # END
    start = channel.last(EventType.START_COMMIT)
    channel.inbox = [
        ControlEvent(EventType.WRITE_STATUS, "c", start.commit_id, 1, error="offset 5 out of range", retriable=True)
    ]
    coordinator.step()  # aborted
    assert ledger.aborted_errors == ["offset 5 out of range"]
    coordinator.step()  # START 3: checked again
    assert ledger.verified == [True, False, True]
    clock.now += coordinator.OFFSET_CHECK_SECONDS
    coordinator.step()  # END
    start = channel.last(EventType.START_COMMIT)
    channel.inbox = [status(start, TP0, 5, 6), status(start, TP1, 5, 6)]
    coordinator.step()
    coordinator.step()  # START 4: the check is due again
    assert ledger.verified == [True, False, True, True]


def test_an_offset_out_of_range_fails_the_connector_with_the_reason(
    world: tuple[Coordinator, Clock, Channel, Ledger, Committer],
) -> None:
    coordinator, _, channel, ledger, _ = world
    ledger.next_offsets[TP1] = 12
    ledger.logs = {TP0: (0, 100), TP1: (0, 3)}
    with pytest.raises(ConnectorFailed, match="above the log end 3"):
        coordinator.step()
    assert ledger.failure is not None and ledger.failure.startswith("orders/1: the committed offset 12")
    assert channel.sent == []  # no START for offsets the log does not have


def test_an_outage_of_the_catalog_met_by_the_tasks_is_waited_out_never_failing_the_connector(world: Any) -> None:
    coordinator, clock, channel, ledger, committer = world
    for attempt in range(1, Coordinator.MAX_RETRIABLE_FAILURES + 3):
        start = start_and_end(coordinator, clock, channel)
        channel.inbox = [
            ControlEvent(
                EventType.WRITE_STATUS,
                "c",
                start.commit_id,
                1,
                error="task 0: cannot reach the catalog 'c': connection refused",
                retriable=True,
                unavailable=True,
            )
        ]
        coordinator.step(0)
        assert ledger.failure is None and coordinator.phase is Phase.IDLE
        assert ledger.warning == "task 0: cannot reach the catalog 'c': connection refused"
        # Backed off: an interval per attempt, up to MAX_OUTAGE_BACKOFF_S.
        backoff = min(10 * attempt, Coordinator.MAX_OUTAGE_BACKOFF_S)
        assert coordinator.next_start == pytest.approx(clock.now + backoff)
        clock.now += backoff - 0.1
        coordinator.step(0)
        assert coordinator.phase is Phase.IDLE  # not yet
        clock.now += 0.1
    assert len(ledger.aborted_errors) == Coordinator.MAX_RETRIABLE_FAILURES + 2

    start = start_and_end(coordinator, clock, channel)
    channel.inbox = [status(start, TP0, 0, 5), status(start, TP1, 0, 5)]
    coordinator.step(0)
    assert len(committer.commits) == 1 and ledger.warning == "" and coordinator.outages == 0


def test_a_prepared_commit_the_catalog_cannot_take_is_applied_once_it_answers_and_nothing_starts_before(
    world: Any,
) -> None:
    coordinator, clock, channel, ledger, committer = world
    committer.out = "cannot reach the catalog 'c' at postgresql://h/db: connection refused"
    start = start_and_end(coordinator, clock, channel)
    channel.inbox = [status(start, TP0, 0, 5), status(start, TP1, 0, 5)]
    coordinator.step(0)
    assert len(ledger.prepared) == 1 and ledger.committed_ids == [] and ledger.warning == committer.out
    starts = len([e for e in channel.sent if e.type is EventType.START_COMMIT])
    for _ in range(3):  # each attempt meets the outage again; no new commit starts meanwhile
        clock.now = coordinator.next_start
        coordinator.step(0)
    assert len([e for e in channel.sent if e.type is EventType.START_COMMIT]) == starts
    assert coordinator.outages == 4 and ledger.failure is None
    committer.out = None
    clock.now = coordinator.next_start
    coordinator.step(0)
    assert ledger.committed_ids == [ledger.prepared[0].commit_id] and len(committer.commits) == 1
    assert ledger.warning == "" and channel.last(EventType.ACK_COMMIT).commit_id == start.commit_id
    coordinator.step(0)
    assert channel.last(EventType.START_COMMIT).offsets == {TP0: 5, TP1: 5}


class VersionedCommitter(Committer):
    """A committer that says what its last commit left each table at (as IcebergCommitter does)."""

    def __init__(self) -> None:
        super().__init__()
        self.table_versions: dict[str, TableVersion] = {}

    def commit(self, prepared: PreparedCommit) -> dict[str, int]:
        snapshot_ids = super().commit(prepared)
        n = len(self.commits)
        # (The second commit adds to a second table.)
        self.table_versions = {name: TableVersion("schema 0", f"/{name}/{n}.json") for name in ["a", "b"][: min(n, 2)]}
        return snapshot_ids


def committed_round(coordinator: Coordinator, clock: Clock, channel: Channel) -> ControlEvent:
    start = start_and_end(coordinator, clock, channel)
    channel.inbox = [status(start, TP0, start.offsets[TP0], start.offsets[TP0] + 5), status(start, TP1, 0, 0, files=0)]
    coordinator.step(0)
    assert channel.last(EventType.ACK_COMMIT).commit_id == start.commit_id
    return start


def test_every_start_says_what_the_latest_commit_to_each_table_left_it_at() -> None:
    coordinator, clock, channel, _, committer = world_with(VersionedCommitter())
    first = committed_round(coordinator, clock, channel)
    # Nothing committed yet by this coordinator: the tasks look their tables up.
    assert first.table_versions == {}
    second = committed_round(coordinator, clock, channel)
    assert second.table_versions == {"a": TableVersion("schema 0", "/a/1.json")}
    # A commit that fails changes nothing; a table the next commit leaves alone keeps its entry.
    failed = start_and_end(coordinator, clock, channel)
    assert failed.table_versions == {
        "a": TableVersion("schema 0", "/a/2.json"),
        "b": TableVersion("schema 0", "/b/2.json"),
    }
    channel.inbox = [status(failed, TP0, 10, 12, error="storage hiccup", retriable=True)]
    coordinator.step(0)
    assert coordinator.phase is Phase.IDLE and len(committer.commits) == 2
    assert start_and_end(coordinator, clock, channel).table_versions == failed.table_versions


def test_a_long_call_heartbeats_until_it_returns_its_coordinator_is_fenced_or_the_limit_passes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import time

    from workers import runtime

    monkeypatch.setattr(runtime, "HEARTBEAT_SECONDS", 0.02)
    beats: list[int] = []

    def heartbeat(epoch: int) -> str | None:
        beats.append(epoch)
        return "RUNNING"

    with runtime.LongCallBeats("c", 7, heartbeat).during("applying commit x"):
        time.sleep(0.3)
    during = len(beats)
    assert during >= 5 and set(beats) == {7}
    time.sleep(0.1)
    assert len(beats) == during, "beats went on after the call returned"

    fenced: list[int] = []
    with runtime.LongCallBeats("c", 7, lambda epoch: fenced.append(epoch) or None).during("applying commit x"):
        time.sleep(0.2)
    assert fenced == [7], "beats went on once the coordinator was told to stop"

    stuck: list[int] = []
    with runtime.LongCallBeats("c", 7, lambda epoch: stuck.append(epoch) or "RUNNING", limit_s=0.1).during("x"):
        time.sleep(0.4)
    assert 1 <= len(stuck) <= 6, "a call stuck past the limit still vouched for its coordinator"
