"""The Hudi sink end to end on Hudi's own Spark writer: copy-on-write and merge-on-read tables, upserts
with delete markers and tombstones, inserts and bulk inserts, compaction beside the sink, a coordinator
killed around its write and a zombie; each table read back by hudi-rs and by Hudi's Spark reader, and
compared with a model of the topic."""

from __future__ import annotations

import contextlib
import json
import random
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pyarrow as pa
import pytest
from confluent_kafka import Consumer, TopicPartition
from django.db import connection
from hudi import HudiReadOptions, HudiTableBuilder

from connectors import actions
from connectors.config import SinkConfig
from connectors.models import Commit, CommitState, MaintenanceOutcome, MaintenanceRun
from sinks.hudi import timeline
from sinks.hudi.services import EXECUTED_ELSEWHERE, run_procedure
from tests.conftest import S3A_BUCKET
from tests.integration.helpers import (
    Processes,
    caught_up,
    changes,
    create_topic,
    produce,
    running_in_threads,
    topic_ids,
    topic_records,
    wait_until,
)
from tests.readers import assert_same_rows, spark_hudi_rows, spark_reader
from workers.storage import StoragePath

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

PARTITIONS = 4


def hudi_config(topic: str, base: Path | str, **overrides: str) -> dict[str, str]:
    return {
        "connector.class": "org.apache.hudi.connect.HoodieSinkConnector",
        "topics": topic,
        "target.base.path": str(base),
        "target.table.name": topic.replace("-", "_"),
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.precombine.field": "ts",
        "hoodie.payload.delete.field": "op",
        "hoodie.payload.delete.marker": "d",
        "hoodie.datasource.write.partitionpath.field": "region",
        "sinkadmin.control.topic": f"control-{topic}",
        "sinkadmin.commit.interval-ms": "1500",
        "sinkadmin.commit.timeout-ms": "15000",
        **overrides,
    }


def merge_on_read_config(topic: str, base: Path | str, **overrides: str) -> dict[str, str]:
    """A merge-on-read table of keyed changes, compacted every second commit. Unpartitioned, so that
    tombstones (keyed by the Kafka key) find their rows; ordered by commit, as Hudi's merge-on-read
    readers need for deletes without a precombine value."""
    return hudi_config(
        topic,
        base,
        **{
            "hoodie.table.type": "MERGE_ON_READ",
            "hoodie.datasource.write.partitionpath.field": "",
            "hoodie.record.merge.mode": "COMMIT_TIME_ORDERING",
            "hoodie.compact.inline.max.delta.commits": "2",
            **overrides,
        },
    )


