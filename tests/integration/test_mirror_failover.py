"""Failing over to the mirror's target, as users of MirrorMaker 2's checkpoints do, between two Apache Kafka
clusters: a consumer group's committed offsets on the source are translated through the offset syncs the
mirror's tasks write in their transactions, checkpointed on the target (read back by MirrorMaker 2's own
RemoteClusterUtils, in Java) and synced into the group there. Once the source cluster is gone, the group
resumes on the target and reads every record it had not read, once, and none it had. And while the mirror's
tasks are killed and started again mid-run, no checkpoint ever points past a record not yet on the target."""

from __future__ import annotations

import bisect
import random
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from sinkadmin.services import ManagedProcess
from sinks.mirror.checkpoints import CheckpointRunner, translated_offsets
from sinks.mirror.settings import MirrorSettings
from sinks.mirror.syncs import Checkpoint, checkpoints_topic
from tests.conftest import free_port, kafka_cluster
from tests.integration.helpers import create_topic, wait_until
from tests.integration.test_mirror_engine import (
    PARTITIONS,
    caught_up,
    mirror_config,
    read_partitions,
    running,
    source_records,
    task_process,
)

# (beside: brokers only, no Spark, and mostly waiting on them: run in the lane beside the others.)
pytestmark = [pytest.mark.integration, pytest.mark.beside]

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINTING = {
    "emit.checkpoints.interval.seconds": "1",
    "refresh.groups.interval.seconds": "1",
    "sync.group.offsets.enabled": "true",
    "sync.group.offsets.interval.seconds": "1",
}


@contextmanager
def checkpointing(config: dict[str, str], connector: str) -> Iterator[CheckpointRunner]:
    """The mirror's checkpoint runner in a thread of this process, stopped on exit."""
    stop = threading.Event()
    runner = CheckpointRunner(connector, MirrorSettings.parse(config))
    thread = threading.Thread(target=runner.run, args=(stop.is_set,), daemon=True)
    thread.start()
    try:
        yield runner
    finally:
        stop.set()
        thread.join(30)


def consume_and_commit(bootstrap: str, topic: str, group: str, counts: dict[int, int]) -> dict[int, int]:
    """Group ``group`` reads the first ``counts[p]`` records of each partition and commits there (a
    partition it reads nothing of keeps no offset); its offsets."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    wanted = {p: n for p, n in counts.items() if n}
    consumer.assign([TopicPartition(topic, p, 0) for p in wanted])
    read = dict.fromkeys(wanted, 0)
    while any(read[p] < n for p, n in wanted.items()):
        for message in consumer.consume(500, 1.0):
            if message.error() is None and read[message.partition()] < wanted[message.partition()]:
                read[message.partition()] += 1
    consumer.commit(offsets=[TopicPartition(topic, p, n) for p, n in read.items()], asynchronous=False)
    consumer.close()
    return read


def read_from(bootstrap: str, topic: str, group: str, starts: dict[int, int] | None = None) -> dict[int, list[bytes]]:
    """What a read_committed consumer of ``group`` reads on ``topic`` until it is quiet: from the group's
    committed offsets, or (``starts``) from those offsets, assigned."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    if starts is None:
        consumer.subscribe([topic])
    else:
        consumer.assign([TopicPartition(topic, p, o) for p, o in starts.items()])
    found: dict[int, list[bytes]] = {}
    quiet_until = time.monotonic() + 8.0
    while time.monotonic() < quiet_until:
        for message in consumer.consume(500, 0.5):
            if message.error() is None:
                found.setdefault(message.partition(), []).append(message.value())
                quiet_until = time.monotonic() + 3.0
    consumer.close()
    return found


