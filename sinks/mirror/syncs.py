"""MirrorMaker 2's offset syncs, checkpoints and heartbeats: their records, byte for byte as MM2 writes them
(Kafka's protocol types: a string is an int16 length and UTF-8 bytes, integers big-endian), and the
translation of a source offset through the syncs.

An offset sync pairs a source record's offset with the offset of its copy on the target. The mirror's tasks
write them to ``mm2-offset-syncs.<source alias>.internal`` on the target cluster (MM2's name for
``offset-syncs.topic.location=target``), in the transaction of the records they describe, so a
read_committed reader sees a sync only once its record is there. A checkpoint is a consumer group's
committed source offset with its translation, in ``<source alias>.checkpoints.internal`` on the target,
which MM2's ``RemoteClusterUtils.translateOffsets`` reads. (The dots are the replication policy's separator
for internal topics: ``offset_syncs_topic``.)
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

TP = tuple[str, int]
CHECKPOINT_VERSION = 0


# MirrorMaker 2's internal topics are named with the replication policy's separator (KIP-690, Kafka 3.1), unless
# replication.policy.internal.topic.separator.enabled=false keeps the dots of earlier versions: its
# DefaultReplicationPolicy.internalSeparator(), which IdentityReplicationPolicy inherits.
def internal_separator(separator: str, enabled: bool = True) -> str:
    """The separator in the internal topics' names, for ``replication.policy.separator`` and
    ``replication.policy.internal.topic.separator.enabled``."""
    return separator if enabled else "."


def offset_syncs_topic(source_alias: str, separator: str = ".") -> str:
    """Where the syncs of a mirror from ``source_alias`` go, on its target (MM2's
    DefaultReplicationPolicy.offsetSyncsTopic, named after the source alias for
    offset-syncs.topic.location=target); ``separator``: ``internal_separator``'s."""
    return f"mm2-offset-syncs{separator}{source_alias}{separator}internal"


def checkpoints_topic(source_alias: str, separator: str = ".") -> str:
    """Where the checkpoints of the groups of cluster ``source_alias`` go, on the target (MM2's
    DefaultReplicationPolicy.checkpointsTopic, which RemoteClusterUtils reads)."""
    return f"{source_alias}{separator}checkpoints{separator}internal"


def is_internal_topic(topic: str, separator: str = ".") -> bool:
    """A topic MirrorMaker 2 never mirrors (ReplicationPolicy.isInternalTopic): Kafka's own (``__``, ``.``),
    Kafka Connect's (``-internal``, ``.internal``) and its own (``<separator>internal``)."""
    return topic.startswith(("__", ".")) or topic.endswith((".internal", "-internal", f"{separator}internal"))


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def _read_string(data: bytes, at: int) -> tuple[str, int]:
    (size,) = struct.unpack_from(">h", data, at)
    at += 2
    return data[at : at + size].decode(), at + size


@dataclass(frozen=True, order=True)
class OffsetSync:
    """The source record at ``upstream`` of ``topic``/``partition`` (the source's topic) is at ``downstream``
    of its replica."""

    topic: str
    partition: int
    upstream: int
    downstream: int

    def key(self) -> bytes:
        return _string(self.topic) + struct.pack(">i", self.partition)

    def value(self) -> bytes:
        return struct.pack(">qq", self.upstream, self.downstream)

    @classmethod
    def parse(cls, key: bytes, value: bytes) -> OffsetSync:
        topic, at = _read_string(key, 0)
        (partition,) = struct.unpack_from(">i", key, at)
        upstream, downstream = struct.unpack_from(">qq", value, 0)
        return cls(topic, partition, upstream, downstream)


@dataclass(frozen=True)
class Checkpoint:
    """Consumer group ``group`` committed ``upstream`` on the source for ``topic``/``partition`` (the
    replica's name, as MM2 writes it): on the target it resumes at ``downstream``."""

    group: str
    topic: str
    partition: int
    upstream: int
    downstream: int
    metadata: str = ""

    def key(self) -> bytes:
        return _string(self.group) + _string(self.topic) + struct.pack(">i", self.partition)

    def value(self) -> bytes:
        return struct.pack(">hqq", CHECKPOINT_VERSION, self.upstream, self.downstream) + _string(self.metadata)

    @classmethod
    def parse(cls, key: bytes, value: bytes) -> Checkpoint:
        group, at = _read_string(key, 0)
        topic, at = _read_string(key, at)
        (partition,) = struct.unpack_from(">i", key, at)
        version, upstream, downstream = struct.unpack_from(">hqq", value, 0)
        if version != CHECKPOINT_VERSION:
            raise ValueError(f"a checkpoint of version {version}: only version {CHECKPOINT_VERSION} is known")
        metadata, _ = _read_string(value, struct.calcsize(">hqq"))
        return cls(group, topic, partition, upstream, downstream, metadata)


