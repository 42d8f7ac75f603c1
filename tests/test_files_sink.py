"""The files sink without servers: its layout, config checks, file writing and commit moves, on local disk."""

from __future__ import annotations

import json
import os
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from connectors.config import SinkConfig, resolve_plugin, validate_config
from sinks.files.committer import FilesCommitter, move, storage_outage
from sinks.files.layout import (
    HOURLY_FORMAT,
    TimePartitioning,
    file_name,
    format_time,
    joda_tokens,
    parse_file_name,
)
from sinks.files.settings import IGNORED_KEYS
from sinks.files.writer import PartitionFiles, tmp_root
from workers.coordinator import PreparedCommit


def files_config(root: Path, **overrides: str) -> dict[str, str]:
    config = {
        "connector.class": "files",
        "topics": "events",
        "store.url": str(root),
        "format.class": "parquet",
        "flush.size": "1000",
    }
    config.update(overrides)
    return config


def write(
    config: dict[str, str],
    records: list[Any],
    partition: int = 0,
    start: int = 0,
    chunk: int = 4,
    value_schemas: tuple[str, ...] = (),
) -> Any:
    """Write records as one staged partition does (in chunks), close every file; the writer."""
    sink = SinkConfig.parse(config)
    files = PartitionFiles(sink, sink.settings, uuid.uuid4(), "events", partition, value_schemas)
    for first in range(0, len(records), chunk):
        piece = records[first : first + chunk]
        offsets = list(range(start + first, start + first + len(piece)))
        timestamps = [r[0] for r in piece]
        values = [r[1] for r in piece]
        files.write(offsets, timestamps, values, [None] * len(piece))
    files.close_all()
    return files


def values(n: int, start: int = 0, **extra: Any) -> list[tuple[int, bytes | None]]:
    return [(1_700_000_000_000 + i, json.dumps({"id": i, **extra}).encode()) for i in range(start, start + n)]


# Layout.


def test_joda_patterns_print_as_joda_does() -> None:
    moment = datetime(2024, 3, 9, 7, 5, 2, tzinfo=UTC)
    assert format_time(HOURLY_FORMAT, moment) == "year=2024/month=03/day=09/hour=07"
    assert format_time("YYYY-MM-dd'T'HH:mm:ss", moment) == "2024-03-09T07:05:02"
    assert format_time("'it''s' MMM yy", moment) == "it's Mar 24"
    assert joda_tokens("'a''b'") == [("literal", "a'b")]
    with pytest.raises(ValueError, match="unterminated"):
        joda_tokens("'year=YYYY")
    with pytest.raises(ValueError, match="not supported"):
        joda_tokens("YYYY/qq")


def test_time_directories_are_aligned_in_the_configured_zone() -> None:
    daily = TimePartitioning("'day'=dd", 86_400_000, "America/New_York")
    # 2024-03-10 03:30 UTC is 22:30 on the 9th in New York.
    at = int(datetime(2024, 3, 10, 3, 30, tzinfo=UTC).timestamp() * 1000)
    assert daily.directory(at) == "day=09"
    assert TimePartitioning("'day'=dd", 86_400_000, "UTC").directory(at) == "day=10"
    hourly = TimePartitioning(HOURLY_FORMAT, 3_600_000, "Asia/Kolkata")  # +05:30: hours start at :30 UTC
    assert hourly.directory(at) == "year=2024/month=03/day=10/hour=09"
    assert hourly.bucket(at) == int(datetime(2024, 3, 10, 3, 30, tzinfo=UTC).timestamp() * 1000)


def test_file_names_carry_padded_offsets_and_parse_back() -> None:
    name = file_name("my+topic", 3, 42, 1041, "parquet", 10)
    assert name == "my+topic+3+0000000042+0000001041.parquet"
    assert parse_file_name(name) == ("my+topic", 3, 42, 1041)
    assert parse_file_name("_SUCCESS") is None


