"""noida-db, the broker the mirror's tests stand on, checked for what they need of it (Tansu returns
aborted transactional records to read_committed readers, so it cannot prove exactly-once between
clusters): aborted records are hidden, an open transaction holds back what read_committed readers
see, offsets sent to a transaction appear only once it commits, and a zombie producer is fenced."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.integration.helpers import create_topic

pytestmark = [pytest.mark.integration]


def committed_values(bootstrap: str, topic: str, seconds: float = 3.0) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    found: list[bytes] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            found.append(message.value())
    consumer.close()
    return found


def producer(bootstrap: str, transactional_id: str) -> Any:
    made = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    made.init_transactions(30)
    return made


def test_read_committed_readers_see_only_committed_records_and_offsets(noida_bootstrap: str) -> None:
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    create_topic(noida_bootstrap, topic, 1)
    group = Consumer({"bootstrap.servers": noida_bootstrap, "group.id": f"g-{topic}", "enable.auto.commit": False})
    writer = producer(noida_bootstrap, f"tx-{topic}")
    writer.begin_transaction()
    writer.produce(topic, b"aborted", partition=0)
    writer.flush(10)
    writer.abort_transaction(30)
    # An open transaction: neither its record nor what follows it (another producer's) is readable.
    writer.begin_transaction()
    writer.produce(topic, b"committed", partition=0)
    writer.send_offsets_to_transaction([TopicPartition(topic, 0, 7)], group.consumer_group_metadata(), 30)
    writer.flush(10)
    plain = Producer({"bootstrap.servers": noida_bootstrap, "enable.idempotence": True})
    plain.produce(topic, b"after", partition=0)
    plain.flush(10)
    assert committed_values(noida_bootstrap, topic) == []
    assert group.committed([TopicPartition(topic, 0)], timeout=10)[0].offset < 0
    writer.commit_transaction(30)
    assert committed_values(noida_bootstrap, topic) == [b"committed", b"after"]
    assert group.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 7
    group.close()


def test_a_zombie_producer_is_fenced_and_its_open_transaction_aborted(noida_bootstrap: str) -> None:
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    create_topic(noida_bootstrap, topic, 1)
    zombie = producer(noida_bootstrap, f"tx-{topic}")
    zombie.begin_transaction()
    zombie.produce(topic, b"zombie", partition=0)
    zombie.flush(10)
    successor = producer(noida_bootstrap, f"tx-{topic}")  # aborts the zombie's transaction
    successor.begin_transaction()
    successor.produce(topic, b"successor", partition=0)
    successor.commit_transaction(30)
    with pytest.raises(KafkaException) as refused:
        zombie.commit_transaction(30)
    assert refused.value.args[0].fatal()
    assert committed_values(noida_bootstrap, topic) == [b"successor"]
