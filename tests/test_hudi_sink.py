"""The Hudi sink without servers: its keys, Hudi's bucket hash, and commits planned, merged and completed
by the coordinator's committer (arrow plane, in process), read back with hudi-rs (the `hudi` package), an
independent reader, and checked against a plain Python model of the stream."""

from __future__ import annotations

import json
import random
import uuid
import zlib
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pytest
from hudi import HudiReadOptions, HudiTableBuilder

from connectors.config import SinkConfig, validate_config
from sinks.hudi.commit import HudiCommitter, HudiMergeJob, balanced, plan
from sinks.hudi.table import (
    COMMIT_ID_KEY,
    HudiTable,
    java_string_hashes,
    parse_properties,
)
from sinks.hudi.writer import PartitionRows, incoming_root
from workers.coordinator import PreparedCommit

TOPIC = "orders"


def hudi_config(base: Path, **overrides: str) -> dict[str, str]:
    return {
        "connector.class": "hudi",
        "topics": TOPIC,
        "target.base.path": str(base),
        "target.table.name": "orders",
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.precombine.field": "ts",
        "sinkadmin.writer": "arrow",
        **overrides,
    }


def java_hash(text: str) -> int:
    """String.hashCode by its definition, one UTF-16 code unit at a time."""
    h = 0
    data = text.encode("utf-16-le")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "little")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def test_record_keys_hash_as_java_strings_do() -> None:
    keys = ["hello", "abc", "", "héllo", "emoji😀", "x" * 300, "order-123456"]
    assert java_string_hashes(pa.array(keys)).tolist() == [java_hash(k) for k in keys]
    assert java_hash("hello") == 99162322 and java_hash("abc") == 96354  # as the JVM prints them


def test_keys_are_checked_one_by_one(tmp_path: Path) -> None:
    assert validate_config(hudi_config(tmp_path)).ok
    assert validate_config(
        hudi_config(tmp_path, **{"connector.class": "org.apache.hudi.connect.HoodieSinkConnector"})
    ).ok
    errors = validate_config(
        {
            **hudi_config(tmp_path),
            "hoodie.table.type": "MERGE_ON_READ",
            "hoodie.datasource.write.recordkey.field": "",
            "target.base.path": "s3a://bucket/orders",
            "hoodie.metadata.enable": "true",
            "hoodie.kafka.commit.interval.secs": "sixty",
            "hoodie.payload.delete.field": "op",
        }
    ).errors
    assert "log files" in errors["hoodie.table.type"][0]
    assert "upsert needs the record key" in errors["hoodie.datasource.write.recordkey.field"][0]
    assert "s3a:// base paths are not supported yet" in errors["target.base.path"][0]
    assert "metadata table" in errors["hoodie.metadata.enable"][0]
    assert "Not a whole number" in errors["hoodie.kafka.commit.interval.secs"][0]
    assert "marker" in errors["hoodie.payload.delete.marker"][0]
    # The Hudi Kafka Connect sink's coordinator keys, in seconds, are ours in milliseconds.
    seconds = {
        **hudi_config(tmp_path),
        "hoodie.kafka.commit.interval.secs": "60",
        "hoodie.kafka.coordinator.write.timeout.secs": "0",
    }
    refused = validate_config(seconds).errors["hoodie.kafka.coordinator.write.timeout.secs"][0]
    assert refused.startswith("as sinkadmin.commit.timeout-ms=0: ") and "at least" in refused
    mapped = validate_config({**seconds, "hoodie.kafka.coordinator.write.timeout.secs": "45"})
    assert mapped.ok and mapped.notes["hoodie.kafka.commit.interval.secs"] == [
        "mapped: sinkadmin.commit.interval-ms=60000"
    ]
    parsed = SinkConfig.parse({**seconds, "hoodie.kafka.coordinator.write.timeout.secs": "45"})
    assert (parsed.commit_interval_ms, parsed.commit_timeout_ms) == (60_000, 45_000)
    # Ours, where both are set.
    both = {**seconds, "hoodie.kafka.coordinator.write.timeout.secs": "45", "sinkadmin.commit.interval-ms": "5000"}
    assert SinkConfig.parse(both).commit_interval_ms == 5000
    assert "is the one used" in validate_config(both).notes["hoodie.kafka.commit.interval.secs"][0]
    missing = validate_config({"connector.class": "hudi", "topics": TOPIC}).errors
    assert 'Missing required configuration "target.base.path"' in missing["target.base.path"][0]
    assert 'Missing required configuration "target.table.name"' in missing["target.table.name"][0]
    # Hudi's own names for the base path and table name.
    own = {k: v for k, v in hudi_config(tmp_path).items() if k not in ("target.base.path", "target.table.name")}
    assert validate_config({**own, "hoodie.base.path": str(tmp_path), "hoodie.table.name": "orders"}).ok
    # A precombine field on insert is what Hudi ignores too: accepted, with why; a delete marker is not.
    insert = validate_config(hudi_config(tmp_path, **{"hoodie.datasource.write.operation": "insert"}))
    assert insert.ok
    assert insert.notes["hoodie.datasource.write.precombine.field"] == [
        "ignored: only upserts merge records by key, and this connector's operation is insert"
    ]
    marked = {"hoodie.datasource.write.operation": "insert", "hoodie.payload.delete.field": "op"}
    marked_errors = validate_config(hudi_config(tmp_path, **marked, **{"hoodie.payload.delete.marker": "d"})).errors
    assert list(marked_errors) == ["hoodie.payload.delete.field"]


