"""The mirror's checkpoints, as MirrorMaker 2's MirrorCheckpointConnector makes them: the source cluster's
consumer groups' committed offsets, translated through the offset syncs the mirror's tasks write
(``sinks.mirror.syncs``), to ``<source alias>.checkpoints.internal`` on the target (the dots are the
replication policy's separator); and with ``sync.group.offsets.enabled``, committed to the same groups there,
so that a consumer that fails over to the target resumes where it left off.

One runner per mirror, beside its task 0 (``sinks.mirror.runtime``). It reads the syncs read_committed:
a sync is visible only once the transaction of its records committed, so a checkpoint never points past a
record that is not on the target.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from sinks.mirror.engine import ensure_internal_topic, group_id
from sinks.mirror.settings import MirrorSettings
from sinks.mirror.syncs import (
    HEARTBEATS_TOPIC,
    Checkpoint,
    Heartbeat,
    OffsetSync,
    OffsetSyncStore,
)

log = logging.getLogger(__name__)

# Group states in which a group has no member on the target: its offsets may be set there.
INACTIVE_GROUP_STATES = {"EMPTY", "DEAD", "UNKNOWN"}


@dataclass(frozen=True)
class Translated:
    """One partition of a group's translation: its offset on the source and where it resumes on the target."""

    topic: str  # the replica's name on the target
    partition: int
    upstream: int
    downstream: int


class Heartbeats:
    """MirrorMaker 2's MirrorHeartbeatConnector: a heartbeat to the source's ``heartbeats`` topic every
    emit.heartbeats.interval.seconds; the mirror's tasks replicate it, which proves the path end to end."""

    def __init__(self, settings: MirrorSettings, source_admin: AdminClient) -> None:
        self.settings = settings
        self.admin = source_admin
        self.producer = Producer({**settings.clients("source"), "enable.idempotence": True})

    def start(self) -> None:
        ensure_internal_topic(self.admin, HEARTBEATS_TOPIC, self.settings.heartbeats_replication_factor)

    def beat(self) -> None:
        heartbeat = Heartbeat(self.settings.source_alias, self.settings.target_alias, int(time.time() * 1000))
        self.producer.produce(HEARTBEATS_TOPIC, value=heartbeat.value(), key=heartbeat.key(), partition=0)
        if self.producer.flush(30) > 0:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "a heartbeat not acknowledged in 30 s"))

    def close(self) -> None:
        self.producer.flush(10)


