"""Wiring of the coordinator and tasks to the real world: the ledger in
Postgres, Kafka, and the sink's runtime (``workers.sink``). Celery tasks and
the ``run_connector`` command both run connectors through these functions."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaException, TopicPartition
from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections, connections

from connectors import actions
from connectors.actions import maintenance as maintenance_actions
from connectors.actions import runtime as runtime_state
from connectors.actions.ledger import PartitionRange, publish_coordinator_phase, seed_offsets
from connectors.config import SinkConfig, resolve_plugin
from connectors.config.kafka_clients import admin_client, consumer_group, source_consumer_config
from connectors.models import Connector, ConnectorTask, CoordinatorStatus, DesiredState, MaintenanceOutcome
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
from workers.dead_letters import DeadLetterSink
from workers.events import PartitionStatus
from workers.kafka import (
    OUT_OF_RANGE_ERRORS,
    ControlChannel,
    GroupOffsets,
    ensure_topic,
    log_offsets,
    resolve_partitions,
)
from workers.maintenance import MaintainedTables, Maintainer, MaintenanceLedger
from workers.participant import TaskRunner, WritePort
from workers.participant import TaskState as ParticipantState
from workers.schema_registry import RegistryUnavailable
from workers.sink import TaskHeartbeat, coordinated_sink, maintained_sink, plugin_of, self_committing_sink
from workers.spark_writer import SparkUnavailable

log = logging.getLogger(__name__)

TP = tuple[str, int]
StopFlag = Callable[[], bool]


# The Celery node name (e.g. "connectors@host") once a worker has set it up.
WORKER_NAME: str | None = None


def worker_id() -> str:
    return f"{WORKER_NAME or socket.gethostname()}:{os.getpid()}"


def offsets_by_topic(ranges: Sequence[tuple[str, int, int, int]]) -> dict[str, dict[str, list[int]]]:
    by_topic: dict[str, dict[str, list[int]]] = {}
    for topic, partition, start, end in ranges:
        by_topic.setdefault(topic, {})[str(partition)] = [start, end]
    return by_topic


def _ranges(statuses: Sequence[PartitionStatus]) -> list[PartitionRange]:
    return [
        PartitionRange(s.topic, s.partition, s.start, s.end, s.records, s.dead_lettered, s.skipped) for s in statuses
    ]


class DjangoLedger:
    """The coordinator's view of the ledger (connectors.actions)."""

    def __init__(
        self,
        connector: Connector,
        epoch: int,
        config: SinkConfig,
        watermarks: Consumer,
        group: GroupOffsets | None = None,
    ) -> None:
        self.connector = connector
        self.epoch = epoch
        self.config = config
        self.watermarks = watermarks
        # Where each commit's offsets are mirrored for Kafka's lag tools (None: nowhere).
        self.group = group

    def offsets(self, partitions: list[TP], *, verify: bool = False) -> dict[TP, int]:
        known = actions.next_offsets(self.connector.pk)
        seeds = {}
        for tp in partitions:
            if tp not in known:
                low, high = log_offsets(self.watermarks, TopicPartition(*tp))
                seeds[tp] = low if self.config.auto_offset_reset == "earliest" else high
        try:
            offsets = seed_offsets(self.connector.pk, self.epoch, seeds) if seeds else known
            offsets = {tp: offsets[tp] for tp in partitions}
            if verify:
                offsets = self._in_range(offsets)
        except actions.StaleEpoch as exc:
            raise Fenced(str(exc)) from None
        return offsets

    def _in_range(self, offsets: dict[TP, int]) -> dict[TP, int]:
        logs: dict[TP, tuple[int, int]] = {}
        for tp in offsets:
            try:
                logs[tp] = log_offsets(self.watermarks, TopicPartition(*tp))
            except KafkaException as exc:
                # (A partition deleted since it was listed: the supervisor says so.)
                log.warning("%s: no log offsets for %s/%d: %s", self.connector.name, *tp, exc)
        beyond = {tp: offsets[tp] for tp, (_, end) in logs.items() if offsets[tp] > end}
        for tp, end in self._fetched_ends(beyond).items():
            logs[tp] = (logs[tp][0], end)
        check = check_offsets(offsets, logs, self.config.out_of_range)
        if check.problems:
            more = f" (and {len(check.problems) - 1} more partitions)" if len(check.problems) > 1 else ""
            raise OffsetsOutOfRange(f"offset out of range on {check.problems[0]}{more}\n" + "\n".join(check.problems))
        if check.skips:
            for (topic, partition), (start, end) in sorted(check.skips.items()):
                log.warning(
                    "%s: %s/%d: skipping offsets %d to %d, deleted by retention before they were committed",
                    self.connector.name,
                    topic,
                    partition,
                    start,
                    end - 1,
                )
            try:
                actions.skip_offsets(self.connector.pk, self.epoch, check.skips)
            except actions.LedgerConflict as exc:
                raise Fenced(str(exc)) from None
            offsets = {tp: check.skips[tp][1] if tp in check.skips else offset for tp, offset in offsets.items()}
        return offsets

    FETCH_CHECK_SECONDS = 3.0

    def _fetched_ends(self, beyond: dict[TP, int]) -> dict[TP, int]:
        """Log ends, as fetching at the ledger's offsets finds them, of partitions whose listed end is below those.

        A Kafka-compatible broker's ListOffsets answer may lag the log (some
        list a batch's base offset + 1 as the end), and a connector must
        not fail on it. A fetch at the offset settles it: the broker says
        the offset is out of range (the listed end stands), or it returns a
        record there, or its answer's high watermark is the end. A consumer
        of its own: its cached watermarks can only come from these fetches.
        """
        if not beyond:
            return {}
        ends: dict[TP, int] = {}
        undecided = dict(beyond)
        consumer = Consumer(
            source_consumer_config(
                settings.KAFKA_BOOTSTRAP_SERVERS, self.config.raw, f"sinkadmin-{self.connector.name}"
            )
        )
        consumer.assign([TopicPartition(t, p, offset) for (t, p), offset in beyond.items()])
        try:
            deadline = time.monotonic() + self.FETCH_CHECK_SECONDS
            while undecided and time.monotonic() < deadline:
                for message in consumer.consume(len(undecided), timeout=0.5):
                    tp = (message.topic(), message.partition())
                    if tp not in undecided:
                        continue
                    error = message.error()
                    if error is None:
                        ends[tp] = undecided[tp] + 1  # a record at or past the offset: in range
                        del undecided[tp]
                    elif error.code() in OUT_OF_RANGE_ERRORS:
                        del undecided[tp]
                for tp in list(undecided):
                    _, high = consumer.get_watermark_offsets(TopicPartition(*tp), cached=True)
                    if high >= 0:
                        ends[tp] = high
                        del undecided[tp]
        finally:
            consumer.close()
        return ends

    def pending(self) -> PreparedCommit | None:
        commit = actions.pending_commit(self.connector.pk)
        if commit is None:
            return None
        ranges = [(p.topic, p.partition, p.start_offset, p.end_offset) for p in commit.partitions.all()]
        return PreparedCommit(
            commit.commit_id,
            commit.epoch,
            list(commit.files),
            offsets_by_topic(ranges),
            int(commit.watermark.timestamp() * 1000) if commit.watermark else None,
            int(commit.prepared_at.timestamp() * 1000) if commit.prepared_at else None,
        )

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
        watermark = datetime.fromtimestamp(watermark_ms / 1000, tz=UTC) if watermark_ms is not None else None
        try:
            commit = actions.prepare_commit(
                self.connector.pk,
                epoch=self.epoch,
                commit_id=commit_id,
                started_at=started_at,
                ranges=_ranges(statuses),
                files=files,
                watermark=watermark,
                complete=complete,
                ended_by=ended_by,
            )
        except actions.StaleEpoch as exc:
            raise Fenced(str(exc)) from None
        except actions.LedgerConflict as exc:
            raise ValueError(str(exc)) from None
        ranges = [(s.topic, s.partition, s.start, s.end) for s in statuses]
        prepared_at_ms = int(commit.prepared_at.timestamp() * 1000) if commit.prepared_at else None
        return PreparedCommit(commit_id, self.epoch, files, offsets_by_topic(ranges), watermark_ms, prepared_at_ms)

    def committed(self, commit_id: uuid.UUID, snapshot_ids: Mapping[str, int]) -> None:
        actions.mark_committed(commit_id, snapshot_ids)
        if self.group is not None:
            self.group.mirror(actions.committed_offsets(self.connector.pk))

    def aborted(self, commit_id: uuid.UUID, started_at: datetime, statuses: list[PartitionStatus], error: str) -> None:
        actions.abort_commit(
            self.connector.pk,
            epoch=self.epoch,
            commit_id=commit_id,
            started_at=started_at,
            ranges=_ranges(statuses),
            error=error,
        )

    def failed(self, message: str, task_index: int | None = None) -> None:
        # (The task whose write failed the connector goes FAILED with the reason, as in Kafka Connect.)
        actions.fail_connector(self.connector.pk, message, task_index=task_index)

    def phase(
        self,
        phase: Phase,
        commit_id: uuid.UUID | None,
        started_at: datetime | None,
        control_offset: int | None,
        expected: list[TP],
        reported: list[TP],
        warning: str = "",
    ) -> None:
        if not publish_coordinator_phase(
            self.connector.pk,
            self.epoch,
            phase=phase.value,
            commit_id=commit_id,
            started_at=started_at,
            control_offset=control_offset,
            expected=expected,
            reported=reported,
            sink_warning=warning,
        ):
            raise Fenced(f"coordinator epoch {self.epoch} of {self.connector.name} was superseded")


