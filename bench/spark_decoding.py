#!/usr/bin/env python
"""How Spark should decode staged records: three ways, measured in one run on the same data.

Stages N JSON records (~1 KB, the sink benchmark's) as the participants stage
them (``RawStagingFile``, one file per partition), then decodes them into the
records' five typed columns and writes zstd Parquet, three ways, each run
three times (the first is cold):

- ``from_json``: Spark reads the staged files and decodes in the JVM; Spark's Parquet writer;
- ``mapInArrow, Spark writes``: Spark reads the staged files, its Python
  workers decode with the participants' JSON decoder, Spark's Parquet writer;
- ``mapInArrow, workers write`` (what the product runs, ``SparkWriter.write``):
  Python workers read the staged files, decode and write the data files.

Prints records/s of each and their ratio to ``from_json``, and writes them to
bench/results/spark_decoding.json.

    .venv/bin/python bench/spark_decoding.py [--records 400000] [--partitions 8] [--master local[2]]
        [--remote sc://host:port]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sinkadmin.settings")

import django  # noqa: E402

django.setup()

import pyarrow as pa  # noqa: E402
from django.conf import settings  # noqa: E402
from pyiceberg.schema import Schema  # noqa: E402
from pyiceberg.types import BooleanType, DoubleType, LongType, NestedField, StringType  # noqa: E402

from connectors.config import SinkConfig  # noqa: E402
from sinks.iceberg.spark_writer import SparkWriter  # noqa: E402
from sinks.iceberg.writes import TargetTable, WritePlan, arrow_schema  # noqa: E402
from workers.spark_writer import STAGING_DDL  # noqa: E402
from workers.staging import RawStagingFile, RecordChunk, StagedPartition, raw_staging_path  # noqa: E402

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "user", StringType(), required=False),
    NestedField(3, "amount", DoubleType(), required=False),
    NestedField(4, "ok", BooleanType(), required=False),
    NestedField(5, "note", StringType(), required=False),
)
DDL = "`id` BIGINT, `user` STRING, `amount` DOUBLE, `ok` BOOLEAN, `note` STRING"


def values_of(ids: range) -> list[bytes | None]:
    """The benchmarks' ~1 KB JSON values (SCHEMA's five columns), one per id."""
    padding = "x" * 900
    return [
        json.dumps(
            {"id": i, "user": f"user-{i % 1000}", "amount": i * 0.25, "ok": i % 2 == 0, "note": padding}
        ).encode()
        for i in ids
    ]


def stage(directory: Path, records: int, partitions: int) -> list[StagedPartition]:
    staged = []
    per_partition = records // partitions
    for p in range(partitions):
        raw = RawStagingFile(raw_staging_path(directory, "bench", p, 0), 8 << 20)
        for first in range(0, per_partition, 8000):
            ids = range(p * per_partition + first, p * per_partition + min(per_partition, first + 8000))
            values = values_of(ids)
            n = len(values)
            offsets = list(range(first, first + n))
            raw.write(RecordChunk("bench", p, offsets, [0] * n, [None] * n, values, [None] * n, [None] * n))
        staged.append(StagedPartition("bench", p, 0, per_partition, per_partition, raw.close(), None))
    return staged


def from_json(spark: object, staged: list[StagedPartition], out: str) -> None:
    from pyspark.sql import functions as F

    raw = spark.read.schema(STAGING_DDL).parquet(*[f"file://{s.path}" for s in staged])  # type: ignore[attr-defined]
    decoded = raw.select("partition", F.from_json(F.col("value").cast("string"), DDL).alias("r"))
    decoded.select("partition", "r.*").write.partitionBy("partition").parquet(f"file://{out}")


def _decode_batches(columns: pa.Schema, batches):  # type: ignore[no-untyped-def]
    from workers.json_decoder import JsonDecoder

    decoder = JsonDecoder(columns)
    for batch in batches:
        decoded = decoder.decode(batch.column("value").to_pylist(), batch.column("error").to_pylist())
        yield from decoded.columns.append_column(
            "partition", pa.array([batch.column("partition")[0].as_py()] * decoded.columns.num_rows, pa.int32())
        ).to_batches()


def map_in_arrow_spark_writes(spark: object, staged: list[StagedPartition], out: str) -> None:
    raw = spark.read.schema(STAGING_DDL).parquet(*[f"file://{s.path}" for s in staged])  # type: ignore[attr-defined]
    decode = functools.partial(_decode_batches, arrow_schema(SCHEMA))
    raw.mapInArrow(decode, f"{DDL}, `partition` INT").write.partitionBy("partition").parquet(f"file://{out}")


def add_spark_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--master", default="local[2]", help="an in-process session on this master")
    parser.add_argument("--remote", default="", help="or a Spark Connect endpoint")


def use_spark(args: argparse.Namespace) -> None:
    """The Spark the arguments name, for this process's SparkWriters."""
    settings.SPARK_REMOTE, settings.SPARK_MASTER = args.remote, "" if args.remote else args.master


def write_report(args: argparse.Namespace, records: int, ways: dict, **run: object) -> None:
    """Print a run's figures (each way's, and what was run) and write them to ``--output``."""
    report = {
        "records": records,
        "record_bytes": 1000,
        **run,
        "spark": args.remote or args.master,
        "cpu_count": os.cpu_count(),
        "ways": ways,
    }
    print(json.dumps(report, indent=2))
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(report, indent=2) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--partitions", type=int, default=8)
    add_spark_arguments(parser)
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "spark_decoding.json"))
    args = parser.parse_args()
    use_spark(args)
    work = Path(tempfile.mkdtemp(prefix="spark-decoding-"))
    try:
        staged = stage(work / "staging", args.records, args.partitions)
        config = SinkConfig.parse({"connector.class": "iceberg", "topics": "bench", "iceberg.tables": "bench.t"})
        writer = SparkWriter(config)
        spark = writer.spark
        total = sum(s.records for s in staged)

        def own_files(out: str) -> None:
            table = TargetTable(config.settings.tables[0], SCHEMA, out)
            files = writer.write(uuid.uuid4(), uuid.uuid4(), staged, WritePlan((table,), "spark")).files
            assert sum(f.records for f in files) == total

        ways = {
            "from_json, Spark writes": lambda out: from_json(spark, staged, out),
            "mapInArrow, Spark writes": lambda out: map_in_arrow_spark_writes(spark, staged, out),
            "mapInArrow, workers write (the product)": own_files,
        }
        results: dict[str, dict[str, float]] = {}
        for name, run in ways.items():
            seconds = []
            for _ in range(3):
                out = str(work / "out" / uuid.uuid4().hex)
                started = time.perf_counter()
                run(out)
                seconds.append(time.perf_counter() - started)
            results[name] = {
                "cold_records_per_s": round(total / seconds[0]),
                "warm_records_per_s": round(total / min(seconds[1:])),
            }
            print(f"{name}: {results[name]}", flush=True)
        baseline = results["from_json, Spark writes"]["warm_records_per_s"]
        for figures in results.values():
            figures["warm_ratio_to_from_json"] = round(figures["warm_records_per_s"] / baseline, 2)
        write_report(args, total, results, staged_files=len(staged))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
