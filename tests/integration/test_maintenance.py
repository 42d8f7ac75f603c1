"""Table maintenance beside a running sink, on Iceberg's own Spark procedures, against the real
catalog, Spark and files: compaction of a thousand small files while the connector commits, a
coordinator killed while Spark compacts and after, snapshot expiry and orphan removal. Every check
reads the table back with pyiceberg and Spark's Iceberg reader, and compares it with the topic,
read with a bare consumer."""

from __future__ import annotations

import itertools
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.core.management import call_command
from django.db import connections
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from pyiceberg.schema import Schema
from pyiceberg.table import TableProperties
from pyiceberg.table.snapshots import Operation
from pyiceberg.types import DoubleType, NestedField
from rest_framework.test import APIClient

from connectors import actions
from connectors.config import SinkConfig
from connectors.models import Commit, CommitState, Connector, MaintenanceOutcome, MaintenanceRun, PartitionOffset
from sinks.iceberg.maintenance import IcebergProcedures, IcebergTables, SparkProcedures
from sinks.iceberg.tables import (
    PROP_CONNECTOR,
    PROP_OFFSETS,
    catalog_for,
    connector_catalog_properties,
    create_table,
    describe_data_file,
    evolve_table,
    load_table,
    schema_from_connect,
)
from tests.integration.conftest import sink_config
from tests.integration.helpers import (
    caught_up,
    create_topic,
    json_records,
    ledger_offsets,
    produce,
    running_in_threads,
    spawn,
    table_of,
    table_rows,
    topic_ids,
    wait_until,
)
from workers.maintenance import Maintainer
from workers.runtime import DjangoMaintenanceLedger

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TABLE = "db.maintained"
SEEDED_FILES = 1000
SEED_ROWS_PER_FILE = 3
# Seeded ids sit far above the topic's, so the two never meet.
SEED_BASE = 10_000_000


COLUMNS = {"id": ("int64", pa.int64()), "name": ("string", pa.string()), "amount": ("double", pa.float64())}


