"""The Hudi sink without servers: its config rules, the options of Hudi's writer, the participants' rows
(keys checked, deletes flagged, tombstones keyed) and the commit metadata. What Hudi's writer does with
them is tested against Spark and the broker (tests/integration/test_hudi_sink.py)."""

from __future__ import annotations

import json
import os
import time
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from connectors.config import SinkConfig, validate_config
from sinks.hudi.commit import HudiCommitter
from sinks.hudi.services import failure_text
from sinks.hudi.settings import writer_options
from sinks.hudi.timeline import (
    COMMIT_ID_KEY,
    KAFKA_OFFSETS_KEY,
    RANGES_KEY,
    Instant,
    commit_metadata,
    pending_compactions,
)
from sinks.hudi.writer import IS_DELETED, SEQUENCE, PartitionRows, incoming_root
from workers.storage import StoragePath

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
            "target.base.path": "s3://bucket/orders",
            "hoodie.metadata.enable": "true",
            "hoodie.clustering.async.enabled": "true",
            "hoodie.allow.empty.commit": "true",
            "hoodie.kafka.commit.interval.secs": "sixty",
            "hoodie.payload.delete.field": "op",
        }
    ).errors
    # Hudi's writer writes merge-on-read tables and the metadata table: those keys are honoured.
    assert "hoodie.table.type" not in errors and "hoodie.metadata.enable" not in errors
    assert "upsert needs the record key" in errors["hoodie.datasource.write.recordkey.field"][0]
    assert "write s3a://bucket/orders" in errors["target.base.path"][0]
    assert "BUCKET index keeps its file groups" in errors["hoodie.clustering.async.enabled"][0]
    assert "must be one of false" in errors["hoodie.allow.empty.commit"][0]
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
        "ignored: Hudi's writer merges records by it on upsert, and on insert with hoodie.combine.before.insert="
        "true; this connector's operation is insert"
    ]
    combined = {"hoodie.datasource.write.operation": "insert", "hoodie.combine.before.insert": "true"}
    assert not validate_config(hudi_config(tmp_path, **combined)).notes
    # A typo in Hudi's namespace is refused, and so is one under the families of Hudi's write configs that pass
    # to its writer (a near miss of a key Hudi declares).
    typo = validate_config(hudi_config(tmp_path, **{"hoodie.compact.inlin": "true", "hoodie.datasource.wrte.x": "1"}))
    assert sorted(typo.errors) == ["hoodie.compact.inlin", "hoodie.datasource.wrte.x"]
    assert "did you mean hoodie.compact.inline?" in typo.errors["hoodie.compact.inlin"][0]
    marked = {"hoodie.datasource.write.operation": "insert", "hoodie.payload.delete.field": "op"}
    marked_errors = validate_config(hudi_config(tmp_path, **marked, **{"hoodie.payload.delete.marker": "d"})).errors
    assert list(marked_errors) == ["hoodie.payload.delete.field"]


def test_debeziums_deletes_as_tombstones_are_refused_where_a_tombstone_cannot_delete(tmp_path: Path) -> None:
    """A tombstone cannot delete its key under event-time ordering (no precombine value) or in a partitioned
    table (no partition values): with Debezium's default unwrap every delete would go to the dead letters (a
    QA run through make run lost them so), so the config is refused with the way that works."""
    unwrap = {"transforms": "unwrap", "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState"}
    mode = "transforms.unwrap.delete.tombstone.handling.mode"
    ordered = validate_config(hudi_config(tmp_path, **unwrap, **{"hoodie.datasource.write.precombine.field": "ts"}))
    [why] = ordered.errors[mode]
    assert "precombine field (ts)" in why and "delete.tombstone.handling.mode=rewrite" in why
    unordered = {**unwrap, "hoodie.datasource.write.precombine.field": ""}
    partitioned = {**unordered, "hoodie.datasource.write.partitionpath.field": "region"}
    assert "partition field values" in validate_config(hudi_config(tmp_path, **partitioned)).errors[mode][0]
    # (Debezium's older key, where the config says it.)
    legacy = {
        **unwrap,
        "transforms.unwrap.delete.handling.mode": "none",
        "hoodie.datasource.write.precombine.field": "ts",
    }
    assert "transforms.unwrap.delete.handling.mode" in validate_config(hudi_config(tmp_path, **legacy)).errors
    # Where a tombstone deletes its key, or deletes are rows with a marker, the config stands.
    for works in (
        unordered,
        {
            **unwrap,
            "hoodie.datasource.write.precombine.field": "ts",
            "hoodie.record.merge.mode": "COMMIT_TIME_ORDERING",
        },
        {
            **unwrap,
            mode: "rewrite",
            "hoodie.datasource.write.precombine.field": "ts",
            "hoodie.payload.delete.field": "__deleted",
            "hoodie.payload.delete.marker": "true",
        },
        {**unwrap, "hoodie.datasource.write.precombine.field": "ts", "transforms.unwrap.delete.handling.mode": "drop"},
    ):
        assert validate_config(hudi_config(tmp_path, **works)).ok, works


