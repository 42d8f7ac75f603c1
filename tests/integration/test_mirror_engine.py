"""The mirror's engine between two Apache Kafka clusters (source and target), read back from the target by a
read_committed consumer, an independent reader: every record once, in source order per partition, with
its key, headers and timestamp; after a task killed mid-transaction, after a zombie, and, at least once
(transaction.producer=false), after a kill that copies a batch twice, counted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
)

from connectors.config import validate_config
from sinks.mirror.engine import IntoItself, MirrorTask, group_id
from sinks.mirror.settings import MirrorSettings
from tests.integration.helpers import create_topic, produce, wait_until

# (beside: brokers only, no Spark, and mostly waiting on them: run in the lane beside the others.)
pytestmark = [pytest.mark.integration, pytest.mark.beside]

PARTITIONS = 4
ROOT = Path(__file__).resolve().parents[2]


def mirror_config(source: str, target: str, topics: str, **overrides: str) -> dict[str, str]:
    return {
        "source.cluster.alias": "east",
        "source.cluster.bootstrap.servers": source,
        "target.cluster.bootstrap.servers": target,
        "topics.regex": topics,
        "sinkadmin.commit.interval-ms": "300",
        "sinkadmin.commit.max-records": "500",
        "refresh.topics.interval.seconds": "1",
        # (The source cluster is shared by the tests: heartbeats, on by default, have a test of their own.)
        "emit.heartbeats.enabled": "false",
        **overrides,
    }


def source_records(bootstrap: str, topic: str, count: int, start: int = 0) -> dict[tuple[str, int], int]:
    values: list[bytes | None] = [json.dumps({"id": f"{topic}-{i}"}).encode() for i in range(start, start + count)]
    keys = [f"key-{i}".encode() for i in range(start, start + count)]
    headers = [[("trace", f"t{i}".encode()), ("empty", b"")] for i in range(start, start + count)]
    # (Recent: a broker's retention would delete records stamped years ago before they are read.)
    base = int(time.time() * 1000) - 3_600_000
    stamps = [base + i for i in range(start, start + count)]
    return produce(bootstrap, topic, values, PARTITIONS, keys=keys, headers=headers, timestamps=stamps)


def read_partitions(bootstrap: str, topics: list[str], seconds: float = 4.0) -> dict[tuple[str, int], list[Any]]:
    """Every committed record of ``topics`` as (key, value, headers, timestamp), per partition in offset order."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    metadata = consumer.list_topics(timeout=10).topics
    consumer.assign([TopicPartition(t, p, 0) for t in topics if t in metadata for p in metadata[t].partitions])
    found: dict[tuple[str, int], list[Any]] = {}
    quiet_until = time.monotonic() + seconds
    while time.monotonic() < quiet_until:
        for message in consumer.consume(500, 0.3):
            if message.error() is None:
                found.setdefault((message.topic(), message.partition()), []).append(
                    (message.key(), message.value(), message.headers(), message.timestamp()[1])
                )
                quiet_until = time.monotonic() + 2.0
    consumer.close()
    return found


def target_offsets(
    target: str, connector: str, partitions: list[tuple[str, int]], alias: str = "east"
) -> dict[tuple[str, int], int]:
    """The mirror's group's offsets on the target (kept under the replicas' names), by source partition (-1001:
    none committed)."""
    group = Consumer({"bootstrap.servers": target, "group.id": group_id(connector), "enable.auto.commit": False})
    try:
        found = group.committed([TopicPartition(f"{alias}.{t}", p) for t, p in partitions], timeout=10)
    finally:
        group.close()
    return {(t, p): c.offset for (t, p), c in zip(partitions, found, strict=True)}


# What a broker answers about a group while it is not ready to: a client retries them.
GROUP_NOT_READY = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
    }
)


def caught_up(target: str, connector: str, ends: dict[tuple[str, int], int], alias: str = "east") -> bool:
    """The target group's offsets reached the source's ends. Not yet while the target cannot say: a broker
    back from a stall or a restart answers NOT_COORDINATOR (or is loading its groups) for a while, which a
    consumer retries."""
    try:
        return target_offsets(target, connector, sorted(ends), alias) == ends
    except KafkaException as exc:
        if exc.args and (exc.args[0].retriable() or exc.args[0].code() in GROUP_NOT_READY):
            return False
        raise


def connector_of(topics: list[str]) -> str:
    return f"mirror-{topics[0]}"


def assert_mirrored_exactly_once(source: str, target: str, topics: list[str], alias: str = "east") -> None:
    origin = read_partitions(source, topics)
    copies = read_partitions(target, [f"{alias}.{t}" for t in topics])
    assert {(t, p) for t, p in origin} == {(t.removeprefix(f"{alias}."), p) for t, p in copies}
    for (topic, partition), records in origin.items():
        # Once each, in source order, key, value, headers and timestamp as they were.
        assert copies[(f"{alias}.{topic}", partition)] == records


