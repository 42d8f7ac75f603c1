"""Shared steps of the integration tests: produce to the real broker, run
connector processes, read the real Iceberg table back."""

from __future__ import annotations

import contextlib
import json
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from django.db import connections

from connectors.config import SinkConfig
from connectors.models import Commit, CommitState, Connector
from sinks.iceberg.tables import PROP_COMMIT_ID, catalog_for
from tests.readers import assert_same_rows, duckdb_iceberg_rows, spark_iceberg_rows
from workers import runtime


def create_topic(bootstrap: str, topic: str, partitions: int, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, num_partitions=partitions, replication_factor=1, config=config or {})
    admin.create_topics([new])[topic].result(30)


# For a topic whose records are stamped long ago: the broker's retention (7 days by default, checked
# every 5 minutes) would otherwise delete them, at a moment of its own, before the test reads them back.
KEPT_FOREVER = {"retention.ms": "-1"}


def produce(
    bootstrap: str,
    topic: str,
    values: list[bytes | None],
    partitions: int,
    keys: list[bytes] | None = None,
    headers: list[list[tuple[str, bytes]]] | None = None,
    timestamps: list[int] | None = None,
) -> dict[tuple[str, int], int]:
    """Produce values round-robin over partitions (with record timestamps in ms if given);
    return the end offset of each partition."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    ends: dict[tuple[str, int], int] = {}
    errors: list[Any] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            key = (msg.topic(), msg.partition())
            ends[key] = max(ends.get(key, 0), msg.offset() + 1)

    for i, value in enumerate(values):
        while True:
            try:
                producer.produce(
                    topic,
                    value=value,
                    key=keys[i] if keys else str(i).encode(),
                    partition=i % partitions,
                    headers=headers[i] if headers else None,
                    timestamp=timestamps[i] if timestamps else 0,
                    on_delivery=delivered,
                )
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors, errors
    return ends


def json_records(start: int, count: int) -> list[bytes | None]:
    return [json.dumps({"id": i, "name": f"name-{i}", "amount": i * 0.5}).encode() for i in range(start, start + count)]


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def ledger_offsets(name: str) -> dict[tuple[str, int], int]:
    connector = Connector.objects.get(name=name)
    return {(o.topic, o.partition): o.next_offset for o in connector.offsets.all()}


def caught_up(name: str, ends: dict[tuple[str, int], int]) -> Callable[[], bool]:
    def check() -> bool:
        offsets = ledger_offsets(name)
        pending = Commit.objects.filter(connector_name=name, state=CommitState.PREPARED).exists()
        return not pending and all(offsets.get(tp) == end for tp, end in ends.items())

    return check


def table_of(name: str, table: str) -> Any:
    """The table as it is now; its catalog's connections are closed (reading it needs only its files)."""
    connector = Connector.objects.get(name=name)
    return table_in(SinkConfig.parse(connector.config), table)


def table_in(config: SinkConfig, table: str) -> Any:
    # A SQL catalog's pool left open holds sessions on the test database,
    # which pytest-django then cannot drop at the end of the run.
    with catalog_for(config) as catalog:
        return catalog.load_table(table)


def alter(table: Any, change: str) -> None:
    """Change the table as a person would with Spark SQL: a "column" (``note``, a string) or a
    "partition spec" (``id_bucket``, a bucket of ``id`` in 4)."""
    from pyiceberg.transforms import BucketTransform
    from pyiceberg.types import StringType

    if change == "column":
        with table.update_schema() as update:
            update.add_column("note", StringType())
    else:
        with table.update_spec() as update:
            update.add_field("id", BucketTransform(4), "id_bucket")


def table_rows(name: str, table: str) -> list[dict[str, Any]]:
    """The table's rows as pyiceberg reads them, checked against Spark's own Iceberg reader: the same
    rows, each as many times (tests.readers)."""
    config = SinkConfig.parse(Connector.objects.get(name=name).config)
    rows = table_in(config, table).scan().to_arrow().to_pylist()
    assert_same_rows(f"Spark's Iceberg reader ({table})", rows, spark_iceberg_rows(config, table))
    return rows


def sink_snapshots(name: str, table: str) -> list[Any]:
    tbl = table_of(name, table)
    return [s for s in tbl.snapshots() if s.summary and s.summary.additional_properties.get(PROP_COMMIT_ID)]


def duckdb_rows(name: str, table: str) -> list[dict[str, Any]]:
    """The table's rows as DuckDB's Iceberg extension reads them (tests.readers.duckdb_iceberg_rows)."""
    return duckdb_iceberg_rows(table_of(name, table).metadata_location)


def assert_upserts_merged_on_read(name: str, table: str, commits: int | None = None) -> None:
    """The connector's commits to ``table`` (its first ``commits``, if given) removed no data file, and those
    after the first that met keys the table held added position delete files instead (merge-on-read,
    sinks.iceberg.row_delta)."""
    snapshots = sink_snapshots(name, table)[:commits]
    assert len(snapshots) >= 2, f"{name} made {len(snapshots)} commit(s) to {table}"
    for snapshot in snapshots:
        summary = snapshot.summary.additional_properties
        assert "deleted-data-files" not in summary, f"commit {summary[PROP_COMMIT_ID]} removed data files"
    added = [int(s.summary.additional_properties.get("added-position-delete-files", 0)) for s in snapshots[1:]]
    assert sum(added) > 0, f"no commit of {name} after the first added a position delete file"