def test_the_writer_is_given_hudis_own_keys_and_ours_in_hudis_names(tmp_path: Path) -> None:
    config = SinkConfig.parse(
        hudi_config(
            tmp_path,
            **{
                "hoodie.table.type": "MERGE_ON_READ",
                "hoodie.compact.inline": "true",
                "hoodie.cleaner.commits.retained": "3",
                "hoodie.kafka.control.topic": "hudi-control",
                "hoodie.datasource.write.partitionpath.field": "region",
            },
        )
    )
    options = writer_options(config.settings, config.raw)
    assert options["hoodie.datasource.write.table.type"] == "MERGE_ON_READ"
    assert options["hoodie.datasource.write.operation"] == "upsert"
    assert options["hoodie.datasource.write.precombine.field"] == "ts"
    assert options["hoodie.datasource.write.keygenerator.class"] == "org.apache.hudi.keygen.SimpleKeyGenerator"
    assert options["hoodie.index.type"] == "BUCKET" and options["hoodie.bucket.index.num.buckets"] == "4"
    # Hudi's write configs as written; the Kafka Connect sink's own keys are not Hudi's writer's.
    assert options["hoodie.compact.inline"] == "true" and options["hoodie.cleaner.commits.retained"] == "3"
    # Inline compaction asked for: not the maintenance's (async) way.
    assert options["hoodie.datasource.compaction.async.enable"] == "false"
    assert "hoodie.kafka.control.topic" not in options
    insert = SinkConfig.parse(hudi_config(tmp_path, **{"hoodie.datasource.write.operation": "insert"}))
    insert_options = writer_options(insert.settings, insert.raw)
    assert "hoodie.datasource.write.precombine.field" not in insert_options
    assert insert_options["hoodie.datasource.write.keygenerator.class"].endswith("NonpartitionedKeyGenerator")
    # Keyless inserts have no key to hash: Hudi's SIMPLE index, unless the config names one.
    keyless = SinkConfig.parse(
        hudi_config(
            tmp_path,
            **{"hoodie.datasource.write.operation": "bulk_insert", "hoodie.datasource.write.recordkey.field": ""},
        )
    )
    by_commit = SinkConfig.parse(hudi_config(tmp_path, **{"hoodie.record.merge.mode": "COMMIT_TIME_ORDERING"}))
    assert "hoodie.datasource.write.precombine.field" not in writer_options(by_commit.settings, by_commit.raw)
    keyless_options = writer_options(keyless.settings, keyless.raw)
    assert keyless_options["hoodie.index.type"] == "SIMPLE" and "hoodie.bucket.index.num.buckets" not in keyless_options
    bucket = validate_config({**keyless.raw, "hoodie.index.type": "BUCKET"}).errors["hoodie.index.type"]
    assert "hashes the record key" in bucket[0]
    chosen = {"hoodie.datasource.write.keygenerator.class": "org.apache.hudi.keygen.CustomKeyGenerator"}
    custom = SinkConfig.parse(hudi_config(tmp_path, **chosen))
    assert writer_options(custom.settings, custom.raw)["hoodie.datasource.write.keygenerator.class"].endswith(
        "CustomKeyGenerator"
    )


def rows_of(config: SinkConfig, records: list[tuple[bytes | None, bytes | None]], path: Path) -> tuple[list, list]:
    rows = PartitionRows(config, config.settings, TOPIC, 0, ())
    rows.write(list(range(len(records))), [k for k, _ in records], [v for _, v in records], [None] * len(records))
    written = rows.finish(StoragePath.parse(str(path.parent)), path.name)
    return (pq.read_table(path).to_pylist() if written is not None else []), rows.bad