class DjangoMaintenanceLedger:
    """Maintenance runs of the coordinator of ``epoch`` in the ledger (connectors.actions.maintenance).

    Used from the maintenance thread, which waits long (a Spark job, its
    coordinator's turn): each call closes the thread's database connection
    when done, so that no waiting thread holds one. Twenty coordinators'
    threads holding theirs while they waited for turns that needed a
    connection exhausted Postgres (tests/integration/test_celery_runtime.py,
    twenty connectors on one worker).
    """

    def __init__(self, connector_id: int, epoch: int) -> None:
        self.connector_id = connector_id
        self.epoch = epoch

    def start(self, table: str) -> int:
        with _connection_released():
            return maintenance_actions.start_maintenance(self.connector_id, self.epoch, table)

    def record(self, run_id: int, **figures: Any) -> None:
        with _connection_released():
            maintenance_actions.record_maintenance(run_id, **figures)

    def finish(self, run_id: int, error: str | None) -> None:
        outcome = MaintenanceOutcome.FAILED if error else MaintenanceOutcome.SUCCEEDED
        with _connection_released():
            maintenance_actions.finish_maintenance(run_id, outcome, error or "")

    def interrupted(self, run_id: int) -> None:
        with _connection_released():
            maintenance_actions.finish_maintenance(
                run_id, MaintenanceOutcome.INTERRUPTED, "the coordinator stopped before the run ended"
            )

    def current(self) -> bool:
        with _connection_released():
            return Connector.objects.filter(pk=self.connector_id, coordinator_epoch=self.epoch).exists()

    def protected_files(self, tables: Iterable[str]) -> set[str]:
        with _connection_released():
            return maintenance_actions.prepared_files(tables)


