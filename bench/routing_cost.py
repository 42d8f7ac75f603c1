#!/usr/bin/env python
"""What routing records to their tables costs the Iceberg sink's decode, per record (decision 017).

The decode both data planes run (``ArrowPartitionWriter``: the JSON decoder, the
tables' files) over runs of the benchmarks' ~1 KB records, each with a ``_table``
field naming one of two tables, in microseconds of this process's CPU per record
(the median of ``--rounds`` rounds, after two that warm up):

- the baseline, measured in the same run: one table and no route field, each run
  decoded whole (what a connector with one table does);
- static routing by ``_table`` to the two tables (each a regex);
- dynamic routing (``iceberg.tables.dynamic-enabled``), the field naming the table.

The tables exist (no catalog: they are given to the writer), so what is measured
is the routing and the per-table decode, not a table's creation. No Spark, broker
or database. Prints and writes bench/results/routing_cost.json.

    .venv/bin/python bench/routing_cost.py [--records 20000] [--rounds 7]
"""

from __future__ import annotations

import functools
import json
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pyiceberg.schema import Schema
from pyiceberg.types import NestedField, StringType
from spark_decoding import SCHEMA  # (the benchmarks' records and their table; sets up Django)
from staging_costs import per_record_arguments, per_record_us, report_per_record

from connectors.config import SinkConfig
from sinks.iceberg.arrow_writer import ArrowPartitionWriter
from sinks.iceberg.writes import TargetTable
from workers.runtime import tune_process_for_tasks
from workers.staging import RecordChunk, StagedPartition

TABLES = ("bench.a", "bench.b")


def values(records: int) -> list[bytes | None]:
    padding = "x" * 880
    return [
        json.dumps(
            {
                "_table": TABLES[i % 2],
                "id": i,
                "user": f"user-{i % 1000}",
                "amount": i * 0.25,
                "ok": i % 2 == 0,
                "note": padding,
            }
        ).encode()
        for i in range(records)
    ]


def config(**keys: str) -> SinkConfig:
    return SinkConfig.parse(
        {
            "connector.class": "org.apache.iceberg.connect.IcebergSinkConnector",
            "topics": "bench",
            "iceberg.catalog.type": "sql",
            "iceberg.catalog.uri": "sqlite:///:memory:",
            "sinkadmin.writer": "arrow",
            **keys,
        }
    )


def main() -> None:
    args = per_record_arguments(__doc__, "routing_cost.json")
    tune_process_for_tasks()
    n = args.records
    run = values(n)
    chunk = RecordChunk("bench", 0, list(range(n)), [None] * n, [None] * n, run, [None] * n, [None] * n)
    schema = Schema(NestedField(100, "_table", StringType(), required=False), *SCHEMA.fields)
    cases = {
        "one table, no route field (baseline)": config(**{"iceberg.tables": "bench.a"}),
        "static routing to two tables": config(
            **{
                "iceberg.tables": ",".join(TABLES),
                "iceberg.tables.route-field": "_table",
                **{f"iceberg.table.{t}.route-regex": t.replace(".", "[.]") for t in TABLES},
            }
        ),
        "dynamic routing to two tables": config(
            **{"iceberg.tables.dynamic-enabled": "true", "iceberg.tables.route-field": "_table"}
        ),
    }
    with tempfile.TemporaryDirectory() as work:

        def decode(cfg: SinkConfig) -> None:
            tables = {t: TargetTable(cfg.settings.target(t), schema, f"{work}/{t}") for t in TABLES}
            writer = ArrowPartitionWriter(
                cfg, lambda name, _: tables[name], lambda name, _: tables[name], uuid.uuid4(), "bench", 0, 0, Path(work)
            )
            writer.write(chunk)
            staged = writer.finish(StagedPartition("bench", 0, 0, n, n, None, None))
            assert sum(f.records for f in staged.files) == n and not staged.bad, staged.bad[:1]
            for f in staged.files:
                Path(f.path).unlink()

        measured = {name: per_record_us(functools.partial(decode, cfg), n, args.rounds) for name, cfg in cases.items()}
    report_per_record(measured, "one table, no route field (baseline)", n, len(run[0] or b""), args.output)


if __name__ == "__main__":
    main()
