#!/usr/bin/env python
"""Sink throughput of both data planes against a bare Kafka consumer on the same broker, same run.

Produces N JSON records (~1 KB) over P partitions, reads them once with
bare confluent-kafka batch consumers, as many processes as the connector has
tasks, each with its share of the partitions (the baseline), and once more
with the same consumers decoding each batch as the tasks do
(workers.json_decoder's JsonDecoder: what decoding costs, with the allocator
the tasks use), then runs the sink once per sink and data plane (``--sinks``: iceberg,
files (Parquet files in the HDFS sink's layout), hudi-insert (a Hudi table
appended to), hudi-upsert (a copy-on-write Hudi table upserted by a key that
half the records update; its run reports the fraction) and hudi-upsert-mor
(the same upserts into a merge-on-read table), iceberg-upsert and
iceberg-upsert-cow (the same upserts into an Iceberg table created
merge-on-read, or copy-on-write), iceberg-lineage (the iceberg sink's records
through Kafka's ReplaceField and InsertField: a field renamed, one dropped,
the topic, partition, offset and timestamp added), and on a topic of Debezium change events
instead (all sinks of the run must then be of these two): iceberg-cdc (the
Iceberg sink's own CDC config: its DebeziumTransform, cdc-field, upsert mode,
merge-on-read) against iceberg-cdc-append (the same events unwrapped by
Debezium's ExtractNewRecordState and appended), iceberg-cdc-routed (that unwrap then
a RegexRouter, Debezium's ``unwrap,route``, against iceberg-cdc-append), and hudi-cdc (the same
unwrap, deletes rewritten as rows flagged ``__deleted``, upserted by key into a
merge-on-read Hudi table); ``--writers``: spark and
arrow; a connector each over the same topic, coordinator + tasks as separate
``run_connector`` processes, and in the product as ``make run`` starts it,
the two modes in turn in each round) until the ledger reaches the topic's end
offsets; make run's rate is also given against run_connector's, paired by
round. Before the sinks, the Spark Connect server is warmed with trivial
jobs until its JIT has done compiling (thousands of jobs), as a `make run`
that has been up for half an hour has it (``warm_spark_server``), and
"Spark alone" runs: the same records staged as the participants stage them and
decoded and written by the data plane's Spark jobs with no sink around
them. Prints and writes to bench/results/sink_throughput.json, per
plane: records/s and the ratio to the bare consumer, the spark plane's rate
against the arrow plane's, the rate after the first commit, commit latency
p50/p99 (and p99 after the first commit, whose cycle holds the tasks'
start), each commit's cycle and what ended it, snapshots written, peak RSS
of every process (the Spark Connect server's JVM and Python workers
included), CPU seconds of each process over
the timed part of the run, Spark's CPU seconds per million records next to
Spark alone's, and the RSS of each sink process every half second.

The sink's clock runs from its first START_COMMIT (the ledger's started_at
of the first commit) to the commit that reaches the end offsets, as the
bare consumer's runs from its first fetch: process start-up (Python
imports, Django, connecting) is left out of both, and reported apart. In
the make-run mode the connector is created once the stack has settled
(its processes nearly idle), as on a stack a user has had running.

    .venv/bin/python bench/sink_throughput.py [--records 1000000] [--partitions 16] [--writers spark,arrow]
        [--sinks iceberg,files,hudi-insert,hudi-upsert,hudi-upsert-mor,iceberg-upsert,iceberg-upsert-cow,iceberg-lineage
         | --sinks iceberg-cdc,iceberg-cdc-append,iceberg-cdc-routed,hudi-cdc]
        [--modes run-connector,make-run]
        [--interval-ms 1000] [--max-records 0] [--set KEY=VALUE ...] [--repeat 1]

With ``--repeat N`` each mode runs its sinks and planes N times, the planes
alternating, and each figure is the median over those rounds (every round's
figures are kept in the result); the spark / arrow ratio is the median of
the rounds' pairs, and peak RSS the largest of any round.
"""

from __future__ import annotations

import argparse
import base64
import functools
import json
import multiprocessing
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sinkadmin.settings")

import django  # noqa: E402

django.setup()

import psutil  # noqa: E402
import pyarrow as pa  # noqa: E402
from confluent_kafka import Consumer, Message, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402

from connectors import actions  # noqa: E402
from connectors.models import Commit, CommitState, Connector, PartitionOffset  # noqa: E402
from sinkadmin.kafka_broker import start_configured_broker  # noqa: E402
from sinkadmin.services import (  # noqa: E402
    listening_process,
    port_open,
    split_hostport,
    start_spark_connect,
)
from sinks.iceberg.tables import default_spark_catalog_conf  # noqa: E402
from workers.json_decoder import JsonDecoder  # noqa: E402
from workers.runtime import tune_process_for_tasks  # noqa: E402
from workers.staging import RecordChunk  # noqa: E402

# The files sink's runs write here (beside the warehouse), and each run's files are removed after it.
FILES_ROOT = settings.VAR_DIR / "bench-files"


def ensure_services() -> list:
    started = []
    host, port = split_hostport(settings.KAFKA_BOOTSTRAP_SERVERS)
    if not port_open(host, port) and settings.KAFKA_EMBEDDED:
        started.append(start_configured_broker(settings.VAR_DIR / "log" / "bench"))
    if settings.SPARK_REMOTE:
        host, port = split_hostport(settings.SPARK_REMOTE.removeprefix("sc://"))
        if not port_open(host, port):
            # (As make run starts it: the project's catalog mapped.)
            catalogs = default_spark_catalog_conf()
            started.append(start_spark_connect(port, settings.VAR_DIR / "log" / "bench", catalogs=catalogs))
    return started