@pytest.mark.parametrize(
    ("connector_class", "name"),
    [
        # The S3 sink names a file by its first offset; the HDFS sinks (and this sink's own name) by both.
        ("io.confluent.connect.s3.S3SinkConnector", "orders+3+0000000042.json"),
        ("S3SinkConnector", "orders+3+0000000042.json"),
        ("io.confluent.connect.hdfs3.Hdfs3SinkConnector", "orders+3+0000000042+0000001041.json"),
        ("files", "orders+3+0000000042+0000001041.json"),
    ],
)
def test_files_are_named_as_the_sink_their_connector_class_names_names_them(connector_class: str, name: str) -> None:
    config = {"connector.class": connector_class, "topics": "orders", "format.class": "json", "flush.size": "10"}
    config |= {"s3.bucket.name": "lake"} if "S3" in connector_class else {"store.url": "/lake"}
    settings = SinkConfig.parse(config).settings
    assert settings.file_name("orders", 3, 42, 1041) == name
    last = None if settings.first_offset_names else 1041
    assert settings.parse_file_name(name) == ("orders", 3, 42, last)
    assert settings.parse_file_name("orders+3+0000000042-1a2b3c4d.json") is None  # (a file under +tmp)


# Config.


def test_the_connect_class_names_of_the_storage_sinks_name_the_files_plugin() -> None:
    for name in (
        "files",
        "io.confluent.connect.hdfs.HdfsSinkConnector",
        "io.confluent.connect.hdfs3.Hdfs3SinkConnector",
        "io.confluent.connect.s3.S3SinkConnector",
        "S3SinkConnector",
    ):
        plugin = resolve_plugin(name)
        assert plugin is not None and plugin.short_name == "files", name


def test_a_confluent_hdfs_config_is_valid(tmp_path: Path) -> None:
    config = files_config(
        tmp_path,
        **{
            "connector.class": "io.confluent.connect.hdfs3.Hdfs3SinkConnector",
            "format.class": "io.confluent.connect.hdfs3.parquet.ParquetFormat",
            "partitioner.class": "io.confluent.connect.storage.partitioner.HourlyPartitioner",
            "timezone": "UTC",
            "locale": "en-US",
            "timestamp.extractor": "Record",
            "rotate.interval.ms": "600000",
            "schema.compatibility": "NONE",
        },
    )
    result = validate_config(config)
    assert result.ok, result.errors
    settings = SinkConfig.parse(config).settings
    assert (settings.format, settings.partitioner, settings.time.duration_ms) == ("parquet", "hourly", 3_600_000)


def test_a_config_as_written_for_the_hdfs_sink_with_its_logs_dir_is_accepted_saying_it_is_ignored() -> None:
    result = validate_config(
        {
            "connector.class": "io.confluent.connect.hdfs3.Hdfs3SinkConnector",
            "topics": "events",
            "hdfs.url": "file:///data",
            "format.class": "io.confluent.connect.hdfs3.parquet.ParquetFormat",
            "flush.size": "3",
            # The HDFS sink's documented default: its write-ahead log's directory, which the ledger replaces.
            "logs.dir": "logs",
        }
    )
    assert result.ok, result.errors
    assert result.notes == {"logs.dir": [f"ignored: {IGNORED_KEYS['logs.dir']}"]}
    entry = next(c for c in result.to_connect()["configs"] if c["definition"]["name"] == "logs.dir")
    assert entry["value"]["errors"] == [] and entry["value"]["notes"] == result.notes["logs.dir"]


