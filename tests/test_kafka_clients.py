"""Kafka client properties reach every client a connector creates; log offsets are asked again while a
partition's leader moves."""

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from connectors.config.kafka_clients import control_client_config, producer_config, source_consumer_config
from workers.kafka import log_offsets

CONFIG = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "PLAIN",
    "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="svc" password="pw";',
    "ssl.truststore.location": "/etc/ca.pem",
    "consumer.override.fetch.min.bytes": "1024",
    "producer.override.compression.type": "zstd",
    "iceberg.kafka.client.rack": "r1",
    "topics": "orders",
}


def test_security_settings_reach_the_source_consumer_with_its_overrides() -> None:
    props = source_consumer_config("b:9092", CONFIG, "g")
    assert props["security.protocol"] == "SASL_SSL" and props["sasl.mechanism"] == "PLAIN"
    # The JAAS config of the Java clients becomes librdkafka's username/password.
    assert (props["sasl.username"], props["sasl.password"]) == ("svc", "pw")
    assert props["ssl.ca.location"] == "/etc/ca.pem"
    assert "sasl.jaas.config" not in props and "ssl.truststore.location" not in props
    assert props["fetch.min.bytes"] == "1024" and "compression.type" not in props
    assert props["enable.auto.commit"] is False


def test_security_settings_reach_the_producers_and_control_clients() -> None:
    producer = producer_config("b:9092", CONFIG)
    assert producer["security.protocol"] == "SASL_SSL" and producer["compression.type"] == "zstd"
    assert producer["sasl.username"] == "svc"
    control = control_client_config("b:9092", CONFIG)
    assert control["security.protocol"] == "SASL_SSL" and control["client.rack"] == "r1"
    assert "topics" not in control


class MovingLeader:
    """A consumer whose partition has no leader for its first ``refusals`` asks."""

    def __init__(self, refusals: int, code: int = KafkaError.NOT_LEADER_FOR_PARTITION) -> None:
        self.refusals, self.code, self.asked = refusals, code, 0

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float, cached: bool) -> tuple[int, int]:
        self.asked += 1
        if self.asked <= self.refusals:
            raise KafkaException(KafkaError(self.code))
        return 3, 42


@pytest.mark.parametrize(
    "code",
    # (The last: a topic just created, which the client's metadata does not know yet; CI met it.)
    [KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE, KafkaError._UNKNOWN_PARTITION],
)
def test_log_offsets_are_asked_again_while_a_new_partitions_leader_is_elected(code: int) -> None:
    consumer = MovingLeader(refusals=2, code=code)
    assert log_offsets(consumer, TopicPartition("control", 0), settle=10) == (3, 42)
    assert consumer.asked == 3


def test_log_offsets_give_up_at_once_on_an_error_that_asking_again_does_not_mend() -> None:
    consumer = MovingLeader(refusals=1, code=KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException):
        log_offsets(consumer, TopicPartition("control", 0), settle=10)
    assert consumer.asked == 1


def test_log_offsets_give_up_when_the_leader_stays_away_past_the_settling_time() -> None:
    consumer = MovingLeader(refusals=1000)
    with pytest.raises(KafkaException):
        log_offsets(consumer, TopicPartition("control", 0), settle=0.6)
    assert 1 < consumer.asked < 5