def produce(topic: str, records: int, partitions: int, debezium: bool = False) -> dict[tuple[str, int], int]:
    """``records`` JSON records of ~1 KB (plain rows, or Debezium's change events of such rows: see
    debezium_events) round-robin over the partitions; each partition's end offset."""
    admin = AdminClient({"bootstrap.servers": settings.KAFKA_BOOTSTRAP_SERVERS})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(30)
    producer = Producer(
        {
            "bootstrap.servers": settings.KAFKA_BOOTSTRAP_SERVERS,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "enable.idempotence": True,
        }
    )
    ends: dict[tuple[str, int], int] = {}

    def delivered(err, msg):
        if err is None:
            key = (msg.topic(), msg.partition())
            ends[key] = max(ends.get(key, 0), msg.offset() + 1)

    for i, (spread, key, value) in enumerate(debezium_events(records) if debezium else plain_records(records)):
        while True:
            try:
                producer.produce(topic, value=value, key=key, partition=spread % partitions, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10000 == 0:
            producer.poll(0)
    producer.flush(120)
    return ends


def row(i: int, keys: int) -> dict:
    return {
        "id": i,
        "key": i % keys,
        "user": f"user-{i % 1000}",
        "amount": i * 0.25,
        "ok": i % 2 == 0,
        "note": "x" * 900,
    }


def plain_records(records: int):
    """(what spreads it over the partitions, key, value) of each row, round-robin; the upsert runs' key: the
    second half of the records update the first half's keys."""
    keys = max(1, records // 2)
    for i in range(records):
        yield i, None, json.dumps(row(i, keys)).encode()


# One in this many of the CDC topic's changes is a delete (with its tombstone).
DELETE_EVERY = 50


def debezium_events(records: int):
    """Debezium's change events of a table of ``records // 2`` rows, as its JSON converter without schemas
    writes them: the snapshot (op r) of every row, then one change of each: an update (op u, before and
    after), or one in DELETE_EVERY a delete (op d) and its tombstone. Keyed by the row's key, whose events
    all go to one partition, as Debezium's do."""
    keys = max(1, records // 2)
    source = {"version": "2.7.3.Final", "connector": "postgresql", "name": "bench", "db": "shop", "table": "events"}
    emitted = 0
    for i in range(records):
        if emitted >= records:
            return
        key = i % keys
        before = row(key, keys) if i >= keys else None
        op = "r" if before is None else ("d" if key % DELETE_EVERY == 0 else "u")
        after = None if op == "d" else row(i, keys)
        event = {
            "before": before,
            "after": after,
            "source": {**source, "ts_ms": 1_700_000_000_000 + i, "snapshot": str(op == "r").lower(), "lsn": i},
            "op": op,
            "ts_ms": 1_700_000_000_500 + i,
        }
        record_key = json.dumps({"key": key}).encode()
        yield key, record_key, json.dumps(event).encode()
        emitted += 1
        if op == "d" and emitted < records:
            yield key, record_key, None
            emitted += 1


def broker_process() -> psutil.Process | None:
    """The process listening on the broker's port (embedded or not), to account its CPU in both runs."""
    return listening_process(split_hostport(settings.KAFKA_BOOTSTRAP_SERVERS)[1])


class Usage(NamedTuple):
    """A process and its descendants at one moment."""

    cpu_seconds: float  # user + system, exited descendants' included
    memory: int  # bytes: the sum of their proportional set sizes (shared pages counted once)
    largest_rss: int  # bytes: the resident set of the largest of them


# Per watched process: the CPU seconds (user + system) last seen of each
# process of its family, by (pid, start time), exited ones included.
_cpu_seen: dict[int, dict[tuple[int, float], float]] = {}


def usage(process: psutil.Process | None) -> Usage:
    """CPU seconds and memory of a process and its descendants; zeros once it is gone.

    CPU is counted per process, as last seen, and a descendant that has
    exited keeps what it was last seen using: Spark's Python workers come
    and go under their daemons, which do not always reap them, so children
    times would lose some (and the sum of the live ones went down when an
    idle worker left). The CPU a process uses between its last sample and
    its exit is not counted (Spark reuses its workers: they live long).
    Memory is summed as PSS: make run's worker is a parent and the pool
    processes it forked, which share most of their pages, and a sum of
    their RSS would count those pages once per process.
    """
    if process is None:
        return Usage(0.0, 0, 0)
    seen = _cpu_seen.setdefault(process.pid, {})
    memory = []
    try:
        family = [process, *process.children(recursive=True)]
    except psutil.NoSuchProcess:
        return Usage(0.0, 0, 0)
    for member in family:
        try:
            seen[(member.pid, member.create_time())] = sum(member.cpu_times()[:2])
            memory.append(member.memory_full_info())
        except psutil.NoSuchProcess:
            continue  # exited meanwhile: keeps what it was last seen using
    if not memory:
        return Usage(0.0, 0, 0)
    return Usage(sum(seen.values()), sum(m.pss for m in memory), max(m.rss for m in memory))


# The records' columns, as the sink's auto-created table has them.
RECORD_SCHEMA = pa.schema(
    [("id", pa.int64()), ("user", pa.string()), ("amount", pa.float64()), ("ok", pa.bool_()), ("note", pa.string())]
)


def bare_consumer_rate(ends: dict[tuple[str, int], int], processes: int, parse: bool = False) -> tuple[float, float]:
    """Records/s of ``processes`` bare batch consumers reading the topic from the start together, each
    a process of its own with a share of the partitions, as the connector's tasks share them: the
    baseline a connector of that many tasks is measured against.

    With ``parse``, each batch's values are also decoded into the records'
    columns by the participants' decoder: the rate of consuming plus
    decoding alone, nothing written.
    """
    partitions = sorted(ends)
    shares = [partitions[n::processes] for n in range(processes)]
    with multiprocessing.get_context("fork").Pool(processes) as pool:
        spans = pool.map(
            functools.partial(_bare_consumer, parse=parse),
            [{tp: ends[tp] for tp in share} for share in shares if share],
        )
    elapsed = max(end for _, end in spans) - min(start for start, _ in spans)
    return sum(ends.values()) / elapsed, elapsed


def _bare_consumer(ends: dict[tuple[str, int], int], parse: bool) -> tuple[float, float]:
    """One bare consumer of ``ends``' partitions to their ends: its first and last moment (wall clock,
    comparable between the processes)."""
    tune_process_for_tasks()  # Arrow's allocator as in the tasks
    consumer = Consumer(
        {
            "bootstrap.servers": settings.KAFKA_BOOTSTRAP_SERVERS,
            "group.id": f"bench-{uuid.uuid4()}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(t, p, 0) for (t, p) in ends])
    decoder = JsonDecoder(RECORD_SCHEMA)
    total = sum(ends.values())
    seen = 0
    started = time.time()
    while seen < total:
        batch = [m.value() for m in consumer.consume(10000, 1.0) if not m.error()]
        seen += len(batch)
        if parse and batch:
            decoder.decode(batch, [None] * len(batch))
    finished = time.time()
    consumer.close()
    return started, finished


def service_processes() -> dict[str, psutil.Process | None]:
    """PostgreSQL (its server with every connection's backend) and Redis where they run on this host:
    both modes write the ledger, and make run also heartbeats its runners into Postgres and has Celery
    on Redis; what that costs the host counts in what make run costs."""
    database = settings.DATABASES["default"]
    local = database.get("HOST") in ("", "localhost", "127.0.0.1")
    redis = urllib.parse.urlsplit(settings.REDIS_URL)
    return {
        "postgres": listening_process(int(database.get("PORT") or 5432)) if local else None,
        "redis": listening_process(redis.port or 6379) if redis.hostname in ("localhost", "127.0.0.1") else None,
    }


def spark_process() -> psutil.Process | None:
    """The Spark Connect server (its JVM and Python workers are its descendants), to account Spark's CPU."""
    if not settings.SPARK_REMOTE:
        return None
    return listening_process(split_hostport(settings.SPARK_REMOTE.removeprefix("sc://"))[1])


def topic_partition(message: Message) -> tuple[str, int]:
    """A fetched message's topic and partition (always set on a fetched one)."""
    topic, partition = message.topic(), message.partition()
    assert topic is not None and partition is not None
    return topic, partition


def chunk_of_messages(topic: str, partition: int, run: list) -> RecordChunk:
    """A run of one partition's fetched messages as the ``RecordChunk`` a participant stages (as
    ``TaskRunner._chunk_of`` makes it for JSON values, without dead letters' headers)."""
    return RecordChunk(
        topic,
        partition,
        [m.offset() for m in run],
        [m.timestamp()[1] for m in run],
        [m.key() for m in run],
        [m.value() for m in run],
        [None] * len(run),
        [None] * len(run),
    )


def spark_alone(ends: dict[tuple[str, int], int], staging: Path) -> dict[str, float]:
    """The "Spark alone" baseline: the topic's records staged as the participants stage them, then
    decoded and written by the data plane's one Spark job per task, with no sink around it
    (no consumer, coordinator or catalog commit). Timed and CPU-counted over those jobs only,
    once cold (the first jobs of the session) and once warm."""
    from connectors.config import SinkConfig
    from sinks.iceberg.tables import catalog_for, create_table, infer_schema_from_json
    from sinks.iceberg.writer import TableWriter
    from workers.staging import RawStagingFile, StagedPartition, raw_staging_path

    config = SinkConfig.parse(
        {
            "connector.class": "iceberg",
            "topics": next(iter(ends))[0],
            "iceberg.tables": f"bench.alone_{uuid.uuid4().hex[:8]}",
            "iceberg.tables.auto-create-enabled": "true",
        }
    )
    consumer = Consumer({"bootstrap.servers": settings.KAFKA_BOOTSTRAP_SERVERS, "group.id": f"bench-{uuid.uuid4()}"})
    consumer.assign([TopicPartition(t, p, 0) for (t, p) in ends])
    files: dict[tuple[str, int], RawStagingFile] = {}
    seen, total = 0, sum(ends.values())
    while seen < total:
        batch = [m for m in consumer.consume(10000, 1.0) if not m.error()]
        seen += len(batch)
        runs: dict[tuple[str, int], list[Message]] = {}
        for m in batch:
            runs.setdefault(topic_partition(m), []).append(m)
        for tp, run in runs.items():
            if tp not in files:
                files[tp] = RawStagingFile(raw_staging_path(staging, *tp, 0), config.buffer_bytes)
            files[tp].write(chunk_of_messages(*tp, run))
    consumer.close()
    parts = [
        StagedPartition(t, p, 0, ends[(t, p)], files[(t, p)].records, files[(t, p)].close(), None)
        for (t, p) in sorted(files)
    ]
    with catalog_for(config) as catalog:
        # The columns auto-create gives the benchmark's records.
        sample = {"id": 0, "user": "u", "amount": 0.5, "ok": True, "note": "x"}
        create_table(catalog, config.settings.tables[0].name, infer_schema_from_json([sample]), [])
    writer = TableWriter(config)
    _ = writer.spark.spark  # connected first: the baseline times the jobs, not the session
    result: dict[str, float] = {}
    spark = spark_process()
    for attempt in ("cold", "warm"):
        # Each task's share of the partitions, as the sink's tasks would hand them to Spark.
        cpu_before, (jvm_before, _) = usage(spark).cpu_seconds, jvm_cpu_seconds(spark)
        started = time.perf_counter()
        written = 0
        for share in (parts[0::2], parts[1::2]):
            result_files = writer.write(uuid.uuid4(), uuid.uuid4(), share).files
            written += sum(f.records for f in result_files)
        seconds = time.perf_counter() - started
        assert written == total, (written, total)
        result[f"{attempt}_seconds"] = round(seconds, 2)
        result[f"{attempt}_records_per_s"] = round(total / seconds)
        result[f"{attempt}_spark_cpu_seconds"] = round(usage(spark).cpu_seconds - cpu_before, 2)
        result[f"{attempt}_spark_jvm_cpu_seconds"] = round(jvm_cpu_seconds(spark)[0] - jvm_before, 2)
    writer.close()
    return result


# The server's warm-up (warm_spark_server): jobs a round, the least and the
# most jobs it runs, and when its JIT counts as done: the compiler threads'
# share of the JVM's CPU under this in two rounds in a row.
WARM_UP_ROUND, WARM_UP_MIN_JOBS, WARM_UP_MAX_JOBS, WARM_UP_JIT_SHARE = 100, 300, 6000, 0.1


# The Spark JVM's threads by what they do, by the start of their name as Linux keeps it (15 characters).
JVM_THREAD_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("jit_compilers", ("C1 Compiler", "C2 Compiler")),
    ("garbage_collector", ("G1 ", "GC Thread", "VM Thread", "VM Periodic", "Service Thread", "Sweeper")),
    ("spark_tasks", ("Executor task",)),
    ("spark_connect_grpc", ("grpc-", "SparkConnectExe")),
    (
        "scheduler_and_rpc",
        (
            "dag-scheduler",
            "spark-listener",
            "dispatcher-",
            "task-result",
            "map-output",
            "block-manager",
            "rpc-",
            "netty-rpc",
            "files-client",
            "shuffle-",
            "executor-heartb",
            "driver-heartbea",
            "heartbeat-recei",
            "element-tracki",
            "context-cleaner",
            "Spark Context",
        ),
    ),
    ("main_and_class_loading", ("java",)),
)


def jvm_thread_cpu(jvm: psutil.Process) -> dict[str, float] | None:
    """CPU seconds of a JVM's live threads, summed by JVM_THREAD_GROUPS (the rest as "other"), from
    Linux's per-thread figures; None where they cannot be read. A thread that ended takes its CPU
    with it: between two readings, the process's CPU less these is the ended threads' (the Python
    workers' stdout writers, task threads retired by their pool)."""
    groups: dict[str, float] = {name: 0.0 for name, _ in JVM_THREAD_GROUPS} | {"other": 0.0}
    tick = os.sysconf("SC_CLK_TCK")
    try:
        for thread in os.listdir(f"/proc/{jvm.pid}/task"):
            try:
                name = Path(f"/proc/{jvm.pid}/task/{thread}/comm").read_text().strip()
                fields = Path(f"/proc/{jvm.pid}/task/{thread}/stat").read_text().rsplit(")", 1)[1].split()
            except FileNotFoundError:
                continue  # (a thread that ended meanwhile)
            group = next((g for g, starts in JVM_THREAD_GROUPS if name.startswith(starts)), "other")
            groups[group] += (int(fields[11]) + int(fields[12])) / tick
    except OSError:
        return None
    return groups


def jvm_cpu_seconds(jvm: psutil.Process | None) -> tuple[float, dict[str, float] | None]:
    """CPU seconds of a JVM's own process (not its Python workers), and of its live threads by group
    (None where they cannot be read)."""
    if jvm is None:
        return 0.0, None
    own = jvm.cpu_times()
    return own.user + own.system, jvm_thread_cpu(jvm)


def warm_spark_server() -> list[dict[str, float]]:
    """Run trivial ``mapInArrow`` jobs (a Spark task per core, as a commit's job, with the function
    the product's warm-up job runs) on the Spark Connect server until its JIT has done compiling;
    per round of WARM_UP_ROUND jobs, the CPU milliseconds a job of the server (its JVM and Python
    workers), of its JVM, and of the JVM's JIT compiler threads.

    A server's JVM interprets its per-job paths (the plan's analysis and
    optimisation, scheduling, the Python runner's set-up) until its JIT has
    compiled them, and that takes thousands of jobs: on this 2-core machine
    a fresh server's JVM took ~220 CPU-ms a job over its first hundred, ~70
    by the three hundredth, ~40-50 by the thousandth and ~31 from about the
    three thousandth on, when its compiler threads fall quiet (from a third
    of its CPU to a twentieth); HotSpot's C2 compiles a method after ~10,000
    calls, and most of a job's methods run a few times a job. A sink's run
    of 30-60 jobs on a server part way there pays the rest. A `make run` up
    for half an hour with a connector committing every second has it behind
    it: the runs are measured there, and the curve is reported. Where the
    JVM's threads cannot be seen (a server on another host), it runs
    WARM_UP_MIN_JOBS.
    """
    from pyspark.sql.types import LongType, StructField, StructType

    from workers.spark_writer import _imported, spark_session

    # What the Iceberg sink's warm-up has the Python workers import (sinks.iceberg.spark_writer.SparkWriter).
    imported = functools.partial(_imported, ("sinks.iceberg.arrow_writer",))

    spark, process = spark_session(), spark_process()
    answer = StructType([StructField("id", LongType())])
    # (A task per core of this machine: the server is local[*] here; on a cluster's, the shape matters little.)
    cores = os.cpu_count() or 2

    curve: list[dict[str, float]] = []
    jobs = quiet_rounds = 0
    while jobs < WARM_UP_MAX_JOBS:
        spark_before, (jvm_before, threads_before) = usage(process).cpu_seconds, jvm_cpu_seconds(process)
        for _ in range(WARM_UP_ROUND):
            spark.range(0, cores, 1, cores).mapInArrow(imported, answer).collect()
        jobs += WARM_UP_ROUND
        spark_after, (jvm_after, threads_after) = usage(process).cpu_seconds, jvm_cpu_seconds(process)
        jvm = jvm_after - jvm_before
        jit = (
            threads_after["jit_compilers"] - threads_before["jit_compilers"]
            if threads_before is not None and threads_after is not None
            else None
        )
        curve.append(
            {
                "jobs": jobs,
                "spark_cpu_ms_per_job": round((spark_after - spark_before) * 1000 / WARM_UP_ROUND, 1),
                "jvm_cpu_ms_per_job": round(jvm * 1000 / WARM_UP_ROUND, 1),
                "jit_cpu_ms_per_job": round(jit * 1000 / WARM_UP_ROUND, 1) if jit is not None else -1.0,
            }
        )
        quiet_rounds = quiet_rounds + 1 if jit is not None and jit < WARM_UP_JIT_SHARE * jvm else 0
        if jobs >= WARM_UP_MIN_JOBS and (jit is None or quiet_rounds >= 2):
            break
    return curve


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


class Product:
    """The product as ``make run`` starts it (``manage.py runstack``: web, Celery connectors worker,
    supervisor, beat), on the benchmark's broker and Spark; connectors are created through its
    REST API, as a user would."""

    USER, PASSWORD = "bench", uuid.uuid4().hex

    def __init__(self, env: dict[str, str] | None = None, options: tuple[str, ...] = (), settle: bool = True) -> None:
        """``env``: the stack's environment (default: this one, on the benchmark's broker and Spark);
        ``options``: runstack's; ``settle``: wait until it has done starting (``_settle``)."""
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        if env is None:
            env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": settings.KAFKA_BOOTSTRAP_SERVERS}
            if settings.SPARK_REMOTE:
                env["SPARK_REMOTE"] = settings.SPARK_REMOTE
        # The stack runs in a session of its own, which a SIGTERM to the benchmark (kill, a CI timeout) does not
        # reach, and Python's default SIGTERM skips the finally that stops it: stop by SystemExit instead.
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _exit_on_sigterm)
        self.began = time.monotonic()
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "runstack", "--addr", f"127.0.0.1:{self.port}", *options],
            env={**env, "SINKADMIN_ADMIN_USER": self.USER, "SINKADMIN_ADMIN_PASSWORD": self.PASSWORD},
            start_new_session=True,
        )
        deadline = time.monotonic() + 180
        while not port_open("127.0.0.1", self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("make run's stack did not start")
            time.sleep(0.2)
        self.settled_after_s = self._settle() if settle else 0.0

    # A stack is settled once its processes use less than this share of one
    # core over a second (idle, measured here: ~0.02).
    SETTLED_CPU = 0.1

    def _settle(self, limit: float = 60.0) -> float:
        """Wait until the stack has done starting, as the stack a user creates a connector on has:
        the web port opens while the Celery workers, beat and the web server still import and fork,
        and the first sink measured (the Spark plane's) shared the two cores with that. Seconds waited."""
        began = time.monotonic()
        stack = psutil.Process(self.process.pid)
        while time.monotonic() - began < limit:
            before = usage(stack).cpu_seconds
            time.sleep(1.0)
            if usage(stack).cpu_seconds - before < self.SETTLED_CPU:
                break
        return round(time.monotonic() - began, 1)

    def roles(self) -> dict[str, psutil.Process | None]:
        """The stack's processes, each with its descendants: the Celery worker that hosts the
        connectors' coordinators and tasks ("worker"), and beside it the supervisor's worker, beat and
        the web server, whose CPU during a run is part of what make run costs."""
        found: dict[str, psutil.Process | None] = {"worker": None, "supervisor": None, "beat": None, "web": None}
        for child in psutil.Process(self.process.pid).children(recursive=True):
            try:
                command, parent = child.cmdline(), child.parent()
                if parent is not None and parent.cmdline() == command:
                    continue  # a prefork pool process: counted with its worker
            except psutil.NoSuchProcess:
                continue
            if "worker" in command and "connectors" in command:
                found["worker"] = child
            elif "worker" in command and "supervisor" in command:
                found["supervisor"] = child
            elif "beat" in command:
                found["beat"] = child
            elif "runserver" in command:
                found["web"] = child
        if found["worker"] is None:
            raise SystemExit("no connectors worker in make run's stack")
        return found

    def worker(self) -> psutil.Process:
        """The Celery worker that hosts the connectors' coordinators and tasks (with its pool)."""
        worker = self.roles()["worker"]
        assert worker is not None  # (roles() exits without one)
        return worker

    def api(self, method: str, path: str, body: dict | None = None) -> dict:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/api/connect/{path}",
            data=json.dumps(body).encode() if body is not None else None,
            method=method,
            headers={
                "Content-Type": "application/json",
                "Authorization": "Basic " + base64.b64encode(f"{self.USER}:{self.PASSWORD}".encode()).decode(),
            },
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            text = response.read()
        return json.loads(text) if text else {}

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(90)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)


HUDI_SINKS = ("hudi-insert", "hudi-upsert", "hudi-upsert-mor", "hudi-cdc")
# The sinks of a topic of Debezium change events (produce(debezium=True)), and the run each is compared with.
CDC_SINKS = {
    "iceberg-cdc": "iceberg-cdc-append",
    "iceberg-cdc-append": None,
    "iceberg-cdc-routed": "iceberg-cdc-append",
    "hudi-cdc": None,
}
# Debezium's JSON converter without schemas, as the CDC sinks read its events.
CDC_CONVERTERS = {
    "key.converter": "org.apache.kafka.connect.json.JsonConverter",
    "key.converter.schemas.enable": "false",
    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter.schemas.enable": "false",
}
# Debezium's unwrap of those events to their rows.
CDC_UNWRAP = {
    **CDC_CONVERTERS,
    "transforms": "unwrap",
    "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
}
# Kafka's InsertField and ReplaceField as users add lineage columns and rename or drop fields (the iceberg-lineage
# sink: the Iceberg writer's decoder applies them, decision 012).
LINEAGE = {
    "transforms": "fields,lineage",
    "transforms.fields.type": "org.apache.kafka.connect.transforms.ReplaceField$Value",
    "transforms.fields.exclude": "ok",
    "transforms.fields.renames": "user:customer",
    "transforms.lineage.type": "org.apache.kafka.connect.transforms.InsertField$Value",
    "transforms.lineage.topic.field": "_topic",
    "transforms.lineage.partition.field": "_partition",
    "transforms.lineage.offset.field": "_offset",
    "transforms.lineage.timestamp.field": "_ts",
}
# The sinks whose records half update an earlier record's key (produce(): key = id % (records // 2)).
UPSERT_SINKS = ("hudi-upsert", "hudi-upsert-mor", "iceberg-upsert", "iceberg-upsert-cow")


def own_control(args: argparse.Namespace, run: str) -> dict[str, str]:
    """The commit keys of a run of a sink whose keys are sinkadmin's (Hudi, files), then ``--set``'s."""
    return {
        "sinkadmin.control.topic": f"control-{run}",
        "sinkadmin.commit.interval-ms": str(args.interval_ms),
        "sinkadmin.commit.timeout-ms": "120000",
        **dict(item.split("=", 1) for item in args.set),
    }


def sink_config(args: argparse.Namespace, sink: str, writer: str, topic: str, run: str) -> dict[str, str]:
    """A connector of ``sink`` over the whole topic: auto-created Iceberg table, or Parquet files
    whose size only the commits bound (as the table's data files are)."""
    common = {
        "topics": topic,
        "tasks.max": str(args.tasks),
        "sinkadmin.commit.max-records": str(args.max_records),
        "sinkadmin.writer": writer,
    }
    # Table maintenance (on by default, hourly) first runs 30-60 s after a
    # coordinator starts: inside a long run here, where one compaction of
    # the files just written would count as the sink's own work. It is
    # measured beside the sink by bench/maintenance.py.
    tables = {"sinkadmin.maintenance.enabled": "false"}
    if sink == "hudi-cdc":
        # Debezium's unwrap, its deletes as rows flagged __deleted (their tombstones dropped), upserted by key.
        tables = {
            **tables,
            **CDC_UNWRAP,
            "transforms.unwrap.delete.handling.mode": "rewrite",
            "hoodie.payload.delete.field": "__deleted",
            "hoodie.payload.delete.marker": "true",
        }
    if sink in HUDI_SINKS:
        upsert = sink != "hudi-insert"
        return {
            **tables,
            "connector.class": "hudi",
            **common,
            "hoodie.table.type": "MERGE_ON_READ" if sink in ("hudi-upsert-mor", "hudi-cdc") else "COPY_ON_WRITE",
            "target.base.path": str(FILES_ROOT / run),
            "target.table.name": f"events_{run}",
            "hoodie.datasource.write.operation": "upsert" if upsert else "insert",
            "hoodie.datasource.write.recordkey.field": "key" if upsert else "id",
            "hoodie.datasource.write.precombine.field": "id" if upsert and sink != "hudi-cdc" else "",
            "hoodie.bucket.index.num.buckets": "16",
            **own_control(args, run),
        }
    if sink == "files":
        return {
            "connector.class": "files",
            **common,
            "store.url": f"file://{FILES_ROOT / run}",
            "format.class": "parquet",
            "parquet.codec": "zstd",
            "flush.size": str(args.records),
            **own_control(args, run),
        }
    if sink in CDC_SINKS:
        if sink == "iceberg-cdc":
            # The Iceberg sink's CDC config, as its users write it.
            tables = {
                **tables,
                **CDC_CONVERTERS,
                "transforms": "dbz",
                "transforms.dbz.type": "org.apache.iceberg.connect.transforms.DebeziumTransform",
                "iceberg.tables.cdc-field": "_cdc.op",
                "iceberg.tables.upsert-mode-enabled": "true",
                "iceberg.tables.default-id-columns": "key",
                "iceberg.tables.auto-create-props.write.merge.mode": "merge-on-read",
            }
        else:
            # The same events, their rows appended (Debezium's defaults: deletes and tombstones dropped).
            tables = {**tables, **CDC_UNWRAP}
        if sink == "iceberg-cdc-routed":
            # Debezium's documented chain: the unwrap, then a RegexRouter naming each topic after its table.
            tables = {
                **tables,
                "transforms": "unwrap,route",
                "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
                "transforms.route.regex": "([^.]+)\\.([^.]+)\\.([^.]+)",
                "transforms.route.replacement": "$3",
            }
    if sink == "iceberg-lineage":
        tables = {**tables, **LINEAGE}
    if sink in ("iceberg-upsert", "iceberg-upsert-cow"):
        tables = {
            **tables,
            "iceberg.tables.upsert-mode-enabled": "true",
            "iceberg.tables.default-id-columns": "key",
            "iceberg.tables.auto-create-props.write.merge.mode": "copy-on-write"
            if sink == "iceberg-upsert-cow"
            else "merge-on-read",
        }
    return {
        "connector.class": "iceberg",
        **common,
        **tables,
        "iceberg.tables": f"bench.events_{run}",
        "iceberg.tables.auto-create-enabled": "true",
        "iceberg.control.topic": f"control-{run}",
        "iceberg.control.commit.interval-ms": str(args.interval_ms),
        "iceberg.control.commit.timeout-ms": "120000",
        **dict(item.split("=", 1) for item in args.set),
    }


def run_sink(
    args: argparse.Namespace,
    sink: str,
    writer: str,
    topic: str,
    ends: dict[tuple[str, int], int],
    broker: psutil.Process | None,
    product: Product | None = None,
) -> dict:
    """One connector of ``sink`` over the whole topic with the given data plane; figures of the run.
    Its tasks and coordinator run as ``run_connector`` processes, or in ``product``'s Celery worker."""
    run = uuid.uuid4().hex[:8]
    name = f"bench-{sink}-{writer}-{run}"
    config = sink_config(args, sink, writer, topic, run)
    try:
        if product is not None:
            measured = {
                "sink": sink,
                "writer": writer,
                **_measured(args, name, ends, product.roles(), broker, [], product, config),
            }
        else:
            measured = {"sink": sink, "writer": writer, **_run_connector_processes(args, name, config, ends, broker)}
        if sink in UPSERT_SINKS or sink in ("iceberg-cdc", "hudi-cdc"):
            # Records whose key an earlier record had (produce(): key = id % (records // 2)).
            measured["rows_updated_fraction"] = round(1 - max(1, args.records // 2) / args.records, 3)
        return measured
    finally:
        shutil.rmtree(FILES_ROOT / run, ignore_errors=True)


def _run_connector_processes(
    args: argparse.Namespace,
    name: str,
    config: dict[str, str],
    ends: dict[tuple[str, int], int],
    broker: psutil.Process | None,
) -> dict:
    actions.create_connector(name, config)
    manage = [sys.executable, str(ROOT / "manage.py"), "run_connector", name]
    children: list[subprocess.Popen] = [
        subprocess.Popen(
            [*manage, "--role", "task", "--task-index", str(i), "--tasks", str(args.tasks)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(args.tasks)
    ]
    # Tasks are listening before the coordinator's first START (a task
    # that joins late only delays its partitions to the next commit).
    for child in children:
        assert child.stderr is not None
        for line in child.stderr:
            sys.stderr.write(line)
            if "task" in line and "started with" in line:
                break
        # Keep forwarding, or a full pipe would block the task.
        threading.Thread(target=shutil.copyfileobj, args=(child.stderr, sys.stderr), daemon=True).start()
    children.append(subprocess.Popen([*manage, "--role", "coordinator"]))
    roles: dict[str, psutil.Process | None] = {
        f"task-{i}": psutil.Process(child.pid) for i, child in enumerate(children[:-1])
    }
    roles["coordinator"] = psutil.Process(children[-1].pid)
    try:
        return _measured(args, name, ends, roles, broker, children)
    finally:
        actions.delete_connector(name)


def cycle_moments(commit: Commit) -> tuple[datetime, datetime, datetime]:
    """A committed commit's START, prepared and committed moments (all set once it is committed)."""
    assert commit.prepared_at is not None and commit.committed_at is not None
    return commit.started_at, commit.prepared_at, commit.committed_at


def _measured(
    args: argparse.Namespace,
    name: str,
    ends: dict[tuple[str, int], int],
    roles: dict[str, psutil.Process | None],
    broker: psutil.Process | None,
    children: list[subprocess.Popen],
    product: Product | None = None,
    config: dict[str, str] | None = None,
) -> dict:
    launched = time.perf_counter()
    if product is not None:
        product.api("POST", "connectors", {"name": name, "config": config})
    watched = {**roles, "broker": broker, "spark": spark_process(), **service_processes()}
    # (wall clock, {role: (cpu seconds, rss)}) every half second: CPU is
    # taken between the samples nearest the sink's first START and last
    # commit; RSS over time shows whether memory follows the backlog.
    samples: list[tuple[float, dict[str, Usage]]] = []
    # (wall clock, (the Spark JVM's own CPU seconds, its threads' by group)), at the same moments: the
    # Spark role's CPU less the JVM's own is its Python workers'.
    jvm_samples: list[tuple[float, tuple[float, dict[str, float] | None]]] = []
    target = sum(ends.values())
    while True:
        samples.append((time.time(), {role: usage(p) for role, p in watched.items()}))
        jvm_samples.append((time.time(), jvm_cpu_seconds(watched["spark"])))
        done = sum(PartitionOffset.objects.filter(connector__name=name).values_list("committed_offset", flat=True))
        pending = Commit.objects.filter(connector_name=name, state=CommitState.PREPARED).exists()
        if done >= target and not pending:
            break
        if any(child.poll() is not None for child in children):
            raise SystemExit("a sink process exited early")
        if product is not None and product.process.poll() is not None:
            raise SystemExit("make run's stack exited early")
        time.sleep(0.5)
    wall_seconds = time.perf_counter() - launched
    for child in children:
        child.terminate()
    for child in children:
        child.wait(60)
    # Deleted once measured, so that no `make run` on this database ever starts it again.
    if product is not None:
        product.api("DELETE", f"connectors/{name}")

    commits = list(
        Commit.objects.filter(connector_name=name, state=CommitState.COMMITTED)
        .exclude(files_count=0)
        .order_by("started_at")
    )
    first_start = min(c.started_at for c in Commit.objects.filter(connector_name=name))
    moments = [cycle_moments(c) for c in commits]
    last_committed = max(committed for _, _, committed in moments)
    sink_seconds = (last_committed - first_start).total_seconds()
    cycles = [(committed - started).total_seconds() for started, _, committed in moments]  # (in commit order)
    cycle, steady_cycle = sorted(cycles), sorted(cycles[1:])
    table_commit = sorted((committed - prepared).total_seconds() for _, prepared, committed in moments)

    def at(moment: float) -> dict[str, Usage]:
        return min(samples, key=lambda sample: abs(sample[0] - moment))[1]

    cpu_from, cpu_to = at(first_start.timestamp()), at(last_committed.timestamp())
    sink_cpu = {role: round(cpu_to[role].cpu_seconds - cpu_from[role].cpu_seconds, 2) for role in cpu_to}

    def jvm_at(moment: float) -> tuple[float, dict[str, float] | None]:
        return min(jvm_samples, key=lambda sample: abs(sample[0] - moment))[1]

    (jvm_from, threads_from), (jvm_to, threads_to) = jvm_at(first_start.timestamp()), jvm_at(last_committed.timestamp())
    jvm_cpu = jvm_to - jvm_from
    jvm_threads: dict[str, float] | None = None
    if threads_from is not None and threads_to is not None:
        jvm_threads = {
            group: round((threads_to[group] - threads_from[group]) * 1e6 / target, 2) for group in threads_to
        }
        jvm_threads["threads_that_ended"] = round(jvm_cpu * 1e6 / target - sum(jvm_threads.values()), 2)
    spark_parts = {
        "jvm": round(jvm_cpu * 1e6 / target, 2),
        "jvm_by_thread_group": jvm_threads,
        "python_workers": round((sink_cpu.get("spark", 0.0) - jvm_cpu) * 1e6 / target, 2),
    }
    # The same from the first commit on: without the sessions' start (the
    # warm-up of Spark's Python workers), as the Spark-alone baseline is warm.
    steady_records = sum(c.records for c in commits[1:])
    steady_from = at(moments[0][2].timestamp())
    steady_spark = cpu_to["spark"].cpu_seconds - steady_from["spark"].cpu_seconds if len(commits) > 1 else 0.0
    if steady_spark < 0:
        # A Python worker exited between the samples and was not yet
        # counted in its parent's children times: no figure rather than a wrong one.
        steady_records = 0
    peak_rss = {role: max(sample[role].largest_rss for _, sample in samples) for role in watched}
    peak_memory = {role: max(sample[role].memory for _, sample in samples) for role in watched}
    memory_series = {
        role: [round(sample[role].memory / 2**20) for _, sample in samples if sample[role].memory] for role in roles
    }

    def pct(values: list[float], q: float) -> float:
        return values[min(len(values) - 1, round(q * (len(values) - 1)))] if values else 0.0

    sink_rate = target / sink_seconds
    # Once running: the records of every commit after the first over the
    # time from the first commit to the last. The first commit carries the
    # tasks' warm-up (first fetch, catalog, table creation); the last one's
    # wait for the end of its interval is still counted.
    sustained_rate = (
        sum(c.records for c in commits[1:]) / (moments[-1][2] - moments[0][2]).total_seconds()
        if len(commits) > 1
        else sink_rate
    )
    return {
        "sink_records_per_s": round(sink_rate),
        "sink_seconds": round(sink_seconds, 2),
        "sink_seconds_with_process_startup": round(wall_seconds, 2),
        "sink_records_per_s_after_first_commit": round(sustained_rate),
        "commit_cycle_p50_s": round(pct(cycle, 0.5), 2),
        "commit_cycle_p99_s": round(pct(cycle, 0.99), 2),
        # Without the first commit, whose cycle also holds the tasks' start
        # (joining Spark's session, its first jobs): a connector's commits
        # after it, as one that has run for a while has them.
        "commit_cycle_p99_s_after_first_commit": round(pct(steady_cycle, 0.99), 2) if steady_cycle else None,
        "table_commit_p50_s": round(pct(table_commit, 0.5), 3),
        "table_commit_p99_s": round(pct(table_commit, 0.99), 3),
        "commits": len(commits),
        # What ended each commit (connectors.models.CommitEnd), and each one's
        # cycle (START to COMMITTED) in seconds, in commit order: the p99 of a
        # run of a few commits is its longest, and this says which that was.
        "commits_ended_by": dict(Counter(c.ended_by for c in commits)),
        "commit_cycles_s": [round(seconds, 2) for seconds in cycles],
        "snapshots": sum(len(c.snapshot_ids) for c in commits),
        "mean_records_per_commit": round(statistics.mean(c.records for c in commits)) if commits else 0,
        # Per role (a role can be a process tree: make run's worker and its
        # pool, the Spark Connect server and its Python workers): the
        # largest RSS of any one of its processes, and all of them together.
        "peak_rss_mb_per_process": {role: round(v / 2**20) for role, v in peak_rss.items()},
        "peak_memory_mb_per_role": {role: round(v / 2**20) for role, v in peak_memory.items()},
        # Over the sink's timed part, not counting process start-up; "spark"
        # is the Spark Connect server with its Python workers.
        "cpu_seconds_sink": sink_cpu,
        "spark_cpu_seconds_per_million_records": round(sink_cpu.get("spark", 0.0) * 1e6 / target, 2),
        # The same, split: the Spark Connect server's JVM (of which its JIT
        # compiler threads), and its Python workers (the decoder and writer).
        "spark_cpu_seconds_per_million_records_by_part": spark_parts,
        "spark_cpu_seconds_per_million_records_after_first_commit": (
            round(steady_spark * 1e6 / steady_records, 2) if steady_records else None
        ),
        "memory_mb_every_half_second": memory_series,
    }


# The figures of a run that --repeat reports as the median over its rounds
# (with each round's value in ``rounds``): what docs/benchmarks.md's tables show.
ROUND_FIGURES = (
    "sink_records_per_s",
    "sink_records_per_s_after_first_commit",
    "commit_cycle_p50_s",
    "commit_cycle_p99_s",
    "commit_cycle_p99_s_after_first_commit",
    "commits",
    "spark_cpu_seconds_per_million_records",
    "spark_cpu_seconds_per_million_records_after_first_commit",
)


def paired_by_round(run: dict, other: dict, figure: str, name: str) -> None:
    """``run``'s ``figure`` over ``other``'s, round by round (each round's runs ran back to back, on
    the host's state of the moment), as ``name``: their median, and each round's in ``<name>_per_round``."""
    paired = [mine[figure] / theirs[figure] for mine, theirs in zip(run["rounds"], other["rounds"], strict=True)]
    run[name] = round(statistics.median(paired), 3)
    run[f"{name}_per_round"] = [round(ratio, 3) for ratio in paired]


def of_rounds(runs: list[dict]) -> dict:
    """One label's figures over its rounds: the run of the median rate (of an even number of
    rounds, the slower middle one) with all it measured (its commits, memory, CPU by process),
    each ROUND_FIGURES value replaced by the median over the rounds, and every round's
    ROUND_FIGURES in ``rounds``; peak RSS is the largest of any round. One round is that run as
    it was."""
    by_rate = sorted(runs, key=lambda run: run["sink_records_per_s"])
    summary = {**by_rate[(len(by_rate) - 1) // 2]}
    for key in ROUND_FIGURES:
        values = [run[key] for run in runs if run.get(key) is not None]
        if key in summary:
            median = statistics.median(values) if values else None
            summary[key] = round(median, 2) if isinstance(median, float) else median
    summary["rounds"] = [{key: run.get(key) for key in ROUND_FIGURES if key in run} for run in runs]
    summary["peak_rss_mb_per_process"] = {
        role: max(run["peak_rss_mb_per_process"][role] for run in runs) for role in summary["peak_rss_mb_per_process"]
    }
    return summary


def write_result(output: str, result: dict) -> None:
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    Path(output).write_text(json.dumps(result, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--interval-ms", type=int, default=1_000)
    # With a long interval (Iceberg's default is 5 min), a backlog is
    # committed in steps of this many records (sinkadmin.commit.max-records).
    # The last commit ends early only if it holds at least this many; if not,
    # it waits for the interval, and the run's figures with it.
    parser.add_argument("--max-records", type=int, default=0)
    # The data planes to run, one connector each, over the same topic in this run.
    parser.add_argument("--writers", default="spark,arrow")
    # The sinks to run each plane with: Iceberg tables and plain Parquet files.
    parser.add_argument("--sinks", default="iceberg,files")
    # How the sink runs: run-connector (coordinator and tasks as processes of
    # their own) and make-run (the product as `make run` starts it, the
    # connector created through the REST API, hosted by the Celery worker).
    parser.add_argument("--modes", default="run-connector,make-run")
    # Any other connector key, for A/B runs of a setting (consumer.override.*, say).
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a connector config key")
    # Rounds of each mode's runs, the planes alternating: each figure is then
    # the median over the rounds, and the spark / arrow ratio the median of
    # each round's pair (a run of 1M records lasts seconds, and one run of a
    # mode can differ 2x from the next on this 2-core host).
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "sink_throughput.json"))
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat takes a whole number of rounds, 1 or more")
    writers = [w.strip() for w in args.writers.split(",") if w.strip()]
    sinks = [s.strip() for s in args.sinks.split(",") if s.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    debezium = any(sink in CDC_SINKS for sink in sinks)
    if debezium and not all(sink in CDC_SINKS for sink in sinks):
        parser.error(f"{', '.join(CDC_SINKS)} read a topic of Debezium events: run them apart from the other sinks")

    call_command("migrate", verbosity=0)
    # A run that was killed leaves its connectors behind, RUNNING: make run's
    # worker would host them beside this run's, and measure both.
    for stale in Connector.objects.filter(name__startswith="bench-").values_list("name", flat=True):
        print(f"deleting {stale}, left by an earlier run that did not finish", flush=True)
        actions.delete_connector(stale)
    services = ensure_services()
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    try:
        kind = "Debezium change events" if debezium else "records"
        print(f"producing {args.records} {kind} over {args.partitions} partitions...", flush=True)
        ends = produce(topic, args.records, args.partitions, debezium)
        target = sum(ends.values())
        broker = broker_process()
        broker_cpu, me = usage(broker).cpu_seconds, os.times()
        bare_rate, bare_seconds = bare_consumer_rate(ends, args.tasks)
        now = os.times()
        bare_cpu = {
            "consumer": now.children_user + now.children_system - me.children_user - me.children_system,
            "broker": usage(broker).cpu_seconds - broker_cpu,
        }
        print(f"bare consumer, {args.tasks} processes: {bare_rate:,.0f} records/s ({bare_seconds:.1f} s)", flush=True)
        parse_rate, _ = bare_consumer_rate(ends, args.tasks, parse=True)
        print(f"bare consumer + the tasks' JSON decoding: {parse_rate:,.0f} records/s", flush=True)
        alone, warm_up = None, None
        if "spark" in writers and not debezium:
            # First the server's JVM is warmed (its per-job paths compiled), as
            # a `make run` that has been up for some minutes has it; then Spark
            # alone, whose first pass ("cold") is the first decoding jobs of
            # the session, its second ("warm") the baseline.
            if settings.SPARK_REMOTE:
                warm_up = warm_spark_server()
                print(
                    f"Spark server warmed up over {warm_up[-1]['jobs']} jobs: its JVM's CPU-ms a job "
                    f"{[point['jvm_cpu_ms_per_job'] for point in warm_up]}, its JIT's "
                    f"{[point['jit_cpu_ms_per_job'] for point in warm_up]}",
                    flush=True,
                )
            staging = Path(settings.STAGING_DIR) / f"bench-alone-{uuid.uuid4().hex[:8]}"
            try:
                alone = spark_alone(ends, staging)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
            alone["spark_cpu_seconds_per_million_records"] = round(alone["warm_spark_cpu_seconds"] * 1e6 / target, 2)
            print(f"Spark alone: {alone}", flush=True)
        # Every run of each label, in the order they ran: with --repeat, the
        # planes alternate within each mode, and the modes within each round,
        # so that each round's pairs share the host's state of the moment (its
        # pace swings by up to 2x here, and drifts over minutes). make run's
        # stack runs only for its mode's runs: its supervisor would take up
        # the run_connector mode's connectors too.
        rounds: dict[str, list[dict]] = {}
        for number in range(1, args.repeat + 1):
            for mode in modes:
                product = Product() if mode == "make-run" else None
                if product is not None:
                    print(f"make run's stack settled {product.settled_after_s} s after its web port opened", flush=True)
                try:
                    for sink, writer in [(sink, writer) for sink in sinks for writer in writers]:
                        label = f"{sink} {writer} ({mode})"
                        print(f"sink, {label}, round {number} of {args.repeat}...", flush=True)
                        run = {"mode": mode, **run_sink(args, sink, writer, topic, ends, broker, product)}
                        if writer != "spark":
                            # Spark is idle then, but its Python workers of the run
                            # before exit (with their session) and take their CPU
                            # time with them: a figure here would mean nothing.
                            run["cpu_seconds_sink"].pop("spark", None)
                            run.pop("spark_cpu_seconds_per_million_records", None)
                            run.pop("spark_cpu_seconds_per_million_records_after_first_commit", None)
                            run.pop("spark_cpu_seconds_per_million_records_by_part", None)
                        rounds.setdefault(label, []).append(run)
                        rate = run["sink_records_per_s"]
                        print(
                            f"sink, {label}, round {number}: {rate:,.0f} records/s, "
                            f"{rate / bare_rate:.2f} of the bare consumer",
                            flush=True,
                        )
                finally:
                    if product is not None:
                        product.stop()
        runs = {label: of_rounds(runs_of_label) for label, runs_of_label in rounds.items()}
        for run in runs.values():
            run["sink_to_bare_ratio"] = round(run["sink_records_per_s"] / bare_rate, 3)
            run["sink_to_consumer_with_parse_ratio"] = round(run["sink_records_per_s"] / parse_rate, 3)
        result: dict = {
            "records": target,
            "partitions": args.partitions,
            "tasks": args.tasks,
            "record_bytes": 1000,
            "records_kind": "debezium" if debezium else "rows",
            "commit_interval_ms": args.interval_ms,
            "sinks": sinks,
            "commit_max_records": args.max_records,
            "rounds": args.repeat,
            "connector_config_set": args.set,
            "bare_consumer_processes": args.tasks,
            "bare_consumer_records_per_s": round(bare_rate),
            "bare_consumer_seconds": round(bare_seconds, 2),
            # The same consumer also decoding each batch as the tasks do.
            "bare_consumer_with_json_parse_records_per_s": round(parse_rate),
            "cpu_seconds_bare": {role: round(v, 2) for role, v in bare_cpu.items()},
            "spark_remote": settings.SPARK_REMOTE or None,
            "spark_master": settings.SPARK_MASTER or None,
            "runs": runs,
            "spark_alone": alone,
            # The server's CPU-ms a job (with its Python workers), its JVM's and its JIT's, over each
            # WARM_UP_ROUND trivial jobs run before the sinks until its JIT had done compiling
            # (warm_spark_server).
            "spark_server_warm_up": warm_up,
            "cpu_count": os.cpu_count(),
        }
        for sink, mode in [(sink, mode) for sink in sinks for mode in modes]:
            spark, arrow = runs.get(f"{sink} spark ({mode})"), runs.get(f"{sink} arrow ({mode})")
            if spark is not None and arrow is not None:
                paired_by_round(spark, arrow, "sink_records_per_s", "spark_to_arrow_ratio")
            # Spark alone runs the Iceberg sink's jobs: a baseline for that sink's Spark CPU only.
            if spark is not None and alone is not None and sink == "iceberg":
                baseline = max(0.01, alone["spark_cpu_seconds_per_million_records"])
                spark["spark_cpu_to_spark_alone_ratio"] = round(
                    spark["spark_cpu_seconds_per_million_records"] / baseline, 2
                )
                spark["spark_cpu_to_spark_alone_ratio_per_round"] = [
                    round(r["spark_cpu_seconds_per_million_records"] / baseline, 2) for r in spark["rounds"]
                ]
                if (steady := spark["spark_cpu_seconds_per_million_records_after_first_commit"]) is not None:
                    spark["spark_cpu_to_spark_alone_ratio_after_first_commit"] = round(steady / baseline, 2)
        for sink, writer in [(sink, writer) for sink in sinks for writer in writers]:
            separate, product_run = (
                runs.get(f"{sink} {writer} (run-connector)"),
                runs.get(f"{sink} {writer} (make-run)"),
            )
            if separate is not None and product_run is not None:
                for figure, suffix in (
                    ("sink_records_per_s", ""),
                    ("sink_records_per_s_after_first_commit", "_after_first_commit"),
                ):
                    paired_by_round(product_run, separate, figure, f"make_run_to_run_connector_ratio{suffix}")
        for label, run in runs.items():
            if run["sink"] in CDC_SINKS:
                # Change events upserted against the same events appended.
                appended = CDC_SINKS[run["sink"]]
                if appended is not None and (table := runs.get(label.replace(run["sink"], appended, 1))):
                    run["to_append_ratio"] = round(run["sink_records_per_s"] / table["sink_records_per_s"], 3)
            elif run["sink"] != "iceberg" and (table := runs.get(label.replace(run["sink"], "iceberg", 1))):
                run["to_iceberg_ratio"] = round(run["sink_records_per_s"] / table["sink_records_per_s"], 3)
        printable = {
            **result,
            "runs": {w: {k: v for k, v in r.items() if k != "memory_mb_every_half_second"} for w, r in runs.items()},
        }
        print(json.dumps(printable, indent=2))
        write_result(args.output, result)
    finally:
        for service in services:
            service.stop()


if __name__ == "__main__":
    main()