@contextlib.contextmanager
def _connection_released() -> Iterator[None]:
    try:
        yield
    finally:
        connections.close_all()  # (this thread's own)


def start_maintainer(
    name: str,
    connector_id: int,
    epoch: int,
    config: SinkConfig,
    tables: Callable[[MaintenanceLedger], MaintainedTables],
) -> Maintainer:
    """The connector's maintenance thread (workers.maintenance) over the sink's ``tables(ledger)``,
    started; runs a predecessor left are marked interrupted."""
    maintenance_actions.interrupt_maintenance(connector_id, epoch)
    last = maintenance_actions.last_maintenance(connector_id)
    ledger = DjangoMaintenanceLedger(connector_id, epoch)
    maintainer = Maintainer(
        name,
        config.maintenance,
        tables(ledger),
        ledger=ledger,
        last_run=last.timestamp() if last is not None else None,
        release=connections.close_all,  # (the maintenance thread's own connections)
    )
    maintainer.start()
    return maintainer


class WritingThread(ThreadPoolExecutor):
    """The thread a task writes its commits on (see TaskRunner.writing)."""

    def __init__(self, name: str) -> None:
        super().__init__(1, thread_name_prefix=name)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        def closing_connections() -> Any:
            try:
                return fn(*args, **kwargs)
            finally:
                # A database connection the write opened (the lock that
                # guards creating a table) would stay open as long as the thread.
                connections.close_all()

        return super().submit(closing_connections)


