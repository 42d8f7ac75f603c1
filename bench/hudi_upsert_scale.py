#!/usr/bin/env python
"""A merge-on-read upsert commit's cost as the table grows: the Hudi sink, as make run runs it, updating 1%
of a table's keys per commit, on a table of 100,000 rows and on one of 10,000,000, in the same run.

For each size, Hudi's own Spark writer first bulk-inserts the table (keys 0..N-1) through the bench's
Spark Connect server, with the options the sink's writer uses for the connector (so that the sink takes
the table as its own); then a Hudi connector, created through make run's REST API, upserts it from a
topic of its own. Each wave puts N/100 updates of random keys in the topic and waits until they are
committed. Per wave: the commit's apply time (the ledger's prepared -> committed: Hudi's write, which on
a merge-on-read table appends log files) and its whole cycle (started -> committed), and per updated
record. Compaction is left to the maintenance (off here), as the sink schedules it apart from its commits.

What it shows: with the bucket index, an upsert finds each key's file group by hashing it, and appends
the key's new version to that group's log; the commit reads no base file. Its cost should follow the
updates, not the table: the 10M table's commit writes 100x the updates of the 100k table's, and the
figures per updated record are what to compare.

    .venv/bin/python bench/hudi_upsert_scale.py [--sizes 100000,10000000] [--waves 3] [--buckets 16]

Prints and writes bench/results/hudi_upsert_scale.json.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from django.conf import settings
from django.core.management import call_command
from sink_throughput import (
    FILES_ROOT,
    ROOT,
    Product,
    ensure_services,
    warm_spark_server,
    write_result,
)

from connectors.config import SinkConfig
from connectors.models import Commit, CommitState
from sinks.hudi.settings import writer_options
from sinks.hudi.writer import IS_DELETED
from workers.spark_writer import connect

PARTITIONS = 8


def connector_config(topic: str, base: Path, table: str, buckets: int) -> dict[str, str]:
    return {
        "connector.class": "hudi",
        "topics": topic,
        "tasks.max": "2",
        "target.base.path": str(base),
        "target.table.name": table,
        "hoodie.table.type": "MERGE_ON_READ",
        "hoodie.datasource.write.operation": "upsert",
        "hoodie.datasource.write.recordkey.field": "key",
        "hoodie.datasource.write.precombine.field": "version",
        "hoodie.datasource.write.partitionpath.field": "",
        "hoodie.bucket.index.num.buckets": str(buckets),
        "sinkadmin.maintenance.enabled": "false",
        "sinkadmin.control.topic": f"control-{topic}",
        "sinkadmin.commit.interval-ms": "2000",
        "sinkadmin.commit.timeout-ms": "600000",
    }


def bulk_insert(config: dict[str, str], rows: int) -> float:
    """The table of ``rows`` keys, written by Hudi's writer with the sink's options for ``config``: columns
    as the sink decodes the topic's records (key, version, amount, note), plus Hudi's delete flag."""
    from pyspark.sql import functions as F

    parsed = SinkConfig.parse(config)
    options = {**writer_options(parsed.settings, parsed.raw), "hoodie.datasource.write.operation": "bulk_insert"}
    spark = connect(settings.SPARK_REMOTE)
    frame = spark.range(rows).select(
        F.col("id").alias("key"),
        F.lit(0).cast("long").alias("version"),
        (F.col("id") % 1000).cast("double").alias("amount"),
        F.concat(F.lit("row "), F.col("id").cast("string")).alias("note"),
        F.lit(False).alias(IS_DELETED),
    )
    began = time.monotonic()
    frame.write.format("hudi").options(**options).mode("append").save(parsed.settings.base_path)
    return time.monotonic() - began


def produce_updates(topic: str, keys: int, count: int, version: int, seed: int) -> None:
    producer = Producer({"bootstrap.servers": settings.KAFKA_BOOTSTRAP_SERVERS, "linger.ms": 50})
    rng = random.Random(seed)
    for key in rng.sample(range(keys), count):
        record = {"key": key, "version": version, "amount": float(key % 997), "note": f"update {version}"}
        producer.produce(topic, json.dumps(record).encode(), key=str(key).encode(), partition=key % PARTITIONS)
        producer.poll(0)
    producer.flush(60)


def seconds_between(start: datetime | None, end: datetime | None) -> float:
    return (end - start).total_seconds() if start is not None and end is not None else 0.0


def wait_for(name: str, records: int, timeout: float = 1800.0) -> list[Commit]:
    """The connector's committed commits once they hold ``records`` records in all."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = list(Commit.objects.filter(connector_name=name, state=CommitState.COMMITTED).order_by("started_at"))
        if sum(c.records for c in done) >= records:
            return done
        time.sleep(0.5)
    raise SystemExit(f"{name} did not commit {records} records in {timeout:.0f} s")


