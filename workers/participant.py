"""A worker task: the participants of the partitions assigned to it.

Each participant stages the records of its partition from the offset the
coordinator's START_COMMIT names (the ledger's offset, not a consumer
group's), decoding them into data files as they arrive (the Arrow writer) or
having Spark decode them at END_COMMIT, then reports a WRITE_STATUS. All
partitions of a task share one Kafka consumer.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
import traceback
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from itertools import groupby
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from connectors.config import SinkConfig
from workers.converters import AvroValueDecoder, RegistryAvroDecoder, value_decoder
from workers.events import ControlEvent, ControlPort, EventType, PartitionStatus
from workers.failpoints import failpoint
from workers.kafka import OUT_OF_RANGE_ERRORS
from workers.staging import ChunkSink, RecordChunk, StagedPartition, StagingBuffer, clear_directory, staged_headers
from workers.transformed import RecordTransformer
from workers.writes import WriteRefused, WriteResult

if TYPE_CHECKING:
    from workers.sink import VersionedWriter

log = logging.getLogger(__name__)

TP = tuple[str, int]


class TaskState(StrEnum):
    WAITING = "waiting"
    STAGING = "staging"
    WRITING = "writing"


class WritePort(Protocol):
    def sink(self, staging_id: uuid.UUID, topic: str, partition: int, start: int, directory: Path) -> ChunkSink:
        """Where a partition's buffered records go as they are staged (``staging_id``: see ``_Commit``)."""
        ...

    def write(self, commit_id: uuid.UUID, staging_id: uuid.UUID, staged: Sequence[StagedPartition]) -> WriteResult:
        """Data files of the commit for the staged records, and the records that could not be converted."""
        ...

    def unavailable(self, exc: BaseException) -> str | None:
        """Why a service the writes need cannot be reached, if that is what ``exc`` says (an outage)."""
        ...

    def warm_up(self) -> None:
        """Be ready for the first write before it comes (open the store, join Spark); run on a thread of
        its own as the task starts. A failure here is met again, and reported, by the first write."""
        ...

    def close(self) -> None:
        """Release what the writer holds (a catalog's connections): a worker process outlives its tasks."""
        ...


class DeadLetterPort(Protocol):
    def send(self, bad: Sequence[Any], staged_files: dict[TP, Path]) -> int: ...


@dataclass
class _Commit:
    commit_id: uuid.UUID
    epoch: int
    buffers: dict[TP, StagingBuffer]
    # Names the sinks' work (staging directory, temporary files): records are
    # staged before their commit is known when they were read ahead.
    staging_id: uuid.UUID
    # What this commit stages at most, in staged bytes (TaskRunner._commit_limit).
    limit: int
    # What it adopted of the read-ahead at its START, and when that was:
    # the rest is staged inside the commit's cycle.
    adopted_bytes: int = 0
    adopted_records: int = 0
    began: float = field(default_factory=time.monotonic)
    # Set when staging failed (a chunk could not be written): the commit
    # stops fetching and its WRITE_STATUS carries this error.
    error: str | None = None
    # The error is an outage of a service the writes need (the catalog).
    unavailable: bool = False
    # What the coordinator was last told of this commit (STAGING_PROGRESS).
    reported_records: int = 0
    reported_at: float = field(default_factory=time.monotonic)
    reported_full: bool = False
    # A catch-up commit (START_COMMIT's catch_up: the previous one ended on a
    # backlog): the task says once when it has read its partitions to their ends.
    catch_up: bool = False
    reported_caught_up: bool = False


@dataclass
class _Write:
    """A commit whose staged records are being written (by Spark) while the task reads ahead."""

    commit: _Commit
    staged: list[StagedPartition]
    began: float
    # The read-ahead started at this commit's END (dropped if the write fails).
    ahead_id: uuid.UUID | None
    result: Future[WriteResult] | None = None
    # When the coordinator was last told that this write is still under way.
    said_at: float = 0.0


@dataclass(frozen=True)
class _Sizing:
    """What a commit's write said of the next commits' size, applied once the commit is acknowledged."""

    commit_id: uuid.UUID
    staged_bytes: int
    seconds: float
    # The commit held all this task could stage for it (its ``limit``): its
    # write was as large as the size it tests.
    full: bool
    # The size the write itself asks for, where it is larger than the present one.
    raise_to: int | None


