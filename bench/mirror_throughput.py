#!/usr/bin/env python
"""The Kafka mirror's throughput against a bare consume-and-produce loop on the same two brokers, same run.

Starts two Apache Kafka clusters of one node each (source and target, as the mirror's tests do), produces N records (200-byte values by default, a key and two headers each) over P
partitions on the source, and copies them to the target:

- bare loop: as many processes as the mirror has tasks, each a confluent-kafka consumer and producer with
  every ``--tasks``-th partition, no transactions and no offsets, flushed at the end: the ceiling of
  copying with these clients;
- the mirror as users run it: the product as ``make run`` starts it (``manage.py runstack``), the connector
  created through its REST API and hosted by its Celery worker; once with ``transaction.producer=true``
  (exactly once) and once with ``false`` (at least once).

The mirror's clock runs from its first transaction's start (the ledger's started_at) to the moment the
target group holds the source's end offsets; the bare loop's from its first fetch to its flush. Prints and
writes to bench/results/mirror_throughput.json: records/s, the ratio to the bare loop, transactions (per
second, and records in each), the worker's CPU seconds per million records, and its memory early and late
in the run (flat, or growing with what was copied).

    .venv/bin/python bench/mirror_throughput.py [--records 200000] [--partitions 8] [--value-bytes 200] [--tasks 2]
        [--interval-ms 1000] [--max-records 10000]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sinkadmin.settings")

import django  # noqa: E402

django.setup()

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from django.core.management import call_command  # noqa: E402
from sink_throughput import Product, ensure_services, topic_partition, usage, write_result  # noqa: E402

from connectors.models import Commit  # noqa: E402
from sinkadmin.kafka_broker import start_embedded_broker  # noqa: E402
from sinkadmin.services import ManagedProcess  # noqa: E402
from sinks.mirror.engine import group_id  # noqa: E402


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def kafka(name: str, data: Path) -> tuple[ManagedProcess, str]:
    port = free_port()
    broker = start_embedded_broker(port, data, ROOT / "var" / "log" / "bench", controller_port=free_port(), name=name)
    return broker, f"127.0.0.1:{port}"


def produce(bootstrap: str, topic: str, records: int, partitions: int, size: int) -> dict[tuple[str, int], int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # (kept: a client collected early cancels the request)
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    ends: dict[tuple[str, int], int] = {}

    def delivered(err, msg):
        if err is None:
            key = (msg.topic(), msg.partition())
            ends[key] = max(ends.get(key, 0), msg.offset() + 1)

    value = b"x" * size
    for i in range(records):
        while True:
            try:
                producer.produce(
                    topic,
                    value=value,
                    key=str(i).encode(),
                    headers=[("trace", str(i).encode()), ("origin", b"bench")],
                    partition=i % partitions,
                    on_delivery=delivered,
                )
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(120)
    return ends


def bare_copier(
    source: str, target: str, copy: str, mine: list[tuple[str, int, int]], ready: Any, results: Any
) -> None:
    """One bare copier process: consume ``mine`` (topic, partition, end) and produce each record to ``copy``,
    no transactions and no offsets, flushed at the end. Starts with the others (``ready``, a barrier), and
    puts (first fetch, flushed, records), by the wall clock, on ``results``."""
    consumer = Consumer(
        {"bootstrap.servers": source, "group.id": f"bare-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(t, p, 0) for t, p, _ in mine])
    producer = Producer({"bootstrap.servers": target, "linger.ms": 5, "enable.idempotence": True})
    total, copied, started = sum(end for _, _, end in mine), 0, None
    ready.wait()
    while copied < total:
        for message in consumer.consume(1000, 1.0):
            if message.error() is not None:
                continue
            started = started or time.time()
            while True:
                try:
                    producer.produce(
                        copy,
                        value=message.value(),
                        key=message.key(),
                        headers=message.headers(),
                        partition=topic_partition(message)[1],
                        timestamp=message.timestamp()[1],
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
            copied += 1
    producer.flush(120)
    flushed = time.time()
    consumer.close()
    results.put((started or flushed, flushed, copied))


def bare_loop(source: str, target: str, topic: str, ends: dict[tuple[str, int], int], processes: int) -> float:
    """The ceiling of copying with these clients: as many bare copier processes as the mirror has tasks,
    each with every ``processes``-th partition (as the mirror's tasks share them), started together;
    records/s from the first fetch of any to the last flush."""
    copy = f"bare-{topic}"
    partitions = max(p for _, p in ends) + 1
    admin = AdminClient({"bootstrap.servers": target})
    admin.create_topics([NewTopic(copy, partitions, 1)])[copy].result(30)
    every = sorted(ends.items())
    shares = [[(t, p, end) for n, ((t, p), end) in enumerate(every) if n % processes == i] for i in range(processes)]
    context = multiprocessing.get_context("spawn")
    ready, results = context.Barrier(processes), context.Queue()
    copiers = [
        context.Process(target=bare_copier, args=(source, target, copy, share, ready, results)) for share in shares
    ]
    for copier in copiers:
        copier.start()
    done = [results.get(timeout=3600) for _ in copiers]
    for copier in copiers:
        copier.join(60)
    assert sum(n for _, _, n in done) == sum(ends.values())
    return sum(ends.values()) / (max(end for _, end, _ in done) - min(start for start, _, _ in done))


def target_offsets(target: str, name: str, ends: dict[tuple[str, int], int]) -> int:
    group = Consumer({"bootstrap.servers": target, "group.id": group_id(name), "enable.auto.commit": False})
    try:
        found = group.committed([TopicPartition(f"east.{t}", p) for t, p in ends], timeout=10)
    finally:
        group.close()
    return sum(max(0, c.offset) for c in found)


def run_mirror(
    product: Product, args: argparse.Namespace, source: str, target: str, topic: str, ends: dict, exactly_once: bool
) -> dict:
    name = f"bench-mirror-{'eos' if exactly_once else 'alo'}-{uuid.uuid4().hex[:6]}"
    config = {
        "connector.class": "org.apache.kafka.connect.mirror.MirrorSinkConnector",
        "tasks.max": str(args.tasks),
        "source.cluster.alias": "east",
        "source.cluster.bootstrap.servers": source,
        "target.cluster.bootstrap.servers": target,
        "topics": topic,
        "transaction.producer": "true" if exactly_once else "false",
        "sinkadmin.commit.interval-ms": str(args.interval_ms),
        "sinkadmin.commit.max-records": str(args.max_records),
    }
    worker = product.worker()
    cpu_before = usage(worker).cpu_seconds
    product.api("POST", "connectors", {"name": name, "config": config})
    total = sum(ends.values())
    deadline = time.monotonic() + 3600
    # The worker's memory (proportional set size of it and its pool) every two seconds: flat, or growing
    # with what was copied?
    memory: list[tuple[int, int]] = []
    while (copied := target_offsets(target, name, ends)) < total:
        if time.monotonic() > deadline:
            raise SystemExit(f"{name} did not catch up in an hour")
        memory.append((copied, usage(worker).memory))
        time.sleep(2.0)
    done_at = time.time()
    cpu = usage(worker).cpu_seconds - cpu_before
    product.api("DELETE", f"connectors/{name}")
    transactions = list(Commit.objects.filter(connector_name=name).values_list("started_at", "records"))
    first = min(started for started, _ in transactions).timestamp()
    seconds = done_at - first
    # Memory once the copying is under way (the first fifth of the records) against the last fifth.
    early = [m for c, m in memory if total * 0.1 <= c < total * 0.3]
    late = [m for c, m in memory if c >= total * 0.8]
    return {
        "mode": "exactly once (transaction.producer=true)" if exactly_once else "at least once (false)",
        "records_per_s": round(total / seconds),
        "seconds": round(seconds, 2),
        "transactions": len(transactions),
        "transactions_per_s": round(len(transactions) / seconds, 2),
        "mean_records_per_transaction": round(sum(r for _, r in transactions) / max(1, len(transactions))),
        "worker_cpu_seconds_per_million_records": round(cpu * 1e6 / total, 2),
        "worker_memory_mb": {
            "early_median": round(statistics.median(early) / 2**20) if early else None,
            "late_median": round(statistics.median(late) / 2**20) if late else None,
            "max": round(max(m for _, m in memory) / 2**20) if memory else None,
            "samples": len(memory),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--value-bytes", type=int, default=200)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--interval-ms", type=int, default=1_000)
    parser.add_argument("--max-records", type=int, default=10_000)
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "mirror_throughput.json"))
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    services = ensure_services()
    data = Path(tempfile.mkdtemp(prefix="bench-mirror-"))
    (source_broker, source), (target_broker, target) = (
        kafka("kafka-source", data / "source"),
        kafka("kafka-target", data / "target"),
    )
    product = None
    try:
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        print(f"producing {args.records} records over {args.partitions} partitions...", flush=True)
        ends = produce(source, topic, args.records, args.partitions, args.value_bytes)
        bare = bare_loop(source, target, topic, ends, args.tasks)
        print(f"bare consume-and-produce loop ({args.tasks} processes): {bare:,.0f} records/s", flush=True)
        product = Product()
        runs = []
        for exactly_once in (True, False):
            run = run_mirror(product, args, source, target, topic, ends, exactly_once)
            run["ratio_to_bare_loop"] = round(run["records_per_s"] / bare, 3)
            print(json.dumps(run), flush=True)
            runs.append(run)
        write_result(
            args.output,
            {
                "records": args.records,
                "partitions": args.partitions,
                "value_bytes": args.value_bytes,
                "tasks": args.tasks,
                "interval_ms": args.interval_ms,
                "max_records": args.max_records,
                "bare_loop_records_per_s": round(bare),
                "bare_loop_processes": args.tasks,
                "mirror_through_make_run": runs,
            },
        )
    finally:
        if product is not None:
            product.stop()
        for broker in (source_broker, target_broker):
            broker.stop()
        for service in services:
            service.stop()


if __name__ == "__main__":
    main()
