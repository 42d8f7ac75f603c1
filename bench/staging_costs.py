#!/usr/bin/env python
"""What staging a record costs: in the task that stages it, and in the Spark Python worker that reads it back.

Builds chunks of ~1 KB JSON records (the sink benchmark's) as a task holds
them (``RecordChunk``), then measures, in microseconds of this process's CPU
per record (the median of ``--rounds`` rounds, after two that warm up):

- building the chunk's Arrow table (``RecordChunk.raw_table``), whatever the file format;
- writing that table (not counting its building), and reading back the columns the decoder takes
  (``read_staged_chunks``), in three formats: the product's (Parquet,
  uncompressed, PLAIN, ``RawStagingFile``), Parquet with the key and value
  columns in DELTA_LENGTH_BYTE_ARRAY, and an Arrow IPC file, read memory-mapped;
- turning the read columns into the Python lists the decoder takes (the same for every format).

No Spark, broker or database: the formats' own costs, on this machine. Prints
them and writes them to bench/results/staging_costs.json.

    .venv/bin/python bench/staging_costs.py [--records 20000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import ipc
from spark_decoding import ROOT, values_of  # (the benchmarks' records; sets up Django)

from workers.staging import STAGING_PARQUET_OPTIONS, STAGING_SCHEMA, RecordChunk

# The columns read_staged_chunks reads (headers only travel to the dead-letter topic).
READ_COLUMNS = ["topic", "partition", "offset", "timestamp", "key", "value", "error"]


def chunk_of(records: int) -> RecordChunk:
    values = values_of(range(records))
    keys: list[bytes | None] = [str(i).encode() for i in range(records)]
    offsets = list(range(records))
    stamps: list[int | None] = [1_700_000_000_000 + i for i in range(records)]
    return RecordChunk("bench", 0, offsets, stamps, keys, values, [None] * records, [None] * records)


def per_record_us(work: Callable[[], object], records: int, rounds: int) -> float:
    """Median CPU microseconds per record of ``work`` over ``rounds`` rounds (two more warm up first)."""
    for _ in range(2):
        work()
    spent = []
    for _ in range(rounds):
        began = time.process_time()
        work()
        spent.append(time.process_time() - began)
    return round(statistics.median(spent) * 1e6 / records, 3)


def per_record_arguments(doc: str | None, results: str, records_help: str = "records per run") -> argparse.Namespace:
    """The command line of a per-record benchmark: ``--records``, ``--rounds`` and ``--output`` (by default
    bench/results/``results``)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=20_000, help=records_help)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / results))
    return parser.parse_args()


def report_per_record(measured: dict[str, float], baseline: str, records: int, value_bytes: int, output: str) -> None:
    """Print each case's CPU per record and its ratio to ``baseline`` (a case measured in the same run), and
    write them to ``output``."""
    base = measured[baseline]
    results = {
        "records": records,
        "value_bytes": value_bytes,
        "cpu_us_per_record": measured,
        "ratio_to_baseline": {name: round(us / base, 2) for name, us in measured.items()},
    }
    width = max(len(name) for name in measured)
    for name, us in measured.items():
        print(f"{name:{width}} {us:7.2f} µs/record  {us / base:5.2f}x")
    Path(output).write_text(json.dumps(results, indent=2) + "\n")
    print(f"written to {output}")


def main() -> None:
    args = per_record_arguments(__doc__, "staging_costs.json", "records per chunk (a task's chunk holds ~8 MiB)")
    n, rounds = args.records, args.rounds
    chunk = chunk_of(n)
    table = chunk.raw_table()

    def parquet_writer(path: Path, **options: object) -> Callable[[], None]:
        def write() -> None:
            with pq.ParquetWriter(path, STAGING_SCHEMA, **options) as writer:  # type: ignore[arg-type]
                writer.write_table(table)

        return write

    def ipc_write(path: Path) -> Callable[[], None]:
        def write() -> None:
            with pa.OSFile(str(path), "wb") as sink, ipc.new_file(sink, STAGING_SCHEMA) as writer:
                writer.write_table(table)

        return write

    def parquet_read(path: Path) -> Callable[[], pa.Table]:
        return lambda: pq.ParquetFile(path).read_row_group(0, columns=READ_COLUMNS)

    def ipc_read(path: Path) -> Callable[[], pa.Table]:
        def read() -> pa.Table:
            with pa.memory_map(str(path)) as source:
                return ipc.open_file(source).read_all().select(READ_COLUMNS)

        return read

    with tempfile.TemporaryDirectory(
        prefix="staging-costs-", dir=ROOT / "var" if (ROOT / "var").is_dir() else None
    ) as d:
        work = Path(d)
        formats = {
            "parquet, plain, uncompressed (the product's)": (
                # (RawStagingFile's options, on the table built once: raw_table is measured apart.)
                parquet_writer(work / "plain.parquet", **STAGING_PARQUET_OPTIONS),
                parquet_read(work / "plain.parquet"),
            ),
            "parquet, key and value in DELTA_LENGTH_BYTE_ARRAY": (
                parquet_writer(
                    work / "delta.parquet",
                    **STAGING_PARQUET_OPTIONS,
                    column_encoding={"key": "DELTA_LENGTH_BYTE_ARRAY", "value": "DELTA_LENGTH_BYTE_ARRAY"},
                ),
                parquet_read(work / "delta.parquet"),
            ),
            "arrow ipc file, read memory-mapped": (ipc_write(work / "staged.arrow"), ipc_read(work / "staged.arrow")),
        }
        figures: dict[str, dict[str, float]] = {}
        for name, (write, read) in formats.items():
            write_us = per_record_us(write, n, rounds)
            read_us = per_record_us(read, n, rounds)
            assert read().num_rows == n
            figures[name] = {"write_us_per_record": write_us, "read_us_per_record": read_us}
            print(f"{name}: write {write_us} µs, read {read_us} µs a record", flush=True)
        build_us = per_record_us(chunk.raw_table, n, rounds)
        read = pq.ParquetFile(work / "plain.parquet").read_row_group(0, columns=READ_COLUMNS)
        to_lists_us = per_record_us(
            lambda: [read.column(c).to_pylist() for c in ("offset", "timestamp", "key", "value", "error")], n, rounds
        )
    print(f"the chunk's Arrow table (raw_table): {build_us} µs a record; read columns to lists: {to_lists_us} µs")
    report = {
        "records_per_chunk": n,
        "record_bytes": round(sum(map(len, filter(None, chunk.values))) / n),
        "rounds": rounds,
        "cpu_count": os.cpu_count(),
        "pyarrow": pa.__version__,
        "raw_table_us_per_record": build_us,
        "read_columns_to_python_lists_us_per_record": to_lists_us,
        "formats": figures,
    }
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
