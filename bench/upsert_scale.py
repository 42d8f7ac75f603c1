#!/usr/bin/env python
"""An upsert commit's cost as the table grows: the Hudi or Iceberg sink, as make run runs it, updating 1% of
a table's keys per commit, on a table of 100,000 rows and on one of 10,000,000, in the same run.

For each size, the table is first loaded (keys 0..N-1) as the sink would have written it: Hudi's own Spark
writer bulk-inserts it through the bench's Spark Connect server with the options the sink's writer uses for
the connector; an Iceberg table is created with the sink's table properties and appended by pyiceberg, in
ten files. Then a connector, created through make run's REST API, upserts it from a topic of its own. Each
wave puts N/100 updates of random keys in the topic and waits until they are committed. Per wave: the
commit's apply time (the ledger's prepared -> committed: the sink's write of the updates into the table)
and its whole cycle (started -> committed), and per updated record. Compaction is left to the maintenance
(off here), as the sink schedules it apart from its commits.

- Hudi merge-on-read, bucket index: an upsert finds each key's file group by hashing it and appends the
  key's new version to that group's log; the commit reads no base file.
- Iceberg merge-on-read (``--sink iceberg``, the default ``write.merge.mode`` of the tables the sink
  creates for upserts): the commit reads the identifier column of the files that may hold its keys and
  writes a position delete file per data file; no data file is rewritten. With ``--merge-mode
  copy-on-write`` every data file holding an updated key is rewritten: with 1% of random keys, all of them.
  After the waves, the table is read whole (pyiceberg, and a Spark aggregate) before and after the
  maintenance's compaction folds the delete files back (rewrite_data_files with delete-file-threshold 1,
  then rewrite_position_delete_files): the read cost of the deletes.
- Iceberg format v3 (``--format-version 3``): the commit goes through Spark's Iceberg runtime, a MERGE of
  the commit's keys on a branch writes deletion vectors, the rows are appended there, and main is
  fast-forwarded (sinks.iceberg.spark_commits).

With ``--key-type uuid`` (Iceberg) the key column is text, a UUID made from each key's number (by MD5, so
that the keys' order in the table is random, as UUIDs are): a live file's keys are then looked up as text,
not as numbers.

What it shows: the cost should follow the updates, not the table; the 10M table's commit writes 100x the
updates of the 100k table's, and the figures per updated record are what to compare.

Two things weigh on the first figures of a run and not on a connector that has run a while, so the ratio is
of medians over five waves, on a warmed Spark server:
- An Iceberg upsert's first commit on a table meets its files for the first time, and builds their key
  indexes (docs/decisions/020-upsert-key-index-per-data-file.md): the first wave of each size.
- A fresh Spark server runs each job's own paths interpreted until its JIT has compiled them, after
  thousands of jobs (``warm_spark_server``). With ``--skip-warm-up`` the large size runs first, on the coldest
  server, so its commits' Spark jobs cost more than the small size's (docs/benchmarks.md, 2026-11-30,
  seventh session).

    .venv/bin/python bench/upsert_scale.py [--sink hudi|iceberg] [--merge-mode merge-on-read|copy-on-write]
        [--key-type integer|uuid] [--format-version 2|3] [--sizes 100000,10000000] [--waves 5] [--buckets 16]

Prints and writes bench/results/<sink>_upsert_scale.json (Iceberg copy-on-write: ..._copy_on_write.json;
UUID keys: ..._uuid_keys.json; format v3: ..._v3.json).
"""

from __future__ import annotations

import argparse
import hashlib
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


# The commit interval (--interval-ms): long enough for a wave's updates to reach the tasks within one, so that
# a wave is one commit of 1% of the keys. At 2 s, a wave was cut into up to four commits, each of which looks
# its keys up in the whole table: the wave's time then counted the lookup up to four times.
INTERVAL_MS = 10_000


