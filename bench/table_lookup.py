#!/usr/bin/env python
"""What resolving its table costs a task at each commit, as the table's history grows.

A task resolves each target table for every commit it writes
(``sinks.iceberg.writer.TableWriter``). Until START_COMMIT carried the tables'
versions it loaded the table every time: one catalog query, then the
metadata file read and parsed, and that file holds every snapshot until
maintenance expires them (24 h by default: 86,400 snapshots at 1 s commits).
Now a task keeps its copy and asks the catalog only where the table's metadata
is (one query), loading it again only when something other than the
coordinator's commits changed it.

For a table of the SQL catalog on the project's Postgres with 1, 100, 300
and 600 snapshots (each made as the coordinator makes one, with the sink's
summary properties), this measures the median wall time, in turns, of a
task's resolution of its table for a new staging round (``TableWriter.plan``):

- with its copy dropped, so that the table is loaded, as every commit did (the baseline);
- as it is now, its copy vouched for by the START after the latest commit.

Prints both, the ratio and the metadata file's size, and writes them to
bench/results/table_lookup.json. Needs Postgres (``scripts/start-services``).

    .venv/bin/python bench/table_lookup.py [--snapshots 1,100,300,600] [--rounds 21]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pyarrow as pa
from spark_decoding import ROOT  # (sets up Django)

from connectors.config import SinkConfig
from sinks.iceberg.tables import (
    PROP_COMMIT_ID,
    PROP_CONNECTOR,
    PROP_EPOCH,
    PROP_OFFSETS,
    catalog_for,
    committed_version,
)
from sinks.iceberg.writer import TableWriter

TABLE = "bench.table_lookup"
SAMPLES: list[bytes | None] = [json.dumps({"id": i, "name": f"n{i}", "amount": i * 0.5}).encode() for i in range(3)]


def medians_ms(works: list[Callable[[], object]], rounds: int) -> list[float]:
    """Median wall milliseconds of each of ``works``, run in turn each round (so drift hits all alike)."""
    for work in works:
        work()
    spent: list[list[float]] = [[] for _ in works]
    for _ in range(rounds):
        for times, work in zip(spent, works, strict=True):
            began = time.perf_counter()
            work()
            times.append(time.perf_counter() - began)
    return [statistics.median(times) * 1000 for times in spent]


def commit(table: Any, n: int) -> None:
    """A snapshot as the coordinator commits one: a small file, the sink's summary properties."""
    offsets = {"bench": {str(p): [n * 1000, (n + 1) * 1000] for p in range(16)}}
    table.append(
        pa.table({"id": pa.array([n], pa.int64()), "name": pa.array([f"n{n}"]), "amount": pa.array([0.5])}),
        snapshot_properties={
            PROP_CONNECTOR: "bench",
            PROP_COMMIT_ID: str(uuid.uuid4()),
            PROP_EPOCH: "1",
            PROP_OFFSETS: json.dumps(offsets, separators=(",", ":")),
        },
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--snapshots", default="1,100,300,600", help="history sizes to measure at (ascending)")
    parser.add_argument("--rounds", type=int, default=41)
    args = parser.parse_args()
    sizes = [int(s) for s in args.snapshots.split(",")]

    run = uuid.uuid4().hex[:8]
    config = SinkConfig.parse(
        {
            "connector.class": "iceberg",
            "topics": "bench",
            "iceberg.tables": TABLE,
            "iceberg.tables.auto-create-enabled": "true",
            "iceberg.catalog": f"bench-table-lookup-{run}",
            "sinkadmin.writer": "arrow",  # (resolving tables needs no Spark)
        }
    )
    writer = TableWriter(config)
    writer.table(uuid.uuid4(), TABLE, lambda: SAMPLES)  # the task creates the table
    rows = []
    with catalog_for(config) as catalog:
        table = catalog.load_table(TABLE)
        with table.transaction() as tx:
            # Manifests merged, so that making the history takes minutes, not hours; the metadata
            # file, which the load reads, holds every snapshot either way.
            tx.set_properties({"commit.manifest-merge.enabled": "true"})
        made = 0
        for size in sizes:
            while made < size:
                commit(table, made)
                made += 1
            # The START after the coordinator's latest commit says what it left the table at.
            writer.tables_committed({TABLE: committed_version(table)})

            def resolved_by_loading() -> None:
                writer._copies.clear()  # (as every commit did before: the table loaded)
                writer.table(uuid.uuid4(), TABLE, lambda: SAMPLES)

            loaded, resolved = medians_ms(
                [resolved_by_loading, lambda: writer.table(uuid.uuid4(), TABLE, lambda: SAMPLES)], args.rounds
            )
            metadata_bytes = os.path.getsize(table.metadata_location.removeprefix("file://"))
            row = {
                "snapshots": size,
                "metadata_kib": round(metadata_bytes / 1024),
                "loading_ms": round(loaded, 2),
                "task_resolution_ms": round(resolved, 2),
                "task_to_loading_ratio": round(resolved / loaded, 3),
            }
            rows.append(row)
            print(
                f"{size:>5} snapshots ({row['metadata_kib']:>5} KiB metadata): loading it {loaded:6.1f} ms, "
                f"the task's resolution now {resolved:5.1f} ms ({resolved / loaded:.2f}x)",
                flush=True,
            )
    writer.close()
    out = ROOT / "bench" / "results" / "table_lookup.json"
    out.write_text(
        json.dumps(
            {
                "what": "median wall ms to resolve a task's table for a commit: loading it (before) vs now",
                "rounds": args.rounds,
                "host_cpus": os.cpu_count(),
                "results": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