def connector_config(name: str) -> tuple[Connector, SinkConfig]:
    connector = Connector.objects.get(name=name)
    return connector, SinkConfig.parse(connector.config)


HEARTBEAT_SECONDS = 1.0


# How long a coordinator heartbeats from inside one call into its sink (LongCallBeats): past this, the call is
# taken for stuck, and the supervisor may start another coordinator, which fences this one.
LONG_CALL_BEAT_LIMIT_S = 3600.0


class LongCallBeats:
    """Heartbeats while the coordinator is inside one long call into its sink: a commit applied to the tables or
    a maintenance run, which last as long as their Spark job (a Hudi write of a large commit takes minutes) and
    which its loop cannot beat between. Without them a coordinator at work read as dead after the heartbeat
    timeout: the supervisor started another every 30 s, each waiting on the first's table lock.

    Beats stop with the call, when ``heartbeat`` says the coordinator must stop (fenced, deleted: its commit is
    refused by the ledger then), and after ``limit_s``: a call stuck past it no longer vouches for its
    coordinator, which the supervisor may then replace."""

    def __init__(
        self, name: str, epoch: int, heartbeat: Callable[[int], str | None], limit_s: float = LONG_CALL_BEAT_LIMIT_S
    ) -> None:
        self.name, self.epoch, self.heartbeat, self.limit_s = name, epoch, heartbeat, limit_s

    @contextlib.contextmanager
    def during(self, what: str) -> Iterator[None]:
        done = threading.Event()

        def beat() -> None:
            started = time.monotonic()
            try:
                while not done.wait(HEARTBEAT_SECONDS):
                    if time.monotonic() - started > self.limit_s:
                        log.warning(
                            "%s: coordinator %s for over %.0f s: no longer heartbeating", self.name, what, self.limit_s
                        )
                        return
                    if self.heartbeat(self.epoch) is None:
                        return
            finally:
                connections.close_all()  # (this thread's own)

        beating = threading.Thread(target=beat, name=f"{self.name}-coordinator-beats", daemon=True)
        beating.start()
        try:
            yield
        finally:
            done.set()
            beating.join()


