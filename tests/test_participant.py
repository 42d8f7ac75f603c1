"""The participant's state machine, driven without servers: an in-memory
partition log behind the consumer's interface, the in-memory control channel
of the coordinator tests, and a writer that keeps what it is given.

What matters here is reading ahead: between END_COMMIT and the next
START_COMMIT the participant keeps fetching, and a START must adopt exactly
the records whose offsets it names, or seek back to them."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

import pytest

from connectors.config import SinkConfig
from tests.test_coordinator import Channel
from workers.events import ControlEvent, EventType, TableVersion
from workers.participant import TaskRunner
from workers.sink import plugin_of
from workers.staging import RecordChunk, StagedPartition
from workers.writes import WriteResult

TP = ("orders", 0)


class Message:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return TP[0]

    def partition(self) -> int:
        return TP[1]

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return b'{"n": %d}' % self._offset

    def key(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000 + self._offset)

    def headers(self) -> None:
        return None


class PartitionLog:
    """One partition's records behind Consumer.assign/consume/pause/resume."""

    def __init__(self, end: int) -> None:
        self.end = end
        self.position: int | None = None
        self.assignments: list[list[tuple[str, int, int]]] = []
        self.paused = False
        self.pauses = 0
        self.asked = 0

    def assign(self, partitions: Sequence[Any]) -> None:
        self.assignments.append([(p.topic, p.partition, p.offset) for p in partitions])
        self.position = partitions[0].offset if partitions else None
        # As librdkafka: a pause outlives a re-assign (tests/integration/test_consumer_seek.py).

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        if self.position is None or self.paused:
            return []
        batch = [Message(o) for o in range(self.position, min(self.end, self.position + num_messages))]
        self.position += len(batch)
        return batch

    def pause(self, partitions: Sequence[Any]) -> None:
        # (librdkafka also drops what it prefetched for the partition, to
        # fetch it again on resume: tests/integration/test_consumer_seek.py.)
        self.paused = True
        self.pauses += 1

    def resume(self, partitions: Sequence[Any]) -> None:
        self.paused = False

    def get_watermark_offsets(self, partition: Any, cached: bool = False, **_: Any) -> tuple[int, int]:
        self.asked += not cached  # (a round trip to the broker; cached: the latest fetch's figure)
        return 0, self.end

    def close(self) -> None:
        pass


class MemorySink:
    chunk_bytes = 1 << 16  # as the arrow writer's, min(buffer-bytes, 1 MiB)

    def __init__(self) -> None:
        self.offsets: list[int] = []

    def write(self, chunk: RecordChunk) -> None:
        self.offsets.extend(chunk.offsets)

    def finish(self, staged: StagedPartition) -> StagedPartition:
        staged.decoded = True
        return staged

    def discard(self) -> None:
        self.offsets.clear()


class Writer:
    def __init__(self) -> None:
        self.written: dict[uuid.UUID, list[int]] = {}
        self.sinks: dict[uuid.UUID, MemorySink] = {}
        # What each START said of the tables, in order.
        self.versions: list[Mapping[str, TableVersion]] = []

    def sink(self, staging_id: uuid.UUID, topic: str, partition: int, start: int, directory: Path) -> MemorySink:
        self.sinks[staging_id] = MemorySink()
        return self.sinks[staging_id]

    def write(self, commit_id: uuid.UUID, staging_id: uuid.UUID, staged: Sequence[StagedPartition]) -> WriteResult:
        self.written[commit_id] = list(self.sinks[staging_id].offsets)
        return WriteResult()

    def tables_committed(self, versions: Mapping[str, TableVersion]) -> None:
        self.versions.append(versions)

    def unavailable(self, exc: BaseException) -> str | None:
        # As the table writer judges its catalog's errors (sinks.iceberg.tables.catalog_outage).
        return f"cannot reach the catalog: {exc}" if isinstance(exc, ConnectionRefusedError) else None