class Sink:
    """Commits of records through the participants' rows and the coordinator's committer, in process."""

    def __init__(self, base: Path, **overrides: str) -> None:
        self.base = base
        self.config = SinkConfig.parse(hudi_config(base, **overrides))
        self.committer = HudiCommitter("orders-sink", self.config)
        self.next_offset: dict[int, int] = {}
        self.stream: list[tuple[int, int, bytes | None, bytes | None]] = []
        self.bad: list[Any] = []

    def staged(self, commit_id: uuid.UUID, records: Sequence[tuple[int, bytes | None, bytes | None]]) -> PreparedCommit:
        """Records as (kafka partition, key, value), keyed by the participants' code; the commit prepared."""
        files: list[dict[str, Any]] = []
        offsets: dict[str, dict[str, list[int]]] = {TOPIC: {}}
        for partition in sorted({p for p, _, _ in records}):
            mine = [(k, v) for p, k, v in records if p == partition]
            start = self.next_offset.get(partition, 0)
            numbered = list(range(start, start + len(mine)))
            rows = PartitionRows(self.config, self.config.settings, TOPIC, partition, ())
            rows.write(numbered, [k for k, _ in mine], [v for _, v in mine], [None] * len(mine))
            self.bad.extend(rows.bad)
            written = rows.finish(
                f"{incoming_root(self.config.settings, commit_id)}/{TOPIC}+{partition}+{start}.parquet"
            )
            if written is not None:
                files.append(written.as_dict())
            self.next_offset[partition] = start + len(mine)
            offsets[TOPIC][str(partition)] = [start, start + len(mine)]
            self.stream.extend((partition, o, k, v) for o, (k, v) in zip(numbered, mine, strict=True))
        return PreparedCommit(commit_id, 1, files, offsets, None, int(datetime.now(UTC).timestamp() * 1000))

    def commit(self, records: Sequence[tuple[int, bytes | None, bytes | None]]) -> str:
        prepared = self.staged(uuid.uuid4(), records)
        (instant,) = self.committer.commit(prepared).values()
        return str(instant)


def read(base: Path) -> list[dict[str, Any]]:
    hudi = HudiTableBuilder.from_base_uri(str(base)).build()
    batches = hudi.read(HudiReadOptions())
    return pa.Table.from_batches(batches).to_pylist() if batches else []


def model(stream: Sequence[tuple[int, int, bytes | None, bytes | None]]) -> dict[str, dict[str, Any]]:
    """The latest row per key, as the stream says: by ts, a tombstone or a delete marker removing it."""
    state: dict[str, dict[str, Any]] = {}
    for _, _, key, value in stream:
        if value is None:
            state.pop(json.loads(key or b"null")["id"], None)
            continue
        record = json.loads(value)
        current = state.get(record["id"])
        if current is None or record["ts"] >= current["ts"]:
            if record.get("op") == "d":
                state.pop(record["id"], None)
            else:
                state[record["id"]] = {k: record[k] for k in ("id", "ts", "amount", "op")}
    return state