def read(base: Path | str, storage_options: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The table's rows as hudi-rs reads them (a snapshot: base files merged with log files), checked
    against Hudi's own Spark reader: the same rows, each as many times (tests.readers)."""
    if isinstance(base, Path) and not (base / ".hoodie").exists():
        return []
    hudi = HudiTableBuilder.from_base_uri(str(base)).with_storage_options(storage_options or {}).build()
    batches = hudi.read(HudiReadOptions())
    rows = pa.Table.from_batches(batches).to_pylist() if batches else []
    assert_same_rows("Spark's Hudi reader", rows, spark_hudi_rows(str(base)))
    return rows


def read_optimized(base: Path) -> list[dict[str, Any]]:
    """The base files only (Hudi's read-optimized query): what compaction has merged so far."""
    frame = spark_reader().read.format("hudi").option("hoodie.datasource.query.type", "read_optimized")
    return [row.asDict(recursive=True) for row in frame.load(str(base)).collect()]


def apply_change(state: dict[int, dict[str, Any]], key: int, record: dict[str, Any] | None) -> None:
    """One change on the model: a tombstone (None) deletes its key; a record wins over the row when its ts
    is at least the row's, and then op=d deletes the key."""
    current = state.get(key)
    if record is None:
        state.pop(key, None)
    elif current is None or record["ts"] >= current["ts"]:
        if record["op"] == "d":
            state.pop(key, None)
        else:
            state[key] = record


def model_of_topic(bootstrap: str, ends: dict[tuple[str, int], int]) -> dict[int, dict[str, Any]]:
    """The latest row per key, from the topic as a bare consumer reads it, in each key's partition's
    offset order (``apply_change``)."""
    state: dict[int, dict[str, Any]] = {}
    for _, _, record in topic_records(bootstrap, ends):
        apply_change(state, record["id"], record)
    return state


def as_model(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    keys = [r["id"] for r in rows]
    assert len(keys) == len(set(keys)), "a key is in the table twice"
    return {r["id"]: {k: r[k] for k in ("id", "ts", "amount", "op", "region")} for r in rows}


def assert_table_equals_model(base: Path, model: dict[int, dict[str, Any]]) -> None:
    assert as_model(read(base)) == model


def assert_timeline_matches_ledger(name: str, base: Path | str) -> None:
    """One completed instant per ledger commit that wrote records, named in the ledger, carrying its commit
    id; and no other instant that adds records."""
    config = SinkConfig.parse(actions.get_connector(name).config)
    commits = Commit.objects.filter(connector_name=name, state=CommitState.COMMITTED).exclude(files_count=0)
    ident = f"{config.settings.database}.{config.settings.table_name}"
    by_instant = {str(c.snapshot_ids[ident]): str(c.commit_id) for c in commits}
    written = [i for i in timeline.completed_instants(StoragePath.parse(str(base))) if i.commit_id is not None]
    assert sorted(by_instant) == [i.timestamp for i in written]
    assert all(by_instant[i.timestamp] == i.commit_id for i in written)


def keyed_changes(
    count: int, keys: int, seed: int, first_ts: int, tombstones: bool = True
) -> tuple[list[bytes], list[bytes | None]]:
    """``changes`` keyed by their id (the Kafka key), with one in twelve a tombstone (a null value)."""
    values = changes(count, keys, PARTITIONS, seed, first_ts)
    kafka_keys = [str(json.loads(v or b"{}")["id"]).encode() for v in values]
    rng = random.Random(seed)
    return kafka_keys, [None if tombstones and rng.random() < 1 / 12 else v for v in values]


def model_of_changes(bootstrap: str, ends: dict[tuple[str, int], int]) -> dict[int, dict[str, Any]]:
    """``model_of_topic`` where a tombstone deletes its Kafka key's row: read with a bare consumer."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-changes", "enable.auto.commit": False})
    consumer.assign([TopicPartition(t, p, 0) for (t, p) in ends])
    found: list[tuple[int, int, bytes, bytes | None]] = []
    remaining = {tp: end for tp, end in ends.items() if end > 0}
    while remaining:
        for message in consumer.consume(1000, 1.0):
            tp = (message.topic(), message.partition())
            if message.error() or tp not in remaining or message.offset() >= remaining[tp]:
                continue
            found.append((message.partition(), message.offset(), message.key(), message.value()))
            if message.offset() + 1 >= remaining[tp]:
                del remaining[tp]
    consumer.close()
    state: dict[int, dict[str, Any]] = {}
    for _, _, key, value in sorted(found, key=lambda r: (r[0], r[1])):
        apply_change(state, int(key), json.loads(value) if value is not None else None)
    return state


def log_files(base: Path) -> list[Path]:
    return [p for p in base.rglob(".*.log.*") if ".hoodie" not in p.parts and not p.name.endswith(".crc")]


def test_appends_land_once_each_over_partitioned_directories(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    name = "hudi-append"
    base = tmp_path / "events"
    create_topic(kafka_bootstrap, topic_name, PARTITIONS)
    values: list[bytes | None] = [
        json.dumps({"id": i, "region": f"r{i % 5}", "amount": i * 0.5}).encode() for i in range(2000)
    ]
    ends = produce(kafka_bootstrap, topic_name, values, PARTITIONS)
    config = hudi_config(
        topic_name,
        base,
        **{
            "hoodie.datasource.write.operation": "insert",
            # As Hudi's quick starts write it: the precombine field, which inserts ignore (a note, not an error).
            "hoodie.datasource.write.precombine.field": "ts",
            "hoodie.payload.delete.field": "",
            "hoodie.payload.delete.marker": "",
            "hoodie.datasource.write.hive_style_partitioning": "true",
            "target.database.name": "lake",
            "tasks.max": "2",
            # A Kafka Connect transform, run as the tasks stage the records: each row carries its offset.
            "transforms": "offset",
            "transforms.offset.type": "org.apache.kafka.connect.transforms.InsertField$Value",
            "transforms.offset.offset.field": "kafka_offset",
        },
    )
    actions.create_connector(name, config)
    with running_in_threads(name, tasks=2):
        wait_until(caught_up(name, ends), 240, f"{name} to commit every record")
    rows = read(base)
    assert sorted(r["id"] for r in rows) == topic_ids(kafka_bootstrap, ends)
    assert all(r["_hoodie_partition_path"] == f"region=r{r['id'] % 5}" for r in rows)
    assert sorted(r["kafka_offset"] for r in rows) == sorted(o for end in ends.values() for o in range(end))
    properties = timeline.table(StoragePath.parse(str(base))).hudi_options()
    assert properties["hoodie.table.type"] == "COPY_ON_WRITE"
    assert properties["hoodie.table.name"] == config["target.table.name"]
    last = timeline.completed_instants(StoragePath.parse(str(base)))[-1].extra
    assert last[timeline.KAFKA_OFFSETS_KEY] == ",".join(f"{p}={ends[(topic_name, p)]}" for p in range(PARTITIONS))
    assert last[timeline.CONNECTOR_KEY] == name
    assert_timeline_matches_ledger(name, base)
    # The participants' rows are gone once their commits are.
    assert not any((base / ".sinkadmin/incoming").glob("*/*.parquet"))


@pytest.mark.parametrize("partitioned", [False, True], ids=["unpartitioned", "partitioned"])
def test_bulk_inserts_land_once_each(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, tmp_path: Path, partitioned: bool
) -> None:
    """Keyless records bulk-inserted (Hudi's row writer, no index), into one partition or by a field."""
    name = f"hudi-bulk-{'partitioned' if partitioned else 'unpartitioned'}"
    base = tmp_path / "events"
    create_topic(kafka_bootstrap, topic_name, PARTITIONS)
    values = [json.dumps({"id": i, "region": f"r{i % 3}"}).encode() for i in range(1500)]
    ends = produce(kafka_bootstrap, topic_name, values, PARTITIONS)
    config = hudi_config(
        topic_name,
        base,
        **{
            "hoodie.datasource.write.operation": "bulk_insert",
            "hoodie.datasource.write.recordkey.field": "",
            "hoodie.datasource.write.precombine.field": "",
            "hoodie.payload.delete.field": "",
            "hoodie.payload.delete.marker": "",
            "hoodie.datasource.write.partitionpath.field": "region" if partitioned else "",
        },
    )
    actions.create_connector(name, config)
    with running_in_threads(name):
        wait_until(caught_up(name, ends), 240, f"{name} to commit every record")
    rows = read(base)
    assert sorted(r["id"] for r in rows) == topic_ids(kafka_bootstrap, ends)
    assert {r["_hoodie_partition_path"] for r in rows} == ({"r0", "r1", "r2"} if partitioned else {""})
    assert_timeline_matches_ledger(name, base)


@pytest.mark.parametrize("point", ["hudi.before_write", "hudi.after_write"])
def test_upserts_equal_the_model_after_a_coordinator_died_around_its_write(
    procs: Processes, kafka_bootstrap: str, topic_name: str, tmp_path: Path, point: str
) -> None:
    """Killed with the commit prepared and nothing written, or with its instant complete and the ledger
    not told: the successor writes it, or finds its instant and only tells the ledger."""
    name = f"hudi-kill-{point.rsplit('.', 1)[1].replace('_', '-')}"
    base = tmp_path / "orders"
    create_topic(kafka_bootstrap, topic_name, PARTITIONS)
    ends = produce(kafka_bootstrap, topic_name, changes(3000, 200, PARTITIONS, seed=5), PARTITIONS)
    actions.create_connector(name, hudi_config(topic_name, base))
    procs.task(name)
    doomed = procs.coordinator(name, failpoints=f"{point}=kill")
    assert doomed.wait(240) == -signal.SIGKILL
    prepared = Commit.objects.get(connector_name=name, state=CommitState.PREPARED)
    held = timeline.instant_of_commit(StoragePath.parse(str(base)), str(prepared.commit_id))
    assert (held is not None) == (point == "hudi.after_write")
    procs.coordinator(name)
    wait_until(caught_up(name, ends), 240, "the new coordinator to roll forward and catch up")
    assert Commit.objects.get(commit_id=prepared.commit_id).state == CommitState.COMMITTED
    assert_table_equals_model(base, model_of_topic(kafka_bootstrap, ends))
    assert_timeline_matches_ledger(name, base)


def test_a_zombie_coordinator_cannot_complete_a_commit_twice(
    procs: Processes, kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    name = "hudi-zombie"
    base = tmp_path / "orders"
    create_topic(kafka_bootstrap, topic_name, PARTITIONS)
    ends = produce(kafka_bootstrap, topic_name, changes(2000, 150, PARTITIONS, seed=9), PARTITIONS)
    actions.create_connector(name, hudi_config(topic_name, base))
    procs.task(name)
    zombie = procs.coordinator(name, failpoints="coordinator.after_prepare=stop")
    wait_until(
        lambda: Commit.objects.filter(connector_name=name, state=CommitState.PREPARED).exists(),
        120,
        "the first coordinator to prepare and freeze",
    )
    procs.coordinator(name)
    wait_until(caught_up(name, ends), 240, "the new coordinator to take over")
    zombie.send_signal(signal.SIGCONT)
    # The zombie takes the table's lock, finds its commit's instant complete, and is fenced at its next
    # ledger write.
    assert zombie.wait(180) == 0
    assert_table_equals_model(base, model_of_topic(kafka_bootstrap, ends))
    assert_timeline_matches_ledger(name, base)


def test_a_coordinator_killed_while_hudi_writes_leaves_its_commit_in_one_instant(
    procs: Processes, kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    """The coordinator dies once Hudi's write has requested its instant; the write goes on in the Spark server; its successor,
    waiting on the table's lock, takes it at once and writes the same commit. Hudi's pre-commit check with
    the sink's rule (jvm/hudi-fence) lets one of the two complete an instant: every inserted record is in the
    table once, and the other write's instant is left incomplete or rolled back."""
    name = "hudi-kill-mid-write"
    base = tmp_path / "events"
    create_topic(kafka_bootstrap, topic_name, PARTITIONS)
    ends = produce(kafka_bootstrap, topic_name, changes(4000, 4000, PARTITIONS, seed=13), PARTITIONS)
    config = hudi_config(
        topic_name,
        base,
        **{
            "hoodie.datasource.write.operation": "insert",
            "hoodie.datasource.write.partitionpath.field": "",
            "hoodie.payload.delete.field": "",
            "hoodie.payload.delete.marker": "",
        },
    )
    actions.create_connector(name, config)
    procs.task(name)
    doomed = procs.coordinator(name, failpoints="hudi.before_write=stop,hudi.during_write=kill")
    wait_until(lambda: psutil.Process(doomed.pid).status() == psutil.STATUS_STOPPED, 240, "the write to be next")
    prepared = Commit.objects.get(connector_name=name, state=CommitState.PREPARED)
    procs.coordinator(name)
    with connection.cursor() as cursor:

        def successor_waits_on_the_table() -> bool:
            cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
            return bool(cursor.fetchone()[0])

        wait_until(successor_waits_on_the_table, 120, "the successor to wait for the table's lock")
    doomed.send_signal(signal.SIGCONT)
    assert doomed.wait(120) == -signal.SIGKILL
    wait_until(caught_up(name, ends), 240, "the successor to roll the commit forward and catch up")
    assert sorted(r["id"] for r in read(base)) == topic_ids(kafka_bootstrap, ends)
    assert_timeline_matches_ledger(name, base)
    holding = [
        i for i in timeline.completed_instants(StoragePath.parse(str(base))) if i.commit_id == str(prepared.commit_id)
    ]
    assert len(holding) == 1
    # The other write's instant is left pending, or, when it failed after the first had completed, rolled back
    # by the first's cleaning (failed writes are rolled back lazily, by the cleaner, once their heartbeat stops).
    assert timeline.pending_writes(StoragePath.parse(str(base))) or rollbacks(base), (
        "only one write of the commit was started: the test did not race two"
    )


def rollbacks(base: Path) -> list[str]:
    """The completed rollbacks on the table's timeline (``<instant>_<completed>.rollback``)."""
    return sorted(p.name for p in (base / ".hoodie" / "timeline").iterdir() if p.name.endswith(".rollback"))


def compactions(base: Path) -> dict[str, str]:
    """Each compaction on the table's timeline and its state: requested, inflight or completed (a merge-on-read
    table's completed ``commit`` instants are its compactions)."""
    folder = base / ".hoodie" / "timeline"
    states: dict[str, str] = {}
    for name in sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")):
        instant, _, action = name.partition(".")
        if action in ("compaction.requested", "compaction.inflight"):
            states.setdefault(instant, action.split(".")[1])
            if action == "compaction.inflight":
                states[instant] = "inflight"
        elif action == "commit" and "_" in instant:
            states[instant.split("_")[0]] = "completed"
    return states


@contextlib.contextmanager
def spark_cores_held(folder: Path) -> Iterator[None]:
    """A Spark job of the tests' session holding every core of the Spark server (local[2]) until the block
    ends: jobs submitted meanwhile, by any session, wait for it (Spark's FIFO scheduler)."""
    release = str(folder / "release-the-cores")

    def hold(batches: Iterator[Any]) -> Iterator[Any]:
        import os
        import time

        while not os.path.exists(release):
            time.sleep(0.1)
        yield from batches

    job = spark_reader().range(0, 2, 1, 2).mapInArrow(hold, "id long")
    holder = threading.Thread(target=job.collect, daemon=True)
    holder.start()
    try:
        yield
    finally:
        Path(release).touch()
        holder.join(60)


def test_a_coordinator_killed_while_hudi_compacts_leaves_the_compaction_to_complete_once(
    procs: Processes, kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    """The coordinator dies while its maintenance's compaction executes in the Spark server (held there
    mid-way: the test's job holds the server's cores), which goes on without it. Run again meanwhile with
    the sink's options, the compaction is refused while Hudi's heartbeat for it lives: Hudi would roll back
    the inflight compaction and execute it again, and two executions of one plan delete each other's files.
    The killed run's compaction then completes once, its base files equal to the waves it compacted; the
    successor commits the next wave beside them, and the table equals the model by both readers."""
    name = "hudi-kill-mid-compaction"
    base = tmp_path / "orders"
    create_topic(kafka_bootstrap, topic_name, PARTITIONS)
    config = merge_on_read_config(
        topic_name,
        base,
        **{
            "sinkadmin.maintenance.enabled": "false",
            "sinkadmin.maintenance.interval-ms": "1000",
            # Hudi's writer schedules a compaction every second delta commit; the maintenance executes it.
            "hoodie.compact.schedule.inline": "true",
        },
    )
    actions.create_connector(name, config)
    procs.task(name)
    first = procs.coordinator(name)
    ends: dict[tuple[str, int], int] = {}
    for wave in range(2):
        keys, values = keyed_changes(600, 80, seed=100 + wave, first_ts=wave * 10_000)
        ends = produce(kafka_bootstrap, topic_name, values, PARTITIONS, keys=keys)
        wait_until(caught_up(name, ends), 240, f"wave {wave} to be committed")
    # Two delta commits: Hudi's writer has scheduled a compaction, which nothing executes yet.
    first.kill()
    first.wait(30)
    (planned,) = compactions(base)
    actions.update_config(name, {**config, "sinkadmin.maintenance.enabled": "true"})
    with spark_cores_held(tmp_path):
        doomed = procs.coordinator(name)
        wait_until(lambda: compactions(base)[planned] == "inflight", 120, "the maintenance to execute the compaction")
        doomed.kill()
        assert doomed.wait(30) == -signal.SIGKILL
        assert compactions(base)[planned] == "inflight"
        with pytest.raises(Exception, match=EXECUTED_ELSEWHERE):
            run_procedure(SinkConfig.parse(config), "run_compaction", "op => 'execute'")
    wait_until(lambda: compactions(base)[planned] == "completed", 120, "the killed run's compaction to complete")
    # Its base files hold the two waves it compacted; the successor commits a third beside them.
    assert as_model(read_optimized(base)) == model_of_changes(kafka_bootstrap, ends)
    procs.coordinator(name)
    keys, values = keyed_changes(600, 80, seed=102, first_ts=20_000)
    ends = produce(kafka_bootstrap, topic_name, values, PARTITIONS, keys=keys)
    wait_until(caught_up(name, ends), 240, "wave 2 to be committed")
    assert_table_equals_model(base, model_of_changes(kafka_bootstrap, ends))
    assert_timeline_matches_ledger(name, base)
    assert set(compactions(base).values()) == {"completed"}
    # The killed coordinator's run, shown interrupted (its successor marked it so).
    runs = list(MaintenanceRun.objects.filter(connector_name=name).order_by("started_at"))
    assert runs[0].outcome == MaintenanceOutcome.INTERRUPTED


def test_merge_on_read_upserts_with_deletes_and_tombstones_are_compacted_beside_the_sink(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    """Upserts into a merge-on-read table append log files; Hudi's compaction (run_compaction, beside the
    sink between its commits) merges them into base files. Before compaction the snapshot equals the model
    and the read-optimized view lags it; after, both equal the model. A time-travel query to the first
    wave's instant gives that wave's model, and an incremental query since then the keys changed after it."""
    name = "hudi-mor"
    base = tmp_path / "orders"
    create_topic(kafka_bootstrap, topic_name, PARTITIONS)
    config = merge_on_read_config(topic_name, base, **{"sinkadmin.maintenance.enabled": "false"})
    actions.create_connector(name, config)
    ends: dict[tuple[str, int], int] = {}
    changed_later: set[int] = set()
    with running_in_threads(name):
        for wave in range(3):
            keys, values = keyed_changes(600, 80, seed=40 + wave, first_ts=wave * 10_000)
            ends = produce(kafka_bootstrap, topic_name, values, PARTITIONS, keys=keys)
            wait_until(caught_up(name, ends), 240, f"wave {wave} to be committed")
            if wave == 0:
                first_instant = timeline.completed_instants(StoragePath.parse(str(base)))[-1].timestamp
                first_model = model_of_changes(kafka_bootstrap, ends)
            else:
                changed_later |= {int(k) for k in keys}
    model = model_of_changes(kafka_bootstrap, ends)
    assert log_files(base), "a merge-on-read upsert wrote no log file"
    assert_table_equals_model(base, model)
    assert as_model(read_optimized(base)) != model, "the base files already hold every update"

    # Compaction, as the maintenance runs it beside the sink.
    actions.update_config(
        name, {**config, "sinkadmin.maintenance.enabled": "true", "sinkadmin.maintenance.interval-ms": "1000"}
    )
    with running_in_threads(name):
        wait_until(
            lambda: MaintenanceRun.objects.filter(
                connector_name=name, outcome=MaintenanceOutcome.SUCCEEDED, rewritten_files__gt=0
            ).exists(),
            240,
            "a compaction to run",
        )
    assert as_model(read_optimized(base)) == model
    assert_table_equals_model(base, model)
    assert_timeline_matches_ledger(name, base)

    # Time travel to the first wave's instant, by both readers; and what changed since, incrementally.
    travelled = spark_reader().read.format("hudi").option("as.of.instant", first_instant).load(str(base))
    assert as_model([r.asDict(recursive=True) for r in travelled.collect()]) == first_model
    hudi = HudiTableBuilder.from_base_uri(str(base)).build()
    batches = hudi.read(HudiReadOptions().with_as_of_timestamp(first_instant))
    assert as_model(pa.Table.from_batches(batches).to_pylist()) == first_model
    incremental = (
        spark_reader()
        .read.format("hudi")
        .option("hoodie.datasource.query.type", "incremental")
        .option("hoodie.datasource.read.begin.instanttime", first_instant)
        .load(str(base))
    )
    changed = as_model([r.asDict(recursive=True) for r in incremental.collect()])
    assert changed == {k: row for k, row in model.items() if k in changed_later}


def test_copy_on_write_upserts_with_delete_markers_ordered_by_event_time(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    """Keyed changes into a copy-on-write table, ordered by the precombine field (Hudi's default), deleted
    by their marker, found by Hudi's record-level index (in its metadata table). (Tombstones have no
    precombine value: in event-time ordering they are bad records, tests/test_hudi_sink.py.)"""
    name = "hudi-cow"
    base = tmp_path / "orders"
    create_topic(kafka_bootstrap, topic_name, PARTITIONS)
    config = hudi_config(
        topic_name, base, **{"hoodie.datasource.write.partitionpath.field": "", "hoodie.index.type": "RECORD_INDEX"}
    )
    actions.create_connector(name, config)
    ends: dict[tuple[str, int], int] = {}
    with running_in_threads(name):
        for wave in range(2):
            keys, values = keyed_changes(600, 80, seed=60 + wave, first_ts=wave * 10_000, tombstones=False)
            ends = produce(kafka_bootstrap, topic_name, values, PARTITIONS, keys=keys)
            wait_until(caught_up(name, ends), 240, f"wave {wave} to be committed")
    assert not log_files(base)
    assert_table_equals_model(base, model_of_changes(kafka_bootstrap, ends))
    assert_timeline_matches_ledger(name, base)
    # Each key found in the record index's partition of the metadata table, not by a scan of the files.
    assert (base / ".hoodie" / "metadata" / "record_index").is_dir()
    properties = timeline.table(StoragePath.parse(str(base))).hudi_options()
    assert "record_index" in properties["hoodie.table.metadata.partitions"].split(",")


def test_a_key_deleted_in_one_partition_and_inserted_in_another_in_one_commit_leaves_the_inserted_row(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    """Under an index that is not global (BUCKET, the default) a record is its key and its partition path, as
    Hudi's index sees it: a delete of a key's row in one partition and the key's insert in another, in one
    commit, are two records, and both reach Hudi (the commit once kept only the later one, and the deleted row
    stayed beside the new)."""
    name = "hudi-moves"
    base = tmp_path / "orders"
    create_topic(kafka_bootstrap, topic_name, 1)
    actions.create_connector(name, hudi_config(topic_name, base))

    def change(key: int, region: str, op: str, ts: int) -> bytes:
        return json.dumps({"id": key, "ts": ts, "amount": 1.0, "op": op, "region": region}).encode()

    with running_in_threads(name):
        ends = produce(kafka_bootstrap, topic_name, [change(k, "eu", "c", 1) for k in range(3)], 1)
        wait_until(caught_up(name, ends), 240, "the inserts to be committed")
        # Key 0 moves from eu to us (its eu row deleted first), key 1 is deleted, key 2 stays.
        moves = [change(0, "eu", "d", 2), change(0, "us", "c", 3), change(1, "eu", "d", 2)]
        ends = produce(kafka_bootstrap, topic_name, moves, 1)
        wait_until(caught_up(name, ends), 240, "the moves to be committed")
    rows = sorted((r["id"], r["region"]) for r in read(base))
    assert rows == [(0, "us"), (2, "eu")]


def test_partitions_whose_rows_give_a_column_other_types_are_written_in_one_commit(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    """Each task infers its partitions' columns from their own plain JSON records: an amount 1 is a long in one
    partition, 2.5 a double in another; and a partition of tombstones alone has its StringConverter keys as
    text, beside the long ids of the records. Spark's schema merge refuses both, and the commit failed at every
    try: the files are now read by schema, the amount widened to a double, the tombstones' keys cast to the
    table's type (a key is never widened: Hudi's record key is its text). A key that is no long's text ("1.0")
    deletes nothing."""
    name = "hudi-types"
    base = tmp_path / "orders"
    create_topic(kafka_bootstrap, topic_name, 3)
    config = hudi_config(
        topic_name,
        base,
        **{
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "hoodie.datasource.write.partitionpath.field": "",
            "hoodie.datasource.write.precombine.field": "",
        },
    )
    actions.create_connector(name, config)

    def record(key: int, amount: float | int) -> bytes:
        return json.dumps({"id": key, "ts": 1, "amount": amount, "op": "c", "region": "eu"}).encode()

    with running_in_threads(name):
        # Round-robin over the 3 partitions: 0, 1, 2.
        ends = produce(kafka_bootstrap, topic_name, [record(1, 1), record(2, 2.5), record(4, 4)], 3, [b"1", b"2", b"4"])
        wait_until(caught_up(name, ends), 240, "the inserts to be committed")
        ends = produce(kafka_bootstrap, topic_name, [record(3, 3), None, None], 3, [b"3", b"2", b"1.0"])
        wait_until(caught_up(name, ends), 240, "the tombstones to be committed")
    rows = sorted((r["id"], r["amount"]) for r in read(base))
    assert rows == [(1, 1.0), (3, 3.0), (4, 4.0)]


def test_a_merge_on_read_table_on_s3_is_written_through_hadoops_s3a_connector(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, s3_endpoint: str
) -> None:
    """A table at an s3a:// base path on the S3-compatible server, configured once as Spark users configure
    S3 (the bucket's S3A settings in spark-defaults.conf, tests/conftest.py): Hudi's writer reaches it
    through Hadoop's S3A connector, the participants' rows and the timeline go through pyarrow and hudi-rs
    with the same settings. Upserts and deletes land in log files, compacted inline every second commit;
    hudi-rs (given the server's address and keys by this test) and Spark's Hudi reader read the model."""
    name = "hudi-s3"
    base = f"s3a://{S3A_BUCKET}/{topic_name}/orders"
    create_topic(kafka_bootstrap, topic_name, PARTITIONS)
    config = merge_on_read_config(topic_name, base, **{"hoodie.compact.inline": "true"})
    actions.create_connector(name, config)
    ends: dict[tuple[str, int], int] = {}
    with running_in_threads(name):
        for wave in range(3):
            keys, values = keyed_changes(400, 60, seed=80 + wave, first_ts=wave * 10_000)
            ends = produce(kafka_bootstrap, topic_name, values, PARTITIONS, keys=keys)
            wait_until(caught_up(name, ends), 240, f"wave {wave} to be committed")
    storage_options = {
        "aws_endpoint": s3_endpoint,
        "aws_allow_http": "true",
        "aws_access_key_id": "test",
        "aws_secret_access_key": "test",
        "aws_region": "us-east-1",
    }
    assert as_model(read(base, storage_options)) == model_of_changes(kafka_bootstrap, ends)
    assert_timeline_matches_ledger(name, base)
    hudi = HudiTableBuilder.from_base_uri(base).with_storage_options(storage_options).build()
    actions_done = {i.action for i in hudi.get_timeline().get_completed_commits()}
    assert "commit" in actions_done, "no compaction completed on the table"
    assert not list(StoragePath.parse(base).child(".sinkadmin", "incoming").folders()), "incoming rows were left"