def mirrormaker_client(program: str, *args: str) -> list[list[str]]:
    """The tab-separated lines a Java program of tests/integration/java prints, run on MirrorMaker 2's client
    library (connect-mirror-client)."""
    jars = ROOT / "var" / "jars" / "mirror-client"
    out = subprocess.run(
        ["java", "-cp", f"{jars}/*", str(ROOT / "tests/integration/java" / program), *args],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    return [line.split("\t") for line in out.splitlines() if line.strip()]


def remote_cluster_utils(target: str, alias: str, group: str, separator: str = ".") -> dict[tuple[str, int], int]:
    """MirrorMaker 2's RemoteClusterUtils.translateOffsets (its Java client library), on the target."""
    lines = mirrormaker_client("TranslateOffsets.java", target, alias, group, separator)
    return {(t, int(p)): int(o) for t, p, o in lines}


def group_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    finally:
        consumer.close()
    return {c.partition: c.offset for c in committed if c.offset >= 0}


@pytest.fixture
def doomed_source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ManagedProcess]]:
    """A source cluster of the test's own, which the test stops (the disaster)."""
    port = free_port()
    with kafka_cluster("kafka-doomed", tmp_path_factory.mktemp("kafka-doomed"), port) as broker:
        yield f"127.0.0.1:{port}", broker


def test_a_consumer_group_fails_over_to_the_target_and_reads_each_record_it_had_not_read_once(
    doomed_source: tuple[str, ManagedProcess], target_kafka_bootstrap: str
) -> None:
    source, broker = doomed_source
    target = target_kafka_bootstrap
    topic, group = f"orders-{uuid.uuid4().hex[:6]}", f"billing-{uuid.uuid4().hex[:6]}"
    create_topic(source, topic, PARTITIONS)
    ends = source_records(source, topic, 2000)
    # The group reads part of the topic on the source and commits: mid-way through the mirror's batches, all
    # of one partition, none of another.
    committed = consume_and_commit(source, topic, group, {0: 137, 1: 333, 2: 0, 3: 500})
    origin = read_partitions(source, [topic])
    config = mirror_config(source, target, topic, **CHECKPOINTING)
    connector = f"mirror-{topic}"
    replica = f"east.{topic}"
    settings = MirrorSettings.parse(config)
    with running(config, connector), checkpointing(config, connector):
        wait_until(lambda: caught_up(target, connector, ends), 120, "the mirror to catch up")
        wait_until(
            lambda: {t.partition for t in translated_offsets(settings, group)} == set(committed),
            60,
            "the group's checkpoints",
        )
        translated = {t.partition: t.downstream for t in translated_offsets(settings, group)}
        wait_until(lambda: group_offsets(target, group, replica) == translated, 60, "the group synced to the target")
    # MirrorMaker 2's own client library reads the same translation from the checkpoints.
    assert remote_cluster_utils(target, "east", group) == {(replica, p): o for p, o in translated.items()}

    broker.stop()  # (the source cluster is lost)

    def unread(partition: int) -> list[bytes]:
        return [value for _, value, _, _ in origin[(topic, partition)][committed.get(partition, 0) :]]

    # The group itself, resuming on the target where its synced offsets say; and a consumer placed at the
    # translated offsets by hand. Each reads what the group had not read on the source, once, in order.
    # (By hand: a partition without a translation, which the group never committed, starts at the log's start.)
    by_hand = {p: translated.get(p, OFFSET_BEGINNING) for p in range(PARTITIONS)}
    for found in (read_from(target, replica, group), read_from(target, replica, f"by-hand-{group}", by_hand)):
        assert {p: found.get(p, []) for p in range(PARTITIONS)} == {p: unread(p) for p in range(PARTITIONS)}


