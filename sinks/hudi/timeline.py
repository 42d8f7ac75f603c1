"""The Hudi table's timeline as the sink reads it, through hudi-rs: which completed instant holds a commit.

Hudi's Spark writer copies every write option under
``hoodie.datasource.write.commitmeta.key.prefix`` into the instant's commit
metadata (``extraMetadata``); the sink's options are under ``sinkadmin.``:
the ledger's commit id, the connector, its epoch and the commit's offset
ranges, and the Kafka offsets in the Hudi Kafka Connect sink's format. That
is how a commit finds its instant (DESIGN I4) and a lost ledger is rebuilt
(I2).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from workers.storage import StoragePath

HOODIE = ".hoodie"
# The active timeline's folder in the tables Hudi 1.x writes (table versions 8 and 9).
ACTIVE_TIMELINE = f"{HOODIE}/timeline"
# The prefix Hudi's writer copies write options into the commit metadata with.
META_PREFIX = "sinkadmin."
COMMIT_ID_KEY = "sinkadmin.commit.id"
CONNECTOR_KEY = "sinkadmin.connector"
EPOCH_KEY = "sinkadmin.epoch"
# The commit's offsets, {"topic": {"partition": [start, end]}}.
RANGES_KEY = "sinkadmin.offsets"
# The ends of every partition committed so far, as Hudi's Kafka Connect coordinator writes kafka.commit.offsets:
# "partition=offset,...".
KAFKA_OFFSETS_KEY = "sinkadmin.kafka.commit.offsets"
# The timeline's actions that add records: a copy-on-write table's commits, a merge-on-read table's delta commits.
DATA_ACTIONS = ("commit", "deltacommit")


@dataclass(frozen=True)
class Instant:
    """A completed instant: its time (Hudi's instant id) and action, and the sink's commit metadata."""

    timestamp: str
    action: str
    completed_at_ms: int
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def commit_id(self) -> str | None:
        return self.extra.get(COMMIT_ID_KEY)


def exists(base: StoragePath) -> bool:
    """Whether a Hudi table is at ``base`` (its hoodie.properties)."""
    return base.exists(f"{HOODIE}/hoodie.properties")


def table(base: StoragePath) -> Any:
    """hudi-rs's table at ``base``."""
    from hudi import HudiTableBuilder

    return HudiTableBuilder.from_base_uri(base.uri).with_storage_options(base.storage_options()).build()


def completed_instants(base: StoragePath) -> list[Instant]:
    """The active timeline's completed instants that add records, oldest first, each with its metadata."""
    if not exists(base):
        return []
    timeline = table(base).get_timeline()
    found = []
    for instant in [*timeline.get_completed_commits(), *timeline.get_completed_deltacommits()]:
        if instant.action not in DATA_ACTIONS:
            continue
        metadata = json.loads(timeline.get_instant_metadata_in_json(instant) or "{}")
        extra = {str(k): str(v) for k, v in (metadata.get("extraMetadata") or {}).items()}
        found.append(Instant(instant.timestamp, instant.action, int(instant.epoch_mills), extra))
    return sorted(found, key=lambda i: i.timestamp)


def pending_compactions(base: StoragePath) -> list[str]:
    """The compactions planned (``.compaction.requested``) or executing (``.inflight``) and not complete,
    oldest first. (A completed compaction is a ``commit`` instant, ``<instant>_<completed>.commit``, its
    plan's files kept beside it.)"""
    return sorted(_not_completed(base, (".compaction.requested", ".compaction.inflight")))


def pending_writes(base: StoragePath) -> set[str]:
    """The writes (commits, delta commits) requested on the timeline and not complete: one in flight, or one
    that failed and is not rolled back yet. (Hudi 1's names: ``<instant>.commit.requested``, then
    ``<instant>.inflight``, then ``<instant>_<completed>.commit``.)"""
    return _not_completed(base, (".commit.requested", ".deltacommit.requested"))


def _not_completed(base: StoragePath, started: tuple[str, ...]) -> set[str]:
    """The instants of the active timeline with a file whose name ends in one of ``started`` and no
    completed file (``<instant>_<completed>.<action>``)."""
    names = base.child(ACTIVE_TIMELINE).files()
    begun = {n.split(".")[0] for n in names if n.endswith(started)}
    completed = {n.split(".")[0].split("_")[0] for n in names if "_" in n.split(".")[0]}
    return begun - completed


def instant_of_commit(base: StoragePath, commit_id: str) -> Instant | None:
    """The completed instant that holds the ledger's commit ``commit_id``, if any."""
    return of_commit(completed_instants(base), commit_id)


def of_commit(instants: list[Instant], commit_id: str) -> Instant | None:
    """The instant among ``instants`` (oldest first) that holds the ledger's commit ``commit_id``, if any."""
    return next((i for i in reversed(instants) if i.commit_id == commit_id), None)


def latest_of(instants: list[Instant], connector: str) -> Instant | None:
    """The connector's latest instant among ``instants`` (oldest first)."""
    return next((i for i in reversed(instants) if i.extra.get(CONNECTOR_KEY) == connector), None)


def commit_metadata(
    connector: str,
    commit_id: str,
    epoch: int,
    ranges: dict[str, dict[str, list[int]]],
    previous: Instant | None = None,
) -> dict[str, str]:
    """The sink's commit metadata of one commit, as write options Hudi copies into the instant. ``previous`` is
    the connector's latest instant: its Kafka offsets carry the partitions this commit has no records of."""
    metadata = {
        COMMIT_ID_KEY: commit_id,
        CONNECTOR_KEY: connector,
        EPOCH_KEY: str(epoch),
        RANGES_KEY: json.dumps(ranges, sort_keys=True, separators=(",", ":")),
    }
    if len(ranges) == 1:
        # (Hudi's format names partitions only: one topic's.) As Hudi's coordinator keeps its global committed
        # offsets, every partition committed so far is there, not only those this commit has records of.
        ((topic, parts),) = ranges.items()
        ends = _kafka_offsets(previous, topic)
        ends.update((int(partition), int(end)) for partition, (_, end) in parts.items())
        metadata[KAFKA_OFFSETS_KEY] = ",".join(f"{p}={o}" for p, o in sorted(ends.items()))
    return metadata


def _kafka_offsets(instant: Instant | None, topic: str) -> dict[int, int]:
    """The ends ``instant`` recorded for ``topic``'s partitions; none if it recorded another topic's."""
    if instant is None or KAFKA_OFFSETS_KEY not in instant.extra:
        return {}
    if set(json.loads(instant.extra.get(RANGES_KEY) or "{}")) != {topic}:
        return {}
    pairs = (item.split("=") for item in instant.extra[KAFKA_OFFSETS_KEY].split(",") if item)
    return {int(partition): int(end) for partition, end in pairs}