def test_participants_flag_deletes_key_tombstones_and_refuse_records_they_cannot_key(tmp_path: Path) -> None:
    config = SinkConfig.parse(
        hudi_config(
            tmp_path,
            **{
                "hoodie.payload.delete.field": "op",
                "hoodie.payload.delete.marker": "d",
                # (Ordered by commit: tombstones delete; by event time they are refused, below.)
                "hoodie.record.merge.mode": "COMMIT_TIME_ORDERING",
            },
        )
    )
    records: list[tuple[bytes | None, bytes | None]] = [
        (b"1", json.dumps({"id": 1, "ts": 5, "op": "u"}).encode()),
        (b"2", json.dumps({"id": 2, "ts": 6, "op": "d"}).encode()),
        (b"3", json.dumps({"id": 3, "ts": 7, "op": "u", IS_DELETED: True}).encode()),
        (b"4", json.dumps({"ts": 8, "op": "u"}).encode()),  # no record key
        (b"5", json.dumps({"id": 5, "op": "u"}).encode()),  # no precombine value
        (json.dumps({"id": 1}).encode(), None),  # a tombstone with a JSON key
        (b"7", None),  # a tombstone with the key's text
        (None, None),  # a tombstone without a key
    ]
    rows, bad = rows_of(config, records, tmp_path / "rows.parquet")
    assert [(r["id"], r[IS_DELETED], r[SEQUENCE]) for r in rows] == [
        (1, False, 0),
        (2, True, 1),
        (3, True, 2),
        (1, True, 5),
        (7, True, 6),
    ]
    # The tombstones' keys are typed as the column is.
    assert {type(r["id"]) for r in rows} == {int}
    assert sorted((b.offset, b.reason) for b in bad) == [
        (3, "record key field 'id' is missing or null"),
        (4, "precombine field 'ts' is missing or null"),
        (7, "a tombstone without a key deletes nothing"),
    ]


def test_a_tombstone_in_a_partitioned_table_is_a_bad_record(tmp_path: Path) -> None:
    config = SinkConfig.parse(hudi_config(tmp_path, **{"hoodie.datasource.write.partitionpath.field": "region"}))
    rows, bad = rows_of(
        config, [(b"a", b'{"id": "a", "ts": 1, "region": "eu"}'), (b"a", None)], tmp_path / "rows.parquet"
    )
    assert [r["id"] for r in rows] == ["a"]
    assert [b.offset for b in bad] == [1] and "partition field values" in bad[0].reason


def test_records_before_the_first_json_object_are_bad_and_do_not_keep_the_rest_from_their_columns(
    tmp_path: Path,
) -> None:
    # (A topic's first record is a poison one, alone in the first chunk the participant writes.)
    config = SinkConfig.parse(hudi_config(tmp_path))
    rows = PartitionRows(config, config.settings, TOPIC, 0, ())
    rows.write([0], [b"a"], [b"{not json"], [None])
    rows.write([1], [b"b"], [b'{"id": "b", "ts": 2}'], [None])
    assert rows.finish(StoragePath.parse(str(tmp_path)), "rows.parquet") is not None
    assert [(r["id"], r["ts"]) for r in pq.read_table(tmp_path / "rows.parquet").to_pylist()] == [("b", 2)]
    assert [b.offset for b in rows.bad] == [0] and "not valid JSON" in rows.bad[0].reason


def test_inserts_keep_every_record_and_flag_none_deleted(tmp_path: Path) -> None:
    config = SinkConfig.parse(hudi_config(tmp_path, **{"hoodie.datasource.write.operation": "insert"}))
    rows, bad = rows_of(config, [(None, b'{"id": 1, "ts": 1}'), (None, b'{"id": 1}'), (b"x", None)], tmp_path / "r")
    assert [(r["id"], r[IS_DELETED]) for r in rows] == [(1, False), (1, False)] and not bad


def test_each_instant_carries_the_commit_and_its_offsets() -> None:
    ranges = {"orders": {"0": [0, 50], "1": [10, 60]}}
    metadata = commit_metadata("orders-sink", "c-1", 3, ranges)
    assert metadata[COMMIT_ID_KEY] == "c-1" and json.loads(metadata[RANGES_KEY]) == ranges
    assert metadata[KAFKA_OFFSETS_KEY] == "0=50,1=60"
    assert all(k.startswith("sinkadmin.") for k in metadata)
    # Hudi's format names partitions only: with two topics it is left out.
    assert KAFKA_OFFSETS_KEY not in commit_metadata("orders-sink", "c-1", 3, {**ranges, "refunds": {"0": [0, 1]}})