class WriteAtOnce(Executor):
    """Writes on the task's own thread, so that a test sees the WRITE_STATUS in the step that
    handles the END (the real runner writes on a thread of its own: see
    test_consuming_goes_on_while_a_commit_is_written)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as exc:
            future.set_exception(exc)
        return future


def runner(
    log: PartitionLog,
    channel: Channel,
    writer: Writer,
    tmp_path: Path,
    buffer_bytes: int,
    max_bytes: int = 1 << 30,
    **more_config: str,
) -> TaskRunner:
    config = SinkConfig.parse(
        {
            "connector.class": "iceberg",
            "topics": TP[0],
            "iceberg.tables": "db.orders",
            "sinkadmin.staging.buffer-bytes": str(buffer_bytes),
            "sinkadmin.staging.max-bytes": str(max_bytes),
            **more_config,
        }
    )
    return TaskRunner(
        connector="c",
        task_index=0,
        task_epoch=1,
        config=config,
        partitions=[TP],
        consumer=log,  # type: ignore[arg-type]
        channel=channel,
        writer=writer,
        dead_letters=None,
        staging_dir=tmp_path,
        batch_size=10,
        versioned_tables=plugin_of(config).versioned_tables,
        write_executor=WriteAtOnce(),
    )


def start(
    channel: Channel, offset: int, epoch: int = 1, table_versions: dict[str, TableVersion] | None = None
) -> uuid.UUID:
    commit_id = uuid.uuid4()
    channel.inbox.append(
        ControlEvent(
            EventType.START_COMMIT, "c", commit_id, epoch, offsets={TP: offset}, table_versions=table_versions or {}
        )
    )
    return commit_id


def end(channel: Channel, commit_id: uuid.UUID, epoch: int = 1) -> None:
    channel.inbox.append(ControlEvent(EventType.END_COMMIT, "c", commit_id, epoch))


def status_range(channel: Channel) -> tuple[int, int]:
    status = channel.last(EventType.WRITE_STATUS).partitions[0]
    return status.start, status.end


def test_records_read_ahead_are_adopted_by_a_start_at_their_offset(tmp_path: Path) -> None:
    log, channel, writer = PartitionLog(end=25), Channel(), Writer()
    task = runner(log, channel, writer, tmp_path, buffer_bytes=1 << 20)
    first = start(channel, 0)
    task.step()  # START, then the first batch: 0..9
    end(channel, first)
    task.step()  # END: 0..9 written; then fetching goes on, for the next commit
    assert status_range(channel) == (0, 10) and writer.written[first] == list(range(10))
    task.step()
    assert task.ahead[TP].start == 10 and task.ahead[TP].records == 15
    second = start(channel, 10)
    task.step()
    assert len(log.assignments) == 1  # adopted: no seek back
    end(channel, second)
    task.step()
    assert status_range(channel) == (10, 25) and writer.written[second] == list(range(10, 25))


def test_each_start_tells_the_writer_what_the_last_commit_left_the_tables_at(tmp_path: Path) -> None:
    log, channel, writer = PartitionLog(end=25), Channel(), Writer()
    task = runner(log, channel, writer, tmp_path, buffer_bytes=1 << 20)
    commit_then_read_ahead(task, channel, 0)
    versions = {
        "db.orders": TableVersion("3f0c schema 1 spec 0 file:///w/db/orders", "file:///w/db/orders/metadata/3.json")
    }
    second = start(channel, 10, table_versions=versions)
    task.step()
    assert writer.versions == [{}, versions]
    end(channel, second)
    task.step()
    assert status_range(channel) == (10, 25)


def test_a_start_sent_twice_keeps_what_the_commit_has_staged(tmp_path: Path) -> None:
    # The control producer may deliver an event twice (a retry after a lost
    # acknowledgement): the second copy of the START in hand changes nothing.
    log, channel, writer = PartitionLog(end=25), Channel(), Writer()
    task = runner(log, channel, writer, tmp_path, buffer_bytes=1 << 20)
    first = start(channel, 0)
    task.step()  # START, then 0..9
    channel.inbox.append(ControlEvent(EventType.START_COMMIT, "c", first, 1, offsets={TP: 0}))
    task.step()  # the copy, then 10..19
    assert len(log.assignments) == 1 and task.current is not None and task.current.buffers[TP].records == 20
    end(channel, first)
    task.step()
    assert status_range(channel) == (0, 20) and writer.written[first] == list(range(20))


def test_a_start_elsewhere_drops_what_was_read_ahead_and_seeks(tmp_path: Path) -> None:
    log, channel, writer = PartitionLog(end=30), Channel(), Writer()
    task = runner(log, channel, writer, tmp_path, buffer_bytes=1 << 20)
    first = start(channel, 0)
    task.step()
    end(channel, first)
    task.step()
    task.step()
    assert task.ahead[TP].start == 10 and task.ahead[TP].records == 20
    # The commit was aborted (or a new coordinator took over): the ledger
    # still says 0, so the records are read again from there.
    second = start(channel, 0, epoch=2)
    task.step()
    assert log.assignments[-1] == [(TP[0], TP[1], 0)]
    for _ in range(3):
        task.step()
    end(channel, second, epoch=2)
    task.step()
    assert status_range(channel) == (0, 30) and writer.written[second] == list(range(30))


def commit_then_read_ahead(task: TaskRunner, channel: Channel, steps: int) -> None:
    """One commit of the task's first batch, then ``steps`` steps of reading ahead."""
    first = start(channel, 0)
    task.step()
    end(channel, first)
    task.step()
    for _ in range(steps):
        task.step(timeout=0)


def read_ahead_until_paused(log: PartitionLog, channel: Channel, writer: Writer, tmp_path: Path) -> TaskRunner:
    """A task that committed offsets [0, 1000) and then read ahead until the partition paused at max-bytes (1 MiB)."""
    task = runner(log, channel, writer, tmp_path, buffer_bytes=65536, max_bytes=1 << 20)
    task.batch_size = 1000
    commit_then_read_ahead(task, channel, steps=100)
    return task


def test_reading_ahead_goes_to_a_sink_and_is_bounded_by_max_bytes(tmp_path: Path) -> None:
    log, channel, writer = PartitionLog(end=50_000), Channel(), Writer()
    task = read_ahead_until_paused(log, channel, writer, tmp_path)
    ahead = task.ahead[TP]
    read_ahead = range(ahead.start, ahead.next_offset)
    # Staged as it came (decoded, with the arrow writer), until the partition paused (I7).
    assert log.paused and log.pauses == 1 and ahead.staged_bytes >= 1 << 20 and len(read_ahead) < 20_000
    assert task.ahead_id is not None
    decoded = writer.sinks[task.ahead_id].offsets  # all but the last, partial chunk
    assert decoded == list(read_ahead)[: len(decoded)] and len(read_ahead) - len(decoded) < 1000
    assert not [e for e in channel.sent if e.type is EventType.STAGING_PROGRESS]  # no commit to end yet
    second = start(channel, read_ahead.start)
    task.step()
    # Adopted: no seek back; the partition stays paused, this commit already
    # holds max-bytes, so it asks for its END at once.
    assert len(log.assignments) == 1 and log.pauses == 1 and log.paused
    asked = channel.last(EventType.STAGING_PROGRESS)
    assert asked.commit_id == second and asked.end_requested
    assert [(p.start, p.end, p.records) for p in asked.partitions] == [
        (read_ahead.start, read_ahead.stop, len(read_ahead))
    ]
    end(channel, second)
    task.step()
    assert status_range(channel) == (read_ahead.start, read_ahead.stop) and not log.paused
    assert writer.written[second] == list(read_ahead)