def run_coordinator(
    name: str, stop: StopFlag, *, max_commits: int | None = None, heartbeat: Callable[[int], str | None] | None = None
) -> int:
    """Run the connector's coordinator until ``stop()``, fencing, or ``heartbeat`` says to stop.

    ``heartbeat(epoch)`` returns the connector's desired state, or None when
    this coordinator must stop. Returns the number of commits done.
    """
    connector, config = connector_config(name)
    bootstrap = settings.KAFKA_BOOTSTRAP_SERVERS
    admin = admin_client(bootstrap, config.raw)
    ensure_topic(admin, config.control_topic, partitions=1)
    epoch = actions.take_coordinator_lease(connector.pk, worker_id())
    channel = ControlChannel(bootstrap, config.raw, config.control_topic, f"{name}-coordinator-{epoch}")
    channel.seek(None)
    watermarks = Consumer(source_consumer_config(bootstrap, config.raw, f"sinkadmin-{name}"))
    group = GroupOffsets(bootstrap, config.raw, consumer_group(name, config.raw))
    plugin = plugin_of(config)
    committer = coordinated_sink(plugin).committer(name, config)
    maintained = maintained_sink(plugin)
    maintainer = maintained.maintainer(name, connector.pk, epoch, config, committer) if maintained else None
    coordinator = Coordinator(
        CoordinatorSettings(
            name,
            epoch,
            config.commit_interval_ms / 1000,
            config.commit_timeout_ms / 1000,
            config.allow_empty_commit,
            config.commit_max_records,
            versioned_tables=plugin.versioned_tables,
        ),
        channel,
        DjangoLedger(connector, epoch, config, watermarks, group),
        committer,
        partitions=lambda: resolve_partitions(admin, config.topics, config.topics_regex),
        maintenance=maintainer,
    )
    if heartbeat is not None:
        coordinator.keep_alive = LongCallBeats(name, epoch, heartbeat).during
    log.info("%s: coordinator started with epoch %d", name, epoch)
    last_beat = 0.0
    try:
        while not stop():
            if heartbeat is not None and time.monotonic() - last_beat >= HEARTBEAT_SECONDS:
                last_beat = time.monotonic()
                desired = heartbeat(epoch)
                if desired is None:
                    break
                coordinator.hold = desired == DesiredState.PAUSED
            coordinator.step()
            if max_commits is not None and coordinator.commits_done >= max_commits:
                break
    except Fenced as exc:
        log.warning("%s: coordinator stops: %s", name, exc)
    except ConnectorFailed as exc:
        log.error("%s: connector failed: %s", name, exc)
    finally:
        if maintainer is not None:
            maintainer.close()
        channel.close()
        watermarks.close()
        group.close()
        committer.close()
        close_old_connections()
    return coordinator.commits_done


# What a service a runner needs raises when it cannot be reached: a crash of that kind is an outage,
# restarted after its back-off for as long as it lasts, and never fails the connector.
OUTAGES: tuple[type[BaseException], ...] = (
    KafkaException,
    OperationalError,
    InterfaceError,
    ConnectionError,
    TimeoutError,
    SinkUnavailable,
    SparkUnavailable,
    RegistryUnavailable,
)


def outage(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) says a service the runner needs cannot be reached."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OUTAGES):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def run_coordinator_supervised(connector_id: int, shutting_down: StopFlag) -> None:
    """The Celery entry point: heartbeats in Postgres, and a clean exit frees the slot."""
    name = Connector.objects.filter(pk=connector_id).values_list("name", flat=True).first()
    if name is None:
        return
    epochs: list[int] = []

    def beat(epoch: int) -> str | None:
        if not epochs:
            epochs.append(epoch)
        return runtime_state.coordinator_alive(connector_id, epoch)

    try:
        run_coordinator(name, shutting_down, heartbeat=beat)
    except Exception as exc:
        # Shown as the connector's trace; the supervisor restarts it after its back-off, and too many
        # crashes that are not outages fail the connector (connectors.actions.runtime.CRASH_WINDOW).
        log.exception("%s: coordinator crashed", name)
        runtime_state.coordinator_crashed(connector_id, exc, outage=outage(exc))
        raise
    finally:
        if epochs:
            runtime_state.coordinator_stopped(connector_id, epochs[0])


_tuning = threading.Lock()
_tuned = threading.Event()


# glibc's mallopt() parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def _keep_freed_memory() -> None:
    """Have glibc's allocator keep freed memory for reuse (see tune_process_for_tasks)."""
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)  # glibc only (not musl, not macOS)
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, 32 << 20)  # glibc's maximum
        mallopt(_M_TRIM_THRESHOLD, 256 << 20)