def test_an_instants_kafka_offsets_carry_every_partition_committed_so_far() -> None:
    """As Hudi's coordinator writes its global committed offsets: a commit with records of some partitions only
    keeps the others' ends from the connector's previous instant, unless that one was of another topic."""
    first = Instant("1", "commit", 0, commit_metadata("orders-sink", "c-1", 1, {"orders": {"0": [0, 50], "2": [0, 7]}}))
    second = commit_metadata("orders-sink", "c-2", 1, {"orders": {"1": [0, 60], "2": [7, 9]}}, first)
    assert second[KAFKA_OFFSETS_KEY] == "0=50,1=60,2=9"
    refunds = commit_metadata("orders-sink", "c-3", 2, {"refunds": {"1": [0, 4]}}, Instant("2", "commit", 0, second))
    assert refunds[KAFKA_OFFSETS_KEY] == "1=4"
    assert commit_metadata("orders-sink", "c-1", 1, {"orders": {"0": [0, 50]}}, None)[KAFKA_OFFSETS_KEY] == "0=50"


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_a_tombstone_in_a_table_ordered_by_event_time_is_a_bad_record(tmp_path: Path, table_type: str) -> None:
    """Hudi 1.2's writer (copy-on-write merges) and merge-on-read readers fail on a delete without an
    ordering value (NPEs in BufferedRecordMergerFactory, OrderingValues.isSameClass): such a tombstone is
    refused, before anything is prepared; ordered by commit, it deletes."""
    kind = {"hoodie.table.type": table_type}
    records: list[tuple[bytes | None, bytes | None]] = [(b"1", b'{"id": 1, "ts": 1}'), (b"1", None)]
    rows, bad = rows_of(SinkConfig.parse(hudi_config(tmp_path, **kind)), records, tmp_path / "event.parquet")
    assert [r[IS_DELETED] for r in rows] == [False] and "COMMIT_TIME_ORDERING" in bad[0].reason
    by_commit = SinkConfig.parse(hudi_config(tmp_path, **kind, **{"hoodie.record.merge.mode": "COMMIT_TIME_ORDERING"}))
    rows, bad = rows_of(by_commit, records, tmp_path / "commit.parquet")
    assert [r[IS_DELETED] for r in rows] == [False, True] and not bad


def test_incoming_rows_go_with_their_commit_and_those_never_prepared_once_an_hour_old(tmp_path: Path) -> None:
    config = SinkConfig.parse(hudi_config(tmp_path))
    committer = HudiCommitter("orders-sink", config)
    folders = {name: Path(incoming_root(config.settings, name).uri) for name in ("applied", "ahead", "aborted")}
    for folder in folders.values():
        folder.mkdir(parents=True)
        (folder / "rows.parquet").write_bytes(b"rows")
    two_hours_ago = time.time() - 7200
    os.utime(folders["aborted"] / "rows.parquet", (two_hours_ago, two_hours_ago))
    committer._cleanup("applied")
    assert sorted(p.name for p in folders["applied"].parent.iterdir()) == ["ahead"]


@pytest.mark.parametrize(
    ("base", "error"),
    [
        ("s3a://lake/orders", None),
        ("file:///lake/orders", None),
        ("s3n://lake/orders", "write s3a://lake/orders"),
        ("s3a:///orders", "names its bucket"),
        ("hdfs://namenode/orders", "hudi-rs and pyarrow, which reach local paths and S3 only"),
        ("gs://lake/orders", "gs:// is not supported"),
        ("orders", "must be an absolute path"),
    ],
)
def test_a_base_path_is_local_or_on_s3_through_hadoops_s3a(tmp_path: Path, base: str, error: str | None) -> None:
    errors = validate_config({**hudi_config(tmp_path), "target.base.path": base}).errors
    if error is None:
        assert "target.base.path" not in errors
    else:
        assert error in errors["target.base.path"][0]


def test_every_write_and_table_service_runs_under_optimistic_concurrency_with_the_sinks_check(tmp_path: Path) -> None:
    from sinks.hudi.services import procedure_options
    from sinks.hudi.settings import CONFLICT_STRATEGY, DEFAULT_LOCK_PROVIDER

    config = SinkConfig.parse(hudi_config(tmp_path))
    for options in (writer_options(config.settings, config.raw), procedure_options(config.raw)):
        assert options["hoodie.write.concurrency.mode"] == "OPTIMISTIC_CONCURRENCY_CONTROL"
        assert options["hoodie.cleaner.policy.failed.writes"] == "LAZY"
        assert options["hoodie.write.lock.conflict.resolution.strategy"] == CONFLICT_STRATEGY
        assert options["hoodie.write.lock.provider"] == DEFAULT_LOCK_PROVIDER
    # A lock provider of the config's (a table other jobs write too) is Hudi's to use; the check stays ours.
    zookeeper = "org.apache.hudi.client.transaction.lock.ZookeeperBasedLockProvider"
    shared = SinkConfig.parse(hudi_config(tmp_path, **{"hoodie.write.lock.provider": zookeeper}))
    assert writer_options(shared.settings, shared.raw)["hoodie.write.lock.provider"] == zookeeper
    errors = validate_config(
        hudi_config(
            tmp_path,
            **{
                "hoodie.write.concurrency.mode": "SINGLE_WRITER",
                "hoodie.cleaner.policy.failed.writes": "EAGER",
                "hoodie.write.lock.conflict.resolution.strategy": "org.example.Mine",
            },
        )
    ).errors
    assert "must be OPTIMISTIC_CONCURRENCY_CONTROL" in errors["hoodie.write.concurrency.mode"][0]
    assert "must be LAZY" in errors["hoodie.cleaner.policy.failed.writes"][0]
    assert f"must be {CONFLICT_STRATEGY}" in errors["hoodie.write.lock.conflict.resolution.strategy"][0]
    assert validate_config(
        hudi_config(tmp_path, **{"hoodie.write.concurrency.mode": "optimistic_concurrency_control"})
    ).ok