def test_bad_keys_are_refused_each_with_its_reason(tmp_path: Path) -> None:
    result = validate_config(
        {
            "connector.class": "io.confluent.connect.s3.S3SinkConnector",
            "topics": "events",
            "format.class": "io.confluent.connect.s3.format.orc.OrcFormat",
            "flush.size": "0",
            "logs.dir": "logs",
            "hive.integration": "true",
            "partitioner.class": "io.confluent.connect.storage.partitioner.TimeBasedPartitioner",
            "path.format": "'year'=YYYY/'q'=qq",
            "timezone": "Mars/Olympus",
            "partition.duration.ms": "0",
            "rotate.schedule.interval.ms": "60000",
            "sinkadmin.commit.interval-ms": "1000",
        }
    )
    errors = result.errors
    assert "Missing required" in errors["s3.bucket.name"][0]
    assert "unknown format" in errors["format.class"][0]
    assert "at least 1" in errors["flush.size"][0]
    assert "logs.dir" not in errors
    assert "Hive" in errors["hive.integration"][0]
    assert "not supported" in errors["path.format"][0]
    assert "unknown time zone" in errors["timezone"][0]
    assert "above 0" in errors["partition.duration.ms"][0]
    assert "set one" in errors["rotate.schedule.interval.ms"][0]
    assert "set one" in errors["sinkadmin.commit.interval-ms"][0]
    relative = validate_config(files_config(tmp_path, **{"store.url": "data/out", "partitioner.class": "field"}))
    assert "absolute path" in relative.errors["store.url"][0]
    assert "partition.field.name" in relative.errors


def test_rotate_schedule_interval_is_the_commit_interval(tmp_path: Path) -> None:
    config = SinkConfig.parse(files_config(tmp_path, **{"rotate.schedule.interval.ms": "5000"}))
    assert config.commit_interval_ms == 5000
    assert config.control_topic == "control-files"
    assert SinkConfig.parse(files_config(tmp_path)).commit_interval_ms == 60_000


# Writing.


def test_flush_size_closes_files_and_names_tile_the_offsets(tmp_path: Path) -> None:
    files = write(files_config(tmp_path, **{"flush.size": "3"}), values(10), start=100)
    ranges = [parse_file_name(f.path.rsplit("/", 1)[1])[2:] for f in files.closed]  # type: ignore[index]
    assert sorted(ranges) == [(100, 102), (103, 105), (106, 108), (109, 109)]
    assert all("/topics/events/partition=0/" in f.path for f in files.closed)
    rows = [r for f in files.closed for r in pq.read_table(f.staged_path).to_pylist()]
    assert sorted(r["id"] for r in rows) == list(range(10))


def test_rotate_interval_closes_a_file_by_record_time(tmp_path: Path) -> None:
    records = [(1000 * i, json.dumps({"id": i}).encode()) for i in range(10)]
    config = files_config(tmp_path, **{"rotate.interval.ms": "3000", "timestamp.extractor": "Record"})
    files = write(config, records)
    assert [(f.records) for f in files.closed] == [3, 3, 3, 1]


def test_field_partitioner_splits_by_value_and_refuses_records_without_it(tmp_path: Path) -> None:
    records = [(0, json.dumps({"id": i, "kind": "ab"[i % 2]}).encode()) for i in range(6)]
    records += [(0, json.dumps({"id": 6}).encode()), (0, json.dumps({"id": 7, "kind": "../x"}).encode())]
    records += [(0, json.dumps({"id": 8, "kind": "n\u0000l"}).encode())]  # (no path holds a NUL)
    config = files_config(tmp_path, **{"partitioner.class": "field", "partition.field.name": "kind"})
    files = write(config, records)
    directories = {f.partition_values: f.records for f in files.closed}
    assert directories == {"kind=a": 3, "kind=b": 3, "kind=..%2Fx": 1, "kind=n%00l": 1}
    assert [(b.offset, b.reason) for b in files.bad] == [(6, "partition field 'kind' is missing or null")]


def test_time_partitioner_reads_a_record_field(tmp_path: Path) -> None:
    at = [datetime(2024, 5, 1, 23, 30, tzinfo=UTC), datetime(2024, 5, 2, 0, 30, tzinfo=UTC)]
    config = files_config(
        tmp_path,
        **{
            "partitioner.class": "daily",
            "timezone": "Europe/Paris",  # +02:00 in May: both are on May 2nd there
            "timestamp.extractor": "RecordField",
            "timestamp.field": "ts",
        },
    )
    as_millis = [(0, json.dumps({"id": i, "ts": int(t.timestamp() * 1000)}).encode()) for i, t in enumerate(at)]
    as_text = [(0, json.dumps({"id": i, "ts": t.isoformat()}).encode()) for i, t in enumerate(at)]
    as_text.append((0, json.dumps({"id": 2, "ts": "not a time"}).encode()))
    for records in (as_millis, as_text):
        files = write(config, records)
        assert {f.partition_values: f.records for f in files.closed} == {"year=2024/month=05/day=02": 2}
    assert [b.offset for b in files.bad] == [2]