def test_mirrormakers_own_code_names_the_internal_topics_as_the_mirror_and_reads_its_checkpoints_with_a_separator(
    kafka_bootstrap: str, target_kafka_bootstrap: str
) -> None:
    # MirrorMaker 2's replication policies, in Java: the offset syncs and checkpoints topics, a replica and a
    # heartbeats replica, for separators and replication.policy.internal.topic.separator.enabled.
    cases = [
        ("DefaultReplicationPolicy", "_", "true", "sep"),
        ("DefaultReplicationPolicy", "__", "false", "sep"),
        ("IdentityReplicationPolicy", "-", "true", "sep"),
        ("DefaultReplicationPolicy", ".", "true", "east"),
    ]
    names = mirrormaker_client("PolicyNames.java", *(arg for case in cases for arg in case))
    for (policy, separator, enabled, alias), theirs in zip(cases, names, strict=True):
        mine = MirrorSettings.parse(
            mirror_config(
                "s:9092",
                "t:9092",
                "orders",
                **{
                    "source.cluster.alias": alias,
                    "replication.policy.class": policy,
                    "replication.policy.separator": separator,
                    "replication.policy.internal.topic.separator.enabled": enabled,
                },
            )
        )
        assert theirs == [
            mine.offset_syncs_topic,
            mine.checkpoints_topic,
            *map(mine.target_topic, ["orders", "heartbeats"]),
        ]

    # A mirror with another separator: RemoteClusterUtils, told the separator, reads its checkpoints. (An alias
    # of its own: Kafka refuses a topic whose name differs from another's by "_" for "." only, and the other
    # tests' mirrors from "east" write mm2-offset-syncs.east.internal on the same target.)
    source, target = kafka_bootstrap, target_kafka_bootstrap
    topic, group = f"parcels-{uuid.uuid4().hex[:6]}", f"depot-{uuid.uuid4().hex[:6]}"
    alias = f"sep{uuid.uuid4().hex[:6]}"
    create_topic(source, topic, PARTITIONS)
    source_records(source, topic, 800)
    committed = consume_and_commit(source, topic, group, {0: 41, 1: 150, 2: 0, 3: 200})
    config = mirror_config(
        source,
        target,
        topic,
        **CHECKPOINTING,
        **{"source.cluster.alias": alias, "replication.policy.separator": "_"},
    )
    connector = f"mirror-{topic}"
    settings = MirrorSettings.parse(config)
    with running(config, connector), checkpointing(config, connector):
        wait_until(
            lambda: {t.partition for t in translated_offsets(settings, group)} == set(committed),
            120,
            "the group's checkpoints",
        )
        translated = {t.partition: t.downstream for t in translated_offsets(settings, group)}
    on_target = AdminClient({"bootstrap.servers": target}).list_topics(timeout=10).topics
    assert {f"{alias}_{topic}", f"mm2-offset-syncs_{alias}_internal", f"{alias}_checkpoints_internal"} <= set(on_target)
    assert remote_cluster_utils(target, alias, group, separator="_") == {
        (f"{alias}_{topic}", p): o for p, o in translated.items()
    }


