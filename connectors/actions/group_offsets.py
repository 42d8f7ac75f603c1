"""A connector's consumer group (``connect-<name>``, or ``consumer.override.group.id``), which Kafka's lag
tools read: the coordinator mirrors each commit's offsets to it (``workers.kafka.GroupOffsets``), and the
offsets API moves it with the ledger, as Kafka Connect's offsets API moves a sink's group."""

from __future__ import annotations

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from django.conf import settings

from connectors.actions.errors import ActionError
from connectors.actions.ledger import committed_offsets
from connectors.config import SinkConfig
from connectors.config.kafka_clients import admin_client, consumer_group
from connectors.models import Connector

TIMEOUT_S = 15.0


class GroupNotMoved(ActionError):
    """The ledger's offsets moved, its consumer group's could not (the broker did not answer)."""

    status = 500


class UnknownPartitions(ActionError):
    """Offsets given for partitions the cluster does not have: Kafka keeps no offset for them."""

    status = 400


def check_partitions_exist(connector: Connector, partitions: list[tuple[str, int]]) -> None:
    """Refuse offsets for partitions the connector's cluster does not have, before anything moves (Kafka
    would keep them in no consumer group, and the ledger's would name records that are not there)."""
    if not partitions:
        return
    config = SinkConfig.parse(connector.config)
    try:
        topics = admin_client(settings.KAFKA_BOOTSTRAP_SERVERS, config.raw).list_topics(timeout=TIMEOUT_S).topics
    except KafkaException as exc:
        raise GroupNotMoved(f"the cluster did not answer, nothing was moved: {exc.args[0].str()}") from exc
    unknown = [
        f"{topic}/{partition}"
        for topic, partition in sorted(set(partitions))
        if topic not in topics or topics[topic].error is not None or partition not in topics[topic].partitions
    ]
    if unknown:
        raise UnknownPartitions(f"the cluster has no partition {', '.join(unknown)}: nothing was moved")


def sync_group(connector: Connector) -> None:
    """Make the connector's consumer group hold the ledger's committed offsets, and those alone (the
    connector is stopped: nothing else commits to the group meanwhile)."""
    config = SinkConfig.parse(connector.config)
    group = consumer_group(connector.name, config.raw)
    admin = admin_client(settings.KAFKA_BOOTSTRAP_SERVERS, config.raw)
    try:
        # Kafka's admin API sets offsets but forgets only a whole group's (in this client): the group
        # goes, and comes back with the ledger's offsets.
        try:
            admin.delete_consumer_groups([group], request_timeout=TIMEOUT_S)[group].result()
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.GROUP_ID_NOT_FOUND:
                raise
        offsets = committed_offsets(connector.pk)
        if offsets:
            request = ConsumerGroupTopicPartitions(
                group, [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
            )
            moved = admin.alter_consumer_group_offsets([request], request_timeout=TIMEOUT_S)[group].result()
            failed = [f"{p.topic}/{p.partition}: {p.error.str()}" for p in moved.topic_partitions if p.error]
            if failed:
                # (A partition of a topic the broker does not have, say: Kafka keeps no offset for it.)
                raise GroupNotMoved(
                    f"the ledger's offsets of {connector.name} moved, but its consumer group {group} refused "
                    f"those of {'; '.join(failed)}"
                )
    except KafkaException as exc:
        raise GroupNotMoved(
            f"the ledger's offsets of {connector.name} moved, but its consumer group {group}'s did not: "
            f"{exc.args[0].str()}; ask again to move it"
        ) from exc
