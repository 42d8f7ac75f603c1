"""The Kafka mirror's engine: one task copies its source partitions to the target cluster in transactions.

This is KIP-656's transactional sink: each task's producer has a stable
``transactional.id`` (connector and task), so ``init_transactions`` fences
any earlier incarnation of the task (a zombie) on the target cluster itself.
One transaction holds a batch of records and the source offsets after them,
sent to a consumer group on the **target** cluster (named from the
connector) with ``send_offsets_to_transaction``: records and offsets commit
together or not at all, and a task that starts (again, or elsewhere) reads
its resume points from that group. The target cluster is the truth; no
coordinator and no ledger are needed for exactly-once, unlike the table
sinks, whose tables cannot take part in a Kafka transaction.

With ``transaction.producer=false`` the records are produced idempotently
and the offsets committed to the same group after the batch is acknowledged:
at least once (a task killed between the two copies the batch again).

Key, value, headers and timestamp are copied as they are; the source
partition maps to the same target partition of the replica topic, created
with the source's partition count (and its topic configs, with
``sync.topic.configs.enabled``).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

from sinks.mirror.settings import MirrorSettings
from sinks.mirror.syncs import Heartbeat, OffsetSync, is_heartbeats_topic, syncs_for
from workers.failpoints import failpoint

log = logging.getLogger(__name__)


class Fenced(Exception):
    """A newer incarnation of this task took over its transactional id: this one must stop."""


class ClusterRefused(Exception):
    """A cluster refused the mirror's credentials or its TLS handshake failed: librdkafka retries those
    forever, but trying again changes nothing, so the task fails with the reason (as Kafka's Java client
    raises SaslAuthenticationException)."""


class IntoItself(Exception):
    """A mirror with IdentityReplicationPolicy whose source and target are one cluster."""


class ClusterUnreachable(Exception):
    """A cluster did not answer the mirror's task in time: an outage (its cause is the client's KafkaException),
    so the task fails with this reason and is started again after its back-off for as long as it lasts."""


# How long a task's start waits for the target's transaction coordinator, in calls of INIT_ATTEMPT_S.
INIT_TRANSACTIONS_S = 30
INIT_ATTEMPT_S = 5

# The client errors that say a cluster refuses the mirror, whatever how often it is asked.
REFUSALS = (KafkaError._AUTHENTICATION, KafkaError._SSL)


class OutcomeUnknown(Exception):
    """A transaction could be neither confirmed nor aborted (the target cluster stalled through every retry).

    Rewinding to the target's offsets now could copy its records again if it
    commits later, so this runner ends instead: the next runner of the task
    calls ``init_transactions``, which completes or aborts it before the
    resume points are read.
    """


# How many times a transaction's offsets or commit are retried in place on a retriable error (each waits
# up to 30 s) before the runner gives up (OutcomeUnknown).
TRANSACTION_RETRIES = 5


FENCED_CODES = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)


def kafka_error(exc: BaseException) -> KafkaError | None:
    """The Kafka error behind ``exc``: confluent-kafka raises a producer's fatal error (a fence) from
    whichever call meets it first, a delivery callback's included, where it surfaces as a SystemError."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, KafkaException) and isinstance(seen.args[0], KafkaError):
            return seen.args[0]
        seen = seen.__cause__ or seen.__context__
    return None


def group_id(connector: str) -> str:
    """The target cluster's consumer group that holds the mirror's offsets."""
    return f"sinkadmin-mirror-{connector}"


def target_group(connector: str, settings: MirrorSettings, **more: Any) -> Consumer:
    """A client of the mirror's group on the target cluster (it never joins the group: it reads and
    commits its offsets)."""
    return Consumer(
        {
            **settings.clients("target"),
            "group.id": group_id(connector),
            "enable.auto.commit": False,
            **more,
        }
    )


