#!/usr/bin/env python
"""Table maintenance: compaction and clustering throughput, and the sink's throughput while a compaction runs
beside it.

1. A table of ``--files`` small files (``--rows-per-file`` records of ~1 KB,
   their text random so that the codec cannot make the bytes vanish) is
   compacted by the product's maintenance (``workers.maintenance``: Iceberg's
   rewrite_data_files on the benchmark's Spark, one REPLACE snapshot). Baseline, same run,
   same files: a plain pyarrow copy in this process (read every file, write
   them as one), the least work a rewrite does. Reported: MB/s of input for
   both and their ratio; the row count is checked equal before and after.
2. The same records as a Hudi table of ``--files`` small base files (one
   bulk_insert by Hudi's Spark writer, a file per Spark partition), clustered
   by Hudi's own ``run_clustering`` procedure as the sink's maintenance runs it
   (``sinks.hudi.services``: one replacecommit), against the same pyarrow copy
   of its files; the rows are counted with hudi-rs before and after.
3. The product as ``make run`` starts it (``manage.py runstack``: Celery
   worker, REST API), the connector created through the REST API: the sink
   over ``--records`` records with maintenance off (the baseline), then the
   same topic into a table seeded with as many small files, whose
   compaction starts with the connector. Reported: the sink's records/s in
   both and their ratio, how much of the sink's run the compaction
   overlapped, and the compaction's MB/s beside the sink.

    .venv/bin/python bench/maintenance.py [--files 1000] [--rows-per-file 100] [--records 2000000]

Writes bench/results/maintenance.json.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import sink_throughput as sink  # noqa: E402  (sets Django up)
from django.core.management import call_command  # noqa: E402
from hudi import HudiReadOptions, HudiTableBuilder  # noqa: E402
from pyiceberg.table import TableProperties  # noqa: E402

from connectors.config import SinkConfig  # noqa: E402
from connectors.models import Commit, CommitState, MaintenanceRun  # noqa: E402
from sinks.hudi.services import HudiTables  # noqa: E402
from sinks.iceberg.maintenance import SparkProcedures, TableMaintenance  # noqa: E402
from sinks.iceberg.tables import (  # noqa: E402
    catalog_for,
    connector_catalog_properties,
    create_table,
    describe_data_file,
    infer_schema_from_json,
)
from workers.maintenance import BetweenCommits  # noqa: E402
from workers.spark_writer import spark_session  # noqa: E402

MB = 1e6


class NoLedger:
    """Maintenance figures kept here: the standalone compaction is not a connector's run."""

    def start(self, table: str) -> int:
        return 0

    def record(self, run_id: int, **figures: object) -> None:
        pass

    def finish(self, run_id: int, error: str | None) -> None:
        pass

    def interrupted(self, run_id: int) -> None:
        pass

    def protected_files(self, tables: object) -> set[str]:
        return set()

    def current(self) -> bool:
        return True


def record(i: int) -> dict:
    # As sink_throughput's records, with random text: ~1 KB that zstd cannot shrink to nothing.
    note = base64.b64encode(os.urandom(600)).decode()
    return {"id": i, "user": f"user-{i % 1000}", "amount": i * 0.25, "ok": i % 2 == 0, "note": note}


def config_for(table: str) -> SinkConfig:
    return SinkConfig.parse({"connector.class": "iceberg", "topics": "bench", "iceberg.tables": table})


def seed(table_name: str, files: int, rows_per_file: int) -> tuple[list[str], int]:
    """The table, as the sink would create it from the records, holding ``files`` small files; their paths and bytes."""
    schema = infer_schema_from_json([record(0)])
    paths, size = [], 0
    with catalog_for(config_for(table_name)) as catalog:
        table = create_table(catalog, table_name, schema, ())
        data = Path(table.location().removeprefix("file://")) / "data"
        data.mkdir(parents=True, exist_ok=True)
        described = []
        for n in range(files):
            frame = pa.Table.from_pylist([record(n * rows_per_file + r) for r in range(rows_per_file)])
            path = data / f"seed-{n:05d}.parquet"
            pq.write_table(frame, path, compression="zstd")
            paths.append(str(path))
            size += path.stat().st_size
            described.append(describe_data_file(table, path.as_uri(), None))
        with table.transaction() as tx:
            mapping = tx.table_metadata.schema().name_mapping.model_dump_json()
            tx.set_properties({TableProperties.DEFAULT_NAME_MAPPING: mapping})
            with tx.update_snapshot().fast_append() as append:
                for data_file in described:
                    append.append_data_file(data_file)
    return paths, size