class Checkpoints:
    """MirrorMaker 2's MirrorCheckpointConnector: each selected source group's committed offsets, translated
    through the offset syncs, to the target's checkpoints topic; and with sync.group.offsets.enabled, into
    the same groups on the target."""

    def __init__(self, connector: str, settings: MirrorSettings, source_admin: AdminClient) -> None:
        self.connector = connector
        self.settings = settings
        self.source_admin = source_admin
        self.target_admin = AdminClient(settings.clients("target"))
        self.syncs = Consumer(
            {
                **settings.clients("target"),
                "group.id": f"sinkadmin-mirror-{connector}-checkpoints",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
            }
        )
        self.producer = Producer({**settings.clients("target"), "enable.idempotence": True, "linger.ms": 5})
        self.store = OffsetSyncStore()
        # The last checkpoint written per (group, replica topic, partition): only changes are written.
        self.emitted: dict[tuple[str, str, int], tuple[int, int]] = {}
        self.latest: list[Checkpoint] = []
        self._groups: list[str] = []
        self._groups_listed_at = float("-inf")

    def start(self) -> None:
        s = self.settings
        ensure_internal_topic(self.target_admin, s.checkpoints_topic, s.checkpoints_replication_factor)
        # (The tasks create the syncs topic too; whichever starts first.)
        ensure_internal_topic(self.target_admin, s.offset_syncs_topic, s.offset_syncs_replication_factor)
        self.syncs.assign([TopicPartition(s.offset_syncs_topic, 0, OFFSET_BEGINNING)])

    def read_syncs(self, timeout: float = 10.0) -> int:
        """Read the offset syncs committed since the last read, up to the topic's end; how many."""
        read = 0
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            messages = self.syncs.consume(10_000, 0.2)
            if not messages:
                break
            found = []
            at_end = False
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        at_end = True
                        continue
                    raise KafkaException(error)
                key, value = message.key(), message.value()
                if key is not None and value is not None:  # (a tombstone deletes nothing here)
                    found.append(OffsetSync.parse(key, value))
            self.store.add(found)
            read += len(found)
            if at_end:
                break
        return read

    def groups(self) -> list[str]:
        """The source consumer groups to checkpoint (listed every refresh.groups.interval.seconds)."""
        if time.monotonic() - self._groups_listed_at >= self.settings.refresh_groups_s:
            listed = self.source_admin.list_consumer_groups(request_timeout=30).result(30)
            own = group_id(self.connector)  # (the mirror's own: it commits nothing on the source)
            self._groups = sorted(
                g.group_id for g in listed.valid if g.group_id != own and self.settings.selects_group(g.group_id)
            )
            self._groups_listed_at = time.monotonic()
        return self._groups

    def translate(self) -> list[Checkpoint]:
        """Each selected group's committed offsets on the mirrored topics, translated (partitions with no
        copied record at or before the group's offset have none)."""
        found = []
        for group in self.groups():
            for tp in _group_offsets(self.source_admin, group):
                if not self.settings.selects(tp.topic):
                    continue
                downstream = self.store.translate(tp.topic, tp.partition, tp.offset)
                if downstream is not None:
                    replica = self.settings.target_topic(tp.topic)
                    found.append(Checkpoint(group, replica, tp.partition, tp.offset, downstream, tp.metadata or ""))
        return found

    def emit(self) -> int:
        """Write the checkpoints that changed; how many."""
        self.latest = self.translate()
        topic = self.settings.checkpoints_topic
        changed = [
            c for c in self.latest if self.emitted.get((c.group, c.topic, c.partition)) != (c.upstream, c.downstream)
        ]
        for checkpoint in changed:
            self.producer.produce(topic, value=checkpoint.value(), key=checkpoint.key(), partition=0)
        if self.producer.flush(30) > 0:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "checkpoints not acknowledged in 30 s"))
        for checkpoint in changed:
            self.emitted[(checkpoint.group, checkpoint.topic, checkpoint.partition)] = (
                checkpoint.upstream,
                checkpoint.downstream,
            )
        return len(changed)

    def sync_group_offsets(self) -> int:
        """Commit the checkpoints to the same groups on the target: a group with no member there, a partition
        whose offset there is behind (a consumer that moved on at the target is never rewound). How many."""
        by_group: dict[str, list[Checkpoint]] = {}
        for checkpoint in self.latest:
            by_group.setdefault(checkpoint.group, []).append(checkpoint)
        if not by_group:
            return 0
        described = self.target_admin.describe_consumer_groups(list(by_group), request_timeout=30)
        synced = 0
        for group, checkpoints in sorted(by_group.items()):
            try:
                state = described[group].result(30).state.name
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.GROUP_ID_NOT_FOUND:
                    raise
                state = "DEAD"
            if state not in INACTIVE_GROUP_STATES:
                log.debug("%s: group %s is %s on the target; its offsets are not synced", self.connector, group, state)
                continue
            current = {(tp.topic, tp.partition): tp.offset for tp in _group_offsets(self.target_admin, group)}
            ahead = [
                TopicPartition(c.topic, c.partition, c.downstream)
                for c in checkpoints
                if current.get((c.topic, c.partition), -1) < c.downstream
            ]
            if ahead:
                request = [ConsumerGroupTopicPartitions(group, ahead)]
                self.target_admin.alter_consumer_group_offsets(request, request_timeout=30)[group].result(30)
                synced += len(ahead)
        return synced

    def close(self) -> None:
        self.syncs.close()
        self.producer.flush(10)