def committed_offsets(
    group: Consumer, settings: MirrorSettings, partitions: list[tuple[str, int]]
) -> dict[tuple[str, int], int]:
    """The next source offset of each partition that the target group holds one for (keyed by the replica
    topic's partitions there)."""
    if not partitions:
        return {}
    found = group.committed([TopicPartition(settings.target_topic(t), p) for t, p in partitions], timeout=30)
    offsets = {}
    for (topic, partition), committed in zip(partitions, found, strict=True):
        if committed.error is not None:
            raise KafkaException(committed.error)
        if committed.offset >= 0:
            offsets[(topic, partition)] = committed.offset
    return offsets


def transactional_id(connector: str, task_index: int) -> str:
    return f"sinkadmin-mirror-{connector}-{task_index}"


def source_partitions(admin: AdminClient, settings: MirrorSettings) -> dict[str, int]:
    """The source topics the mirror selects, with their partition counts."""
    listed = admin.list_topics(timeout=10).topics
    return {name: len(meta.partitions) for name, meta in sorted(listed.items()) if settings.selects(name)}


def assigned(partitions: dict[str, int], task_index: int, tasks: int) -> list[tuple[str, int]]:
    """This task's share of the source partitions: every ``tasks``-th of them in (topic, partition) order."""
    every = [(t, p) for t, count in sorted(partitions.items()) for p in range(count)]
    return [tp for n, tp in enumerate(every) if n % tasks == task_index]


@dataclass
class Copied:
    """What a batch's records became: per source partition their offsets, per replica partition their
    offsets there (from the delivery reports), and any delivery that failed."""

    upstream: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    downstream: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    failed: list[KafkaError] = field(default_factory=list)


def ensure_internal_topic(admin: AdminClient, name: str, replication_factor: int) -> None:
    """A compacted, single-partition internal topic on ``admin``'s cluster (MM2's offset syncs and
    checkpoints topics), created unless there."""
    if name in admin.list_topics(timeout=10).topics:
        return
    topic = NewTopic(
        name, num_partitions=1, replication_factor=replication_factor, config={"cleanup.policy": "compact"}
    )
    try:
        admin.create_topics([topic])[name].result(30)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


@dataclass
class Refusal:
    """Why a cluster refused the mirror (REFUSALS), as a client's error callback last reported it.

    Kept apart from the task: a client holds its callback, so a callback holding the task would make the task
    and each of its clients a reference cycle, which only Python's full collections free, minutes later in an
    idle worker; until then the clients of a task that had ended (a target out of reach) kept connecting."""

    reason: str | None = None

    def noted_by(self, side: str, bootstrap: str) -> dict[str, Any]:
        """An ``error_cb`` for one cluster's clients that notes a refusal."""

        def noted(error: KafkaError) -> None:
            if error.code() in REFUSALS:
                self.reason = f"the {side} cluster ({bootstrap}) refused the mirror: {error.str()}"

        return {"error_cb": noted}


@dataclass(frozen=True)
class Transaction:
    """What one committed transaction (or batch, at least once) copied: per source partition the offsets
    [start, end) it moved over and how many records those held."""

    ranges: dict[tuple[str, int], tuple[int, int, int]]
    records: int
    bytes: int
    started_at: float  # time.time()