def pyarrow_copy(paths: list[str], target: Path) -> float:
    """Seconds to read every file and write them as one, in this process."""
    began = time.perf_counter()
    with pq.ParquetWriter(target, pq.read_schema(paths[0]), compression="zstd") as writer:
        for path in paths:
            writer.write_table(pq.read_table(path))
    return time.perf_counter() - began


def compact(table_name: str) -> tuple[float, dict]:
    """Seconds of the product's compaction of the table (Iceberg's rewrite_data_files)."""
    config = config_for(table_name)
    procedures = SparkProcedures(config.settings.catalog_name, connector_catalog_properties(config))
    with BetweenCommits().served() as between, catalog_for(config) as catalog:
        maintenance = TableMaintenance(
            config.settings.maintenance, catalog, table_name, procedures, between, NoLedger(), 0
        )
        began = time.perf_counter()
        maintenance.compact()
        seconds = time.perf_counter() - began
    return seconds, vars(maintenance.figures)


HUDI_BENCH = {
    "connector.class": "hudi",
    "topics": "bench",
    "target.table.name": "bench",
    "hoodie.datasource.write.recordkey.field": "id",
    "hoodie.datasource.write.operation": "bulk_insert",
    "hoodie.index.type": "SIMPLE",
    "hoodie.clustering.async.enabled": "true",
}


def seed_hudi(base: Path, files: int, rows_per_file: int) -> tuple[list[str], int]:
    """A Hudi table of ``files`` small base files, from one bulk_insert by Hudi's Spark writer (a Spark
    partition per file); their paths and bytes."""
    spark = spark_session()
    frame = spark.createDataFrame(pa.Table.from_pylist([record(i) for i in range(files * rows_per_file)]).to_pandas())
    frame.repartition(files).write.format("hudi").options(
        **{
            "hoodie.table.name": "bench",
            "hoodie.datasource.write.operation": "bulk_insert",
            "hoodie.datasource.write.recordkey.field": "id",
            "hoodie.datasource.write.keygenerator.class": "org.apache.hudi.keygen.NonpartitionedKeyGenerator",
            "hoodie.bulkinsert.sort.mode": "NONE",
        }
    ).mode("append").save(str(base))
    paths = [str(p) for p in base.glob("*.parquet")]
    return paths, sum(Path(p).stat().st_size for p in paths)


def hudi_rows(base: Path) -> int:
    batches = HudiTableBuilder.from_base_uri(str(base)).build().read(HudiReadOptions())
    return sum(b.num_rows for b in batches)


class Runs:
    """The figures of the benchmark's one maintenance run (a run that is no connector's)."""

    def __init__(self) -> None:
        self.figures: dict[str, Any] = {}

    def record(self, run_id: int, **figures: Any) -> None:
        self.figures.update(figures)


def cluster(base: Path) -> tuple[float, dict[str, Any]]:
    """Seconds of Hudi's clustering of the table as the sink's maintenance runs it (the coordinator's turns
    played by a thread), and the run's figures."""
    config = SinkConfig.parse({**HUDI_BENCH, "target.base.path": str(base)})
    runs = Runs()
    with BetweenCommits().served() as between:
        began = time.perf_counter()
        HudiTables(config, runs).maintain("bench", 0, between)  # type: ignore[arg-type]
        seconds = time.perf_counter() - began
    return seconds, runs.figures


