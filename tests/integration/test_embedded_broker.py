"""The embedded Apache Kafka broker (sinkadmin.kafka_broker): its log survives a restart, and a log
directory of another cluster is refused with the reason and left as it was."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from sinkadmin.kafka_broker import formatted_cluster_id, start_embedded_broker
from sinkadmin.services import ServiceError
from tests.conftest import free_port, kafka_cluster

pytestmark = [pytest.mark.integration]


def read_all(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    found: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(found) < expected and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            found.append(message.value())
    consumer.close()
    return found


def test_records_and_the_cluster_id_survive_a_restart_of_the_broker(tmp_path: Path) -> None:
    port, controller_port = free_port(), free_port()
    bootstrap = f"127.0.0.1:{port}"
    with kafka_cluster("kafka-restart", tmp_path, port, controller_port):
        producer = Producer({"bootstrap.servers": bootstrap})
        for n in range(20):
            producer.produce("kept", f"record-{n}".encode())
        assert producer.flush(30) == 0
    cluster_id = (tmp_path / "cluster.id").read_text().strip()
    assert formatted_cluster_id(tmp_path / "data") == cluster_id

    with kafka_cluster("kafka-restart", tmp_path, port, controller_port):
        assert read_all(bootstrap, "kept", 20) == [f"record-{n}".encode() for n in range(20)]
    assert (tmp_path / "cluster.id").read_text().strip() == cluster_id


def test_a_log_directory_of_another_cluster_is_refused_with_both_ids_and_not_wiped(tmp_path: Path) -> None:
    port = free_port()
    with kafka_cluster("kafka-other", tmp_path, port):
        pass
    theirs = formatted_cluster_id(tmp_path / "data")
    meta = (tmp_path / "data" / "meta.properties").read_text()
    (tmp_path / "cluster.id").write_text("AAAAAAAAAAAAAAAAAAAAAA\n")  # this installation's own id, say

    with pytest.raises(ServiceError) as refused:
        start_embedded_broker(port, tmp_path, tmp_path / "log", controller_port=free_port())
    assert str(refused.value) == (
        f"{tmp_path / 'data'} belongs to Kafka cluster {theirs}, but this broker is cluster AAAAAAAAAAAAAAAAAAAAAA"
        f" ({tmp_path / 'cluster.id'}); it was not wiped: move it aside to start afresh"
    )
    assert (tmp_path / "data" / "meta.properties").read_text() == meta

    (tmp_path / "cluster.id").unlink()
    with pytest.raises(
        ServiceError, match=f"holds the log of Kafka cluster {theirs}, which this broker did not format"
    ):
        start_embedded_broker(port, tmp_path, tmp_path / "log", controller_port=free_port())
    assert (tmp_path / "data" / "meta.properties").read_text() == meta