def tune_process_for_tasks() -> None:
    """Three process-wide settings for the participants' hot path, each chosen by
    measuring the benchmark with perf and py-spy; done once per process, at its first task.

    Objects that exist at start-up are kept out of Python's cyclic garbage
    collection. Every fetched message is a GC-tracked object; thousands per
    batch set off collections, full ones included, that walked every object
    the imports created (pyiceberg, pyarrow, Django) and found nothing:
    messages are freed by reference counting. Those walks were a sizeable
    share of a task's time. Freezing again later would also freeze
    whatever garbage exists then (an old catalog's connection pool, say),
    which would never be freed; the thresholds stay Python's, so garbage
    holding connections is still collected as promptly as before.

    Arrow's buffers come from the C library's allocator instead of Arrow's
    default mimalloc, which returned freed pages to the system and faulted
    them in again (huge pages, zeroed by the kernel) for every decoded chunk:
    page faults were a sizeable share of a task's CPU time. With it a task
    uses less CPU per record and peaks lower.

    And that allocator keeps what is freed: by default glibc maps buffers of
    a few MB (a joined chunk of values, a decoded column, a fetched message
    set) afresh each time and gives the top of its heap back as soon as
    it is free, so the same pages were faulted in over and over. With mmap
    and trim thresholds of 32 and 256 MB, a parse-and-write loop (join,
    Arrow's JSON reader, Parquet) takes far fewer page faults and less
    CPU, and in the benchmark the tasks used less CPU per record, at
    about the same peak RSS: the memory kept is what the next chunk needs
    anyway (docs/benchmarks.md, "Measurements behind the runtime's design").
    """
    with _tuning:
        if not _tuned.is_set():
            _keep_freed_memory()
            pa.set_memory_pool(pa.system_memory_pool())
            gc.collect()
            gc.freeze()
            _tuned.set()


def run_task(
    name: str,
    task_index: int,
    partitions: Sequence[TP],
    stop: StopFlag,
    *,
    task_epoch: int = 0,
    heartbeat: TaskHeartbeat | None = None,
) -> None:
    """Run one worker task hosting the participants of ``partitions`` until ``stop()`` or
    ``heartbeat(partition status)`` says to stop (None)."""
    connector, config = connector_config(name)
    bootstrap = settings.KAFKA_BOOTSTRAP_SERVERS
    ensure_topic(admin_client(bootstrap, config.raw), config.control_topic, partitions=1)
    channel = ControlChannel(
        bootstrap, config.raw, config.control_topic, f"{name}-task-{task_index}-{uuid.uuid4().hex[:6]}"
    )
    # Join a commit in flight instead of waiting for the next one. The
    # control topic's end is taken before the ledger is read: a commit the
    # ledger does not show yet has its START sent after that point, since
    # the coordinator publishes a commit before sending its START.
    latest = channel.end_offset()
    status = CoordinatorStatus.objects.filter(connector=connector).first()
    in_flight = status is not None and status.phase in (Phase.STAGING, Phase.COLLECTING)
    joined = status.start_control_offset if in_flight and status is not None else None
    channel.seek(joined if joined is not None else latest)
    consumer = Consumer(source_consumer_config(bootstrap, config.raw, f"sinkadmin-{name}"))
    dead_letters = None
    if config.errors_tolerance == "all" and config.dlq_topic:
        dead_letters = DeadLetterSink(
            bootstrap,
            config.raw,
            config.dlq_topic,
            name,
            task_index,
            config.dlq_replication_factor,
            config.dlq_context_headers,
        )
    plugin = plugin_of(config)
    # (The sink takes records as the transforms leave them: SinkConfig.sink_view.)
    writer = coordinated_sink(plugin).writer(config.sink_view)
    writing = WritingThread(f"{name}-{task_index}-write")
    # While the first commit stages, on a thread of its own: a first write
    # that comes before the warm-up is done does what does not need Spark
    # (resolving the tables) meanwhile, and waits for it only then.
    threading.Thread(
        target=_warm_up, args=(writer, name, task_index), name=f"{name}-{task_index}-warm-up", daemon=True
    ).start()
    runner = TaskRunner(
        connector=name,
        task_index=task_index,
        task_epoch=task_epoch,
        config=config,
        partitions=partitions,
        consumer=consumer,
        channel=channel,
        writer=writer,
        dead_letters=dead_letters,
        staging_dir=Path(settings.STAGING_DIR) / name,
        write_executor=writing,
        watermarks=Consumer(source_consumer_config(bootstrap, config.raw, f"sinkadmin-{name}")),
        versioned_tables=plugin.versioned_tables,
    )
    tune_process_for_tasks()
    log.info("%s: task %d started with %d partitions", name, task_index, len(partitions))
    last_beat = 0.0
    try:
        while not stop():
            if heartbeat is not None and time.monotonic() - last_beat >= HEARTBEAT_SECONDS:
                last_beat = time.monotonic()
                if runner.state is not ParticipantState.STAGING:
                    runner.refresh_end_offsets()
                if heartbeat(partition_status(runner)) is None:
                    break
            runner.step()
    finally:
        runner.close()
        writer.close()
        channel.close()
        if dead_letters is not None:
            dead_letters.close()
        close_old_connections()