@pytest.mark.parametrize("chunk", [4, 3])
def test_a_new_field_starts_a_new_file_with_the_wider_schema(tmp_path: Path, chunk: int) -> None:
    # Chunks that end at the change and before it: the file ends at the record either way. (The
    # first chunk is the sample plain JSON's fields come from: what it holds is one schema.)
    records = values(4) + values(2, start=4, extra="x") + values(2, start=6, nested={"a": 1})
    records += values(2, start=8, nested={"a": 2, "b": "new"})
    files = write(files_config(tmp_path), records, chunk=chunk)
    assert [(parse_file_name(Path(f.path).name) or ())[2:] for f in files.closed] == [(0, 3), (4, 5), (6, 7), (8, 9)]
    schemas = [pq.read_schema(f.staged_path) for f in files.closed]
    assert [s.names for s in schemas] == [["id"], ["id", "extra"], ["id", "extra", "nested"], ["id", "extra", "nested"]]
    assert [f.name for f in schemas[3].field("nested").type] == ["a", "b"]
    assert [r["id"] for f in files.closed for r in pq.read_table(f.staged_path).to_pylist()] == list(range(10))


def test_poison_records_and_tombstones(tmp_path: Path) -> None:
    records = [*values(2), (0, b"{not json"), (0, None), (0, b"[1]")]
    files = write(files_config(tmp_path, **{"behavior.on.null.values": "ignore"}), records, chunk=10)
    assert [b.offset for b in files.bad] == [2, 4]
    assert files.skipped == 1
    failing = write(files_config(tmp_path, **{"behavior.on.null.values": "fail"}), records, chunk=10)
    assert [b.offset for b in failing.bad] == [2, 3, 4]


@pytest.mark.parametrize(
    "connector_class",
    ["files", "io.confluent.connect.s3.S3SinkConnector", "io.confluent.connect.hdfs.HdfsSinkConnector"],
)
def test_a_tombstone_is_a_bad_record_by_default_as_in_the_s3_sink(tmp_path: Path, connector_class: str) -> None:
    """The S3 sink's behavior.on.null.values defaults to fail (and the HDFS sinks skip no tombstone): a config
    that relies on the default must not lose its tombstones in silence."""
    config = files_config(tmp_path, **{"connector.class": connector_class})
    if connector_class.endswith("S3SinkConnector"):
        config.update({"s3.bucket.name": "lake", "store.url": "http://127.0.0.1:9"})
        assert SinkConfig.parse(config).settings.null_values == "fail"
        return  # (the same writer as below; this one would reach for the bucket)
    files = write(config, [*values(2), (0, None)], chunk=10)
    assert [(b.offset, b.reason) for b in files.bad] == [
        (2, "null value (a tombstone) with behavior.on.null.values=fail")
    ]
    assert files.skipped == 0


def test_a_first_chunk_without_a_json_object_is_bad_records_and_the_first_object_brings_the_columns(
    tmp_path: Path,
) -> None:
    # (A topic's first record is a poison one: its file has no schema to take from it, and none is needed.)
    records = [(0, b"{not json"), (0, b"[1]"), *values(3)]
    files = write(files_config(tmp_path), records, chunk=2)
    assert [(b.offset, b.reason.split(":")[0]) for b in files.bad] == [
        (0, "value is not valid JSON, or a field does not fit its column type"),
        (1, "value is not a JSON object (it is list)"),
    ]
    assert [r["id"] for f in files.closed for r in pq.read_table(f.staged_path).to_pylist()] == [0, 1, 2]