@dataclass
class MirrorTask:
    connector: str
    task_index: int
    tasks: int
    settings: MirrorSettings
    # A fixed share of the source partitions (the product's supervisor assigns them, and restarts the task
    # when they change); None: every ``tasks``-th of the selected partitions, followed as they change.
    assignment: list[tuple[str, int]] | None = None
    counts: dict[str, int] = field(default_factory=dict)  # source partitions per topic, as last listed
    copied: int = 0
    transactions: int = 0
    # Called after each committed transaction.
    on_commit: Callable[[Transaction], None] | None = None

    def __post_init__(self) -> None:
        s = self.settings
        self.refusal = Refusal()
        source_errors = self.refusal.noted_by("source", s.source_bootstrap)
        target_errors = self.refusal.noted_by("target", s.target_bootstrap)
        self.source_admin = AdminClient({**s.clients("source"), **source_errors})
        self.target_admin = AdminClient({**s.clients("target"), **target_errors})
        self.source = Consumer(
            {
                **s.clients("source"),
                "group.id": group_id(self.connector),
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "auto.offset.reset": s.auto_offset_reset,
                **source_errors,
            }
        )
        # The group on the target cluster: its committed offsets are where the task resumes.
        self.offsets = target_group(self.connector, s, **target_errors)
        producer: dict[str, Any] = {
            # A transactional call blocks until the request in flight is answered or times out, whatever
            # its own timeout (librdkafka's default 60 s): with a stalled target, a runner asked to stop
            # would wait that long, twice. Kafka's Java producer gives a request 30 s.
            "socket.timeout.ms": 30_000,
            **s.clients("target"),
            "enable.idempotence": True,
            "linger.ms": 5,
            **target_errors,
        }
        if s.exactly_once:
            producer["transactional.id"] = transactional_id(self.connector, self.task_index)
        self.producer = Producer(producer)
        self.partitions: list[tuple[str, int]] = []
        # Whether the runner is asked to stop (run's ``stop``): checked between a transaction's retries too.
        self._stop: Callable[[], bool] = lambda: False
        # The next source offset of each partition, as the target holds it: where the next transaction starts.
        self.positions: dict[tuple[str, int], int] = {}
        self._listed_at = 0.0
        self._stale = False  # the consumer's positions are past a batch that did not commit
        # Each partition's last offset sync (source offset, target offset): syncs_for starts from it; and
        # those of the batch being sent, until it commits.
        self._last_syncs: dict[tuple[str, int], tuple[int, int] | None] = {}
        # The time (ms) of the latest heartbeat replicated, per heartbeats partition.
        self.heartbeats: dict[tuple[str, int], int] = {}
        self._pending_syncs: dict[tuple[str, int], tuple[int, int] | None] = {}

    def check_refused(self) -> None:
        if self.refusal.reason is not None:
            raise ClusterRefused(self.refusal.reason)

    # Starting.

    def start(self) -> None:
        if self.settings.identity:
            self._check_not_into_itself()
        if self.settings.exactly_once:
            # Fences every earlier producer of this id: a zombie's open transaction is aborted.
            self._init_transactions()
        if self.settings.emit_offset_syncs:
            ensure_internal_topic(
                self.target_admin,
                self.settings.offset_syncs_topic,
                self.settings.offset_syncs_replication_factor,
            )
        self.refresh(force=True)

    def _init_transactions(self) -> None:
        """``init_transactions``, in calls of INIT_ATTEMPT_S (librdkafka resumes a call that timed out), with
        ``stop()`` asked between them (the runner's heartbeat beats there): one call of INIT_TRANSACTIONS_S, the
        heartbeat timeout, had the supervisor take the runner for dead, and the runner's failure was lost."""
        deadline = time.monotonic() + INIT_TRANSACTIONS_S
        while True:
            try:
                self.producer.init_transactions(max(0.1, min(INIT_ATTEMPT_S, deadline - time.monotonic())))
                return
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError._TIMED_OUT:
                    raise
                if time.monotonic() >= deadline:
                    raise ClusterUnreachable(
                        f"the target cluster ({self.settings.target_bootstrap}) did not answer in "
                        f"{INIT_TRANSACTIONS_S} s: the mirror's transactional producer could not be started "
                        f"({exc.args[0].str()})"
                    ) from exc
            if self._stop():
                raise Fenced(f"{self.connector} task {self.task_index} was asked to stop while it started")

    def _check_not_into_itself(self) -> None:
        """IdentityReplicationPolicy keeps the topics' names: into the cluster it reads, each record would be
        written into its own topic and read again, without end. The config's check compares the addresses,
        which name one cluster in many ways (localhost and 127.0.0.1, a broker of it or another); the
        clusters' ids tell."""
        source = self.source_admin.list_topics(timeout=10).cluster_id
        target = self.target_admin.list_topics(timeout=10).cluster_id
        if source is not None and source == target:
            raise IntoItself(
                f"the source ({self.settings.source_bootstrap}) and the target ({self.settings.target_bootstrap}) "
                f"are one cluster ({source}): IdentityReplicationPolicy would write each topic into itself, "
                "again and again; use DefaultReplicationPolicy, whose replicas are named after the source alias"
            )

    def refresh(self, force: bool = False) -> None:
        """Pick up new source topics and partitions (every refresh.topics.interval.seconds)."""
        if not force and (
            self.assignment is not None or time.monotonic() - self._listed_at < self.settings.refresh_topics_s
        ):
            return
        self._listed_at = time.monotonic()
        counts = source_partitions(self.source_admin, self.settings)
        if counts != self.counts:
            self._ensure_targets(counts)
            self.counts = counts
        mine = self.assignment if self.assignment is not None else assigned(counts, self.task_index, self.tasks)
        added = [tp for tp in mine if tp not in self.partitions]
        if added:
            self._assign(self._resume_points(added))
            self.partitions.extend(added)
            log.info("%s task %d: mirroring %d partitions", self.connector, self.task_index, len(self.partitions))

    def _rewind(self) -> None:
        """Seek every partition back to the target's offsets (after a batch that did not commit)."""
        points = self._resume_points(self.partitions)  # (first: a target that cannot be asked changes nothing)
        self.source.incremental_unassign([TopicPartition(t, p) for t, p in self.partitions])
        self._assign(points)
        self._stale = False

    def _assign(self, points: list[TopicPartition]) -> None:
        self.source.incremental_assign(points)
        self.positions.update({(p.topic, p.partition): p.offset for p in points})

    def _resume_points(self, partitions: list[tuple[str, int]]) -> list[TopicPartition]:
        """Each partition's next source offset, from the target cluster's group (the truth)."""
        committed = committed_offsets(self.offsets, self.settings, partitions)
        points = []
        for topic, partition in partitions:
            # No offset yet: the log's start or end, as consumer.auto.offset.reset says, asked for
            # explicitly (never the source cluster's own committed offsets, which OFFSET_INVALID
            # would make the consumer look up: they are not the truth).
            start = committed.get((topic, partition))
            if start is None:
                low, high = self._watermarks(topic, partition)
                start = high if self.settings.auto_offset_reset == "latest" else low
            points.append(TopicPartition(topic, partition, start))
        return points

    def _watermarks(self, topic: str, partition: int) -> tuple[int, int]:
        try:
            return self.source.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._UNKNOWN_PARTITION:
                raise
            # A partition (or topic) newer than the consumer's metadata: refresh it, and ask again.
            self.source.list_topics(topic, timeout=30)
            return self.source.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)

    def _ensure_targets(self, counts: dict[str, int]) -> None:
        """Replica topics with the source's partition count (and configs): created, or grown to it."""
        existing = self.target_admin.list_topics(timeout=10).topics
        configs = self._source_configs([t for t in counts if self.settings.target_topic(t) not in existing])
        new = [
            NewTopic(
                self.settings.target_topic(t),
                num_partitions=n,
                replication_factor=self.settings.replication_factor,
                config=configs.get(t, {}),
            )
            for t, n in counts.items()
            if self.settings.target_topic(t) not in existing
        ]
        grown = [
            NewPartitions(self.settings.target_topic(t), n)
            for t, n in counts.items()
            if self.settings.target_topic(t) in existing and len(existing[self.settings.target_topic(t)].partitions) < n
        ]
        for futures in (
            self.target_admin.create_topics(new) if new else {},
            self.target_admin.create_partitions(grown) if grown else {},
        ):
            for name, future in futures.items():
                try:
                    future.result(30)
                except KafkaException as exc:
                    # Another task created (or grew) it first.
                    if exc.args[0].code() not in (KafkaError.TOPIC_ALREADY_EXISTS, KafkaError.INVALID_PARTITIONS):
                        raise
                    log.debug("%s: %s", name, exc)
        for source_topic, count in counts.items():
            if self.counts.get(source_topic) != count:
                self._await_producer_metadata(self.settings.target_topic(source_topic), count)

    def _await_producer_metadata(self, topic: str, count: int, timeout: float = 60.0) -> None:
        """The producer learns of a new topic's or partition's existence (whichever task made it)
        before it is asked to write to it. A broker's metadata lags the controller's for a moment
        after a create, and librdkafka would otherwise keep the stale count until its periodic
        refresh (``topic.metadata.refresh.interval.ms``, minutes): ask until the count shows."""
        deadline = time.monotonic() + timeout
        while True:
            listed = self.producer.list_topics(topic, timeout=30).topics.get(topic)
            known = len(listed.partitions) if listed is not None and listed.error is None else 0
            if known >= count:
                return
            if time.monotonic() > deadline:
                raise KafkaException(
                    KafkaError(
                        KafkaError._UNKNOWN_PARTITION,
                        f"{topic} on the target shows {known} partition(s), not {count}, {timeout:.0f}s after "
                        "it was created or grown",
                    )
                )
            time.sleep(0.25)

    def _source_configs(self, topics: list[str]) -> dict[str, dict[str, str]]:
        """The source topics' own settings (not defaults, nor those config.properties.exclude names), for their
        replicas."""
        if not self.settings.sync_topic_configs or not topics:
            return {}
        found: dict[str, dict[str, str]] = {}
        resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics]
        for resource, future in self.source_admin.describe_configs(resources).items():
            entries = future.result(30)
            found[resource.name] = {
                name: entry.value
                for name, entry in entries.items()
                if entry.value is not None
                and not entry.is_default
                and not entry.is_read_only
                and not entry.is_sensitive
                and self.settings.copies_setting(name)
            }
        return found

    # Copying.

    def step(self) -> int:
        """Copy one batch (up to the commit interval's worth, or max-records); how many records."""
        if self._stale:
            self._rewind()
        self.refresh()
        deadline = time.monotonic() + self.settings.commit_interval_ms / 1000
        batch: list[Any] = []
        while len(batch) < self.settings.max_records and time.monotonic() < deadline:
            for message in self.source.consume(min(1000, self.settings.max_records - len(batch)), 0.2):
                error = message.error()
                if error is None:
                    batch.append(message)
                elif error.code() != KafkaError._PARTITION_EOF:
                    raise KafkaException(error)
        if not batch:
            return 0
        started_at = time.time()
        ends: dict[tuple[str, int], int] = {}
        counts: dict[tuple[str, int], int] = {}
        size = 0
        for message in batch:
            tp = (message.topic(), message.partition())
            ends[tp] = message.offset() + 1
            counts[tp] = counts.get(tp, 0) + 1
            size += len(message.value() or b"") + len(message.key() or b"")
        self._pending_syncs.clear()
        try:
            self._send(batch, ends)
        except (KafkaException, SystemError) as exc:
            error = kafka_error(exc)
            if error is None:
                raise
            if error.code() in FENCED_CODES:
                raise Fenced(f"{self.connector} task {self.task_index}: fenced by a newer incarnation") from exc
            # Start again from what the target holds: nothing of this batch is there (or, at
            # least once, the batch is copied again). At the next step, so that a target that
            # cannot be asked now leaves the task to retry, not without partitions.
            self._stale = True
            raise
        # The syncs of a batch that did not commit are gone with it: the next starts from those committed.
        self._last_syncs.update(self._pending_syncs)
        self._pending_syncs.clear()
        self._note_heartbeats(batch)
        self.copied += len(batch)
        self.transactions += 1
        ranges = {tp: (self.positions.get(tp, end - counts[tp]), end, counts[tp]) for tp, end in ends.items()}
        self.positions.update(ends)
        if self.on_commit is not None:
            self.on_commit(Transaction(ranges, len(batch), size, started_at))
        return len(batch)

    def _note_heartbeats(self, batch: list[Any]) -> None:
        """The latest heartbeat each heartbeats partition replicated (committed), by its own time."""
        for message in batch:
            if not is_heartbeats_topic(message.topic(), self.settings.separator):
                continue
            key, value = message.key(), message.value()
            try:
                beat = Heartbeat.parse(key, value) if key is not None and value is not None else None
            except (ValueError, struct.error):
                beat = None  # (not a heartbeat: nothing to show of it)
            if beat is not None:
                tp = (message.topic(), message.partition())
                self.heartbeats[tp] = max(self.heartbeats.get(tp, 0), beat.timestamp)

    def end_offsets(self) -> dict[tuple[str, int], int]:
        """Each partition's end as the consumer last saw it in fetch responses (the last stable offset: it
        reads committed records only); no request is made."""
        ends = {}
        for topic, partition in self.partitions:
            _, high = self.source.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
            if high >= 0:
                ends[(topic, partition)] = high
        return ends

    def _send(self, batch: list[Any], ends: dict[tuple[str, int], int]) -> None:
        offsets = [TopicPartition(self.settings.target_topic(t), p, end) for (t, p), end in ends.items()]
        if not self.settings.exactly_once:
            copied = self._produce(batch)
            if self.producer.flush(30) > 0:
                raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "records not acknowledged in 30 s"))
            # (After the records are acknowledged: a sync never describes a record that is not there.)
            self._produce_syncs(copied)
            if self.producer.flush(30) > 0:
                raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "offset syncs not acknowledged in 30 s"))
            failpoint("mirror.before_commit")  # (a test's task dies here: records sent, offsets not)
            self.offsets.commit(offsets=offsets, asynchronous=False)
            return
        self.producer.begin_transaction()
        try:
            copied = self._produce(batch)
            # (In the records' transaction: a read_committed reader sees a sync once its record is there.)
            self._produce_syncs(copied)
            failpoint("mirror.in_transaction")  # (a test's task dies here: records sent, the transaction open)
            group = self.offsets.consumer_group_metadata()
            self._retrying(lambda: self.producer.send_offsets_to_transaction(offsets, group, 30))
            failpoint("mirror.before_commit")  # (a test's task freezes here: a zombie in the making)
        except KafkaException as exc:
            self._abort(exc)
            raise
        self._retrying(lambda: self.producer.commit_transaction(30))

    def _retrying(self, call: Callable[[], None]) -> None:
        """Call a transactional step, again on a retriable error (librdkafka's contract: the same call is
        repeated, never an abort in its place, since a commit that timed out may still complete).

        A runner asked to stop between tries (stopped, or replaced by a newer
        runner while the target stalled) ends with the outcome unknown rather
        than retry on: each try can wait a minute."""
        for attempt in range(TRANSACTION_RETRIES):
            if attempt > 0 and self._stop():
                raise OutcomeUnknown(
                    f"{self.connector} task {self.task_index}: asked to stop while the target cluster had not "
                    "confirmed a transaction; the task's next runner settles it before resuming"
                )
            try:
                call()
                return
            except KafkaException as exc:
                error = exc.args[0]
                if error.fatal() or error.txn_requires_abort() or not error.retriable():
                    self._abort(exc)
                    raise
                log.warning("%s task %d: %s; retrying", self.connector, self.task_index, error.str())
        raise OutcomeUnknown(
            f"{self.connector} task {self.task_index}: the target cluster did not confirm a transaction in "
            f"{TRANSACTION_RETRIES} tries; the task's next runner settles it before resuming"
        )

    def _abort(self, cause: KafkaException) -> None:
        """Abort the open transaction after ``cause``: nothing of the batch becomes visible, and the task
        starts again from the target's offsets. (A fatal error, a fence, leaves nothing to abort.)"""
        if cause.args[0].fatal():
            return
        try:
            self.producer.abort_transaction(30)
        except KafkaException as exc:
            raise OutcomeUnknown(
                f"{self.connector} task {self.task_index}: a failed transaction could not be aborted ({cause}); "
                "the task's next runner settles it before resuming"
            ) from exc

    def _produce(self, batch: list[Any]) -> Copied:
        """Send the batch's records to their replicas (flushed, under exactly-once); what they became."""
        copied = Copied()

        def delivered(err: KafkaError | None, message: Any) -> None:
            if err is not None:
                copied.failed.append(err)
            else:
                # (In the order produced, per partition: an idempotent producer keeps it.)
                copied.downstream.setdefault((message.topic(), message.partition()), []).append(message.offset())

        for message in batch:
            kind, stamp = message.timestamp()
            copied.upstream.setdefault((message.topic(), message.partition()), []).append(message.offset())
            while True:
                try:
                    self.producer.produce(
                        self.settings.target_topic(message.topic()),
                        value=message.value(),
                        key=message.key(),
                        partition=message.partition(),
                        headers=message.headers(),
                        timestamp=stamp if kind != 0 else 0,
                        on_delivery=delivered,
                    )
                    break
                except BufferError:
                    self.producer.poll(0.05)
        if not self.settings.exactly_once:
            return copied
        self.producer.flush(30)
        if copied.failed:
            raise KafkaException(copied.failed[0])
        return copied

    def _produce_syncs(self, copied: Copied) -> None:
        """Offset syncs of the records copied (``syncs_for``), to the offset syncs topic (after flushing)."""
        if not self.settings.emit_offset_syncs:
            return
        if copied.failed:
            raise KafkaException(copied.failed[0])
        topic = self.settings.offset_syncs_topic
        for (source_topic, partition), upstream in copied.upstream.items():
            downstream = copied.downstream.get((self.settings.target_topic(source_topic), partition), [])
            if len(downstream) != len(upstream):
                raise KafkaException(
                    KafkaError(KafkaError._FAIL, f"{len(downstream)} of {len(upstream)} records acknowledged")
                )
            chosen, last = syncs_for(
                list(zip(upstream, downstream, strict=True)),
                self._last_syncs.get((source_topic, partition)),
                self.settings.offset_lag_max,
            )
            self._pending_syncs[(source_topic, partition)] = last
            for u, d in chosen:
                sync = OffsetSync(source_topic, partition, u, d)
                self.producer.produce(topic, value=sync.value(), key=sync.key(), partition=0)
        if self.settings.exactly_once:
            self.producer.flush(30)

    def run(
        self,
        stop: Callable[[], bool],
        *,
        paused: Callable[[], bool] | None = None,
        on_start: Callable[[MirrorTask], None] | None = None,
    ) -> None:
        """Copy until ``stop()``; nothing while ``paused()``. ``on_start`` runs once the task knows its
        partitions and their resume points."""
        self._stop = stop
        try:
            try:
                self.start()
            except KafkaException:
                for client in (self.producer, self.source_admin, self.target_admin):
                    client.poll(0)  # (serves the clients' error callbacks)
                self.check_refused()  # (the reason, rather than the failure it caused)
                raise
            if on_start is not None:
                on_start(self)
            while not stop():
                self.check_refused()
                if paused is not None and paused():
                    time.sleep(0.5)
                    continue
                try:
                    self.step()
                except KafkaException as exc:
                    if exc.args[0].fatal():
                        raise
                    # The batch was aborted (or, at least once, will be copied again) and the
                    # task rewound to the target's offsets: try again.
                    log.warning("%s task %d: %s; retrying", self.connector, self.task_index, exc.args[0].str())
                    time.sleep(1.0)
        finally:
            self.close()

    def close(self) -> None:
        self.source.close()
        self.offsets.close()
        if not self.settings.exactly_once:
            # (A transactional producer has nothing to flush outside a transaction: what it sent is
            # committed, or aborted by the broker; and fenced, flushing raises the fence again.)
            self.producer.flush(10)


def main(argv: list[str] | None = None) -> int:
    """Run one mirror task in this process (``python -m sinks.mirror.engine``): the engine without the
    product's lifecycle around it, for tests and for running a task by hand."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--connector", required=True)
    parser.add_argument("--config", required=True, help="the mirror's config, as JSON")
    parser.add_argument("--task-index", type=int, default=0)
    parser.add_argument("--tasks", type=int, default=1)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    stopping = False

    def stop(*_: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    from connectors.config import SinkConfig

    config = SinkConfig.parse({"connector.class": "mirror", **json.loads(args.config)})  # (checked per key)
    task = MirrorTask(args.connector, args.task_index, args.tasks, config.settings)
    try:
        task.run(lambda: stopping)
    except Fenced as exc:
        log.warning("%s", exc)
        return 3
    except OutcomeUnknown as exc:
        log.error("%s", exc)
        return 4
    except ClusterRefused as exc:
        log.error("%s", exc)
        return 5
    return 0


if __name__ == "__main__":
    sys.exit(main())