HEARTBEATS_TOPIC = "heartbeats"


@dataclass(frozen=True)
class Heartbeat:
    """A heartbeat emitted on cluster ``source_alias`` for the flow to ``target_alias`` at ``timestamp``
    (ms): replicated like any record, its copy on the target shows the whole path works."""

    source_alias: str
    target_alias: str
    timestamp: int

    def key(self) -> bytes:
        return _string(self.source_alias) + _string(self.target_alias)

    def value(self) -> bytes:
        return struct.pack(">hq", CHECKPOINT_VERSION, self.timestamp)

    @classmethod
    def parse(cls, key: bytes, value: bytes) -> Heartbeat:
        source, at = _read_string(key, 0)
        target, _ = _read_string(key, at)
        version, timestamp = struct.unpack_from(">hq", value, 0)
        if version != CHECKPOINT_VERSION:
            raise ValueError(f"a heartbeat of version {version}: only version {CHECKPOINT_VERSION} is known")
        return cls(source, target, timestamp)


def is_heartbeats_topic(topic: str, separator: str = ".") -> bool:
    """``heartbeats``, or a replica of one (``east.heartbeats``, ``west.east.heartbeats``): MirrorMaker 2
    replicates them whatever the topics selected."""
    return topic == HEARTBEATS_TOPIC or topic.endswith(f"{separator}{HEARTBEATS_TOPIC}")


def syncs_for(
    pairs: Sequence[tuple[int, int]], previous: tuple[int, int] | None, lag_max: int
) -> tuple[list[tuple[int, int]], tuple[int, int] | None]:
    """Which of one partition's copied records (``pairs``: (source offset, target offset), in order) get an
    offset sync, given the partition's last sync before them; and its last sync after them.

    Each run of records whose offsets advance alike on both sides (no gap in the source from compaction or
    its own transactions, none in the target from the mirror's transaction markers) gets a sync at its first
    and its last record, so any offset inside a run translates exactly; and one at least every ``lag_max``
    records (MM2's offset.lag.max)."""
    chosen: list[tuple[int, int]] = []
    last = previous
    for n, pair in enumerate(pairs):
        before = pairs[n - 1] if n else previous
        starts_run = before is None or pair[0] - before[0] != pair[1] - before[1]
        if starts_run and n and (not chosen or chosen[-1] != before):
            chosen.append(pairs[n - 1])  # (the end of the run before)
        if starts_run or last is None or pair[0] - last[0] >= lag_max or n == len(pairs) - 1:
            chosen.append(pair)
        if chosen:
            last = chosen[-1]
    return chosen, last


@dataclass
class OffsetSyncStore:
    """Every offset sync read so far, per source partition, for translating source offsets to target ones."""

    syncs: dict[TP, list[tuple[int, int]]] = field(default_factory=dict)

    def add(self, syncs: Iterable[OffsetSync]) -> None:
        for sync in syncs:
            known = self.syncs.setdefault((sync.topic, sync.partition), [])
            pair = (sync.upstream, sync.downstream)
            if not known or pair[0] > known[-1][0]:
                known.append(pair)
            elif pair not in known:
                # (Older than the last: a runner after a restart, copying again what was aborted; or a
                # compacted topic read again. Kept in order; a pair for an upstream offset replaces its own.)
                at = bisect.bisect_left(known, (pair[0], -1))
                if at < len(known) and known[at][0] == pair[0]:
                    known[at] = pair
                else:
                    known.insert(at, pair)

    def translate(self, topic: str, partition: int, upstream: int) -> int | None:
        """The target offset a consumer of the replica resumes at to read what follows source offset
        ``upstream`` (a group's committed offset: the next record it reads), never past a record it has not
        read; None when no record at or before ``upstream`` was copied yet.

        The sync at or before ``upstream``: exact when it is at ``upstream``, or when the next sync shows
        that both sides advance alike in between; otherwise one past it, MM2's rule (the records after the
        synced one and before ``upstream`` are read again)."""
        known = self.syncs.get((topic, partition))
        if not known:
            return None
        at = bisect.bisect_right(known, (upstream, 2**63)) - 1
        if at < 0:
            return None
        u, d = known[at]
        if u == upstream:
            return d
        if at + 1 < len(known):
            nu, nd = known[at + 1]
            if nu - u == nd - d:
                return d + (upstream - u)
        return d + 1
