"""What the runtime does with Kafka: topics, partitions, the control channel and log offsets. Clients
are configured by ``connectors.config.kafka_clients``, the one place security settings reach every
client from."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ClusterMetadata, NewTopic

from connectors.config.kafka_clients import control_client_config, source_consumer_config
from connectors.java_regex import compile_java
from workers.events import ControlEvent

log = logging.getLogger(__name__)

# What the source consumer reports for an offset its partition's log does not
# have: it is configured not to reset by itself (source_consumer_config).
OUT_OF_RANGE_ERRORS = (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE)


def ensure_topic(admin: AdminClient, topic: str, partitions: int = 1, replication_factor: int = 1) -> None:
    metadata = admin.list_topics(timeout=10)
    if topic in metadata.topics and not metadata.topics[topic].error:
        return
    brokers = max(1, len(metadata.brokers))
    future = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=min(replication_factor, brokers))]
    )[topic]
    try:
        future.result(timeout=30)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


def resolve_partitions(admin: AdminClient, topics: Iterable[str], topics_regex: str | None) -> list[tuple[str, int]]:
    """The (topic, partition) pairs the connector reads, as the cluster has them now."""
    return partitions_in(admin.list_topics(timeout=10), topics, topics_regex)


def partitions_in(metadata: ClusterMetadata, topics: Iterable[str], topics_regex: str | None) -> list[tuple[str, int]]:
    wanted = set(topics)
    pattern = compile_java(topics_regex) if topics_regex else None
    return partitions_where(
        metadata,
        lambda name: not name.startswith("__") and (name in wanted or bool(pattern and pattern.fullmatch(name))),
    )


def partitions_where(metadata: ClusterMetadata, selects: Callable[[str], bool]) -> list[tuple[str, int]]:
    """Every partition of the topics ``metadata`` lists without error that ``selects`` takes, sorted."""
    return sorted(
        (name, p)
        for name, topic in metadata.topics.items()
        if topic.error is None and selects(name)
        for p in topic.partitions
    )


def source_warnings(
    metadata: ClusterMetadata, topics: Iterable[str], topics_regex: str | None, partitions: list[tuple[str, int]]
) -> list[str]:
    """What is wrong with a connector's source as ``metadata`` shows it: one reason per problem.

    ``partitions``: what ``partitions_in`` found (a config names topics or a
    regex, never both, so none found under a regex means it matched nothing).
    """
    warnings = []
    for name in topics:
        topic = metadata.topics.get(name)
        if topic is None:
            warnings.append(f"topic {name!r} does not exist (or was deleted): nothing to read from it")
        elif topic.error is not None:
            warnings.append(f"topic {name!r} cannot be read: {topic.error.str()}")
    if topics_regex and not partitions:
        warnings.append(f"topics.regex {topics_regex!r} matches no topic")
    return warnings


class GroupOffsets:
    """A connector's committed offsets, mirrored to its consumer group after each commit, as Kafka Connect's
    sinks commit theirs: ``kafka-consumer-groups``, Burrow and the lag exporters show its lag.

    The ledger stays the truth: the group is never read back to resume. The commit is asynchronous (the
    coordinator does not wait on the broker), and a failed one is logged and made good by the next, which
    mirrors every partition's offset again.
    """

    def __init__(self, bootstrap: str, config: dict[str, str], group: str) -> None:
        self.group = group
        self._consumer = Consumer(
            {**source_consumer_config(bootstrap, config, group), "group.id": group, "on_commit": self._committed}
        )

    def mirror(self, offsets: Mapping[tuple[str, int], int]) -> None:
        self._consumer.poll(0)  # (serves the previous commit's callback)
        if offsets:
            partitions = [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
            try:
                self._consumer.commit(offsets=partitions, asynchronous=True)
            except KafkaException as exc:
                log.warning("consumer group %s: offsets not committed: %s", self.group, exc)

    def _committed(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        failed = [f"{p.topic}/{p.partition}: {p.error}" for p in partitions if p.error is not None]
        if error is not None or failed:
            log.warning("consumer group %s: offsets not committed: %s", self.group, error or "; ".join(failed))

    def close(self) -> None:
        self._consumer.close()


class ControlChannel:
    """Producer and consumer of the control topic (one partition)."""

    def __init__(self, bootstrap: str, config: dict[str, str], topic: str, client_id: str) -> None:
        self.topic = topic
        base = control_client_config(bootstrap, config)
        # Not librdkafka's idempotent producer: it asks for a producer id
        # only once a broker connection is up, and retries every 0.5 s, so a
        # new process's first event (a coordinator's first START) waited for
        # a retry or two. Each send is flushed before the next, one request in
        # flight, so order holds across retries without it; a retry can
        # only duplicate an event, and every event is idempotent where it
        # is read (a START or END of the commit in hand, the first
        # WRITE_STATUS per partition).
        self._producer = Producer(
            {
                **base,
                "client.id": client_id,
                "linger.ms": 0,
                "enable.idempotence": False,
                "acks": "all",
                "max.in.flight.requests.per.connection": 1,
            }
        )
        self._consumer = Consumer(
            {
                **base,
                "group.id": f"sinkadmin-control-{client_id}",
                "enable.auto.commit": False,
                "auto.offset.reset": "latest",
                "client.id": client_id,
                # (librdkafka's default, 500 ms, is kept: the broker answers a
                # waiting fetch as soon as an event arrives, so a shorter wait
                # gains nothing and multiplies idle fetches: at 50 ms, twenty
                # connectors' sixty runners sent the broker 1,200 a second,
                # which took a sizeable share of a small machine's CPU;
                # docs/benchmarks.md, "Measurements behind the runtime's design".)
            }
        )

        # The control topic's end is asked of a consumer of its own that never
        # fetches: asked of the one above, the request queued behind its
        # waiting fetch (one connection, answered in order) and waited for it,
        # at every START (docs/benchmarks.md, "Measurements behind the
        # runtime's design").
        self._watermarks = Consumer({**base, "group.id": f"sinkadmin-control-{client_id}", "client.id": client_id})

    def seek(self, offset: int | None) -> None:
        """Read from ``offset`` (None: from the end as it is now, so every event sent after this call is read)."""
        if offset is None:
            # Not OFFSET_END: librdkafka resolves it at the consumer's first
            # fetch, and events sent in between were skipped (a coordinator's
            # first START goes out at once, and a participant's answer can
            # follow within milliseconds).
            offset = self.end_offset()
        self._consumer.assign([TopicPartition(self.topic, 0, offset)])

    def end_offset(self) -> int:
        _, high = log_offsets(self._watermarks, TopicPartition(self.topic, 0))
        return max(0, high)

    def send(self, event: ControlEvent) -> int:
        """Send and wait until the broker has it; returns its offset on the control topic."""
        delivered: list[int] = []
        errors: list[KafkaError] = []

        def on_delivery(err: KafkaError | None, msg: object) -> None:
            if err is not None:
                errors.append(err)
            else:
                delivered.append(msg.offset())  # type: ignore[attr-defined]

        self._producer.produce(self.topic, value=event.encode(), key=event.connector.encode(), on_delivery=on_delivery)
        self._producer.flush(30)
        if errors or not delivered:
            raise KafkaException(errors[0] if errors else KafkaError(KafkaError._MSG_TIMED_OUT))
        return delivered[0]

    def poll(self, timeout: float, connector: str) -> list[tuple[int, ControlEvent]]:
        # Wait for one event, then take what else has arrived: consume()
        # waits out its whole timeout unless the batch fills, which held
        # every status and END up to a poll's timeout.
        messages = self._consumer.consume(num_messages=1, timeout=timeout)
        if messages:
            messages += self._consumer.consume(num_messages=500, timeout=0)
        events: list[tuple[int, ControlEvent]] = []
        for message in messages:
            error, value, offset = message.error(), message.value(), message.offset()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(error)
            if not isinstance(value, bytes) or offset is None:
                continue
            try:
                event = ControlEvent.decode(value)
            except Exception:
                continue
            if event.connector == connector:
                events.append((offset, event))
        return events

    def close(self) -> None:
        self._producer.flush(10)
        self._consumer.close()
        self._watermarks.close()


# A partition whose leader is being elected or moved: a topic just created (the control topic, at a
# connector's first start, which the client's metadata may not know yet: _UNKNOWN_PARTITION, seen in
# CI), a broker restarting. Asked again, it answers.
LEADER_MOVING = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._UNKNOWN_TOPIC,
    }
)


def log_offsets(consumer: Any, tp: TopicPartition, timeout: float = 10.0, settle: float = 30.0) -> tuple[int, int]:
    """A partition's log start and end, asked of its leader (``get_watermark_offsets``, not cached); asked
    again for up to ``settle`` seconds while its leader is moving (LEADER_MOVING)."""
    deadline = time.monotonic() + settle
    while True:
        try:
            low, high = consumer.get_watermark_offsets(tp, timeout=timeout, cached=False)
            return int(low), int(high)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if not isinstance(error, KafkaError) or error.code() not in LEADER_MOVING or time.monotonic() > deadline:
                raise
            time.sleep(0.5)