@contextmanager
def running_in_threads(name: str, tasks: int = 1) -> Iterator[threading.Event]:
    """Coordinator and tasks in this process (threads), stopped on exit."""
    stop = threading.Event()

    def closing_its_connections(target: Callable[..., object], *args: object) -> threading.Thread:
        def run() -> None:
            try:
                target(*args)
            finally:
                connections.close_all()  # this thread's own, before the test database is dropped

        return threading.Thread(target=run, daemon=True)

    threads = [
        closing_its_connections(
            runtime.run_task, name, index, runtime.assigned_partitions(name, index, tasks), stop.is_set
        )
        for index in range(tasks)
    ]
    threads.append(closing_its_connections(runtime.run_coordinator, name, stop.is_set))
    for thread in threads:
        thread.start()
    try:
        yield stop
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)


def spawn(env: dict[str, str], name: str, *args: str, failpoints: str = "") -> subprocess.Popen[bytes]:
    """A connector role in its own process, so a test can SIGKILL it."""
    child_env = dict(env)
    if failpoints:
        child_env["SINKADMIN_FAILPOINTS"] = failpoints
    return subprocess.Popen([sys.executable, "manage.py", "run_connector", name, *args], env=child_env)


def topic_ids(bootstrap: str, ends: dict[tuple[str, int], int]) -> list[int]:
    """The ids of every record in the topic up to ``ends``, read with a bare consumer.

    The table is compared with this, not with what the test meant to
    produce: I1 is about the records that are in the log.
    """
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-reader", "enable.auto.commit": False})
    consumer.assign([TopicPartition(t, p, 0) for (t, p) in ends])
    remaining = {tp: end for tp, end in ends.items() if end > 0}
    ids: list[int] = []
    deadline = time.monotonic() + 60
    while remaining and time.monotonic() < deadline:
        for message in consumer.consume(1000, 1.0):
            if message.error():
                continue
            tp = (message.topic(), message.partition())
            if tp in remaining and message.offset() < remaining[tp]:
                ids.append(json.loads(message.value())["id"])
                if message.offset() + 1 >= remaining[tp]:
                    del remaining[tp]
    consumer.close()
    assert not remaining, f"could not read back {remaining}"
    return sorted(ids)


class TcpProxy:
    """A TCP forwarder to a real server that a test can cut and restore, standing for an outage:
    cut, new connections are refused and live ones dropped; restored, it listens again on the
    same port."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = 0
        self._live: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self.restore()

    def restore(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        with self._lock:
            live, self._live = self._live, []
        for sock in live:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._live += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


def changes(count: int, keys: int, partitions: int, seed: int, first_ts: int = 0) -> list[bytes | None]:
    """Changes of ``keys`` keys (id, ts, amount, op u/d, region); record i is for a key of partition
    i % partitions (produce() places record i there), so each key lives in one partition, as Kafka
    places keyed records. ``ts`` grows along the stream from ``first_ts`` (as a change's source position
    does), so ordering by it is ordering by the stream, whatever the commits' bounds."""
    rng = random.Random(seed)
    by_partition = [
        [k for k in range(keys) if zlib.crc32(str(k).encode()) % partitions == p] for p in range(partitions)
    ]
    values: list[bytes | None] = []
    for i in range(count):
        key = rng.choice(by_partition[i % partitions])
        record = {
            "id": key,
            "ts": first_ts + i,
            "amount": rng.randrange(10_000),
            "op": "d" if rng.random() < 0.1 else "u",
            "region": f"r{key % 3}",
        }
        values.append(json.dumps(record).encode())
    return values


def topic_records(bootstrap: str, ends: dict[tuple[str, int], int]) -> list[tuple[int, int, dict[str, Any]]]:
    """Every JSON record of the topic up to ``ends`` as (partition, offset, record), in offset order per
    partition, read with a bare consumer (the independent reader of what the sink was given)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-records", "enable.auto.commit": False})
    consumer.assign([TopicPartition(t, p, 0) for (t, p) in ends])
    records: list[tuple[int, int, dict[str, Any]]] = []
    remaining = {tp: end for tp, end in ends.items() if end > 0}
    deadline = time.monotonic() + 60
    while remaining and time.monotonic() < deadline:
        for message in consumer.consume(1000, 1.0):
            tp = (message.topic(), message.partition())
            if message.error() or tp not in remaining or message.offset() >= remaining[tp]:
                continue
            records.append((message.partition(), message.offset(), json.loads(message.value())))
            if message.offset() + 1 >= remaining[tp]:
                del remaining[tp]
    consumer.close()
    assert not remaining, f"could not read back {remaining}"
    return sorted(records, key=lambda r: (r[0], r[1]))


def group_offsets(bootstrap: str, group: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """What Kafka's tools read: the group's committed offsets, as a plain consumer of that group sees them."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        found = consumer.committed([TopicPartition(t, p) for t, p in partitions], timeout=15)
    finally:
        consumer.close()
    return {(tp.topic, tp.partition): tp.offset for tp in found if tp.offset >= 0}


class Processes:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.children: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, *args: str, failpoints: str = "") -> subprocess.Popen[bytes]:
        child = spawn(self.env, name, *args, failpoints=failpoints)
        self.children.append(child)
        return child

    def coordinator(self, name: str, failpoints: str = "") -> subprocess.Popen[bytes]:
        return self.start(name, "--role", "coordinator", failpoints=failpoints)

    def task(self, name: str, index: int = 0, tasks: int = 1, failpoints: str = "") -> subprocess.Popen[bytes]:
        return self.start(
            name, "--role", "task", "--task-index", str(index), "--tasks", str(tasks), failpoints=failpoints
        )

    def stop_all(self) -> None:
        for child in self.children:
            if child.poll() is None:
                child.send_signal(signal.SIGCONT)
                child.kill()
            child.wait(30)
