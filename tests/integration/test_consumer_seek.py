"""What the participants' seek, read-ahead and control polls rely on, checked against the real broker and librdkafka.

When a START_COMMIT names an offset other than where a task's read-ahead
buffer begins, the task re-assigns its partitions at the ledger's offsets and
stages only records at or after them. A message fetched before the re-assign
with a higher offset would be staged first and the records between the two
offsets skipped, so librdkafka must hand over nothing fetched before the
re-assign. These tests make the consumer hold prefetched messages beyond the
new position, as a task reading ahead does, then re-assign backwards.

Pausing a partition makes librdkafka drop what it prefetched for it and
fetch it again on resume, so a task that has read ahead as far as it may
stops consuming instead of pausing (workers/participant.py).
"""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

from connectors.config.kafka_clients import source_consumer_config
from tests.integration.helpers import create_topic, json_records, produce
from workers.events import end_commit
from workers.kafka import ControlChannel

pytestmark = pytest.mark.integration


def _two_partitions_of_2000(kafka_bootstrap: str, topic: str) -> None:
    create_topic(kafka_bootstrap, topic, 2)
    produce(kafka_bootstrap, topic, json_records(0, 4000), 2)


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
    _two_partitions_of_2000(kafka_bootstrap, topic_name)
    consumer = Consumer(source_consumer_config(kafka_bootstrap, {}, "seek-check"))
    try:
        consumer.assign([TopicPartition(topic_name, 0, 1000), TopicPartition(topic_name, 1, 1000)])
        first = _consume_offsets(consumer, 10)
        assert first and all(offset >= 1000 for _, offset in first)
        if paused:
            # Partitions paused at staging.max-bytes when a takeover's START comes.
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


def _fetched(stats: dict[str, int], consumer: Consumer, seen: list[tuple[int, int]]) -> int:
    """Messages the consumer has received from the broker so far, from librdkafka's
    statistics (they arrive with polling; a polled message goes to ``seen``)."""
    stats.clear()
    while "rxmsgs" not in stats:
        for message in consumer.consume(num_messages=1, timeout=0.05):
            if message.error() is None:
                seen.append((message.partition(), message.offset()))
        time.sleep(0.02)  # a few records per statistics interval, not the whole prefetch
    return stats["rxmsgs"]


@pytest.mark.parametrize("paused", [False, True])
def test_pausing_drops_prefetched_records_and_fetches_them_again(
    kafka_bootstrap: str, topic_name: str, paused: bool
) -> None:
    _two_partitions_of_2000(kafka_bootstrap, topic_name)
    stats: dict[str, int] = {}
    config = source_consumer_config(kafka_bootstrap, {}, "pause-check")
    config.update({"statistics.interval.ms": 100, "stats_cb": lambda raw: stats.update(json.loads(raw))})
    partitions = [TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)]
    consumer = Consumer(config)
    seen: list[tuple[int, int]] = []
    try:
        consumer.assign([TopicPartition(topic_name, 0, 0), TopicPartition(topic_name, 1, 0)])
        while _fetched(stats, consumer, seen) < 4000:
            pass  # until librdkafka has prefetched every record
        assert len(seen) < 1000
        if paused:
            consumer.pause(partitions)
            consumer.resume(partitions)
        seen += _consume_offsets(consumer, 4000 - len(seen))
        fetched = _fetched(stats, consumer, seen)
    finally:
        consumer.close()
    assert sorted(seen) == sorted((p, o) for p in (0, 1) for o in range(2000))
    if paused:
        assert fetched > 4000 + 3000, "the pause should have dropped the prefetched records"
    else:
        assert fetched == 4000


def test_a_control_poll_returns_at_the_first_event_not_at_its_timeout(kafka_bootstrap: str, topic_name: str) -> None:
    create_topic(kafka_bootstrap, topic_name, 1)
    channel = ControlChannel(kafka_bootstrap, {}, topic_name, "poll-check")
    sender = ControlChannel(kafka_bootstrap, {}, topic_name, "poll-check-sender")
    try:
        channel.seek(None)
        channel.poll(1.0, "c")  # assigned and fetching
        commit_id = uuid.uuid4()
        timer = threading.Timer(0.5, lambda: sender.send(end_commit("c", commit_id, 1)))
        timer.start()
        began = time.monotonic()
        events = channel.poll(30.0, "c")
        waited = time.monotonic() - began
        timer.join()
    finally:
        channel.close()
        sender.close()
    assert [e.commit_id for _, e in events] == [commit_id]
    # (A batch consume() would have waited out the 30 s.)
    assert waited < 15.0


def test_a_control_channel_that_seeks_to_the_end_reads_every_event_sent_after(
    kafka_bootstrap: str, topic_name: str
) -> None:
    # A coordinator seeks to the end and sends its first START at once; the
    # answers follow within milliseconds. None of them may be skipped, as
    # they were when the end was resolved at the consumer's first fetch.
    create_topic(kafka_bootstrap, topic_name, 1)
    sender = ControlChannel(kafka_bootstrap, {}, topic_name, "seek-end-sender")
    sender.send(end_commit("c", uuid.uuid4(), 1))  # an event from before: not to be read
    sent = []
    try:
        for attempt in range(10):
            channel = ControlChannel(kafka_bootstrap, {}, topic_name, f"seek-end-{attempt}")
            try:
                channel.seek(None)
                sent.append(uuid.uuid4())
                sender.send(end_commit("c", sent[-1], 1))
                events = channel.poll(10.0, "c")
            finally:
                channel.close()
            assert [e.commit_id for _, e in events] == [sent[-1]], f"attempt {attempt}"
    finally:
        sender.close()