def test_a_start_elsewhere_deletes_what_was_read_ahead_and_reads_it_again(tmp_path: Path) -> None:
    log, channel, writer = PartitionLog(end=3000), Channel(), Writer()
    task = runner(log, channel, writer, tmp_path, buffer_bytes=65536)
    commit_then_read_ahead(task, channel, steps=200)
    ahead_sink = writer.sinks[task.ahead_id] if task.ahead_id is not None else None
    assert ahead_sink is not None and ahead_sink.offsets
    second = start(channel, 0, epoch=2)  # a takeover: the ledger still says 0
    task.step()
    assert ahead_sink.offsets == []  # discarded: nothing read ahead reaches a table
    assert log.assignments[-1] == [(TP[0], TP[1], 0)]
    for _ in range(400):
        task.step(timeout=0)
    end(channel, second, epoch=2)
    task.step()
    assert status_range(channel) == (0, 3000) and writer.written[second] == list(range(3000))


def test_a_partition_paused_at_max_bytes_is_resumed_by_a_start_that_seeks(tmp_path: Path) -> None:
    log, channel, writer = PartitionLog(end=50_000), Channel(), Writer()
    task = runner(log, channel, writer, tmp_path, buffer_bytes=65536, max_bytes=1 << 20)
    task.batch_size = 1000
    start(channel, 0)
    for _ in range(30):
        task.step(timeout=0)
    assert log.paused and TP in task.paused  # bounded staging (I7)
    assert task.current is not None
    staged_to = task.current.buffers[TP].next_offset
    # A takeover before the END: the new coordinator starts again at 0, and
    # the pause, which outlives the re-assign, is undone.
    second = start(channel, 0, epoch=2)
    task.step(timeout=0)
    assert log.assignments[-1] == [(TP[0], TP[1], 0)] and not log.paused and not task.paused
    for _ in range(30):
        task.step(timeout=0)
    end(channel, second, epoch=2)
    task.step()
    # Read again from 0, up to the same bound (where it paused again).
    assert status_range(channel) == (0, staged_to) and writer.written[second] == list(range(staged_to))


def progress_sent(channel: Channel) -> list[ControlEvent]:
    return [e for e in channel.sent if e.type is EventType.STAGING_PROGRESS]


def test_a_partition_that_fills_its_staging_asks_once_for_the_commits_end(tmp_path: Path) -> None:
    log, channel, writer = PartitionLog(end=50_000), Channel(), Writer()
    task = runner(log, channel, writer, tmp_path, buffer_bytes=65536, max_bytes=1 << 20)
    task.batch_size = 1000
    commit = start(channel, 0)
    task.step(timeout=0)
    assert not progress_sent(channel)  # without max-records, only a full partition speaks
    for _ in range(30):
        task.step(timeout=0)
    assert log.paused
    [asked] = progress_sent(channel)
    assert asked.commit_id == commit and asked.end_requested and asked.task_index == 0
    assert task.current is not None and asked.partitions[0].end == task.current.buffers[TP].next_offset


def test_with_max_records_it_reports_what_it_staged_until_the_coordinator_has_heard_enough(tmp_path: Path) -> None:
    log, channel, writer = PartitionLog(end=1000), Channel(), Writer()
    task = runner(log, channel, writer, tmp_path, buffer_bytes=1 << 20, **{"sinkadmin.commit.max-records": "25"})
    task.PROGRESS_SECONDS = 3600  # only the threshold speaks here
    commit = start(channel, 0)
    task.step(timeout=0)
    task.step(timeout=0)
    assert not progress_sent(channel)  # 20 records
    task.step(timeout=0)
    [reported] = progress_sent(channel)  # 30: this task alone holds max-records
    assert reported.commit_id == commit and not reported.end_requested
    assert [(p.start, p.end, p.records) for p in reported.partitions] == [(0, 30, 30)]
    for _ in range(5):
        task.step(timeout=0)
    assert len(progress_sent(channel)) == 1


def test_with_max_records_staged_counts_go_out_every_progress_period(tmp_path: Path) -> None:
    log, channel, writer = PartitionLog(end=40), Channel(), Writer()
    task = runner(log, channel, writer, tmp_path, buffer_bytes=1 << 20, **{"sinkadmin.commit.max-records": "10000"})
    task.PROGRESS_SECONDS = 0
    start(channel, 0)
    for _ in range(3):
        task.step(timeout=0)
    assert [e.partitions[0].records for e in progress_sent(channel)] == [10, 20, 30]
    task.PROGRESS_SECONDS = 3600
    task.step(timeout=0)
    assert len(progress_sent(channel)) == 3  # 40 staged, not told yet
    # The period passes while nothing more arrives: what is staged still goes out, once.
    task.PROGRESS_SECONDS = 0
    task.step(timeout=0)
    task.step(timeout=0)
    assert [e.partitions[0].records for e in progress_sent(channel)] == [10, 20, 30, 40]