def changes(
    rng: random.Random, count: int, keys: int, tombstones: bool
) -> list[tuple[int, bytes | None, bytes | None]]:
    """Changes over ``keys`` keys, each key in one Kafka partition (as Kafka places keyed records)."""
    found: list[tuple[int, bytes | None, bytes | None]] = []
    for _ in range(count):
        key = f"k{rng.randrange(keys)}"
        partition = zlib.crc32(key.encode()) % 3
        kafka_key = json.dumps({"id": key}).encode()
        roll = rng.random()
        if tombstones and roll < 0.08:
            found.append((partition, kafka_key, None))
            continue
        record = {
            "id": key,
            "ts": rng.randrange(50),
            "amount": rng.randrange(1000),
            "op": "d" if roll > 0.9 else "u",
            "region": f"r{partition}",
        }
        found.append((partition, kafka_key, json.dumps(record).encode()))
    return found


def as_rows(found: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["id"]: {"id": r["id"], "ts": r["ts"], "amount": r["amount"], "op": r["op"]} for r in found}


@pytest.mark.parametrize("tombstones", [True, False])
def test_upserts_leave_the_latest_row_per_key(tmp_path: Path, tombstones: bool) -> None:
    overrides = {"hoodie.payload.delete.field": "op", "hoodie.payload.delete.marker": "d"}
    if not tombstones:
        # (A key stays in its partition: deletes and updates find its row there.)
        overrides["hoodie.datasource.write.partitionpath.field"] = "region"
    sink = Sink(tmp_path / "orders", **overrides)
    rng = random.Random(7)
    instants = [sink.commit(changes(rng, 400, 60, tombstones)) for _ in range(6)]
    found = read(tmp_path / "orders")
    ids = [r["id"] for r in found]
    assert len(ids) == len(set(ids)), "a key is in the table twice"
    assert as_rows(found) == model(sink.stream)
    table = HudiTable(pafs.LocalFileSystem(), str(tmp_path / "orders"), sink.config.settings.spec())
    assert table.completed() == instants
    last = table.commit_metadata(instants[-1])
    assert last["operationType"] == "UPSERT"
    assert json.loads(last["extraMetadata"]["sinkadmin.offsets"]) == {
        TOPIC: {str(p): o for p, o in sink.next_offset.items()}
    }
    # Each key's row is in its bucket's file group: at most num.buckets (4) file groups per partition.
    for partition_files in last["partitionToWriteStats"].values():
        assert len({s["fileId"] for s in partition_files}) <= 4
    assert all(r["_hoodie_file_name"].split("_")[0][:8].isdigit() for r in found)


def test_a_tombstone_in_a_partitioned_table_is_a_bad_record(tmp_path: Path) -> None:
    sink = Sink(tmp_path / "orders", **{"hoodie.datasource.write.partitionpath.field": "region"})
    sink.commit([(0, b'{"id": "a"}', b'{"id": "a", "ts": 1, "region": "eu"}'), (0, b'{"id": "a"}', None)])
    assert [b.offset for b in sink.bad] == [1] and "partition field values" in sink.bad[0].reason
    assert [r["id"] for r in read(tmp_path / "orders")] == ["a"]


def test_table_properties_partition_metadata_and_timeline(tmp_path: Path) -> None:
    sink = Sink(
        tmp_path / "orders",
        **{
            "hoodie.datasource.write.partitionpath.field": "region",
            "hoodie.datasource.write.hive_style_partitioning": "true",
            "target.database.name": "sales",
        },
    )
    records = [
        (p, None, json.dumps({"id": f"{p}-{i}", "ts": i, "region": f"r{i % 4}"}).encode())
        for p in range(4)
        for i in range(50)
    ]
    instant = sink.commit(records)
    properties = parse_properties((tmp_path / "orders/.hoodie/hoodie.properties").read_text())
    assert properties["hoodie.table.checksum"] == str(zlib.crc32(b"sales.orders"))
    assert properties["hoodie.table.version"] == "6" and properties["hoodie.table.type"] == "COPY_ON_WRITE"
    for region in range(4):
        metadata = parse_properties((tmp_path / f"orders/region=r{region}/.hoodie_partition_metadata").read_text())
        assert metadata == {"commitTime": instant, "partitionDepth": "1"}
    assert sorted(r["id"] for r in read(tmp_path / "orders")) == sorted(json.loads(v)["id"] for _, _, v in records)  # type: ignore[arg-type]
    extra = HudiTable(pafs.LocalFileSystem(), str(tmp_path / "orders"), sink.config.settings.spec()).commit_metadata(
        instant
    )["extraMetadata"]
    assert extra["kafka.commit.offsets"] == "0=50,1=50,2=50,3=50"
    assert extra["deltastreamer.checkpoint.key"] == "orders,0:50,1:50,2:50,3:50"
    assert not (tmp_path / "orders/.hoodie/.temp/sinkadmin").exists() or not any(
        (tmp_path / "orders/.hoodie/.temp/sinkadmin").iterdir()
    )