class TaskRunner:
    FETCH_WAIT_SECONDS = 0.05
    # Until a write has been timed, a task assumes its writer this fast:
    # well below what a Spark core was measured to write, so the first
    # commit (which also starts Spark's Python workers) is small rather than
    # late; each write then corrects it. (Assumed slower still, bounded by
    # the commits' longest writes, the first records took more commits than
    # they needed: docs/benchmarks.md, "Measurements behind the runtime's
    # design".)
    ASSUMED_WRITE_BYTES_PER_S = 32 * 2**20
    # However slow a write was (a Spark retry, a pause), a commit may stage
    # this much: the next writes correct it in a few commits.
    MIN_COMMIT_BYTES = 2**20
    # The writes (staged bytes, seconds) the fixed part of a write's time is
    # reckoned from, and how well their times must follow their sizes for it.
    WRITES_REMEMBERED = 8
    LINE_FIT = 0.9
    # A commit may stage at most this many times what the last write held.
    MAX_GROWTH = 4
    # How often staged counts go to the coordinator while it counts them
    # (sinkadmin.commit.max-records).
    PROGRESS_SECONDS = 0.5

    def __init__(
        self,
        *,
        connector: str,
        task_index: int,
        task_epoch: int,
        config: SinkConfig,
        partitions: Sequence[TP],
        consumer: Consumer,
        channel: ControlPort,
        writer: WritePort,
        dead_letters: DeadLetterPort | None,
        staging_dir: Path,
        on_progress: Callable[[TaskRunner], None] | None = None,
        batch_size: int = 5000,
        write_executor: Executor | None = None,
        watermarks: Consumer | None = None,
        versioned_tables: bool = False,
    ) -> None:
        self.connector = connector
        # The writer is a VersionedWriter (Plugin.versioned_tables): it is told what each START says
        # the coordinator's commits left the tables at.
        self.versioned_tables = versioned_tables
        self.task_index = task_index
        self.task_epoch = task_epoch
        self.config = config
        self.partitions = set(partitions)
        self.consumer = consumer
        # Where end offsets are asked while not fetching: a consumer that never
        # fetches, as the one above queues the request behind its waiting
        # fetch, each partition's answer after it (see workers.kafka.ControlChannel;
        # docs/benchmarks.md, "Measurements behind the runtime's design").
        self.watermarks = watermarks or consumer
        self.channel = channel
        self.writer = writer
        self.dead_letters = dead_letters
        self.staging_dir = staging_dir
        self.on_progress = on_progress
        self.batch_size = batch_size
        self.state = TaskState.WAITING
        self.runner_id = uuid.uuid4().hex[:8]
        self.current: _Commit | None = None
        self.highest_epoch = 0
        self.paused: set[TP] = set()
        # Records read since the last END_COMMIT, for the next commit: the
        # consumer keeps fetching and the sinks keep decoding while the
        # coordinator commits, and a START whose offsets match adopts them
        # (under ``ahead_id``) instead of seeking back. Bounded as any
        # staging is (I7); nothing of it is in a table before a START adopts it.
        self.ahead: dict[TP, StagingBuffer] = {}
        self.ahead_id: uuid.UUID | None = None
        self.end_offsets: dict[TP, int] = {}
        # When each partition's end offset was last learnt (monotonic), from a
        # fetch response or by asking the broker (refresh_end_offsets).
        self._end_offset_at: dict[TP, float] = {}
        # A commit's files are written on another thread (Spark's job is
        # mostly waiting), so that consuming for the next commit never
        # waits for it; one at a time, in commit order.
        self.writing: _Write | None = None
        # Writes still running for commits the coordinator decided without
        # them (see _supersede_write); their staging goes when they end.
        self.superseded: list[_Write] = []
        self._write_executor = write_executor
        # Values that are not plain JSON to begin with (Avro, the wire format) become JSON as they are staged.
        self._decoder = value_decoder(config)
        self._avro_envelopes = config.avro_envelopes
        # Then the connector's Kafka Connect transforms run over them (workers.transformed).
        # (A chain the sink's decoders apply to columns is not the tasks': SinkConfig.staged_transforms.)
        staged = config.staged_transforms
        self._transformer = RecordTransformer(config, staged) if staged is not None else None
        # Headers only for the dead-letter topic and the transforms (``SinkConfig.stages_headers`` says why).
        self._stages_headers = config.stages_headers
        # How much one commit of this task stages at most, in staged bytes:
        # what its writer writes in the write target, as its last writes went
        # (see _learn_commit_size). Under a backlog each commit then holds
        # about that, so its write, and its latency, stay bounded.
        self.write_target_s = config.commit_write_target_ms / 1000
        self.commit_bytes = max(self.MIN_COMMIT_BYTES, round(self.ASSUMED_WRITE_BYTES_PER_S * self.write_target_s))
        self._writes: deque[tuple[int, float]] = deque(maxlen=self.WRITES_REMEMBERED)
        self.fixed_write_seconds = 0.0
        self._sizing: _Sizing | None = None
        # How fast this task stages under a backlog (bytes a second), as its
        # last staging that reached a commit's worth with as much again
        # waiting went (_learn_staging_pace); None until then.
        self.staging_bytes_per_s: float | None = None
        # When the present read-ahead began (at a write's start), and whether it has held a commit's worth.
        self._ahead_began = 0.0
        self._ahead_full = False

    def step(self, timeout: float = 0.2) -> bool:
        if self._wants_records():
            wait = 0.0
        else:
            wait = min(timeout, self.FETCH_WAIT_SECONDS) if self.writing is not None else timeout
        events = self.channel.poll(wait, self.connector)
        for _, event in events:
            self._handle(event)
        writing = self.writing
        if writing is not None and writing.result is not None:
            if writing.result.done():
                self._report(writing)
            else:
                self._still_writing(writing)
        if self.superseded:
            self._forget_superseded()
        if self._wants_records():
            return self._consume(timeout) or bool(events)
        return bool(events)

    def _wants_records(self) -> bool:
        """Whether to fetch: for the open commit, or ahead of the next, until it holds a commit's worth.

        (Once it does, what librdkafka has fetched waits in its queue, up to its bound.)
        """
        current = self.current
        if current is not None:
            return current.error is None and not _holds(current.buffers, current.limit)
        return bool(self.ahead) and not _holds(self.ahead, self.commit_bytes)

    def _commit_limit(self, adopted_bytes: int) -> int:
        """What a commit that starts holding ``adopted_bytes`` of read-ahead may stage: ``commit_bytes``,
        less what could not be staged and written in the write target.

        ``commit_bytes`` is what the writer writes in the target; what the
        read-ahead did not cover is staged after the START, inside the
        commit's cycle. That is nothing under a steady backlog (the next
        commit is read ahead while this one is written), but not after a
        raise: the read-ahead stopped at the old size, and the ACK that
        raises it comes just before the next START. Growing by half took
        seconds to stage before a write that itself took most of the target:
        a cycle well past the target. So the commit holds the size ``s``
        whose rest, staged at the task's pace ``r`` (``staging_bytes_per_s``),
        and whose write, ``target * s / commit_bytes``, together take the
        target: ``(s - adopted) / r + target * s / commit_bytes = target``.
        It grows to ``commit_bytes`` over the next commits, whose read-ahead
        is bounded by that (docs/benchmarks.md, "Measurements behind the
        runtime's design").
        """
        size, pace = self.commit_bytes, self.staging_bytes_per_s
        if pace is None or adopted_bytes >= size:
            return size
        reach = pace * self.write_target_s  # what the task stages in the target
        return max(min(size, self.MIN_COMMIT_BYTES), round(size * (reach + adopted_bytes) / (size + reach)))

    def _learn_staging_pace(self, began: float, buffers: dict[TP, StagingBuffer], since: tuple[int, int]) -> None:
        """How fast this task stages, from a staging that began at ``began`` holding ``since``
        (bytes, records) and now holds a commit's worth in ``buffers``.

        Only a staging that read a backlog says it: one that waited for
        records to arrive says how fast they come, and a commit sized by
        that would only be smaller than need be. So it counts when as many
        records again wait in the task's partitions, and when it staged a
        quarter of its size or more (less is mostly the wait for the first
        fetch after the START).
        """
        held = _staged_bytes(buffers)
        staged_bytes = held - since[0]
        staged_records = sum(b.records for b in buffers.values()) - since[1]
        seconds = time.monotonic() - began
        if staged_records <= 0 or seconds <= 0 or 4 * staged_bytes < held:
            return
        waiting = sum(max(0, self.end_offsets.get(tp, b.next_offset) - b.next_offset) for tp, b in buffers.items())
        if waiting >= staged_records:
            self.staging_bytes_per_s = staged_bytes / seconds

    def _learn_commit_size(
        self, commit_id: uuid.UUID, staged_bytes: int, seconds: float, limit: int | None = None
    ) -> None:
        """Size the next commits by how long this one's write took.

        A write of ``staged_bytes`` that took ``seconds`` says the writer
        writes ``staged_bytes * target / seconds`` in the write target: the
        next commits hold that. A write that took the target or longer sets
        the size (down); a shorter one only raises it (at most MAX_GROWTH
        times what it held): an idle task's small commit, mostly a Spark
        job's fixed cost, says little of a full one, and would otherwise
        shrink the size the backlog that follows starts with. As Spark
        Streaming's backpressure sizes a batch by the last batches'
        processing times. A raise waits for the commit's ACK, which may
        bound it (``_acknowledged``).

        That rule's fixed point is the size whose write takes the target,
        whatever a write's fixed part (a job's start), as long as that part
        is shorter than the target; a longer one (a busy cluster's
        scheduling, a keyed write's rewrite of the files its keys touch)
        would shrink the commits to nothing, each paying it whole. So the
        fixed part is reckoned from the recent writes (the intercept of
        their times over their sizes, once those differ enough to tell and
        fit a line; all of the time when it does not follow the size), and
        once it is more than half the target a commit holds what the rest
        of a write does in as long as the fixed part takes: half of each
        write is then the fixed part.
        """
        if staged_bytes <= 0:
            return
        full = staged_bytes >= (self.commit_bytes if limit is None else limit)
        self._writes.append((staged_bytes, seconds))
        sizes = [size for size, _ in self._writes]
        times = [t for _, t in self._writes]
        slope = 0.0
        # Only a line that fits: two tasks' jobs share Spark, and whichever
        # went first wrote faster; a fixed part read from that scatter would
        # make the next short write look far faster than it was.
        if max(sizes) >= 1.5 * min(sizes):
            if max(times) <= 1.25 * min(times):
                # Sizes half again apart, times within a quarter: the time is the fixed part.
                self.fixed_write_seconds = min(times)
            elif statistics.correlation(sizes, times) >= self.LINE_FIT:
                slope, intercept = statistics.linear_regression(sizes, times)
                self.fixed_write_seconds = min(max(intercept, 0.0), *times)
        size = self._size_for(staged_bytes, seconds, slope)
        raise_to: int | None = None
        if size > self.commit_bytes:
            raise_to = size  # (at the ACK)
        elif seconds >= self.write_target_s:
            self.commit_bytes = max(self.MIN_COMMIT_BYTES, size)
        self._sizing = _Sizing(commit_id, staged_bytes, seconds, full, raise_to)

    def _size_for(self, staged_bytes: int, seconds: float, slope: float = 0.0) -> int:
        """What a commit may stage, after a write of ``staged_bytes`` in ``seconds`` (see _learn_commit_size)."""
        target = self.write_target_s
        # (Below half the target the plain ratio holds: see above.)
        fixed = self.fixed_write_seconds if self.fixed_write_seconds > target / 2 else 0.0
        # Bytes a second of the part that follows the size: this write's
        # (as things are now), unless its time was nearly all fixed part and
        # its own rest is lost in the noise: then the recent writes' slope.
        rest = seconds - fixed
        if rest >= 0.1 * seconds or slope <= 0:
            bytes_per_second = staged_bytes / max(rest, 0.1 * seconds, 1e-3)
        else:
            bytes_per_second = 1 / slope
        # (Up by at most MAX_GROWTH a write: one fast write, the other task's
        # job over early, say, does not make the next commit huge.)
        return min(round(bytes_per_second * max(target - fixed, fixed)), self.MAX_GROWTH * staged_bytes)

    def _acknowledged(self, event: ControlEvent) -> None:
        """ACK_COMMIT of this task's last write: apply what it said of the size, bounded by the commit's longest write.

        The tasks' jobs share Spark, and in its FIFO order the job submitted
        first runs alone while the other waits: the first task's write
        says Spark is as fast as it is alone, and sized by it alone its next
        commit held a whole Spark's worth, so the later write ran well past
        the target, and the commit cycle's p99 with it (docs/benchmarks.md,
        "Measurements behind the runtime's design").
        The commit waited for its longest write (``write_seconds``, from the
        coordinator); a task whose commit was full sizes by that instead
        when it is longer than its own, so the tasks' commits together hold
        what Spark writes in the target, whichever job goes first. A raise
        waited for this, and not only the next write: what the task reads
        ahead meanwhile is bounded by the size, and a raise applied at once
        would have filled the next commit before the ACK could bound it.
        """
        sizing = self._sizing
        if sizing is None or sizing.commit_id != event.commit_id:
            return
        self._sizing = None
        size = sizing.raise_to or self.commit_bytes
        longest = event.write_seconds
        if sizing.full and longest is not None and longest > sizing.seconds:
            size = min(size, self._size_for(sizing.staged_bytes, longest))
        self.commit_bytes = max(self.MIN_COMMIT_BYTES, size)

    # -- control events ---------------------------------------------------------------

    def _handle(self, event: ControlEvent) -> None:
        if event.epoch < self.highest_epoch:
            return  # from a coordinator that has been replaced
        self.highest_epoch = event.epoch
        if event.type is EventType.START_COMMIT:
            current = self.current
            if current is not None and current.commit_id == event.commit_id and current.epoch == event.epoch:
                return  # the same START again (a control producer's retry)
            self._begin(event)
        elif event.type is EventType.END_COMMIT:
            current = self.current
            if current is not None and current.commit_id == event.commit_id and current.epoch == event.epoch:
                self._finish(current)
        elif event.type is EventType.ACK_COMMIT:
            self._acknowledged(event)

    def _begin(self, event: ControlEvent) -> None:
        if self.current is not None:
            # A new START supersedes an unfinished commit (the coordinator
            # was replaced): its staged records are dropped and re-read.
            self._discard(self.current)
        if self.writing is not None:
            self._supersede_write(self.writing)
        if self.versioned_tables:
            cast("VersionedWriter", self.writer).tables_committed(event.table_versions)
        ahead, self.ahead = self.ahead, {}
        staging_id, self.ahead_id = self.ahead_id or event.commit_id, None
        mine = {tp: offset for tp, offset in event.offsets.items() if tp in self.partitions}
        buffers: dict[TP, StagingBuffer] = {}
        for tp, buffer in ahead.items():
            if mine.get(tp) == buffer.start:
                # The ledger's offset is where this buffer starts: what was
                # read ahead is exactly the start of this commit.
                buffers[tp] = buffer
            else:
                buffer.discard()  # (an abort, a takeover, a timeout): read again
        if not mine:
            clear_directory(self._staging_for(staging_id))
            self.current = None
            self.state = TaskState.WAITING
            self.consumer.assign([])
            return
        seek = set(ahead) != set(mine) or len(buffers) != len(mine)
        adopted_bytes, adopted_records = _staged_bytes(buffers), sum(b.records for b in buffers.values())
        directory = self._staging_for(staging_id)
        for tp, offset in mine.items():
            if tp not in buffers:
                buffers[tp] = StagingBuffer(*tp, offset, self.writer.sink(staging_id, *tp, offset, directory))
        self.current = _Commit(
            event.commit_id,
            event.epoch,
            buffers,
            staging_id,
            self._commit_limit(adopted_bytes),
            adopted_bytes,
            adopted_records,
            catch_up=event.catch_up,
        )
        log.debug(
            "%s task %d: commit %s: %.1f MiB read ahead, stages up to %.1f MiB (size %.1f MiB, staging pace %s)",
            self.connector,
            self.task_index,
            event.commit_id,
            adopted_bytes / 2**20,
            self.current.limit / 2**20,
            self.commit_bytes / 2**20,
            "unknown" if self.staging_bytes_per_s is None else f"{self.staging_bytes_per_s / 2**20:.0f} MiB/s",
        )
        if seek:
            # Re-assigning with explicit offsets is the seek: the ledger is the truth.
            self.consumer.assign([TopicPartition(t, p, b.next_offset) for (t, p), b in sorted(buffers.items())])
        # A pause outlives a re-assign (librdkafka keeps it per partition;
        # tests/integration/test_consumer_seek.py), so it is undone here,
        # except where an adopted buffer already holds all this commit may stage.
        max_bytes = self.config.staging_max_bytes
        resumed = {tp for tp in self.paused & buffers.keys() if buffers[tp].staged_bytes < max_bytes}
        if resumed:
            self.consumer.resume([TopicPartition(*tp) for tp in sorted(resumed)])
            self.paused -= resumed
        self.state = TaskState.STAGING
        self._staged(self.current)  # what was adopted may already be enough

    def _consume(self, timeout: float) -> bool:
        current = self.current
        buffers = current.buffers if current is not None else self.ahead
        # consume() returns early only when the batch fills: when records
        # trickle in, a short wait keeps control events (END, START) prompt.
        messages = self.consumer.consume(num_messages=self.batch_size, timeout=min(timeout, self.FETCH_WAIT_SECONDS))
        try:
            for tp, reason in self._stage(buffers, messages):
                self._out_of_range(tp, reason)
        except Exception as exc:
            if current is None:
                # Reading ahead (decoding met a registry outage, say): drop
                # what was read ahead; the next START reads it again, inside
                # a commit, whose status then carries the error.
                log.warning("%s task %d: reading ahead stopped: %s", self.connector, self.task_index, exc)
                self._drop_ahead()
                self.consumer.assign([])
                return True
            # Staging failed (storage, the catalog, the Schema Registry...):
            # stop fetching; the commit's status reports it and the
            # coordinator retries.
            log.exception("%s task %d: staging commit %s failed", self.connector, self.task_index, current.commit_id)
            current.error, current.unavailable = self._failure(exc)
            self.consumer.assign([])
            return True
        if current is not None:
            self._staged(current)
        elif messages and not self._ahead_full and _holds(self.ahead, self.commit_bytes):
            self._ahead_full = True
            self._learn_staging_pace(self._ahead_began, self.ahead, (0, 0))
        if messages:
            now = time.monotonic()
            for tp in buffers.keys() - self.paused:
                # (A paused partition is not fetched: its cached end is as old
                # as the pause, and older than what refresh_end_offsets asks.)
                _, high = self.consumer.get_watermark_offsets(TopicPartition(*tp), cached=True)
                if high >= 0:
                    self.end_offsets[tp] = high
                    self._end_offset_at[tp] = now
        if self.on_progress is not None:
            self.on_progress(self)
        return bool(messages)

    def _out_of_range(self, tp: TP, reason: str) -> None:
        """The partition's log no longer has the offset it is read from (retention, a recreated topic).

        The open commit is failed with the reason; its abort has the
        coordinator check the ledger's offsets against the logs, where the
        connector's policy decides (``workers.coordinator.check_offsets``).
        Read ahead of a commit, the partition's buffer is dropped: the next
        START seeks it again and meets the same error inside a commit.
        """
        current = self.current
        if current is not None and tp in current.buffers:
            if current.error is None:
                offset = current.buffers[tp].next_offset
                current.error = f"task {self.task_index}: {tp[0]}/{tp[1]}: offset {offset} is out of range: {reason}"
                log.warning("%s %s", self.connector, current.error)
            self.consumer.assign([])
        elif tp in self.ahead:
            self.ahead.pop(tp).discard()

    def _stage(self, buffers: dict[TP, StagingBuffer], messages: list[Any]) -> list[tuple[TP, str]]:
        """Stage what was fetched; returns the partitions whose offset is out of range, with the broker's reason."""
        max_bytes = self.config.staging_max_bytes
        fetched = []
        out_of_range: list[tuple[TP, str]] = []
        for message in messages:
            error = message.error()
            if error is None:
                fetched.append(message)
            elif error.code() in OUT_OF_RANGE_ERRORS:
                out_of_range.append(((message.topic(), message.partition()), error.str()))
            elif error.code() != KafkaError._PARTITION_EOF:
                log.warning("%s task %d: consumer error %s", self.connector, self.task_index, error)
        # A batch holds runs of one partition each (librdkafka hands over
        # fetched message sets whole): each run is staged at once.
        for tp, group in groupby(fetched, key=_topic_partition):
            buffer = buffers.get(tp)
            if buffer is None:
                continue  # not ours
            run = list(group)
            if run[0].offset() < buffer.next_offset:
                run = [m for m in run if m.offset() >= buffer.next_offset]  # fetched before the seek
                if not run:
                    continue
            chunk = self._chunk_of(tp, run)
            dropped = 0
            if self._transformer is not None:
                chunk, dropped = self._transformer.apply(chunk)
            buffer.extend(chunk)
            if dropped:
                # (What the transforms dropped is counted as skipped: the staged range still covers it.)
                buffer.skip(dropped, run[-1].offset() + 1)
            if buffer.staged_bytes >= max_bytes and tp not in self.paused:
                # Bounded staging (I7): stop fetching this partition until
                # the commit (or, reading ahead, until the next START). A
                # pause drops what librdkafka prefetched for the partition
                # (tests/integration/test_consumer_seek.py), so nothing else
                # pauses.
                self.consumer.pause([TopicPartition(*tp)])
                self.paused.add(tp)
        return out_of_range

    def _chunk_of(self, tp: TP, run: list[Any]) -> RecordChunk:
        values = [m.value() for m in run]
        errors: list[str | None] = [None] * len(run)
        if self._decoder is not None:
            # (Avro for the transforms: in the envelope of its Connect schema, as Kafka Connect hands it to them.)
            decoder = self._decoder
            decode = decoder.to_json
            if self._avro_envelopes and isinstance(decoder, AvroValueDecoder | RegistryAvroDecoder):
                decode = decoder.to_envelope
            for i, value in enumerate(values):
                if value is not None:
                    try:
                        values[i] = decode(value)
                    except ValueError as exc:
                        errors[i] = str(exc)
        stamps: list[int] = [m.timestamp()[1] for m in run]
        # -1: the record has no timestamp.
        timestamps = [t if t >= 0 else None for t in stamps] if min(stamps) < 0 else cast(list[int | None], stamps)
        headers: list[Any] = [None] * len(run)
        if self._stages_headers:
            headers = [m.headers() for m in run]
            if any(headers):
                headers = [staged_headers(h) for h in headers]
        return RecordChunk(
            tp[0], tp[1], [m.offset() for m in run], timestamps, [m.key() for m in run], values, headers, errors
        )

    def _staged(self, current: _Commit) -> None:
        """After records were staged for (or adopted by) ``current``: tell the coordinator what
        it holds, and write it at once if it holds all this task may stage for it.

        Holding ``commit_bytes``, a task takes no more records for the commit
        whatever comes (``_wants_records``), so what it writes is settled;
        its write need not wait for the END its request brings back, two
        hops on the control topic (under a backlog at a short interval,
        writing at once shortened the commit cycle's p50: docs/benchmarks.md,
        "Measurements behind the runtime's design"). The commit still
        ends at the coordinator's END: the other tasks stage until then, and
        a status that came before it is counted as any other (a START that
        supersedes the commit drops the write, as after an END).
        """
        self._report_progress(current)
        if current.error is None and _holds(current.buffers, current.limit):
            self._learn_staging_pace(current.began, current.buffers, (current.adopted_bytes, current.adopted_records))
            self._finish(current)

    def _report_progress(self, current: _Commit) -> None:
        """Tell the coordinator what this commit holds, where that may end it early (DESIGN step 2).

        A partition whose staging is full (paused) asks for the END at once:
        it takes no more records until the commit ends, and waiting out the
        interval would only idle it. So does a task that holds what its
        writer writes in the write target (``commit_bytes``): under a
        backlog, a commit's write then takes about that long, however much
        is waiting. With ``sinkadmin.commit.max-records`` the staged counts
        go out every PROGRESS_SECONDS, and at once when this task alone
        holds that many, until the coordinator has heard of enough. In a
        catch-up commit the task says once that it has read its partitions
        to their ends (``end_cause`` "caught-up", not a request: the commit
        ends once every task has said so). Otherwise nothing is sent.
        """
        cause: str | None = None
        reason: str | None = None
        if not self.paused.isdisjoint(current.buffers):
            cause = "staging-full"  # (connectors.models.CommitEnd)
            reason = f"task {self.task_index} paused a partition whose staging is full"
        elif _holds(current.buffers, current.limit):
            staged = _staged_bytes(current.buffers)
            cause = "write-target"
            # (Less than commit_bytes: what the read-ahead left is also staged in the target.)
            what = "its writer writes" if current.limit >= self.commit_bytes else "it stages and writes"
            reason = (
                f"task {self.task_index} staged {staged / 2**20:.0f} MiB, what {what} in "
                f"{self.write_target_s:g} s (sinkadmin.commit.write-target-ms) at its last commits' pace"
            )
        full = cause is not None
        caught_up = current.catch_up and not full and not current.reported_caught_up and self._read_to_end(current)
        if caught_up:
            cause = "caught-up"
            reason = f"task {self.task_index} read its partitions to their ends"
        records = sum(b.records for b in current.buffers.values())
        max_records = self.config.commit_max_records
        now = time.monotonic()
        ask_for_end = full and not current.reported_full
        counting = current.reported_records < max_records and records > current.reported_records
        count_due = counting and (records >= max_records or now - current.reported_at >= self.PROGRESS_SECONDS)
        if not (ask_for_end or count_due or caught_up):
            return
        self._send(
            EventType.STAGING_PROGRESS,
            current,
            partitions=tuple(
                PartitionStatus(topic, partition, b.start, b.next_offset, b.records)
                for (topic, partition), b in sorted(current.buffers.items())
            ),
            end_requested=full,
            end_cause=cause,
            end_reason=reason,
        )
        current.reported_records, current.reported_at = records, now
        current.reported_full = current.reported_full or full
        current.reported_caught_up = current.reported_caught_up or caught_up

    def _read_to_end(self, current: _Commit) -> bool:
        """Whether the commit has staged every one of its partitions up to the log end the
        consumer last heard of (the high watermark of its latest fetch response, which
        librdkafka keeps; unknown before a partition's first fetch).

        A partition whose log ends in a transaction marker stays short of
        it (the marker is never delivered): its commits end on the interval.
        """
        for tp, buffer in current.buffers.items():
            _, high = self.consumer.get_watermark_offsets(TopicPartition(*tp), cached=True)
            if high < 0 or buffer.next_offset < high:
                return False
        return True

    # While a commit's write runs, the coordinator hears this often that it does.
    WRITING_PROGRESS_SECONDS = 5.0

    def _still_writing(self, write: _Write) -> None:
        """Tell the coordinator, every WRITING_PROGRESS_SECONDS, that this commit's write is under way.

        Its wait for write statuses then lasts as long as the write does
        (up to its limit), instead of giving up on a task that is alive and
        busy: a first commit whose Spark was still starting (forty tasks
        warming up at once, each for most of the timeout) outlasted the 30 s
        timeout, was given up on, and was written again by the next commit
        (docs/benchmarks.md, "Measurements behind the runtime's design").
        """
        now = time.monotonic()
        if now - max(write.began, write.said_at) < self.WRITING_PROGRESS_SECONDS:
            return
        write.said_at = now
        self._send(
            EventType.STAGING_PROGRESS,
            write.commit,
            partitions=tuple(PartitionStatus(s.topic, s.partition, s.start, s.end, s.records) for s in write.staged),
        )

    END_OFFSET_REFRESH_SECONDS = 5.0

    def refresh_end_offsets(self) -> None:
        """End offsets of the partitions no fetch has told of for END_OFFSET_REFRESH_SECONDS
        (between commits, paused), so that lag stays true.

        Each is a round trip to the broker that this loop waits for (slow and
        uneven on a busy host), so a partition being fetched is not asked:
        every fetch response carries its high watermark (taken in
        ``_consume``). Asked regardless, they held up reading ahead, and a
        START that came meanwhile, every few seconds while a commit was
        written (docs/benchmarks.md, "Measurements behind the runtime's design").
        """
        now = time.monotonic()
        for tp in self.partitions:
            if now - self._end_offset_at.get(tp, -math.inf) < self.END_OFFSET_REFRESH_SECONDS:
                continue
            self._end_offset_at[tp] = now  # (unanswered too: asked again next period, not at every beat)
            try:
                _, high = self.watermarks.get_watermark_offsets(TopicPartition(*tp), timeout=1, cached=False)
            except KafkaException:
                continue
            if high >= 0:
                self.end_offsets[tp] = high

    def _finish(self, current: _Commit) -> None:
        """END_COMMIT, or a commit's worth staged (``_staged``): hand the staged records to the writer,
        and read ahead while it writes."""
        self.state = TaskState.WRITING
        self.current = None
        failpoint("participant.before_write")
        write = _Write(current, [], time.monotonic(), None)
        if current.error is not None:
            self._report(write)
            return
        try:
            write.staged = [buffer.finish() for buffer in current.buffers.values()]
        except Exception as exc:
            log.exception("%s task %d: closing commit %s failed", self.connector, self.task_index, current.commit_id)
            current.error, current.unavailable = self._failure(exc)
            self._report(write)
            return
        # Read ahead from where this commit ends (see self.ahead).
        self.ahead_id = write.ahead_id = uuid.uuid4()
        self._ahead_began, self._ahead_full = time.monotonic(), False
        directory = self._staging_for(self.ahead_id)
        self.ahead = {
            tp: StagingBuffer(*tp, s.end, self.writer.sink(self.ahead_id, *tp, s.end, directory))
            for tp, s in zip(current.buffers, write.staged, strict=True)
        }
        if self.paused:
            self.consumer.resume([TopicPartition(*tp) for tp in sorted(self.paused)])
            self.paused.clear()
        if self._write_executor is None:
            self._write_executor = ThreadPoolExecutor(1, thread_name_prefix=f"{self.connector}-{self.task_index}-write")
        self.writing = write
        write.result = self._write_executor.submit(
            self.writer.write, current.commit_id, current.staging_id, write.staged
        )

    def _report(self, write: _Write) -> None:
        """The WRITE_STATUS of a commit whose write is over."""
        current = write.commit
        statuses: list[PartitionStatus] = []
        result, retriable, unavailable = WriteResult(), False, current.unavailable
        error: str | None
        if current.error is not None:
            error, retriable = current.error, True
        else:
            assert write.result is not None
            try:
                result = write.result.result()
                statuses, error = self._statuses(write.staged, result)
            except Exception as exc:
                log.exception(
                    "%s task %d: writing commit %s failed", self.connector, self.task_index, current.commit_id
                )
                error, unavailable = self._failure(exc)
                # (A refused write fails the connector at once; anything else is tried again first.)
                result, retriable = WriteResult(), not isinstance(exc, WriteRefused)
        failpoint("participant.before_status")
        seconds = time.monotonic() - write.began
        if error is None:
            self._learn_commit_size(current.commit_id, _staged_bytes(current.buffers), seconds, current.limit)
        log.info(
            "%s task %d: commit %s: %d records, %d files written in %.2f s%s",
            self.connector,
            self.task_index,
            current.commit_id,
            sum(s.records for s in statuses),
            len(result.files),
            seconds,
            "" if error is None else " (failed)",
        )
        self._send(
            EventType.WRITE_STATUS,
            current,
            partitions=tuple(statuses),
            files=tuple(result.files),
            error=error,
            retriable=retriable,
            unavailable=unavailable,
            write_seconds=seconds,
        )
        if error is not None:
            for buffer in current.buffers.values():
                buffer.discard()  # files of a failed write are never committed
            if write.ahead_id is None or write.ahead_id == self.ahead_id:
                # What was read ahead follows records that will be read again.
                self._drop_ahead()
                self.consumer.assign([])  # (paused partitions stay paused until the next START)
        clear_directory(self._staging_for(current.staging_id))
        if self.writing is write:
            self.writing = None
        if self.current is None:
            self.state = TaskState.WAITING

    def _supersede_write(self, write: _Write) -> None:
        """A START came while this write was unreported: its commit was decided without it.

        A coordinator starts a commit only once the previous one is decided
        (committed with the partitions that answered in time, or aborted),
        and a new coordinator fences the old one's, so nothing can commit
        what this write would report. A write that has not begun is dropped;
        one that is running ends unreported (its files are orphans for table
        maintenance). Queued instead, every commit that timed out under load
        left one more write ahead of the next commit's, which then timed out
        too: the task never caught up (tests/integration/test_celery_runtime.py,
        twenty connectors on two cores).
        """
        self.writing = None
        assert write.result is not None
        if write.result.cancel():
            log.info(
                "%s task %d: commit %s was decided without this task; its write is dropped",
                self.connector,
                self.task_index,
                write.commit.commit_id,
            )
            clear_directory(self._staging_for(write.commit.staging_id))
        else:
            log.warning(
                "%s task %d: commit %s was decided without this task; its write, still running, "
                "will not be reported (consider a longer iceberg.control.commit.timeout-ms)",
                self.connector,
                self.task_index,
                write.commit.commit_id,
            )
            self.superseded.append(write)

    def _forget_superseded(self) -> None:
        for write in [w for w in self.superseded if w.result is not None and w.result.done()]:
            self.superseded.remove(write)
            clear_directory(self._staging_for(write.commit.staging_id))

    def _failure(self, exc: Exception) -> tuple[str, bool]:
        """The WRITE_STATUS error of writing (or staging) that raised ``exc``, and whether it is an outage.

        An outage of a service the writes need (the catalog) is said as such,
        and the coordinator waits it out; anything else goes with its trace.
        """
        outage = self.writer.unavailable(exc)
        if outage is not None:
            return f"task {self.task_index}: {outage}", True
        return f"task {self.task_index} could not write its files: {exc}\n{traceback.format_exc()}", False

    def _drop_ahead(self) -> None:
        for buffer in self.ahead.values():
            buffer.discard()
        if self.ahead_id is not None:
            clear_directory(self._staging_for(self.ahead_id))
        self.ahead, self.ahead_id = {}, None

    def _send(self, kind: EventType, current: _Commit, **fields: Any) -> None:
        """An event of this task about ``current``, stamped with its commit and epoch."""
        self.channel.send(
            ControlEvent(
                kind,
                self.connector,
                current.commit_id,
                current.epoch,
                task_index=self.task_index,
                task_epoch=self.task_epoch,
                **fields,
            )
        )

    def _statuses(self, staged: list[StagedPartition], result: WriteResult) -> tuple[list[PartitionStatus], str | None]:
        bad_by_tp: dict[TP, int] = {}
        for bad in result.bad:
            bad_by_tp[(bad.topic, bad.partition)] = bad_by_tp.get((bad.topic, bad.partition), 0) + 1
        if result.bad and self.config.errors_tolerance == "none":
            first = result.bad[0]
            return [], (
                f"record {first.topic}/{first.partition}@{first.offset} cannot be converted: {first.reason} "
                "(errors.tolerance=none)"
            )
        if result.bad and self.dead_letters is not None:
            files = {(s.topic, s.partition): s.path for s in staged if s.path is not None}
            self.dead_letters.send(result.bad, files)  # type: ignore[arg-type]
        return [
            PartitionStatus(
                topic=s.topic,
                partition=s.partition,
                start=s.start,
                end=s.end,
                records=s.records,
                dead_lettered=bad_by_tp.get((s.topic, s.partition), 0),
                skipped=result.skipped.get((s.topic, s.partition), 0) + s.dropped,
                max_timestamp=s.max_timestamp,
            )
            for s in staged
        ], None

    def _discard(self, current: _Commit) -> None:
        for buffer in current.buffers.values():
            buffer.discard()
        clear_directory(self._staging_for(current.staging_id))
        self.current = None

    def _staging_for(self, staging_id: uuid.UUID) -> Path:
        # Unique per runner: a superseded runner of the same task that has
        # not noticed yet must not delete or overwrite this one's files.
        return self.staging_dir / f"{staging_id}-{self.task_index}-{self.runner_id}"

    def close(self) -> None:
        if self._write_executor is not None:
            # A write in progress finishes (its status is never sent: the
            # commit times out, and its files are orphans).
            self._write_executor.shutdown(wait=True, cancel_futures=True)
        for write in [*self.superseded, *([self.writing] if self.writing is not None else [])]:
            clear_directory(self._staging_for(write.commit.staging_id))
        self.writing, self.superseded = None, []
        if self.current is not None:
            self._discard(self.current)
        self._drop_ahead()
        self.consumer.close()
        if self.watermarks is not self.consumer:
            self.watermarks.close()


def _staged_bytes(buffers: dict[TP, StagingBuffer]) -> int:
    return sum(b.staged_bytes for b in buffers.values())


def _holds(buffers: dict[TP, StagingBuffer], size: int) -> bool:
    """Whether these buffers hold ``size`` staged bytes (a commit's worth: see TaskRunner._commit_limit)."""
    return _staged_bytes(buffers) >= size


def _topic_partition(message: Any) -> TP:
    return message.topic(), message.partition()