def test_compactions_pending_are_those_planned_or_executing_and_not_complete(tmp_path: Path) -> None:
    folder = tmp_path / ".hoodie" / "timeline"
    folder.mkdir(parents=True)
    for name in (
        "20261128100000000.compaction.requested",  # complete: its commit instant is beside its plan
        "20261128100000000.compaction.inflight",
        "20261128100000000_20261128100005000.commit",
        "20261128110000000.compaction.requested",  # executing
        "20261128110000000.compaction.inflight",
        "20261128120000000.compaction.requested",  # planned
        "20261128120000001_20261128120002000.deltacommit",
    ):
        (folder / name).touch()
    assert pending_compactions(StoragePath.parse(str(tmp_path))) == ["20261128110000000", "20261128120000000"]
    assert pending_compactions(StoragePath.parse(str(tmp_path / "elsewhere"))) == []


def test_a_compaction_another_run_executes_is_said_to_be_left_to_it() -> None:
    refused = RuntimeError(
        "org.apache.hudi.exception.HoodieLockException: Cannot execute instant 20261128110000000 due to "
        "heartbeat by concurrent writer/job"
    )
    said = failure_text(refused)
    assert said.startswith("20261128110000000 is still executed by an earlier run")
    assert "not rolled back" in said
    assert failure_text(ValueError("disk full")) == "ValueError: disk full"


COMMIT_ORDERED = {"hoodie.record.merge.mode": "COMMIT_TIME_ORDERING"}


def test_a_tombstones_key_in_kafka_connects_schema_envelope_is_its_payload(tmp_path: Path) -> None:
    """Debezium's keys through JsonConverter with schemas.enable=true (its default) carry their schema."""
    config = SinkConfig.parse(hudi_config(tmp_path, **COMMIT_ORDERED))
    enveloped = {"schema": {"type": "struct", "fields": [{"field": "id", "type": "int64"}]}, "payload": {"id": 4}}
    rows, bad = rows_of(
        config,
        [(b"4", b'{"id": 4, "ts": 1}'), (json.dumps(enveloped).encode(), None)],
        tmp_path / "rows.parquet",
    )
    assert bad == []
    assert [(r["id"], r[IS_DELETED]) for r in rows] == [(4, False), (4, True)]


def test_a_tombstone_with_an_avro_key_is_a_bad_record_that_says_so(tmp_path: Path) -> None:
    config = SinkConfig.parse(
        hudi_config(tmp_path, **COMMIT_ORDERED, **{"key.converter": "io.confluent.connect.avro.AvroConverter"})
    )
    rows, bad = rows_of(config, [(b"\x00\x00\x00\x00\x07\x06abc", None)], tmp_path / "rows.parquet")
    assert rows == [] and [b.offset for b in bad] == [0]
    assert "wire format (key.converter=avro)" in bad[0].reason


def test_a_partition_of_tombstones_alone_types_their_keys_as_their_json_values(tmp_path: Path) -> None:
    """So that its file reads beside the other partitions' (Spark's mergeSchema), whose records have JSON ids."""
    config = SinkConfig.parse(hudi_config(tmp_path, **COMMIT_ORDERED, **{"key.converter": "json"}))
    rows, bad = rows_of(config, [(b'{"id": 7}', None), (b"8", None)], tmp_path / "rows.parquet")
    assert bad == [] and [(r["id"], r[IS_DELETED]) for r in rows] == [(7, True), (8, True)]
    assert pq.read_schema(tmp_path / "rows.parquet").field("id").type == "int64"


def test_tombstones_keyed_by_text_take_the_records_key_type_or_are_bad_records(tmp_path: Path) -> None:
    config = SinkConfig.parse(hudi_config(tmp_path, **COMMIT_ORDERED, **{"key.converter": "string"}))
    rows, bad = rows_of(
        config,
        [(b"x", None), (b"1", b'{"id": 1, "ts": 1}'), (b"abc", None)],
        tmp_path / "rows.parquet",
    )
    assert [(r["id"], r[IS_DELETED]) for r in rows] == [(1, False)]
    assert [b.offset for b in bad] == [0, 2] and "is no int64 value" in bad[0].reason
    rows, bad = rows_of(config, [(b"5", None), (b"5", b'{"id": 5, "ts": 1}')], tmp_path / "more.parquet")
    assert bad == [] and [(r["id"], r[IS_DELETED]) for r in rows] == [(5, True), (5, False)]
    # Hudi's record key is the field's text: a key that is another text of the value (which Arrow's cast would
    # take) deletes no row, as the commit's typed_rows has it where Spark casts a partition of tombstones alone.
    keys = [b"06", b"+6", b"6.0", b"6"]
    rows, bad = rows_of(config, [*((k, None) for k in keys), (b"6", b'{"id": 6, "ts": 1}')], tmp_path / "text.parquet")
    assert [(r["id"], r[IS_DELETED]) for r in rows] == [(6, True), (6, False)]
    assert [b.offset for b in bad] == [0, 1, 2] and all("is no int64 value" in b.reason for b in bad)


