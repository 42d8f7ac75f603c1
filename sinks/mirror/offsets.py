"""The mirror's offsets as the offsets API (KIP-875) reads and moves them: the consumer group on the target
cluster that its transactions commit to, which is where its tasks resume. The ledger follows what is set here.

Offsets are named by source topic and partition, as a sink connector's are.
"""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from connectors.config import SinkConfig
from sinks.mirror import checkpoints
from sinks.mirror.checkpoints import Translated
from sinks.mirror.engine import committed_offsets, group_id, source_partitions, target_group
from sinks.mirror.settings import MirrorSettings

TP = tuple[str, int]


def read_offsets(name: str, config: SinkConfig) -> dict[TP, int]:
    """The next source offset of each mirrored partition, as the target cluster's group holds it."""
    settings: MirrorSettings = config.settings
    source = AdminClient(settings.clients("source"))
    wanted = [(t, p) for t, count in source_partitions(source, settings).items() for p in range(count)]
    group = target_group(name, settings)
    try:
        return committed_offsets(group, settings, wanted)
    finally:
        group.close()


def alter_offsets(name: str, config: SinkConfig, changes: Iterable[tuple[str, int, int | None]] | None) -> None:
    """Set partitions' offsets in the target group (None forgets one: it starts again as
    consumer.auto.offset.reset says); ``changes=None`` forgets them all. Only on a stopped connector: no task
    commits to the group meanwhile."""
    settings: MirrorSettings = config.settings
    current = read_offsets(name, config)
    if changes is None:
        kept: dict[TP, int] = {}
    else:
        kept = dict(current)
        for topic, partition, offset in changes:
            if offset is None:
                kept.pop((topic, partition), None)
            else:
                kept[(topic, partition)] = offset
    if any(tp not in kept for tp in current):
        # A group's offset cannot be unset one partition at a time by this client: the group (the mirror's
        # alone, with no member while the connector is stopped) is deleted, and what stays is set again.
        admin = AdminClient(settings.clients("target"))
        for future in admin.delete_consumer_groups([group_id(name)], request_timeout=30).values():
            try:
                future.result(30)
            except KafkaException as exc:
                if "GROUP_ID_NOT_FOUND" not in str(exc):
                    raise
    if kept:
        group = target_group(name, settings)
        try:
            group.commit(
                offsets=[TopicPartition(settings.target_topic(t), p, o) for (t, p), o in kept.items()],
                asynchronous=False,
            )
        finally:
            group.close()


def translated_offsets(name: str, config: SinkConfig, group: str) -> list[Translated]:
    """Consumer group ``group``'s offsets for the target, from the mirror's checkpoints."""
    return checkpoints.translated_offsets(config.settings, group)