class SlowWriter(Writer):
    """A writer that holds each write until the test lets it go (Spark's job, say), or fails it."""

    def __init__(self, fail: bool = False, error: Exception | None = None) -> None:
        super().__init__()
        self.release = threading.Event()
        self.error = error or (OSError("the warehouse is unreachable") if fail else None)

    def write(self, commit_id: uuid.UUID, staging_id: uuid.UUID, staged: Sequence[StagedPartition]) -> WriteResult:
        assert self.release.wait(10)
        if self.error is not None:
            raise self.error
        return super().write(commit_id, staging_id, staged)


def statuses(channel: Channel) -> list[ControlEvent]:
    return [e for e in channel.sent if e.type is EventType.WRITE_STATUS]


def step_until(task: TaskRunner, done: Callable[[], bool], seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        task.step(timeout=0.01)
        if done():
            return
        time.sleep(0.001)
    raise AssertionError("the task never got there")


def test_consuming_goes_on_while_a_commit_is_written(tmp_path: Path) -> None:
    log, channel, writer = PartitionLog(end=40), Channel(), SlowWriter()
    task = runner(log, channel, writer, tmp_path, buffer_bytes=1 << 20)
    task._write_executor = None  # the runner's own writing thread
    first = start(channel, 0)
    task.step()  # START, then 0..9
    end(channel, first)
    task.step()  # END: the write starts; fetching goes on for the next commit
    for _ in range(5):
        task.step(timeout=0.01)
    # The write still holds, and every record after the commit is staged for the next one.
    assert not statuses(channel)
    assert task.ahead[TP].start == 10 and task.ahead[TP].records == 30
    writer.release.set()
    step_until(task, lambda: bool(statuses(channel)))
    assert status_range(channel) == (0, 10) and writer.written[first] == list(range(10))
    start(channel, 10)
    task.step()
    assert len(log.assignments) == 1  # what was read ahead is adopted
    task.close()


def test_a_task_whose_write_is_under_way_says_so_every_period_for_that_commit(tmp_path: Path) -> None:
    log, channel, writer = PartitionLog(end=40), Channel(), SlowWriter()
    task = runner(log, channel, writer, tmp_path, buffer_bytes=1 << 20)
    task._write_executor = None  # the runner's own writing thread
    first = start(channel, 0)
    task.step()
    end(channel, first)
    task.WRITING_PROGRESS_SECONDS = 3600
    task.step()  # END: the write starts
    for _ in range(3):
        task.step(timeout=0.01)
    assert progress_sent(channel) == []  # (not within the period)
    task.WRITING_PROGRESS_SECONDS = 0
    task.step(timeout=0.01)
    task.step(timeout=0.01)
    said = progress_sent(channel)
    assert len(said) == 2 and {e.commit_id for e in said} == {first}
    assert [(p.start, p.end, p.records) for p in said[0].partitions] == [(0, 10, 10)]
    writer.release.set()
    step_until(task, lambda: bool(statuses(channel)))
    count = len(progress_sent(channel))
    task.step(timeout=0.01)
    assert len(progress_sent(channel)) == count  # (the write is over: nothing more to say)
    task.close()


def test_a_write_that_fails_drops_what_was_read_ahead_and_reports_a_retriable_error(tmp_path: Path) -> None:
    log, channel, writer = PartitionLog(end=40), Channel(), SlowWriter(fail=True)
    task = runner(log, channel, writer, tmp_path, buffer_bytes=1 << 20)
    task._write_executor = None
    first = start(channel, 0)
    task.step()
    end(channel, first)
    task.step()
    task.step(timeout=0.01)
    assert task.ahead[TP].records > 0
    writer.release.set()
    step_until(task, lambda: bool(statuses(channel)))
    status = channel.last(EventType.WRITE_STATUS)
    assert status.retriable and "the warehouse is unreachable" in (status.error or "") and not status.partitions
    assert task.ahead == {} and log.assignments[-1] == []  # nothing read ahead survives a failed write
    start(channel, 0)  # the coordinator retries from the ledger's offset
    task.step()
    assert log.assignments[-1] == [(TP[0], TP[1], 0)]
    task.close()


@pytest.mark.parametrize(
    ("error", "outage"),
    [(ConnectionRefusedError("[Errno 111] Connection refused"), True), (ValueError("bad partition spec"), False)],
)
def test_a_write_that_meets_an_outage_says_so_and_any_other_error_goes_with_its_trace(
    tmp_path: Path, error: Exception, outage: bool
) -> None:
    log, channel, writer = PartitionLog(end=10), Channel(), SlowWriter(error=error)
    writer.release.set()
    task = runner(log, channel, writer, tmp_path, buffer_bytes=1 << 20)
    first = start(channel, 0)
    task.step()
    end(channel, first)
    step_until(task, lambda: bool(statuses(channel)))
    status = channel.last(EventType.WRITE_STATUS)
    assert status.retriable and status.unavailable is outage
    if outage:
        assert status.error == "task 0: cannot reach the catalog: [Errno 111] Connection refused"
    else:
        assert (status.error or "").startswith("task 0 could not write its files: bad partition spec\nTraceback")
    task.close()


def test_a_write_the_coordinator_gave_up_on_is_not_queued_before_the_next_commits(tmp_path: Path) -> None:
    # Under load a write can outlast the commit timeout: the coordinator
    # aborts and starts again from the ledger. The write still running ends
    # unreported; one still queued is dropped, so the retry's write is never
    # behind a line of writes nothing will commit.
    log, channel, writer = PartitionLog(end=30), Channel(), SlowWriter()
    task = runner(log, channel, writer, tmp_path, buffer_bytes=1 << 20)
    task._write_executor = None  # the runner's own writing thread
    first = start(channel, 0)
    task.step()
    end(channel, first)
    task.step()  # the first write holds
    second = start(channel, 0)  # the first commit timed out
    task.step()
    assert task.writing is None and [w.commit.commit_id for w in task.superseded] == [first]
    end(channel, second)
    task.step()  # the second write queues behind the first
    third = start(channel, 0)  # and times out too
    task.step()
    assert [w.commit.commit_id for w in task.superseded] == [first]  # the second never began
    step_until(task, lambda: task.current is not None and task.current.buffers[TP].records == 30)
    end(channel, third)
    task.step()
    writer.release.set()
    step_until(task, lambda: bool(statuses(channel)))
    assert [s.commit_id for s in statuses(channel)] == [third]
    assert status_range(channel) == (0, 30)
    assert set(writer.written) == {first, third}
    step_until(task, lambda: not task.superseded)
    task.close()


# -- commits sized by their write (sinkadmin.commit.write-target-ms) ---------------------------


def test_a_task_that_staged_a_writes_worth_asks_for_the_end_and_writes_it_at_once(tmp_path: Path) -> None:
    log, channel, writer = PartitionLog(end=1000), Channel(), SlowWriter()
    task = runner(log, channel, writer, tmp_path, buffer_bytes=1 << 20, **{"sinkadmin.commit.write-target-ms": "1500"})
    task._write_executor = None  # the runner's own writing thread
    task.commit_bytes = 2000  # (a test record stages 72-73 bytes: three batches)
    commit = start(channel, 0)
    for _ in range(10):
        task.step(timeout=0)
    # Three batches of ten hold the commit's worth: the task asks once for
    # the END, and without waiting for it writes them (it takes no more for
    # this commit), reading ahead for the next one meanwhile, up to a
    # commit's worth again, without pausing (nothing prefetched is dropped).
    [asked] = progress_sent(channel)
    assert asked.commit_id == commit and asked.end_requested and asked.end_cause == "write-target"
    assert "what its writer writes in 1.5 s (sinkadmin.commit.write-target-ms)" in (asked.end_reason or "")
    assert task.writing is not None and task.writing.commit.commit_id == commit and task.current is None
    assert task.ahead[TP].start == 30 and log.position == 60 and log.pauses == 0
    writer.release.set()
    step_until(task, lambda: bool(statuses(channel)))
    # The status may come before the END (the coordinator counts it when the END is sent);
    # the END, once it comes, finds nothing more to write.
    assert status_range(channel) == (0, 30)
    end(channel, commit)
    task.step(timeout=0)
    assert len(statuses(channel)) == 1 and task.ahead[TP].start == 30
    task.close()


def test_in_a_catch_up_commit_a_task_says_once_that_it_read_its_partitions_to_their_ends(tmp_path: Path) -> None:
    log, channel, writer = PartitionLog(end=25), Channel(), Writer()
    task = runner(log, channel, writer, tmp_path, buffer_bytes=1 << 20)
    commit_id = uuid.uuid4()
    channel.inbox.append(ControlEvent(EventType.START_COMMIT, "c", commit_id, 1, offsets={TP: 0}, catch_up=True))
    task.step(timeout=0)  # 0..9
    task.step(timeout=0)  # 10..19
    assert not progress_sent(channel)  # the log ends at 25
    task.step(timeout=0)  # 20..24: read to the end
    [said] = progress_sent(channel)
    assert said.commit_id == commit_id and said.end_cause == "caught-up" and not said.end_requested
    assert said.partitions[0].end == 25 and said.end_reason == "task 0 read its partitions to their ends"
    # It says it once, and goes on taking what arrives until the END.
    log.end = 30
    task.step(timeout=0)
    task.step(timeout=0)
    assert len(progress_sent(channel)) == 1 and task.current is not None and task.current.buffers[TP].records == 30
    end(channel, commit_id)
    task.step(timeout=0)
    assert status_range(channel) == (0, 30)


def test_a_task_says_nothing_of_reaching_the_log_end_outside_a_catch_up_commit(tmp_path: Path) -> None:
    # Nor before a partition's first fetch, whose log end it does not know yet.
    log, channel, writer = PartitionLog(end=25), Channel(), Writer()
    task = runner(log, channel, writer, tmp_path, buffer_bytes=1 << 20)
    commit_id = start(channel, 0)
    for _ in range(5):
        task.step(timeout=0)
    assert task.current is not None and task.current.buffers[TP].records == 25 and not progress_sent(channel)
    end(channel, commit_id)
    task.step(timeout=0)
    log.get_watermark_offsets = lambda partition, **_: (-1001, -1001)  # type: ignore[method-assign]
    log.end = 25
    channel.inbox.append(ControlEvent(EventType.START_COMMIT, "c", uuid.uuid4(), 1, offsets={TP: 25}, catch_up=True))
    for _ in range(3):
        task.step(timeout=0)
    assert not progress_sent(channel)


def test_reading_ahead_stops_at_a_commits_worth_and_the_next_start_ends_at_once(tmp_path: Path) -> None:
    log, channel, writer = PartitionLog(end=1000), Channel(), SlowWriter()
    task = runner(log, channel, writer, tmp_path, buffer_bytes=1 << 20, **{"sinkadmin.commit.write-target-ms": "1"})
    task._write_executor = None  # the runner's own writing thread
    task.commit_bytes, task.MIN_COMMIT_BYTES = 1400, 1  # (two batches)
    first = start(channel, 0)
    for _ in range(3):
        task.step(timeout=0)
    end(channel, first)
    for _ in range(10):
        task.step(timeout=0.01)
    assert not statuses(channel)  # still writing
    assert task.ahead[TP].start == 20 and task.ahead[TP].records == 20 and log.position == 40 and log.pauses == 0
    writer.release.set()
    step_until(task, lambda: bool(statuses(channel)))
    # The write took far longer than its 1 ms target: the next commits are smaller.
    assert task.commit_bytes < 1400
    second = start(channel, 20)
    task.step(timeout=0)
    # What was read ahead is more than a commit's worth now: it asks for the
    # END and writes it at once (adopted: no seek back), reading ahead from where it ends.
    asked = channel.last(EventType.STAGING_PROGRESS)
    assert asked.commit_id == second and asked.end_requested and asked.end_cause == "write-target"
    assert task.writing is not None and task.writing.commit.commit_id == second
    assert len(log.assignments) == 1 and task.ahead[TP].start == 40
    end(channel, second)
    step_until(task, lambda: len(statuses(channel)) == 2)
    assert status_range(channel) == (20, 40)
    task.close()


def written(task: TaskRunner, staged_bytes: int, seconds: float, longest: float | None = None) -> None:
    """A write of ``staged_bytes`` in ``seconds``, its status sent, then its commit's ACK (with the longest write)."""
    commit_id = uuid.uuid4()
    task._learn_commit_size(commit_id, staged_bytes, seconds)
    task._handle(ControlEvent(EventType.ACK_COMMIT, "c", commit_id, 1, write_seconds=longest))


def test_the_commit_size_follows_how_long_writes_take(tmp_path: Path) -> None:
    log, channel, writer = PartitionLog(end=10), Channel(), Writer()
    task = runner(log, channel, writer, tmp_path, buffer_bytes=1 << 20, **{"sinkadmin.commit.write-target-ms": "2000"})
    # Until a write is timed: the assumed pace over the target.
    assert task.commit_bytes == TaskRunner.ASSUMED_WRITE_BYTES_PER_S * 2
    mib = 2**20
    written(task, 100 * mib, 4.0)  # twice the target: half as much next time
    assert task.commit_bytes == 50 * mib
    written(task, 50 * mib, 1.0)  # in half the target: twice as much
    assert task.commit_bytes == 100 * mib
    # A small commit written quickly (an idle task; mostly a Spark job's
    # fixed cost) says nothing of what a full one takes: the size stays.
    written(task, 1 * mib, 0.5)
    assert task.commit_bytes == 100 * mib
    # A write that took far too long (a Spark retry) shrinks it, to a floor.
    written(task, 100 * mib, 3600.0)
    assert task.commit_bytes == TaskRunner.MIN_COMMIT_BYTES
    written(task, 0, 5.0)  # (nothing staged: nothing learnt)
    assert task.commit_bytes == TaskRunner.MIN_COMMIT_BYTES


def test_a_write_whose_fixed_part_outlasts_the_target_is_not_split_into_ever_smaller_commits(tmp_path: Path) -> None:
    # A keyed write rewriting the files its keys touch, or a cluster that
    # takes seconds to schedule a job: 20 s whatever the commit holds, and
    # then 100 MiB/s. Sized by the ratio alone, each commit would shrink to
    # the floor and pay the 20 s for 1 MiB.
    log, channel, writer = PartitionLog(end=10), Channel(), Writer()
    task = runner(log, channel, writer, tmp_path, buffer_bytes=1 << 20, **{"sinkadmin.commit.write-target-ms": "2000"})
    mib = 2**20

    def write(size: int) -> None:
        written(task, size, 20 + size / (100 * mib))

    write(100 * mib)  # 21 s: no fixed part known yet, so scaled down by 2 / 21
    assert task.commit_bytes == round(100 * mib * 2 / 21)
    sizes = []
    for _ in range(6):
        write(task.commit_bytes)
        sizes.append(task.commit_bytes)
    # As long for a tenth of the size: the time is all fixed part, so the
    # commits grow (at most four times the last a step) until the time
    # follows the size, then hold what 20 s of the second part write: half
    # of each write is the fixed part.
    assert sizes[0] == 4 * round(100 * mib * 2 / 21)
    assert sizes == sorted(sizes)
    assert task.fixed_write_seconds == pytest.approx(20, abs=0.01)
    assert sizes[-2:] == [pytest.approx(2000 * mib, rel=0.01)] * 2


def test_a_write_whose_time_does_not_follow_its_size_makes_commits_larger(tmp_path: Path) -> None:
    log, channel, writer = PartitionLog(end=10), Channel(), Writer()
    task = runner(log, channel, writer, tmp_path, buffer_bytes=1 << 20, **{"sinkadmin.commit.write-target-ms": "2000"})
    mib = 2**20
    written(task, 100 * mib, 20.0)
    assert task.commit_bytes == 10 * mib
    written(task, 10 * mib, 19.5)  # a tenth of the size, as long: all fixed part
    assert task.fixed_write_seconds == 19.5
    assert task.commit_bytes == 40 * mib  # (at most four times the last commit)


def test_with_a_small_fixed_part_a_commits_write_takes_the_target(tmp_path: Path) -> None:
    log, channel, writer = PartitionLog(end=10), Channel(), Writer()
    task = runner(log, channel, writer, tmp_path, buffer_bytes=1 << 20, **{"sinkadmin.commit.write-target-ms": "2000"})
    mib = 2**20

    def seconds(size: int) -> float:
        return 0.4 + size / (200 * mib)

    for _ in range(6):  # from the assumed pace, under a backlog: each commit holds commit_bytes
        written(task, task.commit_bytes, seconds(task.commit_bytes))
    assert task.fixed_write_seconds == pytest.approx(0.4, abs=0.01)
    assert seconds(task.commit_bytes) == pytest.approx(2.0, abs=0.01)


def test_a_raise_waits_for_the_commits_ack(tmp_path: Path) -> None:
    log, channel, writer = PartitionLog(end=10), Channel(), Writer()
    task = runner(log, channel, writer, tmp_path, buffer_bytes=1 << 20, **{"sinkadmin.commit.write-target-ms": "2000"})
    mib = 2**20
    task.commit_bytes = 50 * mib
    commit_id = uuid.uuid4()
    task._learn_commit_size(commit_id, 50 * mib, 1.0)
    # Reading ahead meanwhile stays bounded by the present size.
    assert task.commit_bytes == 50 * mib
    task._handle(ControlEvent(EventType.ACK_COMMIT, "c", uuid.uuid4(), 1))  # another commit's
    assert task.commit_bytes == 50 * mib
    task._handle(ControlEvent(EventType.ACK_COMMIT, "c", commit_id, 1))
    assert task.commit_bytes == 100 * mib
    # A commit never acknowledged (aborted, or decided without it): no raise.
    task._learn_commit_size(uuid.uuid4(), 100 * mib, 1.0)
    task._learn_commit_size(uuid.uuid4(), 100 * mib, 2.0)
    task._handle(ControlEvent(EventType.ACK_COMMIT, "c", commit_id, 1))
    assert task.commit_bytes == 100 * mib
    # A write that took longer than the target shrinks the size at once.
    task._learn_commit_size(uuid.uuid4(), 100 * mib, 4.0)
    assert task.commit_bytes == 50 * mib


def test_a_commit_holds_what_it_stages_and_writes_in_the_target_beyond_its_read_ahead(tmp_path: Path) -> None:
    log, channel, writer = PartitionLog(end=10), Channel(), Writer()
    task = runner(log, channel, writer, tmp_path, buffer_bytes=1 << 20, **{"sinkadmin.commit.write-target-ms": "10000"})
    mib = 2**20
    task.commit_bytes = 600 * mib  # (just raised: its write of 600 MiB takes 10 s)
    # Until the task's staging pace is known: the whole size.
    assert task._commit_limit(300 * mib) == 600 * mib
    task.staging_bytes_per_s = 100 * mib
    # The read-ahead stopped at 300 MiB: the rest is staged inside the
    # cycle, at 100 MiB/s. 487.5 MiB: 1.875 s to stage the rest, 8.125 s to write.
    limit = task._commit_limit(300 * mib)
    assert limit == round(487.5 * mib)
    assert (limit - 300 * mib) / (100 * mib) + 10 * limit / (600 * mib) == pytest.approx(10)
    # A read-ahead of a whole size: all of it (written at once); none: what stages and writes in 10 s.
    assert task._commit_limit(700 * mib) == task._commit_limit(600 * mib) == 600 * mib
    assert task._commit_limit(0) == round(600 * mib * 1000 / 1600)


def test_a_start_after_a_raise_writes_what_it_stages_and_writes_in_the_target(tmp_path: Path) -> None:
    log, channel, writer = PartitionLog(end=1000), Channel(), SlowWriter()
    task = runner(log, channel, writer, tmp_path, buffer_bytes=1 << 20, **{"sinkadmin.commit.write-target-ms": "1500"})
    task._write_executor = None  # the runner's own writing thread
    task.commit_bytes, task.MIN_COMMIT_BYTES = 2000, 1  # (three batches of ten: a test record stages 72-73 bytes)
    first = start(channel, 0)
    step_until(task, lambda: task.writing is not None)
    # The first commit reached its worth with 970 records waiting: that says how fast the task stages.
    assert task.staging_bytes_per_s is not None
    task.staging_bytes_per_s = None
    # So does the read-ahead, while the first commit is written.
    step_until(task, lambda: task.staging_bytes_per_s is not None)
    assert task.ahead[TP].records == 30 and log.position == 60
    writer.release.set()
    end(channel, first)
    step_until(task, lambda: bool(statuses(channel)))
    assert task.ahead[TP].records == 30
    # The ACK raises the size, and the next START comes right after it.
    task.commit_bytes = 4000
    task.staging_bytes_per_s = 2000 / 1.5  # (so the test need not depend on the pace of this machine)
    second = start(channel, 30)
    # Staging all the read-ahead lacks (~1800 bytes) would take most of the target, and
    # writing 4000 all of it: the commit holds what it stages and writes in
    # the target, and asks for its END on that.
    step_until(task, lambda: task.writing is not None and task.writing.commit.commit_id == second)
    commit = task.writing.commit  # type: ignore[union-attr]
    adopted = commit.adopted_bytes
    assert commit.adopted_records == 30 and len(log.assignments) == 1  # (adopted: no seek)
    assert adopted < commit.limit < 4000 and commit.limit == round(4000 * (2000 + adopted) / (4000 + 2000))
    asked = [e for e in progress_sent(channel) if e.commit_id == second and e.end_requested]
    assert len(asked) == 1 and "what it stages and writes in 1.5 s" in (asked[0].end_reason or "")
    assert commit.limit <= sum(b.staged_bytes for b in commit.buffers.values()) < commit.limit + 800
    task.close()


def test_the_staging_pace_is_not_learnt_from_records_that_trickle_in(tmp_path: Path) -> None:
    # The read-ahead fills only as fast as records arrive: nothing is waiting
    # behind it, and sized by that pace a commit would only be smaller than need be.
    log, channel, writer = PartitionLog(end=30), Channel(), SlowWriter()
    task = runner(log, channel, writer, tmp_path, buffer_bytes=1 << 20, **{"sinkadmin.commit.write-target-ms": "1500"})
    task._write_executor = None
    task.commit_bytes, task.MIN_COMMIT_BYTES = 2000, 1
    start(channel, 0)
    step_until(task, lambda: task.writing is not None)
    for end_offset in (40, 50, 60):  # arriving while the first commit is written
        log.end = end_offset
        step_until(task, lambda: log.position == log.end)
    assert task._ahead_full and task.ahead[TP].records == 30
    assert task.staging_bytes_per_s is None
    writer.release.set()
    task.close()


def test_tasks_whose_jobs_queue_in_spark_size_by_the_commits_longest_write(tmp_path: Path) -> None:
    # Two tasks' full commits of 100 MiB each; Spark runs the first job
    # submitted alone (1 s), the other after it (2.5 s in all): the commit
    # waited 2.5 s for a 2 s target.
    first, second = (
        runner(
            PartitionLog(end=10),
            Channel(),
            Writer(),
            tmp_path / name,
            buffer_bytes=1 << 20,
            **{"sinkadmin.commit.write-target-ms": "2000"},
        )
        for name in ("a", "b")
    )
    mib = 2**20
    for task, seconds in ((first, 1.0), (second, 2.5)):
        task.commit_bytes = 100 * mib
        written(task, 100 * mib, seconds, longest=2.5)
    # Sized by its own write alone, the first would stage twice as much (all
    # of Spark for 2 s); by the commit's longest write, both hold 80 MiB: together
    # what Spark wrote in 2 s, whichever job goes first next.
    assert first.commit_bytes == second.commit_bytes == 80 * mib
    # A commit that did not hold a full size (an idle task's) is not bounded by
    # the others' writes: its write says little of a full one, either way.
    written(first, 1 * mib, 0.3, longest=3.0)
    assert first.commit_bytes == 80 * mib


def test_the_write_target_is_the_interval_and_at_least_one_and_a_half_seconds_unless_set() -> None:
    def target(**config: str) -> int:
        return SinkConfig.parse(
            {"connector.class": "iceberg", "topics": "t", "iceberg.tables": "db.t", **config}
        ).commit_write_target_ms

    assert target(**{"iceberg.control.commit.interval-ms": "1000"}) == 1500
    assert target(**{"iceberg.control.commit.interval-ms": "2000"}) == 2000
    assert target(**{"iceberg.control.commit.interval-ms": "10000"}) == 10000
    assert target(**{"iceberg.control.commit.interval-ms": "1000", "sinkadmin.commit.write-target-ms": "500"}) == 500


def test_end_offsets_between_fetches_are_asked_of_a_consumer_that_does_not_fetch(tmp_path: Path) -> None:
    # (Asked of the fetching consumer, each request waited behind its long-poll fetch.)
    log, channel, writer, watermarks = PartitionLog(end=10), Channel(), Writer(), PartitionLog(end=70)
    task = runner(log, channel, writer, tmp_path, buffer_bytes=1 << 20)
    task.watermarks = watermarks  # type: ignore[assignment]
    task.refresh_end_offsets()
    assert task.end_offsets == {TP: 70}
    task.close()


def test_end_offsets_are_asked_only_of_partitions_no_fetch_told_of_lately(tmp_path: Path) -> None:
    # Each question is a round trip the task's loop waits for; every fetch response has the figure.
    log, channel, writer, watermarks = PartitionLog(end=50_000), Channel(), Writer(), PartitionLog(end=60_000)
    task = read_ahead_until_paused(log, channel, writer, tmp_path)
    task.watermarks = watermarks  # type: ignore[assignment]
    assert TP in task.paused and task.end_offsets == {TP: 50_000}
    task.refresh_end_offsets()
    assert watermarks.asked == 0  # the fetch that filled it told of it just now
    task._end_offset_at[TP] -= task.END_OFFSET_REFRESH_SECONDS  # time passes; paused, nothing fetched tells
    task.step(timeout=0)
    task.refresh_end_offsets()
    assert watermarks.asked == 1 and task.end_offsets == {TP: 60_000}
    task.step(timeout=0)
    task.refresh_end_offsets()
    assert watermarks.asked == 1 and task.end_offsets == {TP: 60_000}  # once a period
    task.close()