def key_value(key: int, key_type: str) -> int | str:
    """Key number ``key`` as the table holds it: the number, or (``uuid``) a UUID made from it by MD5."""
    if key_type == "integer":
        return key
    return str(uuid.UUID(bytes=hashlib.md5(str(key).encode()).digest()))


def iceberg_connector_config(
    topic: str, table: str, merge_mode: str, interval_ms: int, format_version: int = 2
) -> dict[str, str]:
    return {
        "connector.class": "iceberg",
        "topics": topic,
        "tasks.max": "2",
        "iceberg.tables": f"bench.{table}",
        "iceberg.tables.upsert-mode-enabled": "true",
        "iceberg.tables.default-id-columns": "key",
        "iceberg.tables.auto-create-enabled": "true",
        "iceberg.tables.auto-create-props.write.merge.mode": merge_mode,
        "iceberg.tables.auto-create-props.format-version": str(format_version),
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false",
        "sinkadmin.maintenance.enabled": "false",
        "iceberg.control.topic": f"control-{topic}",
        "iceberg.control.commit.interval-ms": str(interval_ms),
        "iceberg.control.commit.timeout-ms": "600000",
    }


def connector_config(topic: str, base: Path, table: str, buckets: int, interval_ms: int) -> dict[str, str]:
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
        "sinkadmin.commit.interval-ms": str(interval_ms),
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