def test_inserts_fill_small_files_before_opening_new_ones(tmp_path: Path) -> None:
    sink = Sink(
        tmp_path / "events",
        **{
            "hoodie.datasource.write.operation": "insert",
            "hoodie.datasource.write.precombine.field": "",
            "hoodie.parquet.max.file.size": "60000",
            "hoodie.parquet.small.file.limit": "40000",
        },
    )
    padding = "x" * 40
    total = 0
    for _ in range(4):
        records = [
            (p, None, json.dumps({"id": total + i * 4 + p, "note": padding}).encode())
            for p in range(4)
            for i in range(150)
        ]
        total += len(records)
        sink.commit(records)
    found = read(tmp_path / "events")
    assert sorted(r["id"] for r in found) == list(range(total))
    table = HudiTable(pafs.LocalFileSystem(), str(tmp_path / "events"), sink.config.settings.spec())
    groups = table.latest_slices("")
    # Small files took the later commits' records: fewer file groups than one per commit and partition.
    assert len(groups) < 4 * 4
    assert all(s.size < 60000 * 1.5 for s in groups.values())


def test_a_commit_cut_before_its_instant_completed_is_rolled_forward_to_the_same_rows(tmp_path: Path) -> None:
    sink = Sink(tmp_path / "orders", **{"hoodie.payload.delete.field": "op", "hoodie.payload.delete.marker": "d"})
    rng = random.Random(3)
    sink.commit(changes(rng, 300, 40, tombstones=True))
    prepared = sink.staged(uuid.uuid4(), changes(rng, 300, 40, tombstones=True))
    # The first coordinator: the instant in flight, one Spark task's slices written, then it died.
    settings = sink.config.settings
    table = HudiTable.create_or_load(pafs.LocalFileSystem(), str(tmp_path / "orders"), settings.spec())
    instant = sink.committer._instant(table, prepared)
    table.start(instant, {COMMIT_ID_KEY: str(prepared.commit_id)})
    writes = plan(table, settings, prepared.files, instant, str(prepared.commit_id))
    job = HudiMergeJob(table.base, table.spec, instant, True, balanced(writes, 4))
    job.run_unit(0)
    assert as_rows(read(tmp_path / "orders")) != model(sink.stream), "the cut commit's rows are already visible"
    # Its successor finds the instant and finishes it: the same instant, the same files.
    result = HudiCommitter("orders-sink", sink.config).commit(prepared)
    assert result == {"default.orders": int(instant)}
    assert as_rows(read(tmp_path / "orders")) == model(sink.stream)
    # Done is done: a zombie finishing it again changes nothing.
    assert HudiCommitter("orders-sink", sink.config).commit(prepared) == result
    assert as_rows(read(tmp_path / "orders")) == model(sink.stream)
    assert table.completed()[-1] == instant and len(table.completed()) == 2


def test_an_instant_that_never_completed_is_rolled_back_before_the_next(tmp_path: Path) -> None:
    sink = Sink(tmp_path / "orders")
    sink.commit([(0, None, b'{"id": "a", "ts": 1, "amount": 1, "op": "u"}')])
    # A commit the ledger never prepared wrote a slice of its own under an instant of its own.
    stray = sink.staged(uuid.uuid4(), [(0, None, b'{"id": "b", "ts": 1, "amount": 2, "op": "u"}')])
    table = HudiTable.create_or_load(pafs.LocalFileSystem(), str(tmp_path / "orders"), sink.config.settings.spec())
    instant = sink.committer._instant(table, stray)
    table.start(instant, {COMMIT_ID_KEY: "never-prepared"})
    job = HudiMergeJob(
        table.base, table.spec, instant, True, balanced(plan(table, sink.config.settings, stray.files, instant, "x"), 2)
    )
    job.run_unit(0)
    assert any(instant in p.name for p in (tmp_path / "orders").glob("*.parquet"))
    sink.stream = sink.stream[:-1]
    sink.commit([(0, None, b'{"id": "c", "ts": 1, "amount": 3, "op": "u"}')])
    assert sorted(r["id"] for r in read(tmp_path / "orders")) == ["a", "c"]
    assert not any(instant in p.name for p in (tmp_path / "orders").rglob("*"))