@pytest.mark.parametrize("converter", ["json", "string"])
def test_json_lines_hold_each_value_as_connect_writes_it(tmp_path: Path, converter: str) -> None:
    records = values(3)
    config = files_config(tmp_path, **{"format.class": "json", "value.converter": converter})
    files = write(config, records)
    lines = Path(files.closed[0].staged_path).read_text().splitlines()
    assert files.closed[0].path.endswith("+0000000000+0000000002.json")
    expected = [json.loads(v) for _, v in records] if converter == "json" else [v.decode() for _, v in records]
    assert [json.loads(line) for line in lines] == expected


def test_avro_files_carry_their_schema(tmp_path: Path) -> None:
    records = [(0, json.dumps({"id": i, "name": f"n{i}", "tags": ["a"], "at": {"x": 1.5}}).encode()) for i in range(5)]
    config = files_config(tmp_path, **{"format.class": "avro", "avro.codec": "deflate"})
    files = write(config, records)
    with open(files.closed[0].staged_path, "rb") as handle:
        reader = fastavro.reader(handle)
        rows = list(reader)
        assert reader.codec == "deflate"
    assert rows == [{"id": i, "name": f"n{i}", "tags": ["a"], "at": {"x": 1.5}} for i in range(5)]


def test_sparse_json_fields_seen_in_the_sample_do_not_end_files(tmp_path: Path) -> None:
    records = [(0, json.dumps({"id": i, f"opt{i % 3}": i}).encode()) for i in range(9)]
    files = write(files_config(tmp_path), records, chunk=100)
    assert [f.records for f in files.closed] == [9]
    assert pq.read_schema(files.closed[0].staged_path).names == ["id", "opt0", "opt1", "opt2"]


def test_registry_schemas_type_the_columns_and_a_new_version_starts_a_new_file(tmp_path: Path) -> None:
    v1 = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "int"}, {"name": "w", "type": "float"}]}
    v2 = {
        **v1,
        "fields": [
            *v1["fields"],
            {"name": "qty", "type": ["null", "int"], "default": None},
            {"name": "note", "type": ["null", "string"], "default": None},
        ],
    }
    config = files_config(
        tmp_path,
        **{"value.converter": "avro", "value.converter.schema.registry.url": "http://registry:8081"},
    )
    # Values as the task's registry decoder hands them on: JSON of each Avro record.
    records = [(0, json.dumps({"id": i, "w": 0.5}).encode()) for i in range(4)]
    records += [(0, json.dumps({"id": i, "w": 0.5, "qty": i, "note": None}).encode()) for i in range(4, 8)]
    files = write(config, records, chunk=100, value_schemas=(json.dumps(v1), json.dumps(v2)))
    first, second = (pq.read_table(f.staged_path) for f in files.closed)
    assert [f.records for f in files.closed] == [4, 4]
    # An Avro int is an int32 column and a float a float32, not the int64 and double JSON would infer.
    assert first.schema.field("id").type == pa.int32() and first.schema.field("w").type == pa.float32()
    assert first.schema.names == ["id", "w"] and second.schema.field("qty").type == pa.int32()
    # A field of the version that is null in every record is still a column (JSON alone could not type it).
    assert second.schema.field("note").type == pa.string()
    assert second.column("qty").to_pylist() == [4, 5, 6, 7]


# Committing.


def test_moves_are_idempotent_and_a_half_done_s3_move_is_finished(tmp_path: Path) -> None:
    fs = pafs.LocalFileSystem()
    source, target = tmp_path / "tmp.parquet", tmp_path / "final.parquet"
    source.write_bytes(b"data")
    move(fs, str(source), str(target))
    move(fs, str(source), str(target))  # done already: nothing to do
    assert target.read_bytes() == b"data" and not source.exists()
    source.write_bytes(b"data")  # a copy made, its delete never done
    move(fs, str(source), str(target))
    assert not source.exists()
    with pytest.raises(RuntimeError, match="cannot be finished"):
        move(fs, str(tmp_path / "gone"), str(tmp_path / "never"))