def test_a_tombstones_json_key_is_the_text_of_the_records_key_type_or_a_bad_record(tmp_path: Path) -> None:
    config = SinkConfig.parse(hudi_config(tmp_path, **COMMIT_ORDERED, **{"key.converter": "json"}))
    records = [(b'{"id": 7.0}', None), (b'{"id": 7}', None), (b'{"id": 7, "ts": 1}', b'{"id": 7, "ts": 1}')]
    rows, bad = rows_of(config, records, tmp_path / "rows.parquet")
    assert [(r["id"], r[IS_DELETED]) for r in rows] == [(7, True), (7, False)]
    assert [b.offset for b in bad] == [0] and "id=7.0 is no int64 value" in bad[0].reason


def test_tombstones_delete_with_operation_delete_whatever_the_precombine_field(tmp_path: Path) -> None:
    # (The precombine field orders upserts only: operation=delete takes no ordering.)
    config = SinkConfig.parse(hudi_config(tmp_path, **{"hoodie.datasource.write.operation": "delete"}))
    rows, bad = rows_of(config, [(b"1", b'{"id": 1}'), (b"2", None)], tmp_path / "rows.parquet")
    assert bad == [] and [(r["id"], r[IS_DELETED]) for r in rows] == [(1, True), (2, True)]


def test_the_iceberg_sinks_debezium_transform_deletes_by_its_nested_operation(tmp_path: Path) -> None:
    dbz = {"transforms": "dbz", "transforms.dbz.type": "org.apache.iceberg.connect.transforms.DebeziumTransform"}
    # Without a delete field its deletes would be upserted as live rows: refused.
    errors = validate_config(hudi_config(tmp_path, **dbz)).errors
    assert any("hoodie.payload.delete.field=_cdc.op" in e for e in errors["transforms.dbz.type"])
    marked = {**dbz, "hoodie.payload.delete.field": "_cdc.op", "hoodie.payload.delete.marker": "D"}
    # Ordered by event time (the precombine field), the tombstone it passes on after each delete cannot delete:
    # refused, unless a Filter of tombstones comes first.
    errors = validate_config(hudi_config(tmp_path, **marked)).errors
    assert "RecordIsTombstone" in errors["transforms.dbz.type"][0]
    marked |= {
        "transforms": "drop,dbz",
        "transforms.drop.type": "org.apache.kafka.connect.transforms.Filter",
        "transforms.drop.predicate": "tombstone",
        "predicates": "tombstone",
        "predicates.tombstone.type": "org.apache.kafka.connect.transforms.predicates.RecordIsTombstone",
    }
    assert validate_config(hudi_config(tmp_path, **marked)).ok
    config = SinkConfig.parse(hudi_config(tmp_path, **marked))
    # (Hudi's payloads read a delete field at the top level: the sink flags deletes itself.)
    assert "hoodie.payload.delete.field" not in writer_options(config.settings, config.raw)
    events = [{"id": 1, "ts": 1, "_cdc": {"op": "I"}}, {"id": 1, "ts": 2, "_cdc": {"op": "D"}}, {"id": 2, "ts": 3}]
    rows, bad = rows_of(config, [(None, json.dumps(e).encode()) for e in events], tmp_path / "rows.parquet")
    assert bad == [] and [(r["id"], r[IS_DELETED]) for r in rows] == [(1, False), (1, True), (2, False)]


def test_a_nested_precombine_field_is_read_in_its_struct_as_hudi_reads_it(tmp_path: Path) -> None:
    """(The Iceberg sink's DebeziumTransform puts the event's time in ``_cdc.ts``: ordering by it was a bad record
    for every event, its name looked for among the top-level columns only.)"""
    config = SinkConfig.parse(
        hudi_config(
            tmp_path,
            **{
                "hoodie.datasource.write.precombine.field": "_cdc.ts",
                "hoodie.datasource.write.recordkey.field": "id",
                "hoodie.payload.delete.field": "_cdc.op",
                "hoodie.payload.delete.marker": "D",
            },
        )
    )
    events = [
        {"id": 1, "_cdc": {"op": "I", "ts": 5}},
        {"id": 1, "_cdc": {"op": "D", "ts": 6}},
        {"id": 2, "_cdc": {"op": "I"}},  # (no ts)
        {"id": 3},  # (no _cdc)
    ]
    rows, bad = rows_of(config, [(None, json.dumps(e).encode()) for e in events], tmp_path / "rows.parquet")
    assert [(r["id"], r["_cdc"]["ts"], r[IS_DELETED]) for r in rows] == [(1, 5, False), (1, 6, True)]
    assert [(b.offset, b.reason) for b in bad] == [
        (2, "precombine field '_cdc.ts' is missing or null"),
        (3, "precombine field '_cdc.ts' is missing or null"),
    ]