def measure_size(product: Product, rows: int, waves: int, buckets: int) -> dict:
    run = uuid.uuid4().hex[:8]
    topic, name, table = f"bench-hudi-scale-{run}", f"bench-hudi-scale-{rows}-{run}", f"scale_{run}"
    base = FILES_ROOT / run
    admin = AdminClient({"bootstrap.servers": settings.KAFKA_BOOTSTRAP_SERVERS})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    config = connector_config(topic, base, table, buckets)
    print(f"{rows:,} rows: bulk insert...", flush=True)
    loaded_s = bulk_insert(config, rows)
    print(f"{rows:,} rows: bulk insert took {loaded_s:.1f} s", flush=True)
    product.api("POST", "connectors", {"name": name, "config": config})
    per_wave = []
    committed = 0
    updates = max(1, rows // 100)
    for wave in range(1, waves + 1):
        before = {c.commit_id for c in Commit.objects.filter(connector_name=name)}
        produce_updates(topic, rows, updates, wave, seed=wave)
        committed += updates
        commits = [c for c in wait_for(name, committed) if c.commit_id not in before]
        apply_s = sum(seconds_between(c.prepared_at, c.committed_at) for c in commits)
        cycle_s = sum(seconds_between(c.started_at, c.committed_at) for c in commits)
        per_wave.append(
            {
                "updates": updates,
                "commits": len(commits),
                "apply_s": round(apply_s, 2),
                "cycle_s": round(cycle_s, 2),
                "apply_us_per_update": round(apply_s * 1e6 / updates, 1),
            }
        )
        print(f"{rows:,} rows, wave {wave}: {per_wave[-1]}", flush=True)
    product.api("DELETE", f"connectors/{name}")
    log_files = sum(1 for f in base.rglob("*") if ".log." in f.name)
    shutil.rmtree(base, ignore_errors=True)
    return {
        "table_rows": rows,
        "updates_per_commit": updates,
        "bulk_insert_s": round(loaded_s, 1),
        "waves": per_wave,
        "apply_s_median": statistics.median(w["apply_s"] for w in per_wave),
        "apply_us_per_update_median": statistics.median(w["apply_us_per_update"] for w in per_wave),
        "log_files_after": log_files,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="100000,10000000")
    parser.add_argument("--waves", type=int, default=3)
    parser.add_argument("--buckets", type=int, default=16)
    # Without the Spark server's warm-up (thousands of trivial jobs, minutes): then run the large size
    # first, so that a cold JIT weighs on it and not on the small one.
    parser.add_argument("--skip-warm-up", action="store_true")
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "hudi_upsert_scale.json"))
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    call_command("migrate", verbosity=0)
    services = ensure_services()
    try:
        if not args.skip_warm_up:
            warm_spark_server()
        product = Product()
        try:
            results = [measure_size(product, rows, args.waves, args.buckets) for rows in sizes]
        finally:
            product.stop()
    finally:
        for service in services:
            service.stop()
    small = min(results, key=lambda r: r["table_rows"])
    large = max(results, key=lambda r: r["table_rows"])
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "spark_warmed_up": not args.skip_warm_up,
        "table_type": "MERGE_ON_READ",
        "index": f"BUCKET ({args.buckets} buckets)",
        "sizes": results,
        "large_to_small_apply_ratio": round(large["apply_s_median"] / small["apply_s_median"], 2),
        "large_to_small_apply_per_update_ratio": round(
            large["apply_us_per_update_median"] / small["apply_us_per_update_median"], 3
        ),
    }
    print(json.dumps(result, indent=2), flush=True)
    write_result(args.output, result)


if __name__ == "__main__":
    main()