def rows(table_name: str) -> int:
    with catalog_for(config_for(table_name)) as catalog:
        return catalog.load_table(table_name).scan(selected_fields=("id",)).to_arrow().num_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--rows-per-file", type=int, default=100)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--interval-ms", type=int, default=1000)
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "maintenance.json"))
    args = parser.parse_args()

    call_command("migrate", verbosity=0)
    services = sink.ensure_services()
    run = uuid.uuid4().hex[:8]
    try:
        # 1. Compaction alone, against a pyarrow copy of the same files. A
        # first small one loads Iceberg's classes in the server, as a `make run` that
        # has run a while has them (reported apart).
        warm_up = f"bench.warm_{run}"
        seed(warm_up, 10, args.rows_per_file)
        cold_seconds, _ = compact(warm_up)
        standalone = f"bench.compact_{run}"
        paths, seeded_bytes = seed(standalone, args.files, args.rows_per_file)
        before = rows(standalone)
        copy_seconds = pyarrow_copy(paths, Path(paths[0]).parent / "_copy.parquet")
        (Path(paths[0]).parent / "_copy.parquet").unlink()
        compact_seconds, figures = compact(standalone)
        assert rows(standalone) == before, "compaction changed the row count"
        assert figures["rewritten_files"] == args.files, figures
        alone = {
            "files": args.files,
            "input_mb": round(seeded_bytes / MB, 1),
            "output_files": figures["added_files"],
            "output_mb": round(figures["added_bytes"] / MB, 1),
            "seconds": round(compact_seconds, 2),
            "mb_per_s": round(seeded_bytes / MB / compact_seconds, 1),
            "first_job_of_the_session_seconds": round(cold_seconds, 2),
            "pyarrow_copy_seconds": round(copy_seconds, 2),
            "pyarrow_copy_mb_per_s": round(seeded_bytes / MB / copy_seconds, 1),
        }
        alone["to_pyarrow_copy_ratio"] = round(alone["mb_per_s"] / alone["pyarrow_copy_mb_per_s"], 2)
        print(f"compaction alone: {alone}", flush=True)

        # 2. Hudi clustering of as many small file groups, against a pyarrow copy of its files.
        hudi_base = Path(paths[0]).parent.parent.parent / f"hudi_{run}"
        hudi_paths, hudi_bytes = seed_hudi(hudi_base, args.files, args.rows_per_file)
        hudi_before = hudi_rows(hudi_base)
        hudi_copy_seconds = pyarrow_copy(hudi_paths, hudi_base / "_copy.parquet")
        (hudi_base / "_copy.parquet").unlink()
        cluster_seconds, clustered = cluster(hudi_base)
        assert clustered.get("rewritten_files", 0) > 0, clustered
        assert hudi_rows(hudi_base) == hudi_before == args.files * args.rows_per_file, "clustering changed the rows"
        clustering = {
            "files": len(hudi_paths),
            "input_mb": round(hudi_bytes / MB, 1),
            "clustered_file_groups": clustered["rewritten_files"],
            "seconds": round(cluster_seconds, 2),
            "mb_per_s": round(hudi_bytes / MB / cluster_seconds, 1),
            "pyarrow_copy_seconds": round(hudi_copy_seconds, 2),
            "pyarrow_copy_mb_per_s": round(hudi_bytes / MB / hudi_copy_seconds, 1),
        }
        clustering["to_pyarrow_copy_ratio"] = round(clustering["mb_per_s"] / clustering["pyarrow_copy_mb_per_s"], 2)
        print(f"hudi clustering alone: {clustering}", flush=True)

        # 3. The sink through make run's stack, without and with a compaction beside it.
        topic = f"bench-maint-{run}"
        print(f"producing {args.records} records over {args.partitions} partitions...", flush=True)
        ends = sink.produce(topic, args.records, args.partitions)
        broker = sink.broker_process()
        product = sink.Product()
        sink_args = argparse.Namespace(
            tasks=args.tasks,
            interval_ms=args.interval_ms,
            max_records=0,
            records=args.records,
            set=["sinkadmin.maintenance.enabled=false"],
        )
        try:
            # (A first connector warms Spark's Python workers, as a make run that has run a while has them.)
            sink.run_sink(sink_args, "iceberg", "spark", topic, ends, broker, product)
            without = sink.run_sink(sink_args, "iceberg", "spark", topic, ends, broker, product)
            beside_table = f"bench.beside_{run}"
            _, beside_bytes = seed(beside_table, args.files, args.rows_per_file)
            sink_args.set = [
                f"iceberg.tables={beside_table}",
                # (run_sink's connectors have maintenance off unless told.)
                "sinkadmin.maintenance.enabled=true",
                # The first run comes one to two intervals after the
                # coordinator starts (at most 30-60 s): 5-10 s here, inside
                # the sink's run. Later runs leave the sink's own files alone
                # (fewer than 500 of them), so one compaction is measured.
                "sinkadmin.maintenance.interval-ms=5000",
                "sinkadmin.maintenance.rewrite.min-input-files=500",
            ]
            started = time.time()
            beside = sink.run_sink(sink_args, "iceberg", "spark", topic, ends, broker, product)
        finally:
            product.stop()
        maintenance = MaintenanceRun.objects.filter(table_name=beside_table).order_by("started_at").first()
        # (The sink's end deletes its connector: the run's later steps, expiry and orphan
        # removal, may be cut by it; what is measured is the compaction, to its replace snapshot.)
        if maintenance is None or maintenance.replace_snapshot_id is None or maintenance.rewritten_files < args.files:
            # (Its first run comes 5-10 s after the coordinator starts: a shorter run of the sink ends first.)
            found = "none" if maintenance is None else f"{maintenance.outcome}, {maintenance.rewritten_files} files"
            raise SystemExit(
                f"no compaction of the {args.files} seeded files finished beside the sink (its run: {found}): "
                "the sink's run must outlast the first maintenance run, 5-10 s after its start (more --records)"
            )
        commits = Commit.objects.filter(
            connector_name__startswith="bench-iceberg-spark-",
            state=CommitState.COMMITTED,
            committed_at__gte=datetime.fromtimestamp(started, UTC),
        ).exclude(files_count=0)
        sink_from = min(c.started_at for c in commits).timestamp()
        sink_to = max(sink.cycle_moments(c)[2] for c in commits).timestamp()
        with catalog_for(config_for(beside_table)) as catalog:
            replace = catalog.load_table(beside_table).snapshot_by_id(maintenance.replace_snapshot_id)
        assert replace is not None
        # From the run's start to its replace snapshot: the manifest rewrite
        # (in the coordinator's turn), then Iceberg's rewrite_data_files.
        m_from, m_to = maintenance.started_at.timestamp(), replace.timestamp_ms / 1000
        overlap = max(0.0, min(sink_to, m_to) - max(sink_from, m_from))
        until_replace = m_to - m_from
        result = {
            "compaction_alone": alone,
            "hudi_clustering_alone": clustering,
            "sink_without_maintenance": {k: without[k] for k in ("sink_records_per_s", "sink_seconds", "commits")},
            "sink_beside_compaction": {k: beside[k] for k in ("sink_records_per_s", "sink_seconds", "commits")},
            "sink_beside_to_without_ratio": round(beside["sink_records_per_s"] / without["sink_records_per_s"], 3),
            "compaction_beside_sink": {
                "input_mb": round(beside_bytes / MB, 1),
                "seconds_until_replace_snapshot": round(until_replace, 2),
                "mb_per_s_until_replace_snapshot": round(beside_bytes / MB / until_replace, 1),
                "share_of_sink_run_overlapped": round(overlap / (sink_to - sink_from), 2),
            },
            "records": sum(ends.values()),
            "partitions": args.partitions,
            "tasks": args.tasks,
            "commit_interval_ms": args.interval_ms,
            "mode": "make-run",
            "cpu_count": os.cpu_count(),
        }
        print(json.dumps(result, indent=2))
        sink.write_result(args.output, result)
    finally:
        for service in services:
            service.stop()


if __name__ == "__main__":
    main()
