"""MirrorMaker 2's per-client keys (source.consumer.*, target.producer.*, consumer.*, Kafka Connect's
producer.override.*...) on the mirror, without servers: each reaches the librdkafka clients MirrorMaker 2's key
names, or is refused with why, or ignored with a note where it asks for what the mirror does; and librdkafka
itself knows the properties the table of its properties names, and takes the clients' configurations."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from connectors.config import SinkConfig, validate_config
from connectors.config.kafka_clients import CONSUMER_PROPERTIES, EVERY_CLIENT_PROPERTIES, PRODUCER_PROPERTIES
from sinks.mirror.settings import MirrorSettings

BASE = {
    "connector.class": "mirror",
    "source.cluster.alias": "east",
    "source.cluster.bootstrap.servers": "s:9092",
    "target.cluster.bootstrap.servers": "t:9092",
    "topics.regex": "orders.*",
}


def settings(**keys: str) -> MirrorSettings:
    return SinkConfig.parse({**BASE, **keys}).settings


def test_each_prefix_reaches_the_clients_of_its_kind_on_its_cluster_as_in_mirrormaker() -> None:
    mirror = settings(
        **{
            "source.consumer.fetch.min.bytes": "1024",
            "source.producer.compression.type": "lz4",
            "target.producer.compression.type": "zstd",
            "target.producer.batch.size": "65536",
            "target.consumer.fetch.max.bytes": "1048576",
            "target.producer.transaction.timeout.ms": "90000",
        }
    )
    source, target = mirror.clients("source"), mirror.clients("target")
    # The consumer that reads the source; the heartbeats' producer on the source.
    assert source == {"bootstrap.servers": "s:9092", "fetch.min.bytes": "1024", "compression.type": "lz4"}
    # The producers that write the target (the tasks' transactional ones, the checkpoints'); its consumers.
    assert target == {
        "bootstrap.servers": "t:9092",
        "compression.type": "zstd",
        "batch.size": "65536",
        "fetch.max.bytes": "1048576",
        "transaction.timeout.ms": "90000",
    }
    # MirrorMaker 2's connector-wide consumer.* and producer.* reach both clusters' clients of their kind, and
    # Kafka Connect's overrides a sink's: its consumer reads the source, its producers write the target.
    wide = settings(**{"consumer.fetch.wait.max.ms": "100", "producer.compression.type": "gzip"})
    assert wide.clients("source")["fetch.wait.max.ms"] == wide.clients("target")["fetch.wait.max.ms"] == "100"
    assert wide.clients("source")["compression.type"] == wide.clients("target")["compression.type"] == "gzip"
    connect = settings(**{"consumer.override.fetch.min.bytes": "1", "producer.override.linger.ms": ""})
    assert connect.clients("source")["fetch.min.bytes"] == "1" and "fetch.min.bytes" not in connect.clients("target")
    assert "linger.ms" not in connect.clients("target")  # (a blank value: librdkafka's default, as for any key)
    # The mirror's own keys under those prefixes stay its own.
    own = settings(**{"consumer.auto.offset.reset": "latest", "consumer.poll.timeout.ms": "500"})
    assert own.auto_offset_reset == "latest" and own.clients("source") == {"bootstrap.servers": "s:9092"}


def test_the_more_specific_prefix_wins_as_in_mirrormaker() -> None:
    mirror = settings(
        **{
            "target.consumer.fetch.max.bytes": "2000000",
            "consumer.fetch.max.bytes": "1000000",
            "consumer.override.fetch.max.bytes": "1500000",
        }
    )
    # <side>.consumer.* over Kafka Connect's consumer.override.* over MirrorMaker 2's consumer.*.
    assert mirror.clients("target")["fetch.max.bytes"] == "2000000"
    assert mirror.clients("source")["fetch.max.bytes"] == "1500000"


def test_settings_the_mirror_makes_itself_are_refused_unless_they_ask_for_what_it_does() -> None:
    refused = {
        "source.consumer.group.id": "sinkadmin-mirror-m",
        "consumer.override.group.id": "billing",
        "source.consumer.isolation.level": "read_uncommitted",
        "source.consumer.enable.auto.commit": "true",
        "source.consumer.auto.offset.reset": "latest",
        "source.consumer.max.poll.records": "500",
        "target.producer.enable.idempotence": "false",
        "target.producer.transactional.id": "mine",
        "producer.override.acks": "1",
        "target.producer.linger.ms": "50",
        "target.producer.delivery.report.only.error": "true",
        "target.producer.queue.buffering.max.ms": "50",  # (linger.ms's other name)
        "target.consumer.bootstrap.servers": "other:9092",
    }
    errors = validate_config({**BASE, **refused}).errors
    assert sorted(errors) == sorted(refused)
    assert "sinkadmin-mirror-<connector>" in errors["consumer.override.group.id"][0]
    assert "aborted transactions are never copied" in errors["source.consumer.isolation.level"][0]
    assert "consumer.auto.offset.reset" in errors["source.consumer.auto.offset.reset"][0]
    assert "sinkadmin.commit.max-records" in errors["source.consumer.max.poll.records"][0]
    assert "fences" in errors["target.producer.transactional.id"][0]
    assert "sinkadmin.commit.interval-ms" in errors["target.producer.linger.ms"][0]
    assert "target.cluster.bootstrap.servers" in errors["target.consumer.bootstrap.servers"][0]
    # MirrorMaker 2's docs ask for read_committed source consumers for exactly once: what the mirror does.
    as_it_does = {
        "source.consumer.isolation.level": "read_committed",
        "consumer.enable.auto.commit": "false",
        "target.producer.enable.idempotence": "true",
        "target.producer.acks": "all",
        "producer.override.acks": "-1",
        "source.consumer.value.deserializer": "org.apache.kafka.common.serialization.ByteArrayDeserializer",
    }
    accepted = validate_config({**BASE, **as_it_does})
    assert accepted.errors == {} and sorted(accepted.notes) == sorted(as_it_does)
    # Ignored: not handed to the clients, which the mirror configures so already.
    assert settings(**as_it_does).clients("source") == {"bootstrap.servers": "s:9092"}


def test_a_java_clients_setting_is_refused_with_librdkafkas_counterpart() -> None:
    refused = {
        "target.producer.buffer.memory": "33554432",
        "source.consumer.fetch.max.wait.ms": "100",
        "target.producer.max.block.ms": "1000",
        "source.consumer.fetch.min.byte": "1",
    }
    errors = validate_config({**BASE, **refused}).errors
    assert sorted(errors) == sorted(refused)
    assert "not a setting of librdkafka" in errors["target.producer.max.block.ms"][0]
    assert errors["target.producer.buffer.memory"][0].endswith("queue.buffering.max.kbytes (in KiB)")
    assert errors["source.consumer.fetch.max.wait.ms"][0].endswith("its counterpart there is fetch.wait.max.ms")
    assert errors["source.consumer.fetch.min.byte"][0].endswith("(did you mean source.consumer.fetch.min.bytes?)")


def test_a_setting_of_another_kind_of_client_or_of_every_client_is_refused() -> None:
    refused = {
        # librdkafka's request.timeout.ms is a producer's; its consumers would ignore it.
        "source.consumer.request.timeout.ms": "30000",
        "target.producer.fetch.min.bytes": "1",
        # The mirror's clients of one cluster share one configuration: client.id would reach them all.
        "source.consumer.client.id": "mm2",
        "target.producer.message.max.bytes": "2000000",
        # A cluster's security settings are its clients' all.
        "source.consumer.security.protocol": "SSL",
        "target.producer.sasl.jaas.config": "x",
    }
    errors = validate_config({**BASE, **refused}).errors
    assert sorted(errors) == sorted(refused)
    assert "is a setting of its producers" in errors["source.consumer.request.timeout.ms"][0]
    assert "every client" in errors["source.consumer.client.id"][0]
    assert "not only its consumers" in errors["source.consumer.client.id"][0]
    assert "write source.cluster.security.protocol" in errors["source.consumer.security.protocol"][0]


def test_an_admin_clients_keys_are_refused_each_with_why() -> None:
    # librdkafka has no property of an admin client alone: each would reach more than the admin, or nothing.
    refused = {
        "source.admin.request.timeout.ms": "30000",
        "target.admin.client.id": "mm2-admin",
        "admin.retries": "3",
        "admin.override.default.api.timeout.ms": "60000",
    }
    errors = validate_config({**BASE, **refused}).errors
    assert sorted(errors) == sorted(refused)
    assert "it does nothing for admin clients" in errors["source.admin.request.timeout.ms"][0]
    assert "not only its admin clients" in errors["target.admin.client.id"][0]
    # (admin.timeout.ms is MirrorMaker 2's own key, not an admin client's timeout.ms.)
    assert "admin.timeout.ms" in validate_config({**BASE, "admin.timeout.ms": "60000"}).notes


def test_librdkafka_knows_each_property_of_the_table_and_takes_the_mirrors_client_configurations(
    caplog: pytest.LogCaptureFixture,
) -> None:
    for name in CONSUMER_PROPERTIES | PRODUCER_PROPERTIES | EVERY_CLIENT_PROPERTIES:
        try:
            Producer({name: "\x01"})  # (a value no property takes: only the name is checked)
        except KafkaException as exc:
            assert "No such configuration property" not in str(exc), name
        except TypeError:
            assert name == "delivery.report.only.error"  # (confluent-kafka's own, a bool)
    # librdkafka's own kinds of a few, as its warnings say.
    logger = logging.getLogger("librdkafka")
    Producer({"fetch.min.bytes": "1", "logger": logger}).poll(0.5)  # (a producer logs as it is polled)
    Consumer({"group.id": "g", "compression.type": "zstd", "logger": logger}).close()
    assert "fetch.min.bytes is a consumer property" in caplog.text
    assert "compression.codec is a producer property" in caplog.text
    # Every client the mirror makes of a cluster takes the cluster's configuration with both kinds' properties.
    mirror = settings(
        **{
            "consumer.fetch.min.bytes": "1024",
            "producer.compression.type": "zstd",
            "target.producer.transaction.timeout.ms": "90000",
        }
    )
    for side in ("source", "target"):
        Consumer({**mirror.clients(side), "group.id": "g"}).close()
        Producer({**mirror.clients(side), "enable.idempotence": True})
        AdminClient(mirror.clients(side))