def test_the_merge_mode_is_read_under_hudis_write_config_name_too(tmp_path: Path) -> None:
    """Hudi 1.x's writer takes ``hoodie.write.record.merge.mode`` (its table config is ``hoodie.record.merge.mode``):
    commit-time ordering set under that name orders by commit, as Hudi then does, and Debezium's tombstones may
    delete; the two names with different values are refused."""
    commit_time = {
        "hoodie.datasource.write.precombine.field": "ts",
        "hoodie.write.record.merge.mode": "COMMIT_TIME_ORDERING",
        "transforms": "unwrap",
        "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
    }
    assert validate_config(hudi_config(tmp_path, **commit_time)).ok
    config = SinkConfig.parse(hudi_config(tmp_path, **commit_time))
    assert not config.settings.event_time_ordering
    # (So Hudi is given no ordering field, which would make the table event-time.)
    options = writer_options(config.settings, config.raw)
    assert "hoodie.datasource.write.precombine.field" not in options
    assert options["hoodie.write.record.merge.mode"] == "COMMIT_TIME_ORDERING"
    both = {**commit_time, "hoodie.record.merge.mode": "EVENT_TIME_ORDERING"}
    assert "hoodie.write.record.merge.mode" in validate_config(hudi_config(tmp_path, **both)).errors


def test_a_partitioned_tables_deletes_are_told_to_need_a_global_index(tmp_path: Path) -> None:
    """A delete whose before lacks the partition fields deletes nothing under an index that is not global: the
    refusal of tombstones in a partitioned table says so where it steers users to rows marked deleted."""
    unwrap = {
        "transforms": "unwrap",
        "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
        "hoodie.datasource.write.partitionpath.field": "region",
    }
    mode = "transforms.unwrap.delete.tombstone.handling.mode"
    [why] = validate_config(hudi_config(tmp_path, **unwrap)).errors[mode]
    assert "hoodie.index.type=GLOBAL_SIMPLE" in why and "REPLICA IDENTITY" in why
    [why] = validate_config(hudi_config(tmp_path, **unwrap, **{"hoodie.index.type": "GLOBAL_SIMPLE"})).errors[mode]
    assert "global index" not in why


@pytest.mark.parametrize(
    ("index", "partition_path", "identity"),
    [
        ("BUCKET", "region", ("region",)),
        ("SIMPLE", "region,id", ("region",)),
        ("BLOOM", "region:simple,day:timestamp", ("region", "day")),  # (CustomKeyGenerator's field:type)
        ("GLOBAL_SIMPLE", "region", ()),
        ("RECORD_INDEX", "region", ()),
    ],
)
def test_a_commit_keeps_one_record_per_key_and_partition_path_unless_the_index_is_global(
    tmp_path: Path, index: str, partition_path: str, identity: tuple[str, ...]
) -> None:
    """A delete of a key in one partition and its insert in another are two records to an index that is not
    global (Hudi's HoodieKey): both must reach Hudi (tests/integration/test_hudi_sink.py)."""
    settings = SinkConfig.parse(
        hudi_config(
            tmp_path, **{"hoodie.datasource.write.partitionpath.field": partition_path, "hoodie.index.type": index}
        )
    ).settings
    assert settings.identity_partition_fields == identity


def test_tombstone_keys_are_read_as_their_converter_writes_them(tmp_path: Path) -> None:
    # StringConverter's text is the key as it is: "1.50" is no number 1.5.
    as_text = SinkConfig.parse(hudi_config(tmp_path, **COMMIT_ORDERED, **{"key.converter": "string"}))
    rows, bad = rows_of(as_text, [(b"1.50", None), (b"1e3", None)], tmp_path / "text.parquet")
    assert bad == [] and [r["id"] for r in rows] == ["1.50", "1e3"]
    # Confluent's JSON Schema converter: JSON after the registry's header.
    json_schema = SinkConfig.parse(
        hudi_config(tmp_path, **COMMIT_ORDERED, **{"key.converter": "io.confluent.connect.json.JsonSchemaConverter"})
    )
    rows, bad = rows_of(json_schema, [(b'\x00\x00\x00\x00\x05{"id": "abc"}', None)], tmp_path / "js.parquet")
    assert bad == [] and [r["id"] for r in rows] == ["abc"]
    # JsonConverter with schemas.enable=false: a key shaped as an envelope is a map like any other.
    plain = SinkConfig.parse(hudi_config(tmp_path, **COMMIT_ORDERED, **{"key.converter.schemas.enable": "false"}))
    rows, bad = rows_of(plain, [(b'{"schema": 1, "payload": {"id": 1}}', None)], tmp_path / "plain.parquet")
    assert rows == [] and "must hold the record key field" in bad[0].reason