def iceberg_load(config: dict[str, str], rows: int, key_type: str) -> float:
    """The table of ``rows`` keys in ten files, created as the sink creates it for ``config`` (its table
    properties), its columns as the sink decodes the topic's records (key, version, amount, note). A format
    v3 table is loaded at v2 by pyiceberg, which writes no v3, then upgraded through Spark, as a user
    upgrades a table."""
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import DoubleType, LongType, NestedField, StringType

    from sinks.iceberg.spark_commits import SparkTables
    from sinks.iceberg.tables import catalog_for, create_table

    parsed = SinkConfig.parse(config)
    properties = dict(parsed.settings.table_properties)
    format_version = int(properties.get("format-version", "2"))
    properties["format-version"] = str(min(format_version, 2))
    schema = Schema(
        NestedField(1, "key", LongType() if key_type == "integer" else StringType(), required=False),
        NestedField(2, "version", LongType(), required=False),
        NestedField(3, "amount", DoubleType(), required=False),
        NestedField(4, "note", StringType(), required=False),
    )
    began = time.monotonic()
    with catalog_for(parsed) as catalog:
        table = create_table(catalog, parsed.settings.tables[0].name, schema, (), properties)
        step = max(1, rows // 10)
        for first in range(0, rows, step):
            keys = pa.array(range(first, min(rows, first + step)), pa.int64())
            stored = keys if key_type == "integer" else pa.array([key_value(k, key_type) for k in keys.to_pylist()])
            table.append(
                pa.table(
                    {
                        "key": stored,
                        "version": pa.array([0] * len(keys), pa.int64()),
                        "amount": pa.compute.cast(pa.compute.divide(keys, 1000), pa.float64()),
                        "note": pa.compute.binary_join_element_wise("row ", keys.cast(pa.string()), ""),
                    }
                )
            )
    if format_version > 2:
        SparkTables.of(parsed).upgrade(parsed.settings.tables[0].name, format_version)
    return time.monotonic() - began


def iceberg_read_costs(config: dict[str, str]) -> dict[str, float]:
    """A whole read of the table: pyiceberg's (to Arrow) and a Spark aggregate over it, in seconds."""
    from sinks.iceberg.maintenance import sql_identifier
    from sinks.iceberg.tables import catalog_for, connector_spark_catalog_conf

    parsed = SinkConfig.parse(config)
    name = parsed.settings.tables[0].name
    with catalog_for(parsed) as catalog:
        table = catalog.load_table(name)
        table.scan().to_arrow()  # (as for Spark's below: the second read is timed)
        began = time.monotonic()
        rows = table.scan().to_arrow().num_rows
        pyiceberg_s = time.monotonic() - began
        delete_files = sum(len(task.delete_files) for task in table.scan().plan_files())
    session = connect(settings.SPARK_REMOTE)
    for key, value in connector_spark_catalog_conf(parsed).items():
        session.conf.set(key, value)
    query = f"SELECT count(*), sum(amount) FROM {sql_identifier(parsed.settings.catalog_name, *name.split('.'))}"
    # Twice, the second timed: the first also loads the table into the session, and (the first read of a
    # run) warms the session's catalog; pyiceberg's first read imports and caches what it needs.
    session.sql(query).collect()
    began = time.monotonic()
    session.sql(query).collect()
    spark_s = time.monotonic() - began
    return {
        "rows": rows,
        "delete_files": delete_files,
        "pyiceberg_s": round(pyiceberg_s, 2),
        "spark_s": round(spark_s, 2),
    }


def iceberg_compact(config: dict[str, str]) -> float:
    """The maintenance's compaction of the table (delete-file-threshold 1); its seconds."""
    from dataclasses import replace

    from sinks.iceberg.maintenance import SparkProcedures, TableMaintenance
    from sinks.iceberg.tables import catalog_for, connector_catalog_properties
    from workers.maintenance import BetweenCommits

    class Figures:
        def record(self, run_id: int, **figures: object) -> None:
            pass

    parsed = SinkConfig.parse(config)
    settings_ = parsed.settings
    began = time.monotonic()
    with catalog_for(parsed) as catalog:
        TableMaintenance(
            replace(settings_.maintenance, delete_file_threshold=1),
            catalog,
            settings_.tables[0].name,
            SparkProcedures(settings_.catalog_name, connector_catalog_properties(parsed)),
            BetweenCommits(),
            Figures(),  # type: ignore[arg-type]
            0,
        ).compact()
    return time.monotonic() - began


def produce_updates(topic: str, keys: int, count: int, version: int, seed: int, key_type: str) -> None:
    producer = Producer({"bootstrap.servers": settings.KAFKA_BOOTSTRAP_SERVERS, "linger.ms": 50})
    rng = random.Random(seed)
    for key in rng.sample(range(keys), count):
        record = {
            "key": key_value(key, key_type),
            "version": version,
            "amount": float(key % 997),
            "note": f"update {version}",
        }
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


def measure_size(
    product: Product,
    sink: str,
    merge_mode: str,
    rows: int,
    waves: int,
    buckets: int,
    interval_ms: int,
    key_type: str = "integer",
    format_version: int = 2,
) -> dict:
    run = uuid.uuid4().hex[:8]
    topic, name, table = f"bench-{sink}-scale-{run}", f"bench-{sink}-scale-{rows}-{run}", f"scale_{run}"
    base = FILES_ROOT / run
    admin = AdminClient({"bootstrap.servers": settings.KAFKA_BOOTSTRAP_SERVERS})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    if sink == "iceberg":
        config = iceberg_connector_config(topic, table, merge_mode, interval_ms, format_version)
    else:
        config = connector_config(topic, base, table, buckets, interval_ms)
    print(f"{rows:,} rows: bulk insert...", flush=True)
    loaded_s = iceberg_load(config, rows, key_type) if sink == "iceberg" else bulk_insert(config, rows)
    print(f"{rows:,} rows: bulk insert took {loaded_s:.1f} s", flush=True)
    product.api("POST", "connectors", {"name": name, "config": config})
    per_wave = []
    committed = 0
    updates = max(1, rows // 100)
    for wave in range(1, waves + 1):
        before = {c.commit_id for c in Commit.objects.filter(connector_name=name)}
        produce_updates(topic, rows, updates, wave, wave, key_type)
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
                "apply_s_per_commit": round(apply_s / max(1, len(commits)), 2),
            }
        )
        print(f"{rows:,} rows, wave {wave}: {per_wave[-1]}", flush=True)
    product.api("DELETE", f"connectors/{name}")
    reads: dict[str, object] = {}
    if sink == "iceberg":
        reads["before_compaction"] = iceberg_read_costs(config)
        reads["compaction_s"] = round(iceberg_compact(config), 2)
        reads["after_compaction"] = iceberg_read_costs(config)
        print(f"{rows:,} rows: reads {reads}", flush=True)
    log_files = sum(1 for f in base.rglob("*") if ".log." in f.name)
    shutil.rmtree(base, ignore_errors=True)
    return {
        **reads,
        "table_rows": rows,
        "updates_per_commit": updates,
        "bulk_insert_s": round(loaded_s, 1),
        "waves": per_wave,
        "apply_s_median": statistics.median(w["apply_s"] for w in per_wave),
        "apply_s_per_commit_median": statistics.median(w["apply_s_per_commit"] for w in per_wave),
        "apply_us_per_update_median": statistics.median(w["apply_us_per_update"] for w in per_wave),
        "log_files_after": log_files,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sink", choices=("hudi", "iceberg"), default="hudi")
    parser.add_argument("--merge-mode", choices=("merge-on-read", "copy-on-write"), default="merge-on-read")
    parser.add_argument("--key-type", choices=("integer", "uuid"), default="integer")
    # Iceberg's table format version: 3 is written through Spark's Iceberg runtime (deletion vectors).
    parser.add_argument("--format-version", type=int, choices=(2, 3), default=2)
    parser.add_argument("--sizes", default="100000,10000000")
    parser.add_argument("--waves", type=int, default=5)
    parser.add_argument("--interval-ms", type=int, default=INTERVAL_MS)
    parser.add_argument("--buckets", type=int, default=16)
    # Without the Spark server's warm-up (thousands of trivial jobs, minutes): then run the large size
    # first, so that a cold JIT weighs on it and not on the small one.
    parser.add_argument("--skip-warm-up", action="store_true")
    parser.add_argument("--output")
    args = parser.parse_args()
    if args.key_type != "integer" and args.sink != "iceberg":
        parser.error("--key-type is the Iceberg sink's: Hudi's bucket index hashes any key alike")
    suffix = "_copy_on_write" if args.sink == "iceberg" and args.merge_mode == "copy-on-write" else ""
    suffix += "_uuid_keys" if args.key_type == "uuid" else ""
    suffix += "_v3" if args.sink == "iceberg" and args.format_version == 3 else ""
    output = args.output or str(ROOT / "bench" / "results" / f"{args.sink}_upsert_scale{suffix}.json")
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    call_command("migrate", verbosity=0)
    services = ensure_services()
    try:
        if not args.skip_warm_up:
            warm_spark_server()
        product = Product()
        try:
            results = [
                measure_size(
                    product,
                    args.sink,
                    args.merge_mode,
                    rows,
                    args.waves,
                    args.buckets,
                    args.interval_ms,
                    args.key_type,
                    args.format_version,
                )
                for rows in sizes
            ]
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
        "sink": args.sink,
        "key_type": args.key_type,
        **(
            {"write.merge.mode": args.merge_mode, "format-version": args.format_version}
            if args.sink == "iceberg"
            else {"table_type": "MERGE_ON_READ", "index": f"BUCKET ({args.buckets} buckets)"}
        ),
        "sizes": results,
        "large_to_small_apply_ratio": round(large["apply_s_median"] / small["apply_s_median"], 2),
        "large_to_small_apply_per_commit_ratio": round(
            large["apply_s_per_commit_median"] / small["apply_s_per_commit_median"], 2
        ),
        "large_to_small_apply_per_update_ratio": round(
            large["apply_us_per_update_median"] / small["apply_us_per_update_median"], 3
        ),
    }
    print(json.dumps(result, indent=2), flush=True)
    write_result(output, result)


if __name__ == "__main__":
    main()