@contextmanager
def running(config: dict[str, str], connector: str, tasks: int = 2) -> Iterator[list[MirrorTask]]:
    """``tasks`` mirror tasks in this process's threads, stopped on exit."""
    stop = threading.Event()
    settings = MirrorSettings.parse(config)
    made = [MirrorTask(connector, n, tasks, settings) for n in range(tasks)]
    threads = [threading.Thread(target=task.run, args=(stop.is_set,), daemon=True) for task in made]
    for thread in threads:
        thread.start()
    try:
        yield made
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)


def task_process(config: dict[str, str], connector: str, failpoints: str = "") -> subprocess.Popen[bytes]:
    env = {**os.environ, "SINKADMIN_FAILPOINTS": failpoints}
    return subprocess.Popen(
        [sys.executable, "-m", "sinks.mirror.engine", "--connector", connector, "--config", json.dumps(config)],
        cwd=ROOT,
        env=env,
    )


@contextmanager
def successor_caught_up(config: dict[str, str], connector: str, ends: dict[tuple[str, int], int]) -> Iterator[None]:
    """A task process that replaces a dead or frozen one, running until the mirror has caught up (and the block ran)."""
    successor = task_process(config, connector)
    target = config["target.cluster.bootstrap.servers"]
    try:
        wait_until(lambda: caught_up(target, connector, ends), 120, "the successor to catch up")
        yield
    finally:
        successor.terminate()
        successor.wait(60)


def setup(source: str, topics: list[str], count: int) -> dict[tuple[str, int], int]:
    ends: dict[tuple[str, int], int] = {}
    for topic in topics:
        create_topic(source, topic, PARTITIONS)
        ends.update(source_records(source, topic, count))
    return ends


def test_records_are_mirrored_once_in_order_with_keys_headers_and_timestamps(
    kafka_bootstrap: str, target_kafka_bootstrap: str, topics: list[str]
) -> None:
    ends = setup(kafka_bootstrap, topics, 1200)
    config = mirror_config(kafka_bootstrap, target_kafka_bootstrap, "|".join(topics))
    with running(config, connector_of(topics)):
        wait_until(lambda: caught_up(target_kafka_bootstrap, connector_of(topics), ends), 120, "the mirror to catch up")
    assert_mirrored_exactly_once(kafka_bootstrap, target_kafka_bootstrap, topics)
    replicas = AdminClient({"bootstrap.servers": target_kafka_bootstrap}).list_topics(timeout=10).topics
    assert all(len(replicas[f"east.{t}"].partitions) == PARTITIONS for t in topics)


def test_the_replicas_are_created_with_mirrormakers_replication_factor(
    kafka_bootstrap: str, target_kafka_bootstrap: str, topics: list[str]
) -> None:
    """``replication.factor`` reaches the target cluster's CreateTopics: 2 on the one-broker target is refused
    by the broker, with its reason, and nothing is created; -1 (the default) takes the cluster's. The replicas
    take their source topic's own settings but those config.properties.exclude names (MirrorMaker 2's
    default: min.insync.replicas, throttles...)."""
    setup(kafka_bootstrap, topics, 10)
    own = {"retention.ms": "123456789", "min.insync.replicas": "1", "message.timestamp.type": "LogAppendTime"}
    source = AdminClient({"bootstrap.servers": kafka_bootstrap})
    altered = [
        ConfigResource(
            ConfigResource.Type.TOPIC,
            t,
            incremental_configs=[
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in own.items()
            ],
        )
        for t in topics
    ]
    for future in source.incremental_alter_configs(altered).values():
        future.result(30)
    config = mirror_config(kafka_bootstrap, target_kafka_bootstrap, "|".join(topics), **{"replication.factor": "2"})
    task = MirrorTask(connector_of(topics), 0, 1, MirrorSettings.parse(config))
    try:
        with pytest.raises(KafkaException) as refused:
            task.refresh(force=True)
        assert refused.value.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR, refused.value
    finally:
        task.close()
    target = AdminClient({"bootstrap.servers": target_kafka_bootstrap})
    assert not {f"east.{t}" for t in topics} & set(target.list_topics(timeout=10).topics)
    task = MirrorTask(connector_of(topics), 0, 1, MirrorSettings.parse({**config, "replication.factor": "-1"}))
    try:
        task.refresh(force=True)
    finally:
        task.close()
    replicas = target.list_topics(timeout=10).topics
    assert all(len(replicas[f"east.{t}"].partitions[0].replicas) == 1 for t in topics)
    described = target.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, f"east.{t}") for t in topics])
    for future in described.values():
        entries = future.result(30)
        topic_level = {n for n, e in entries.items() if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}
        assert entries["retention.ms"].value == "123456789" and "retention.ms" in topic_level
        assert not {"min.insync.replicas", "message.timestamp.type"} & topic_level


