#!/usr/bin/env python
"""What a commit's Spark job pays per Spark task: a task per staged partition against a task per core.

Stages N JSON records (~1 KB, the sink benchmark's) in the shape a backlog
at a short commit interval gives: C commits of a task's P partitions, a
staged file each (``RawStagingFile``). Then writes them as the sink's tasks
do, a ``SparkWriter.write`` job per commit, twice, each run twice (the
first one warms): with a Spark task per staged partition (how jobs were
cut before) and with a Spark task per core (``task_groups``, the product).
Prints wall seconds and Spark CPU seconds of each and their ratios (the
Spark Connect server with ``--remote``, else this process, the driver:
with their descendants, the JVM and Spark's Python workers), and writes
them to bench/results/spark_tasks.json.

    .venv/bin/python bench/spark_tasks.py [--records 800000] [--partitions 8] [--commits 40]
        [--master local[2]] [--remote sc://host:port]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psutil
from spark_decoding import (  # (sets up Django, which the imports below need)
    ROOT,
    SCHEMA,
    add_spark_arguments,
    stage,
    use_spark,
    write_report,
)

from connectors.config import SinkConfig
from sinkadmin.services import listening_process, split_hostport
from sinks.iceberg.spark_writer import SparkWriter
from sinks.iceberg.writes import TargetTable, WritePlan
from workers.staging import StagedPartition


def spark_cpu_seconds(spark: psutil.Process) -> float:
    """User and system CPU of Spark's process and its descendants (the JVM and its Python workers)."""
    total = 0.0
    for member in [spark, *spark.children(recursive=True)]:
        try:
            times = member.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=800_000)
    parser.add_argument("--partitions", type=int, default=8, help="a task's partitions: staged files per commit")
    parser.add_argument("--commits", type=int, default=40)
    add_spark_arguments(parser)
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "spark_tasks.json"))
    args = parser.parse_args()
    use_spark(args)
    work = Path(tempfile.mkdtemp(prefix="spark-tasks-"))
    try:
        files = args.partitions * args.commits
        staged = stage(work / "staging", args.records, files)
        commits: list[list[StagedPartition]] = [
            staged[n * args.partitions : (n + 1) * args.partitions] for n in range(args.commits)
        ]
        total = sum(s.records for s in staged)
        config = SinkConfig.parse({"connector.class": "iceberg", "topics": "bench", "iceberg.tables": "bench.t"})
        writer = SparkWriter(config)
        writer.warm_up()
        cores = writer.cores
        if args.remote:
            spark = listening_process(split_hostport(args.remote.removeprefix("sc://").split("/")[0])[1])
            assert spark is not None, f"nothing listens at {args.remote}"
        else:
            spark = psutil.Process()  # the in-process session's JVM is a child of this process

        def run(tasks_per_job: int) -> dict[str, float]:
            # (What the warm-up learnt, set by hand: the number of Spark tasks a job may have.)
            writer._cores = tasks_per_job
            out = str(work / "out" / uuid.uuid4().hex)
            table = TargetTable(config.settings.tables[0], SCHEMA, out)
            cpu, started = spark_cpu_seconds(spark), time.perf_counter()
            written = sum(
                f.records
                for commit in commits
                for f in writer.write(uuid.uuid4(), uuid.uuid4(), commit, WritePlan((table,), "spark")).files
            )
            seconds, cpu = time.perf_counter() - started, spark_cpu_seconds(spark) - cpu
            assert written == total, (written, total)
            return {"seconds": round(seconds, 2), "spark_cpu_seconds": round(cpu, 2)}

        ways = {"a Spark task per staged partition": args.partitions, "a Spark task per core (the product)": cores}
        results: dict[str, dict[str, float]] = {}
        for _ in range(2):  # the first round warms both, the second is kept
            for name, tasks in ways.items():
                results[name] = {**run(tasks), "spark_tasks_per_job": min(tasks, args.partitions)}
                print(f"{name}: {results[name]}", flush=True)
        baseline = results["a Spark task per staged partition"]
        for figures in results.values():
            figures["records_per_s"] = round(total / figures["seconds"])
            figures["seconds_ratio"] = round(figures["seconds"] / baseline["seconds"], 2)
            figures["spark_cpu_ratio"] = round(figures["spark_cpu_seconds"] / baseline["spark_cpu_seconds"], 2)
        write_report(args, total, results, jobs=args.commits, staged_files_per_job=args.partitions, spark_cores=cores)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
