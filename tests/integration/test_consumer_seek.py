"""What the participants' seek relies on, checked against the real broker and librdkafka.

When a START_COMMIT names an offset other than where a task's read-ahead
buffer begins, the task re-assigns its partitions at the ledger's offsets and
stages only records at or after them. A message fetched before the re-assign
with a higher offset would be staged first and the records between the two
offsets skipped, so librdkafka must hand over nothing fetched before the
re-assign. These tests make the consumer hold prefetched messages beyond the
new position, as a task reading ahead does, then re-assign backwards.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.integration.helpers import create_topic, json_records, produce
from workers.kafka import source_consumer_config

pytestmark = pytest.mark.integration


def _consume_offsets(consumer: Consumer, count: int) -> list[tuple[int, int]]:
    seen: list[tuple[int, int]] = []
    for _ in range(100):
        for message in consumer.consume(num_messages=count - len(seen), timeout=0.5):
            if message.error() is None:
                seen.append((message.partition(), message.offset()))
        if len(seen) >= count:
            break
    return seen


@pytest.mark.parametrize("paused", [False, True])
def test_after_a_reassign_backwards_only_records_from_the_new_offsets_arrive(
    kafka_bootstrap: str, topic_name: str, paused: bool
) -> None:
    create_topic(kafka_bootstrap, topic_name, 2)
    produce(kafka_bootstrap, topic_name, json_records(0, 4000), 2)
    consumer = Consumer(source_consumer_config(kafka_bootstrap, {}, "seek-check"))
    try:
        consumer.assign([TopicPartition(topic_name, 0, 1000), TopicPartition(topic_name, 1, 1000)])
        first = _consume_offsets(consumer, 10)
        assert first and all(offset >= 1000 for _, offset in first)
        if paused:
            # A full read-ahead buffer pauses its partitions before the START.
            consumer.pause([TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)])
        # librdkafka has prefetched well past these ten by now.
        consumer.assign([TopicPartition(topic_name, 0, 200), TopicPartition(topic_name, 1, 300)])
        if paused:
            # A pause outlives the re-assign: the participant resumes.
            assert not consumer.consume(num_messages=1, timeout=2.0)
            consumer.resume([TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)])
        after = _consume_offsets(consumer, 3000)
    finally:
        consumer.close()

    by_partition: dict[int, list[int]] = {0: [], 1: []}
    for partition, offset in after:
        by_partition[partition].append(offset)
    # Each partition resumes exactly at its new offset and goes on in order,
    # with nothing fetched before the re-assign in between.
    for partition, start in ((0, 200), (1, 300)):
        offsets = by_partition[partition]
        assert offsets, f"partition {partition} delivered nothing after the re-assign"
        assert offsets == list(range(start, start + len(offsets)))