def test_identity_replication_into_the_cluster_it_reads_is_refused_by_the_clusters_ids(
    kafka_bootstrap: str, topics: list[str]
) -> None:
    # One cluster under two names: the config's check, which compares the addresses, cannot tell.
    ends = setup(kafka_bootstrap, topics, 10)
    alias = kafka_bootstrap.replace("127.0.0.1", "localhost")
    config = mirror_config(
        kafka_bootstrap,
        alias,
        "|".join(topics),
        **{"replication.policy.class": "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"},
    )
    assert not validate_config({"connector.class": "mirror", **config}).errors
    task = MirrorTask(connector_of(topics), 0, 1, MirrorSettings.parse(config))
    try:
        with pytest.raises(IntoItself, match=r"are one cluster .*IdentityReplicationPolicy would write each topic"):
            task.start()
    finally:
        task.close()
    # Nothing was written into the topics it reads.
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "ends"})
    try:
        assert {tp: consumer.get_watermark_offsets(TopicPartition(*tp), timeout=10)[1] for tp in ends} == ends
    finally:
        consumer.close()


def test_a_task_killed_mid_transaction_leaves_nothing_of_it_and_its_successor_resumes(
    kafka_bootstrap: str, target_kafka_bootstrap: str, topics: list[str]
) -> None:
    ends = setup(kafka_bootstrap, topics, 1000)
    config = mirror_config(kafka_bootstrap, target_kafka_bootstrap, "|".join(topics))
    connector = connector_of(topics)
    doomed = task_process(config, connector, failpoints="mirror.in_transaction=kill")
    assert doomed.wait(120) == -signal.SIGKILL
    with successor_caught_up(config, connector, ends):
        pass
    assert_mirrored_exactly_once(kafka_bootstrap, target_kafka_bootstrap, topics)


def test_a_zombie_task_is_fenced_and_commits_nothing(
    kafka_bootstrap: str, target_kafka_bootstrap: str, topics: list[str]
) -> None:
    ends = setup(kafka_bootstrap, topics, 1000)
    config = mirror_config(kafka_bootstrap, target_kafka_bootstrap, "|".join(topics))
    connector = connector_of(topics)
    zombie = task_process(config, connector, failpoints="mirror.before_commit=stop")
    wait_until(lambda: _stopped(zombie), 120, "the first task to freeze before its commit")
    with successor_caught_up(config, connector, ends):
        zombie.send_signal(signal.SIGCONT)
        assert zombie.wait(60) == 3, "the zombie was not fenced"
    assert_mirrored_exactly_once(kafka_bootstrap, target_kafka_bootstrap, topics)


def test_at_least_once_loses_nothing_and_copies_a_cut_batch_twice(
    kafka_bootstrap: str, target_kafka_bootstrap: str, topics: list[str]
) -> None:
    ends = setup(kafka_bootstrap, topics, 1000)
    config = mirror_config(
        kafka_bootstrap, target_kafka_bootstrap, "|".join(topics), **{"transaction.producer": "false"}
    )
    connector = connector_of(topics)
    doomed = task_process(config, connector, failpoints="mirror.before_commit=kill")
    assert doomed.wait(120) == -signal.SIGKILL
    with successor_caught_up(config, connector, ends):
        pass
    origin = read_partitions(kafka_bootstrap, topics)
    copies = read_partitions(target_kafka_bootstrap, [f"east.{t}" for t in topics])
    duplicates = 0
    for (topic, partition), records in origin.items():
        copied = copies[(f"east.{topic}", partition)]
        assert set(map(repr, copied)) == set(map(repr, records)), "a record was lost"
        duplicates += len(copied) - len(records)
    # The killed task's batch had been produced, not its offsets committed: copied again.
    assert duplicates > 0


def test_new_topics_and_partitions_are_followed(
    kafka_bootstrap: str, target_kafka_bootstrap: str, topics: list[str]
) -> None:
    first, later = topics
    create_topic(kafka_bootstrap, first, PARTITIONS)
    ends = source_records(kafka_bootstrap, first, 400)
    config = mirror_config(kafka_bootstrap, target_kafka_bootstrap, "|".join(topics))
    with running(config, connector_of(topics)):
        wait_until(lambda: caught_up(target_kafka_bootstrap, connector_of(topics), ends), 120, "the first topic")
        create_topic(kafka_bootstrap, later, PARTITIONS)
        ends.update(source_records(kafka_bootstrap, later, 400))
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        admin.create_partitions([NewPartitions(first, PARTITIONS + 2)])[first].result(30)
        grown = Producer({"bootstrap.servers": kafka_bootstrap})
        for partition in (PARTITIONS, PARTITIONS + 1):
            for i in range(50):
                grown.produce(first, json.dumps({"id": f"grown-{partition}-{i}"}).encode(), partition=partition)
            ends[(first, partition)] = 50
        grown.flush(30)
        wait_until(
            lambda: caught_up(target_kafka_bootstrap, connector_of(topics), ends), 120, "the new topic and partitions"
        )
    assert_mirrored_exactly_once(kafka_bootstrap, target_kafka_bootstrap, topics)


def _stopped(process: subprocess.Popen[bytes]) -> bool:
    try:
        with open(f"/proc/{process.pid}/stat") as stat:
            return stat.read().split(")")[1].split()[0] == "T"
    except FileNotFoundError:
        return False