def test_tombstone_keys_of_any_size_or_kind_never_stop_the_write(tmp_path: Path) -> None:
    config = SinkConfig.parse(hudi_config(tmp_path, **COMMIT_ORDERED))
    rows_writer = PartitionRows(config, config.settings, TOPIC, 0, ())
    # Chunks of tombstones alone, of integer keys, then text, then beyond 64 bits: one file, typed as text.
    rows_writer.write([0], [b'{"id": 1}'], [None], [None])
    rows_writer.write([1], [b'{"id": "two"}'], [None], [None])
    rows_writer.write([2], [b'{"id": 99999999999999999999}'], [None], [None])
    written = rows_writer.finish(StoragePath.parse(str(tmp_path)), "rows.parquet")
    assert written is not None and rows_writer.bad == []
    assert [r["id"] for r in pq.read_table(tmp_path / "rows.parquet").to_pylist()] == [
        "1",
        "two",
        "99999999999999999999",
    ]


def test_a_record_refused_for_a_missing_key_says_when_its_value_is_an_envelope_read_as_plain_json(
    tmp_path: Path,
) -> None:
    """(A Debezium config whose converters were left at a Kafka Connect worker's default, schemas.enable=true,
    read here as plain JSON: the key field is under payload.)"""
    config = SinkConfig.parse(hudi_config(tmp_path, **{"hoodie.datasource.write.recordkey.field": "id"}))
    envelope = {"schema": {"type": "struct", "fields": []}, "payload": {"id": 1}}
    _, bad = rows_of(config, [(None, json.dumps(envelope).encode()), (None, b'{"name": "x"}')], tmp_path / "r.parquet")
    assert [b.reason for b in bad] == [
        "record key field 'id' is missing or null (the value is Kafka Connect's {schema, payload} envelope, read as "
        "plain JSON: set value.converter.schemas.enable=true)",
        "record key field 'id' is missing or null",
    ]


def test_a_tombstones_key_with_a_connect_decimal_deletes_the_row_its_record_made(tmp_path: Path) -> None:
    """(Kafka Connect's envelope writes a Decimal key field in base64: the tombstone's key is read as the decimal
    the record's own field is, or the delete would match no row.)"""
    decimal_field = {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "2"}}
    schema = {"type": "struct", "fields": [{"field": "id", **decimal_field}, {"field": "name", "type": "string"}]}
    key_schema = {"type": "struct", "fields": [{"field": "id", **decimal_field}]}
    config = SinkConfig.parse(
        hudi_config(
            tmp_path,
            **{
                "hoodie.datasource.write.recordkey.field": "id",
                "hoodie.datasource.write.precombine.field": "",
                "key.converter": "json",
                "value.converter.schemas.enable": "true",
            },
        )
    )
    key = json.dumps({"schema": key_schema, "payload": {"id": "AQ=="}}).encode()
    value = json.dumps({"schema": schema, "payload": {"id": "AQ==", "name": "x"}}).encode()
    rows, bad = rows_of(config, [(key, value), (key, None)], tmp_path / "rows.parquet")
    assert bad == [] and [(r["id"], r[IS_DELETED]) for r in rows] == [(Decimal("0.01"), False), (Decimal("0.01"), True)]


def test_connects_times_in_the_envelope_stay_the_numbers_hudi_tables_had_them_as(tmp_path: Path) -> None:
    """(A Connect Timestamp is a timestamp column for the Iceberg sink; here it stays the long it was in tables this
    sink created before, which Hudi's writer would let become a timestamp and then read as microseconds.)"""
    timestamp = {"type": "int64", "name": "org.apache.kafka.connect.data.Timestamp"}
    date = {"type": "int32", "name": "org.apache.kafka.connect.data.Date"}
    schema = {"type": "struct", "fields": [{"field": "id", "type": "int64"}, {"field": "seen", **timestamp}]}
    schema["fields"].append({"field": "born", **date})
    config = SinkConfig.parse(
        hudi_config(
            tmp_path,
            **{
                "hoodie.datasource.write.recordkey.field": "id",
                "hoodie.datasource.write.precombine.field": "",
                "value.converter.schemas.enable": "true",
            },
        )
    )
    value = json.dumps({"schema": schema, "payload": {"id": 1, "seen": 1_700_000_000_123, "born": 19000}}).encode()
    rows, bad = rows_of(config, [(None, value)], tmp_path / "rows.parquet")
    assert bad == [] and [(r["seen"], r["born"]) for r in rows] == [(1_700_000_000_123, 19000)]