def seed_small_files(
    config: SinkConfig, table_name: str, files: int, columns: tuple[str, ...] = tuple(COLUMNS), first: int = 0
) -> set[int]:
    """The table (made as the sink makes it, if it does not exist) given ``files`` small files
    (as a day of 1 s commits leaves), numbered from ``first``, in ten snapshots; their rows' ids."""
    schema = schema_from_connect(
        {"type": "struct", "fields": [{"field": name, "type": COLUMNS[name][0]} for name in columns]}
    )
    ids: set[int] = set()
    with catalog_for(config) as catalog:
        table = load_table(catalog, table_name) or create_table(catalog, table_name, schema, ())
        data = Path(table.location().removeprefix("file://")) / "data"
        data.mkdir(parents=True, exist_ok=True)
        per_snapshot = max(1, files // 10)
        for snapshot in range(files // per_snapshot):
            described = []
            for n in range(first + snapshot * per_snapshot, first + (snapshot + 1) * per_snapshot):
                rows = [SEED_BASE + n * SEED_ROWS_PER_FILE + r for r in range(SEED_ROWS_PER_FILE)]
                ids.update(rows)
                path = data / f"seed-{n:05d}.parquet"
                values = {"id": rows, "name": [f"seed-{i}" for i in rows], "amount": [i * 0.5 for i in rows]}
                frame = pa.table(
                    {name: values[name] for name in columns},
                    schema=pa.schema([(name, COLUMNS[name][1]) for name in columns]),
                )
                pq.write_table(frame, path, compression="zstd")
                described.append(describe_data_file(table, path.as_uri(), None))
            with table.transaction() as tx:
                if tx.table_metadata.name_mapping() is None:
                    tx.set_properties(
                        {
                            TableProperties.DEFAULT_NAME_MAPPING: tx.table_metadata.schema().name_mapping.model_dump_json()
                        }
                    )
                with tx.update_snapshot().fast_append() as append:
                    for data_file in described:
                        append.append_data_file(data_file)
    return ids


def live_files(table: Any) -> list[str]:
    return [task.file.file_path for task in table.scan().plan_files()]


def ids_at(table: Any, snapshot_id: int | None = None) -> list[int]:
    return sorted(table.scan(snapshot_id=snapshot_id, selected_fields=("id",)).to_arrow().column("id").to_pylist())


def rows_at(table: Any, snapshot_id: int) -> list[tuple[Any, ...]]:
    frame = table.scan(snapshot_id=snapshot_id).to_arrow()
    return sorted(zip(*(frame.column(n).to_pylist() for n in frame.column_names), strict=True))


def assert_exact(name: str, bootstrap: str, ends: dict[tuple[str, int], int], seeded: set[int]) -> None:
    """Every record of the topic and every seeded row in the table once; commits contiguous (I1)."""
    ids = sorted(row["id"] for row in table_rows(name, TABLE))
    expected = sorted([*topic_ids(bootstrap, ends), *seeded])
    assert len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} rows twice"
    assert ids == expected, f"{len(ids)} rows; expected {len(expected)}"
    committed = Commit.objects.filter(connector_name=name, state=CommitState.COMMITTED).order_by("committed_at")
    ranges: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for commit in committed:
        for p in commit.partitions.all():
            ranges.setdefault((p.topic, p.partition), []).append((p.start_offset, p.end_offset))
    for tp, spans in ranges.items():
        spans.sort()
        assert all(a[1] == b[0] for a, b in itertools.pairwise(spans)), f"{tp}: {spans}"
        assert spans[-1][1] == ends[tp]


class Producing:
    """Records produced in rounds from a thread, so that the sink commits all along."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, start: int) -> None:
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.next = start
        self.ends: dict[tuple[str, int], int] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(0.3):
            ends = produce(self.bootstrap, self.topic, json_records(self.next, 40), self.partitions)
            self.next += 40
            for tp, end in ends.items():
                self.ends[tp] = max(self.ends.get(tp, 0), end)

    def __enter__(self) -> Producing:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(60)


def maintenance_config(**overrides: str) -> dict[str, str]:
    return {
        "sinkadmin.maintenance.interval-ms": "2000",
        # Seeded files are ~1 KB: a 64 KiB target packs them in a few dozen files.
        "sinkadmin.maintenance.rewrite.target-file-size-bytes": "65536",
        "sinkadmin.maintenance.rewrite.min-input-files": "5",
        "iceberg.control.commit.interval-ms": "1000",
        **overrides,
    }


def test_a_thousand_small_files_are_compacted_while_the_connector_commits(
    kafka_bootstrap: str, lake: dict[str, str], topic_name: str, signed_in: Client, operator_api: APIClient
) -> None:
    create_topic(kafka_bootstrap, topic_name, 2)
    config = sink_config(topic_name, TABLE, **maintenance_config())
    seeded = seed_small_files(SinkConfig.parse(config), TABLE, SEEDED_FILES)
    actions.create_connector("compacting", config)
    seeded_files = set(live_files(table_of("compacting", TABLE)))
    assert len(seeded_files) == SEEDED_FILES

    with running_in_threads("compacting", tasks=2), Producing(kafka_bootstrap, topic_name, 2, 0) as producing:

        def compacted() -> bool:
            return MaintenanceRun.objects.filter(
                connector_name="compacting", outcome=MaintenanceOutcome.SUCCEEDED, rewritten_files__gte=SEEDED_FILES
            ).exists()

        wait_until(compacted, 240, "the seeded files to be compacted")
        producing.stop.set()
        producing.thread.join(60)
        ends = dict(producing.ends)
        wait_until(caught_up("compacting", ends), 120, "every record produced to be committed")

    run = MaintenanceRun.objects.get(connector_name="compacting", rewritten_files__gte=SEEDED_FILES)
    assert run.table_name == TABLE and run.error == "" and run.ended_at is not None
    assert run.added_files < SEEDED_FILES / 10 and run.replace_snapshot_id is not None
    # Commits of the sink landed while the compaction ran, before and after its snapshot.
    sink_commits = Commit.objects.filter(connector_name="compacting", state=CommitState.COMMITTED)
    assert sink_commits.filter(committed_at__gt=run.started_at, committed_at__lt=run.ended_at).exists()
    assert sink_commits.filter(committed_at__gt=run.ended_at).exists()

    table = table_of("compacting", TABLE)
    replace = table.snapshot_by_id(run.replace_snapshot_id)
    assert replace is not None and replace.summary is not None
    assert replace.summary.operation is Operation.REPLACE
    assert PROP_CONNECTOR not in replace.summary.additional_properties
    assert run.added_bytes == int(replace.summary.additional_properties["added-files-size"]) > 0
    # The streaming commits' manifests, and the compaction's, rewritten into fewer.
    assert MaintenanceRun.objects.filter(connector_name="compacting", rewritten_manifests__gt=1).exists()
    # What a reader sees is the same before and after the replace snapshot, column by column.
    assert replace.parent_snapshot_id is not None
    assert rows_at(table, replace.parent_snapshot_id) == rows_at(table, replace.snapshot_id)
    assert not seeded_files & set(live_files(table))
    assert_exact("compacting", kafka_bootstrap, ends, seeded)

    shown = operator_api.get("/api/connect/connectors/compacting/maintenance").json()["runs"]
    compaction = next(r for r in shown if r["rewritten_files"] >= SEEDED_FILES)
    assert compaction["table"] == TABLE and compaction["outcome"] == "SUCCEEDED"
    # A later run may have been cut by the connector's stop at the end of the block (CI met one): it is
    # recorded as interrupted, never left as running.
    assert {r["outcome"] for r in shown} <= {"SUCCEEDED", "INTERRUPTED"}
    page = signed_in.get(reverse("connector-detail", args=["compacting"])).content.decode()
    assert "Table maintenance" in page and f"{run.rewritten_files:,}" in page


@pytest.fixture
def processes(lake: dict[str, str]) -> Iterator[list[Any]]:
    children: list[Any] = []
    yield children
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait(30)


@pytest.mark.slow
@pytest.mark.parametrize("point", ["spark.rewrite_data_files", "maintenance.after_rewrite"])
def test_a_coordinator_killed_while_spark_compacts_or_after_leaves_the_table_readable_and_exact(
    kafka_bootstrap: str, lake: dict[str, str], topic_name: str, processes: list[Any], point: str
) -> None:
    create_topic(kafka_bootstrap, topic_name, 2)
    config = sink_config(topic_name, TABLE, **maintenance_config())
    seeded = seed_small_files(SinkConfig.parse(config), TABLE, 100)
    ends = produce(kafka_bootstrap, topic_name, json_records(0, 200), 2)
    name = f"killed-{point.rsplit('.', 1)[-1].replace('_', '-')}"
    actions.create_connector(name, config)
    task = spawn(lake, name, "--role", "task", "--task-index", "0", "--tasks", "1")
    doomed = spawn(lake, name, "--role", "coordinator", failpoints=f"{point}=kill")
    processes.extend([task, doomed])
    assert doomed.wait(180) == -9, "the coordinator did not reach the failpoint"

    # Killed: the table is readable and exact, whatever the kill left behind. (Killed while Spark
    # compacts, the server may go on and commit the compaction, or give it up: either is exact.)
    table = table_of(name, TABLE)
    ids = ids_at(table)
    assert len(ids) == len(set(ids)) and seeded <= set(ids)
    replaced = any(s.summary is not None and s.summary.operation is Operation.REPLACE for s in table.snapshots())
    assert replaced or point == "spark.rewrite_data_files"

    successor = spawn(lake, name, "--role", "coordinator")
    processes.append(successor)
    wait_until(caught_up(name, ends), 180, "the next coordinator to commit every record")
    wait_until(
        lambda: MaintenanceRun.objects.filter(connector_name=name, outcome=MaintenanceOutcome.SUCCEEDED).exists(),
        120,
        "the next coordinator's maintenance run",
    )
    interrupted = MaintenanceRun.objects.filter(connector_name=name, outcome=MaintenanceOutcome.INTERRUPTED)
    assert interrupted.count() == 1
    assert_exact(name, kafka_bootstrap, ends, seeded)
    table = table_of(name, TABLE)
    assert len(live_files(table)) < 100


def unreachable_spark() -> Any:
    """A Spark Connect client of a server that is not there (its retries cut short)."""
    from workers.spark_writer import connect

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # (free: nothing listens there)
    return connect(f"sc://127.0.0.1:{port}", max_retries=1, max_backoff_ms=100)


def maintain(name: str, clock: float, procedures: IcebergProcedures | None = None, **keys: str) -> MaintenanceRun:
    """One maintenance run of TABLE as the connector's coordinator runs it, snapshot ages measured at ``clock``."""
    connector = Connector.objects.get(name=name)
    config = SinkConfig.parse({**connector.config, **keys})
    procedures = procedures or SparkProcedures(config.settings.catalog_name, connector_catalog_properties(config))
    with catalog_for(config) as catalog:
        ledger = DjangoMaintenanceLedger(connector.pk, connector.coordinator_epoch)
        tables = IcebergTables(
            config.settings.maintenance, lambda: [TABLE], lambda: catalog, procedures, ledger, lambda: clock
        )
        maintainer = Maintainer(name, config.maintenance, tables, ledger=ledger, last_run=None)
        try:
            with maintainer.queue.served():
                maintainer.run_once()
        finally:
            connections.close_all()
    return MaintenanceRun.objects.filter(connector_name=name).latest("started_at")


# (The Spark Connect client warns when the unreachable Spark of this test exhausts its retries.)
@pytest.mark.filterwarnings("ignore:.*RETRIES_EXCEEDED:UserWarning")
def test_snapshots_expire_by_age_and_count_and_orphans_older_than_the_window_are_removed(
    kafka_bootstrap: str, lake: dict[str, str], topic_name: str
) -> None:
    create_topic(kafka_bootstrap, topic_name, 2)
    config = sink_config(topic_name, TABLE, **{"sinkadmin.maintenance.enabled": "false"})
    actions.create_connector("expiring", config)
    ends: dict[tuple[str, int], int] = {}
    with running_in_threads("expiring", tasks=1):
        for batch in range(4):
            # The last batch only to partition 0: partition 1's offsets are then in an older snapshot only.
            ends |= produce(kafka_bootstrap, topic_name, json_records(batch * 50, 50), 2 if batch < 3 else 1)
            wait_until(caught_up("expiring", ends), 60, f"batch {batch}")
    table = table_of("expiring", TABLE)
    snapshots = table.snapshots()
    assert len(snapshots) >= 4
    latest_commit = table.current_snapshot()
    assert latest_commit is not None
    holding_partition_1 = [
        s.snapshot_id
        for s in snapshots
        if "1" in json.loads(s.summary.additional_properties[PROP_OFFSETS]).get(topic_name, {})
    ]
    kept = {latest_commit.snapshot_id, holding_partition_1[-1]}
    assert len(kept) == 2

    data = Path(table.location().removeprefix("file://"), "data")
    two_days_ago, hour_ago = time.time() - 2 * 86400, time.time() - 3600
    old_orphan = data / f"{uuid.uuid4()}-never-committed.parquet"
    young_orphan = data / f"{uuid.uuid4()}-being-written.parquet"
    hidden = data / ".part-in-progress.parquet"
    # A prepared commit's file, not yet in any metadata: it must stay appliable however old (I9).
    prepared = data / f"{uuid.uuid4()}-prepared.parquet"
    for orphan in (old_orphan, young_orphan, hidden, prepared):
        orphan.write_bytes(b"PAR1 not a committed file")
    for backdated in (old_orphan, hidden, prepared):
        os.utime(backdated, (two_days_ago, two_days_ago))
    os.utime(young_orphan, (hour_ago, hour_ago))
    connector = Connector.objects.get(name="expiring")
    Commit.objects.create(
        connector=connector,
        connector_name="expiring",
        epoch=connector.coordinator_epoch,
        state=CommitState.PREPARED,
        started_at=timezone.now(),
        prepared_at=timezone.now(),
        files=[{"table": TABLE, "path": prepared.as_uri()}],
    )
    live_before = set(live_files(table))

    # A Spark that cannot be reached: the run fails at once, saying so, and changes nothing.
    config_of = SinkConfig.parse(connector.config)
    unreachable = SparkProcedures(
        config_of.settings.catalog_name, connector_catalog_properties(config_of), unreachable_spark()
    )
    run = maintain("expiring", time.time(), unreachable)
    assert run.outcome == MaintenanceOutcome.FAILED and ": SparkUnavailable: Spark at " in run.error
    assert "is unreachable" in run.error and ";" not in run.error and old_orphan.exists()  # (one step's error)

    # Now: nothing is a day old, so nothing expires; of the unreferenced files, only the old
    # orphan goes (not the young one, nor a hidden one, nor the prepared commit's).
    no_compaction = {"sinkadmin.maintenance.rewrite.min-input-files": "1000"}
    window = {"sinkadmin.maintenance.orphans.older-than-ms": "86400000"}
    run = maintain("expiring", time.time(), **no_compaction, **window)
    assert run.outcome == MaintenanceOutcome.SUCCEEDED, run.error
    assert run.expired_snapshots == 0 and run.orphan_files == 1
    assert run.removed_bytes == len(b"PAR1 not a committed file")
    assert not old_orphan.exists() and young_orphan.exists() and hidden.exists() and prepared.exists()
    assert run.rewritten_manifests == run.rewritten_files == 0  # (fewer than min-input-files of either)
    table = table_of("expiring", TABLE)
    assert len(table.snapshots()) == len(snapshots)

    # Two days on: every snapshot is past the age; kept are the current one (the connector's
    # latest commit) and the latest holding partition 1's offsets, which a ledger rebuild needs.
    run = maintain(
        "expiring",
        time.time() + 2 * 86400,
        **{"sinkadmin.maintenance.expire.max-snapshot-age-ms": "86400000"},
        **no_compaction,
        **window,
    )
    assert run.outcome == MaintenanceOutcome.SUCCEEDED, run.error
    table = table_of("expiring", TABLE)
    assert run.expired_snapshots == len(snapshots) - len(kept)
    assert {s.snapshot_id for s in table.snapshots()} == kept
    # The expired snapshots' manifest lists were theirs alone: Iceberg deleted them with them.
    assert run.expired_files >= len(snapshots) - len(kept)
    for snapshot in snapshots:
        listed = Path(snapshot.manifest_list.removeprefix("file://").removeprefix("file:"))
        assert listed.exists() is (snapshot.snapshot_id in kept)
    assert young_orphan.exists() and hidden.exists() and prepared.exists()
    assert set(live_files(table)) == live_before
    Commit.objects.filter(connector_name="expiring", state=CommitState.PREPARED).delete()
    assert_exact("expiring", kafka_bootstrap, ends, set())
    for path in live_before:
        assert Path(path.removeprefix("file://")).exists()

    # A lost ledger is rebuilt from what expiry kept, every partition's offsets included.
    actions.stop_connector("expiring")
    Commit.objects.filter(connector_name="expiring").delete()
    PartitionOffset.objects.filter(connector__name="expiring").delete()
    call_command("rebuild_ledger", "expiring")
    assert ledger_offsets("expiring") == ends


def test_compaction_reads_files_of_an_older_schema_as_a_reader_of_the_table_does(
    kafka_bootstrap: str, lake: dict[str, str], topic_name: str
) -> None:
    """Files from before a column was added are rewritten with the column empty, and the
    rows a reader sees stay the same; files of the current schema are copied as they are."""
    config = sink_config(topic_name, TABLE, **{"sinkadmin.maintenance.enabled": "false"})
    actions.create_connector("evolved", config)
    parsed = SinkConfig.parse(config)
    seeded = seed_small_files(parsed, TABLE, 10, columns=("id", "name"))
    with catalog_for(parsed) as catalog:
        evolve_table(catalog, TABLE, Schema(NestedField(10, "amount", DoubleType(), required=False)))
    seeded |= seed_small_files(parsed, TABLE, 10, first=10)
    before = table_of("evolved", TABLE)
    assert before.current_snapshot() is not None

    run = maintain("evolved", time.time())
    assert run.rewritten_files == 20 and run.added_files == 1

    table = table_of("evolved", TABLE)
    replace = table.current_snapshot()
    assert replace is not None and replace.summary is not None and replace.summary.operation is Operation.REPLACE
    assert rows_at(table, before.current_snapshot().snapshot_id) == rows_at(table, replace.snapshot_id)
    frame = table.scan().to_arrow()
    assert sorted(frame.column("id").to_pylist()) == sorted(seeded)
    amounts = dict(zip(frame.column("id").to_pylist(), frame.column("amount").to_pylist(), strict=True))
    old = SEED_BASE + 10 * SEED_ROWS_PER_FILE
    assert all(amounts[i] is None for i in seeded if i < old)
    assert all(amounts[i] == i * 0.5 for i in seeded if i >= old)