def test_the_timeline_holds_what_rebuilds_a_lost_ledger(tmp_path: Path) -> None:
    from sinks.hudi.commit import recovered_commits

    sink = Sink(tmp_path / "orders")
    instants = [
        sink.commit([(p, None, json.dumps({"id": f"{n}-{p}", "ts": 1}).encode()) for p in range(2)]) for n in range(3)
    ]
    found = sorted(recovered_commits("orders-sink", sink.config), key=lambda c: c.committed_at)
    assert [c.snapshot_ids for c in found] == [{"default.orders": int(i)} for i in instants]
    assert [c.ranges for c in found] == [{(TOPIC, 0): (n, n + 1), (TOPIC, 1): (n, n + 1)} for n in range(3)]
    assert recovered_commits("another-connector", sink.config) == []


@pytest.mark.parametrize("seed", range(5))
def test_upserts_without_deletes_merge_in_columns_as_record_by_record(seed: int) -> None:
    from sinks.hudi.table import DELETE, SEQUENCE, TOMBSTONE, _merge_in_order, _merge_upserts

    rng = random.Random(seed)

    def records(n: int, start: int) -> pa.Table:
        keys = [f"k{rng.randrange(30)}" for _ in range(n)]
        return pa.table(
            {
                "_hoodie_record_key": pa.array(keys, pa.string()),
                "ts": pa.array([rng.randrange(10) for _ in range(n)], pa.int64()),
                "v": pa.array(range(start, start + n), pa.int64()),
                DELETE: pa.array([False] * n),
                TOMBSTONE: pa.array([False] * n),
                SEQUENCE: pa.array(range(n), pa.int64()),
            }
        )

    stored_input = records(40, 0)
    _, stored, _, _ = _merge_in_order(None, stored_input, "ts")
    incoming = records(120, 1000)
    for precombine in ("ts", None):
        fast = _merge_upserts(stored, incoming, precombine)
        assert fast is not None
        slow = _merge_in_order(stored, incoming, precombine)
        assert fast[2:] == slow[2:]
        assert fast[0] is not None and slow[0] is not None
        assert sorted(fast[0].to_pylist(), key=str) == sorted(slow[0].to_pylist(), key=str)
        assert sorted(fast[1].to_pylist(), key=str) == sorted(slow[1].to_pylist(), key=str)


def test_an_upsert_rewrites_only_the_buckets_it_touches(tmp_path: Path) -> None:
    sink = Sink(tmp_path / "orders", **{"hoodie.bucket.index.num.buckets": "8"})
    sink.commit([(0, None, json.dumps({"id": f"k{i}", "ts": 1}).encode()) for i in range(200)])
    table = HudiTable(pafs.LocalFileSystem(), str(tmp_path / "orders"), sink.config.settings.spec())
    assert len(table.latest_slices("")) == 8
    instant = sink.commit([(0, None, b'{"id": "k7", "ts": 2}')])
    (stats,) = table.commit_metadata(instant)["partitionToWriteStats"].values()
    assert len(stats) == 1 and stats[0]["numUpdateWrites"] == 1 and stats[0]["prevCommit"] != "null"
    assert len(read(tmp_path / "orders")) == 200


def test_bulk_insert_opens_new_file_groups_only_and_an_empty_commit_is_an_instant(tmp_path: Path) -> None:
    sink = Sink(
        tmp_path / "events",
        **{
            "hoodie.datasource.write.operation": "bulk_insert",
            "hoodie.datasource.write.precombine.field": "",
            "hoodie.allow.empty.commit": "true",
        },
    )
    assert sink.config.allow_empty_commit
    for n in range(3):
        sink.commit([(0, None, json.dumps({"id": n * 10 + i}).encode()) for i in range(10)])
    table = HudiTable(pafs.LocalFileSystem(), str(tmp_path / "events"), sink.config.settings.spec())
    assert len(table.latest_slices("")) == 3  # one new file group per commit, none rewritten
    empty = str(sink.committer.commit(PreparedCommit(uuid.uuid4(), 1, [], {}, None, None))["default.orders"])
    assert table.completed()[-1] == empty and table.commit_metadata(empty)["partitionToWriteStats"] == {}
    assert table.commit_metadata(empty)["operationType"] == "BULK_INSERT"
    assert sorted(r["id"] for r in read(tmp_path / "events")) == list(range(30))
