#!/usr/bin/env python
"""What a Spark job costs however little it does: the floor under each commit's write.

Runs trivial jobs back to back, each kind ``--jobs`` times after ten that
warm up, and reports wall milliseconds per job and this process's (the
client's) CPU milliseconds per job:

- a JVM-only job (``range(...).collect()``, one Spark task);
- a ``mapInArrow`` job whose Python function passes its rows on, with one
  Spark task and with a task per core (a commit's job has a task per core).

- a commit's job as a connector at a short interval has it: 8 staged
  files of 2,500 records (a task's partitions), decoded and written as
  data files by a task per core (``SparkWriter.write``).

The difference between the first and the others is what Spark's Python
runner adds to a job; the rest is the JVM's planning and scheduling and,
over Spark Connect, the gRPC round trip. A commit pays it once per task.
With ``--remote`` naming a server on this host, it also reports the
server's CPU milliseconds per job: its JVM's (of which its JIT compiler
threads') and its Python workers'. Prints them and writes them to
bench/results/spark_job_floor.json (with ``--remote``, to
spark_job_floor-connect.json unless ``--output`` says).

    .venv/bin/python bench/spark_job_floor.py [--jobs 40] [--master local[2]] [--remote sc://host:port]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psutil
import pyarrow as pa
from sink_throughput import jvm_cpu_seconds, usage
from spark_decoding import ROOT, SCHEMA, add_spark_arguments, stage, use_spark, write_report  # (sets up Django)

from connectors.config import SinkConfig
from sinkadmin.services import listening_process, split_hostport
from sinks.iceberg.spark_writer import SparkWriter
from sinks.iceberg.writes import TargetTable, WritePlan
from workers.spark_writer import spark_session


def _passed_on(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield from batches


def server_cpu(server: psutil.Process) -> tuple[float, float, float]:
    """CPU seconds so far of a Spark Connect server's JVM, of its JIT compiler threads, and of its
    Python workers (its descendants, with those that exited: ``usage`` keeps them)."""
    jvm, threads = jvm_cpu_seconds(server)
    return jvm, threads["jit_compilers"] if threads is not None else 0.0, usage(server).cpu_seconds - jvm


def per_job_ms(job: Callable[[], object], jobs: int, server: psutil.Process | None) -> dict[str, float]:
    for _ in range(10):
        job()
    walls, cpus = [], []
    before = server_cpu(server) if server is not None else None
    for _ in range(jobs):
        wall, cpu = time.perf_counter(), time.process_time()
        job()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    figures = {
        "wall_ms_median": round(statistics.median(walls) * 1000, 1),
        "wall_ms_p90": round(sorted(walls)[int(0.9 * (len(walls) - 1))] * 1000, 1),
        "client_cpu_ms_median": round(statistics.median(cpus) * 1000, 1),
    }
    if server is not None and before is not None:
        after = server_cpu(server)
        for name, start, end in zip(("jvm", "jit", "python_workers"), before, after, strict=True):
            figures[f"server_{name}_cpu_ms_per_job"] = round((end - start) * 1000 / jobs, 1)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=40)
    add_spark_arguments(parser)
    parser.add_argument("--output", default="")
    args = parser.parse_args()
    name = "spark_job_floor-connect.json" if args.remote else "spark_job_floor.json"
    args.output = args.output or str(ROOT / "bench" / "results" / name)
    use_spark(args)
    spark = spark_session()
    server = None
    if args.remote:
        server = listening_process(split_hostport(args.remote.removeprefix("sc://").split("/")[0])[1])
    # The product's warm-up job learns how many Spark tasks run at once (and warms the Python workers).
    config = SinkConfig.parse({"connector.class": "iceberg", "topics": "bench", "iceberg.tables": "bench.t"})
    writer = SparkWriter(config, spark)
    per_core = writer.cores
    work = Path(tempfile.mkdtemp(prefix="spark-job-floor-"))
    try:
        staged = stage(work / "staging", 8 * 2_500, 8)
        table = TargetTable(config.settings.tables[0], SCHEMA, str(work / "out"))
        kinds = {
            "JVM only (range, collect), one task": lambda: spark.range(0, 2, 1, 1).collect(),
            "mapInArrow, one task": lambda: spark.range(0, 1, 1, 1).mapInArrow(_passed_on, "id long").collect(),
            f"mapInArrow, a task per core ({per_core})": lambda: (
                spark.range(0, per_core, 1, per_core).mapInArrow(_passed_on, "id long").collect()
            ),
            f"a commit's job: 8 staged files of 2,500 records, a task per core ({per_core})": lambda: writer.write(
                uuid.uuid4(), uuid.uuid4(), staged, WritePlan((table,), "spark")
            ),
        }
        ways = {}
        for kind, job in kinds.items():
            ways[kind] = per_job_ms(job, args.jobs, server)
            print(f"{kind}: {ways[kind]}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    write_report(args, 0, ways, jobs_per_kind=args.jobs, spark_cores=per_core)


if __name__ == "__main__":
    main()