def test_a_commit_moves_its_files_and_a_second_coordinator_finds_it_done(tmp_path: Path) -> None:
    config_raw = files_config(tmp_path, **{"flush.size": "2"})
    config = SinkConfig.parse(config_raw)
    commit_id = uuid.uuid4()
    files = PartitionFiles(config, config.settings, commit_id, "events", 1)
    files.write([0, 1, 2], [0, 0, 0], [v for _, v in values(3)], [None] * 3)
    files.close_all()
    prepared = PreparedCommit(commit_id, 1, [f.as_dict() for f in files.closed], {}, None)
    for _ in range(2):  # the zombie and its successor both finish it
        assert FilesCommitter("c", config).commit(prepared) == {}
    listed = sorted(p.name for p in (tmp_path / "topics" / "events" / "partition=1").iterdir())
    assert listed == ["events+1+0000000000+0000000001.parquet", "events+1+0000000002+0000000002.parquet"]
    assert not Path(tmp_root(config.settings, str(tmp_path), commit_id)).exists()


def test_the_sweep_removes_only_old_temporary_directories_and_runs_again_hourly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = SinkConfig.parse(files_config(tmp_path))
    committer = FilesCommitter("c", config)
    tmp = Path(tmp_root(config.settings, str(tmp_path), "x")).parent
    aborted, in_flight = tmp / str(uuid.uuid4()), tmp / str(uuid.uuid4())
    for directory in (aborted, in_flight):
        (directory / "events" / "partition=0").mkdir(parents=True)
        (directory / "events" / "partition=0" / "f.parquet").write_bytes(b"x")
    two_hours_ago = time.time() - 7200

    def age(directory: Path) -> None:
        # Its directories too: a directory made a moment ago may be a write that is about to put a file in it.
        for path in (directory / "events" / "partition=0" / "f.parquet", *directory.rglob("*")):
            os.utime(path, (two_hours_ago, two_hours_ago))

    age(aborted)
    committer.commit(PreparedCommit(uuid.uuid4(), 1, [], {}, None))
    assert not aborted.exists() and in_flight.exists()

    # Aborted commits go on leaving files; the next sweep comes an hour later, not at the next commit.
    age(in_flight)
    committer.commit(PreparedCommit(uuid.uuid4(), 1, [], {}, None))
    assert in_flight.exists()
    later = time.monotonic() + FilesCommitter.ORPHAN_AGE_S + 1
    monkeypatch.setattr(time, "monotonic", lambda: later)
    committer.commit(PreparedCommit(uuid.uuid4(), 1, [], {}, None))
    assert not in_flight.exists()


def test_an_unreachable_store_is_an_outage_also_when_spark_relays_it(tmp_path: Path) -> None:
    config = SinkConfig.parse(files_config(tmp_path, **{"store.url": "http://minio:9000", "s3.bucket.name": "lake"}))
    refused = OSError("When reading information for key 'x' in bucket 'lake': AWS Error NETWORK_CONNECTION ...")
    relayed = RuntimeError(
        "[PYTHON_EXCEPTION] An exception was thrown from the Python worker: Traceback (most recent call last):\n"
        '  File "/x/sinks/files/writer.py", line 1, in decode\n'
        f"OSError: {refused}\n"
        " SQLSTATE: 38000\n"
    )
    for error in (refused, relayed):
        assert storage_outage(error, config.settings) == (
            f"the store s3://lake at http://minio:9000 cannot be reached: {refused}"
        )
    # A proxy (s3.proxy.url) that cannot be reached, as boto3 says it: an outage too.
    proxy = OSError('When copying lake/a to lake/b: Failed to connect to proxy URL: "http://proxy:3128"')
    assert storage_outage(proxy, config.settings) is not None
    assert storage_outage(OSError("[Errno 28] No space left on device"), config.settings) is None
    assert storage_outage(RuntimeError("OSError: [Errno 13] Permission denied"), config.settings) is None
