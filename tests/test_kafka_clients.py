"""Kafka client properties reach every client a connector creates."""

from workers.kafka import control_client_config, producer_config, source_consumer_config

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