def _warm_up(writer: WritePort, name: str, task_index: int) -> None:
    """The sink writer's ``warm_up``, logged."""
    began = time.monotonic()
    try:
        writer.warm_up()
        log.info("%s task %d: ready to write in %.2f s", name, task_index, time.monotonic() - began)
    except Exception as exc:
        # The first commit's write meets the same cause and reports it.
        log.warning("%s task %d: could not get ready to write: %s", name, task_index, exc)
    finally:
        connections.close_all()  # (this thread's: a default catalog's creation lock)


def partition_status(runner: TaskRunner) -> dict[str, Any]:
    """Live figures per partition for the UI and API."""
    buffers = runner.current.buffers if runner.current is not None else runner.ahead
    figures: dict[str, Any] = {}
    for topic, partition in sorted(runner.partitions):
        buffer = buffers.get((topic, partition))
        figures[f"{topic}/{partition}"] = {
            "state": runner.state.value,
            "staged": buffer.records if buffer else 0,
            "position": buffer.next_offset if buffer else None,
            "end_offset": runner.end_offsets.get((topic, partition)),
            "paused": (topic, partition) in runner.paused,
        }
    return figures


def run_task_supervised(task: ConnectorTask, shutting_down: StopFlag) -> None:
    """The Celery entry point for a claimed task: heartbeats, failures recorded with their trace."""
    partitions = [(str(t), int(p)) for t, p in task.assigned_partitions]
    ended_by: str | None = None

    def beat(partitions: dict[str, Any], warning: str = "") -> str | None:
        nonlocal ended_by
        desired = runtime_state.task_alive(task.pk, task.epoch, partition_status=partitions, warning=warning)
        if desired is None or desired == DesiredState.STOPPED:
            ended_by = desired or "superseded"
            return None
        return desired

    plugin = resolve_plugin(str(task.connector.config.get("connector.class", "")))
    # A sink without a coordinator runs its own tasks (the mirror's transactions); the others host participants.
    run = run_task if plugin is None or plugin.coordinated else self_committing_sink(plugin).run_task
    try:
        run(task.connector.name, task.task_index, partitions, shutting_down, task_epoch=task.epoch, heartbeat=beat)
    except Exception as exc:
        log.exception("%s: task %d failed", task.connector.name, task.task_index)
        runtime_state.task_failed(task.pk, task.epoch, exc, outage=outage(exc))
        return
    # (A runner can also learn it was superseded other than by its heartbeat, and end on its own: a mirror's
    # task fenced on the target by the supervisor, which moved its partitions. Its successor may start now.)
    if ended_by == "superseded" or not runtime_state.task_released(
        task.pk, task.epoch, stopped=ended_by == DesiredState.STOPPED
    ):
        runtime_state.task_vacated(task.pk, worker_id())


def assigned_partitions(name: str, task_index: int, tasks: int) -> list[TP]:
    """Round-robin share of the connector's partitions for one task."""
    _, config = connector_config(name)
    admin = admin_client(settings.KAFKA_BOOTSTRAP_SERVERS, config.raw)
    return resolve_partitions(admin, config.topics, config.topics_regex)[task_index::tasks]