class CheckpointRunner:
    """What runs beside a mirror's tasks, each at its interval, as MirrorMaker 2 runs its checkpoint and
    heartbeat connectors beside the source connector: the checkpoints (with emit.checkpoints.enabled) and the
    heartbeats (with emit.heartbeats.enabled). Only the enabled ones have clients."""

    def __init__(self, connector: str, settings: MirrorSettings) -> None:
        self.connector = connector
        self.settings = settings
        self.checkpoints: Checkpoints | None = None
        self.heartbeats: Heartbeats | None = None
        if settings.emit_checkpoints or settings.emit_heartbeats:
            source = AdminClient(settings.clients("source"))  # (one client of the source's admin API for both)
            if settings.emit_checkpoints:
                self.checkpoints = Checkpoints(connector, settings, source)
            if settings.emit_heartbeats:
                self.heartbeats = Heartbeats(settings, source)
        # Why each part's last round failed, while it does (for the task's status: the records are still
        # mirrored, but a failover would resume from old checkpoints, or the heartbeats stopped).
        self.failures: dict[str, str] = {}

    @property
    def failure(self) -> str:
        """What fails, for the task's status ("" when nothing does)."""
        # (Read from the task's thread while the runner's writes it: a copy, which the GIL makes whole.)
        return "; ".join(f"{part} failing: {why}" for part, why in sorted(dict(self.failures).items()))

    def run(self, stop: Callable[[], bool]) -> None:
        """Each part at its interval until ``stop()``. A round that fails (a cluster out of reach, a topic it
        may not write) is shown in ``failure``, logged once per cause, and tried again at the next interval:
        the mirror's copying goes on meanwhile."""
        s = self.settings
        started: set[Callable[[], None]] = set()  # (the parts' start, once it worked)
        next_emit = next_sync = next_beat = time.monotonic()
        try:
            while not stop():
                now = time.monotonic()
                if self.heartbeats is not None and now >= next_beat:
                    next_beat = now + s.heartbeats_interval_s
                    self._round("heartbeats", started, self.heartbeats.start, self.heartbeats.beat)
                if self.checkpoints is not None and now >= next_emit:
                    next_emit = now + s.checkpoints_interval_s
                    self._round("checkpoints", started, self.checkpoints.start, self._checkpoint)
                if self.checkpoints is not None and s.sync_group_offsets and now >= next_sync:
                    next_sync = now + s.sync_group_offsets_interval_s
                    self._round("group offset sync", started, self.checkpoints.start, self._sync)
                time.sleep(0.2)
        finally:
            self.close()

    def _checkpoint(self) -> None:
        assert self.checkpoints is not None
        self.checkpoints.read_syncs()
        written = self.checkpoints.emit()
        if written:
            log.info("%s: %d checkpoint(s) written", self.connector, written)

    def _sync(self) -> None:
        assert self.checkpoints is not None
        synced = self.checkpoints.sync_group_offsets()
        if synced:
            log.info("%s: %d group offset(s) synced to the target", self.connector, synced)

    def _round(
        self, part: str, started: set[Callable[[], None]], start: Callable[[], None], work: Callable[[], None]
    ) -> None:
        """One round of ``part`` (its ``start`` first, until that has worked once), its failure noted."""
        try:
            if start not in started:
                start()
                started.add(start)
            work()
        except Exception as exc:
            kafka = isinstance(exc, KafkaException)
            failure = str(exc) if kafka else f"{type(exc).__name__}: {exc}"
            if self.failures.get(part) != failure:  # (once per cause, not at every interval)
                log.warning("%s: %s failing: %s; trying again", self.connector, part, failure, exc_info=not kafka)
            self.failures[part] = failure
        else:
            if self.failures.pop(part, None) is not None:
                log.info("%s: %s work again", self.connector, part)

    def close(self) -> None:
        for part in (self.checkpoints, self.heartbeats):
            if part is not None:
                part.close()


def _group_offsets(admin: AdminClient, group: str) -> list[TopicPartition]:
    """The offsets ``group`` has committed on ``admin``'s cluster (none for a group it does not know)."""
    request = [ConsumerGroupTopicPartitions(group)]
    try:
        listed = admin.list_consumer_group_offsets(request, request_timeout=30)[group].result(30)
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND:
            return []
        raise
    return [tp for tp in listed.topic_partitions or [] if tp.offset >= 0]


def translated_offsets(settings: MirrorSettings, group: str, timeout: float = 30.0) -> list[Translated]:
    """A group's offsets for the target, as its latest checkpoints say (what MirrorMaker 2's
    ``RemoteClusterUtils.translateOffsets`` returns): the checkpoints topic read to its end."""
    topic = settings.checkpoints_topic
    consumer = Consumer(
        {
            **settings.clients("target"),
            "group.id": f"sinkadmin-translate-{group}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    latest: dict[tuple[str, int], Translated] = {}
    try:
        listed = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if listed is None or listed.error is not None:
            return []  # (no checkpoint was ever written)
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    break
                raise KafkaException(error)
            key, value = message.key(), message.value()
            if key is None or value is None:
                continue
            checkpoint = Checkpoint.parse(key, value)
            if checkpoint.group == group:
                latest[(checkpoint.topic, checkpoint.partition)] = Translated(
                    checkpoint.topic, checkpoint.partition, checkpoint.upstream, checkpoint.downstream
                )
        else:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"{topic} not read to its end in {timeout:.0f} s"))
    finally:
        consumer.close()
    return [latest[k] for k in sorted(latest)]