def test_checkpoints_are_never_ahead_of_the_copied_records_while_the_mirror_is_killed_and_restarted(
    kafka_bootstrap: str, target_kafka_bootstrap: str
) -> None:
    source, target = kafka_bootstrap, target_kafka_bootstrap
    topic, group = f"ledger-{uuid.uuid4().hex[:6]}", f"audit-{uuid.uuid4().hex[:6]}"
    create_topic(source, topic, PARTITIONS)
    config = mirror_config(source, target, topic, **CHECKPOINTING)
    connector = f"mirror-{topic}"
    # A consumer group of the source, which reads ahead of the mirror in each round and commits as it goes.
    reader = Consumer(
        {"bootstrap.servers": source, "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    )
    reader.subscribe([topic])
    rng = random.Random(5)
    read = 0

    def group_checkpoints(runner: CheckpointRunner) -> set[tuple[str, int, int, int]]:
        assert runner.checkpoints is not None
        return {(t, p, up, down) for (g, t, p), (up, down) in dict(runner.checkpoints.emitted).items() if g == group}

    ends: dict[tuple[str, int], int] = {}
    with checkpointing(config, connector) as runner:
        # Four rounds: new records on the source, the group reads most of them (ahead of the mirror), and the
        # mirror's task starts, is let write a checkpoint or more, and is killed (SIGKILL, often mid-transaction).
        for round_ in range(4):
            ends = transactional_records(source, topic, 1000, start=round_ * 1000)
            target_read = read + rng.randint(400, 900)
            while read < target_read:
                taken = [m for m in reader.consume(37, 1.0) if m.error() is None]
                if taken:
                    read += len(taken)
                    reader.commit(asynchronous=False)
            before = group_checkpoints(runner)
            doomed = task_process(config, connector)
            wait_until(
                lambda before=before: group_checkpoints(runner) - before,
                90,
                f"a checkpoint of {group} in round {round_}",
            )
            time.sleep(rng.uniform(0.0, 0.6))
            doomed.send_signal(signal.SIGKILL)
            doomed.wait(30)
        last = task_process(config, connector)
        try:
            wait_until(lambda: caught_up(target, connector, ends), 120, "the last task to catch up")
            while read < 4000:  # (the group reads to the end too)
                taken = [m for m in reader.consume(500, 1.0) if m.error() is None]
                read += len(taken)
            reader.commit(asynchronous=False)

            def at_the_end() -> bool:  # (the group's offsets, past the last commit markers, translated)
                reached = {p: up for _, p, up, _ in group_checkpoints(runner)}
                return all(reached.get(p, -1) >= n for (_, p), n in ends.items())

            wait_until(at_the_end, 60, "the group's last checkpoints")
        finally:
            last.terminate()
            last.wait(60)
            reader.close()

    # Where each source record's copy is on the target (exactly once: the k-th committed record of a replica
    # partition copies the partition's k-th committed record on the source).
    origin, copies = committed_offsets(source, topic), committed_offsets(target, f"east.{topic}")
    assert (
        {p: len(c) for p, c in copies.items()}
        == {p: len(o) for p, o in origin.items()}
        == {p: 1000 for p in range(PARTITIONS)}
    )

    # Every checkpoint the runner wrote for the group: resuming at it never skips the group's next record.
    # (It may read some again: a checkpoint made while the mirror was behind the group points just past
    # the last record copied then, as MirrorMaker 2's does.)
    written = [c for c in checkpoints_read(target) if c.group == group]
    # (At least one new in each round, and the last ones.)
    assert len({(c.partition, c.upstream, c.downstream) for c in written}) >= 5, written
    for checkpoint in written:
        following = bisect.bisect_left(origin[checkpoint.partition], checkpoint.upstream)
        if following < len(origin[checkpoint.partition]):
            assert checkpoint.downstream <= copies[checkpoint.partition][following], f"{checkpoint} is ahead"


def transactional_records(bootstrap: str, topic: str, count: int, start: int) -> dict[tuple[str, int], int]:
    """``count`` records round-robin over the partitions in transactions of ten, as an exactly-once
    application writes them (so the source's offsets have commit markers between records, which a translation
    must not count as records); each partition's offset after its last record."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"app-{topic}", "linger.ms": 5})
    producer.init_transactions(30)
    ends: dict[tuple[str, int], int] = {}

    def delivered(err: KafkaError | None, message: Message) -> None:
        assert err is None, err
        key = (message.topic(), message.partition())
        ends[key] = max(ends.get(key, 0), message.offset() + 1)

    for first in range(start, start + count, 10):
        producer.begin_transaction()
        for i in range(first, first + 10):
            producer.produce(
                topic,
                value=f"{topic}-{i}".encode(),
                key=f"key-{i}".encode(),
                partition=i % PARTITIONS,
                on_delivery=delivered,
            )
            producer.poll(0)
        producer.commit_transaction(30)
    return ends


def committed_offsets(bootstrap: str, topic: str) -> dict[int, list[int]]:
    """The offsets of ``topic``'s committed records, per partition, in order."""
    found: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    at_end: set[int] = set()
    while len(at_end) < PARTITIONS:
        for message in consumer.consume(1000, 1.0):
            error = message.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                at_end.add(message.partition())
            elif error is None:
                found[message.partition()].append(message.offset())
    consumer.close()
    return found


def checkpoints_read(target: str) -> list[Checkpoint]:
    """Every checkpoint in the target's checkpoints topic of source alias east, in order."""
    consumer = Consumer(
        {"bootstrap.servers": target, "group.id": f"cp-{uuid.uuid4().hex[:6]}", "enable.partition.eof": True}
    )
    consumer.assign([TopicPartition(checkpoints_topic("east"), 0, 0)])
    found = []
    while True:
        message = consumer.poll(5.0)
        assert message is not None, "the checkpoints topic was not read to its end"
        error = message.error()
        if error is not None:
            assert error.code() == KafkaError._PARTITION_EOF, error
            break
        key, value = message.key(), message.value()
        assert key is not None and value is not None
        found.append(Checkpoint.parse(key, value))
    consumer.close()
    return found
