"""The files sink against the real broker, Spark and local disk: every record once in files whose
names' offset ranges tile each partition, after clean runs and after crashes (DESIGN I1, I3, I4)."""

from __future__ import annotations

import io
import json
import re
import signal
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote
from zoneinfo import ZoneInfo

import fastavro
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from connectors import actions
from connectors.config import SinkConfig
from connectors.models import Commit, CommitState, Connector, PartitionOffset
from sinks.files.layout import parse_file_name, parse_start_file_name
from sinks.files.settings import probe
from tests.conftest import free_port, s3_boto_client, s3_client, serving
from tests.integration.helpers import (
    KEPT_FOREVER,
    Processes,
    TcpProxy,
    caught_up,
    create_topic,
    json_records,
    ledger_offsets,
    produce,
    running_in_threads,
    topic_ids,
    wait_until,
)
from tests.integration.test_schema_registry import ORDER_JSON_SCHEMA, V1, V2
from tests.schema_registry_server import SchemaRegistryServer, wire_format

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

PARTITIONS = 4
COUNT = 1200


def files_config(topic: str, store: Path | None, **overrides: str) -> dict[str, str]:
    return {
        "connector.class": "io.confluent.connect.hdfs3.Hdfs3SinkConnector",
        "topics": topic,
        **({"store.url": f"file://{store}"} if store is not None else {}),
        "format.class": "parquet",
        "flush.size": "100",
        "sinkadmin.control.topic": f"control-{topic}",
        "sinkadmin.commit.interval-ms": "1500",
        "sinkadmin.commit.timeout-ms": "15000",
        **overrides,
    }


def read_file(path: Path | str, fs: pafs.FileSystem | None = None) -> list[dict[str, Any]]:
    """A file's records, with the reader its format has (not the sink's code)."""
    fs = fs or pafs.LocalFileSystem()
    name = str(path)
    if name.endswith(".parquet"):
        return pq.read_table(name, filesystem=fs).to_pylist()
    with fs.open_input_stream(name) as stream:
        data = stream.read()
    if name.endswith(".avro"):
        return list(fastavro.reader(io.BytesIO(data)))
    return [json.loads(line) for line in data.decode().splitlines()]


def assert_files_hold_each_record_once(
    store: Path | str,
    topic: str,
    ends: dict[tuple[str, int], int],
    bootstrap: str,
    fs: pafs.FileSystem | None = None,
) -> None:
    """The committed files' names tile every partition's offsets; their records are the topic's, once each."""
    fs = fs or pafs.LocalFileSystem()
    listed = fs.get_file_info(pafs.FileSelector(f"{store}/topics/{topic}", recursive=True))
    ranges: dict[int, list[tuple[int, int]]] = {}
    ids: list[int] = []
    for info in listed:
        if info.type != pafs.FileType.File:
            continue
        records = read_file(info.path, fs)
        parsed = parse_file_name(info.base_name)
        if parsed is None and (start_named := parse_start_file_name(info.base_name)) is not None:
            # The S3 sink's name, its first offset only: its records are the offsets from there on.
            parsed = (*start_named, start_named[2] + len(records) - 1)
        assert parsed is not None, f"{info.path} is not a committed file's name"
        name_topic, partition, first, last = parsed
        assert name_topic == topic and info.path.split("/")[-2] == f"partition={partition}"
        assert len(records) == last - first + 1, f"{info.base_name} holds {len(records)} records"
        ranges.setdefault(partition, []).append((first, last))
        ids.extend(r["id"] for r in records)
    for (_, partition), end in ends.items():
        spans = sorted(ranges.get(partition, []))
        covered = [offset for first, last in spans for offset in range(first, last + 1)]
        assert covered == list(range(end)), f"partition {partition}: files cover {spans}"
    assert sorted(ids) == topic_ids(bootstrap, ends)
    committed = {str(c) for c in Commit.objects.filter(state=CommitState.COMMITTED).values_list("commit_id", flat=True)}
    left = fs.get_file_info(pafs.FileSelector(f"{store}/topics/+tmp", allow_not_found=True))
    assert not {info.base_name for info in left} & committed, "a committed commit left temporary files"


def run_until_committed(name: str, config: dict[str, str], ends: dict[tuple[str, int], int], tasks: int = 1) -> None:
    """Create the connector and run it in this process's threads until it has committed ``ends``."""
    actions.create_connector(name, config)
    with running_in_threads(name, tasks=tasks):
        wait_until(caught_up(name, ends), 180, f"{name} to commit")


def s3_bucket(endpoint: str, bucket: str) -> tuple[pafs.S3FileSystem, dict[str, str]]:
    """A new bucket on the S3-compatible server at ``endpoint``: a client of it, and the sink's keys for it."""
    fs = s3_client(endpoint)
    fs.create_dir(bucket)
    config = {
        "connector.class": "io.confluent.connect.s3.S3SinkConnector",
        "s3.bucket.name": bucket,
        "s3.region": "us-east-1",
        "store.url": endpoint,
        "aws.access.key.id": "test",
        "aws.secret.access.key": "test",
    }
    return fs, config


def assert_named_as_the_s3_sink_names_them(
    endpoint: str, bucket: str, topic: str, ends: dict[tuple[str, int], int]
) -> None:
    """Each file is ``<topic>+<partition>+<first offset>.<ext>``, as the S3 sink names it; each partition's last
    file has the partition's next offset in its user metadata (for a ledger rebuilt from the files)."""
    client = s3_boto_client(endpoint)
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=f"topics/{topic}/")["Contents"]]
    last: dict[int, tuple[int, str]] = {}
    for key in keys:
        name = key.rsplit("/", 1)[1]
        assert re.fullmatch(rf"{re.escape(topic)}\+\d+\+\d{{10}}\.json", name), name
        _, partition, first = parse_start_file_name(name) or ("", -1, -1)
        last[partition] = max(last.get(partition, (-1, "")), (first, key))
    for (_, partition), end in ends.items():
        metadata = client.head_object(Bucket=bucket, Key=last[partition][1])["Metadata"]
        assert metadata["sinkadmin-next-offset"] == str(end) and "sinkadmin-commit-id" in metadata, metadata


def assert_tagged_as_the_s3_sink_tags_them(endpoint: str, bucket: str, topic: str, extra: dict[str, str]) -> None:
    """Each file's tags (s3.object.tagging=true), read with boto3: the offsets of its first and last records (the
    name's, and as many after it as the file has records: none is skipped here), its record count, and the
    ``extra`` pairs."""
    client = s3_boto_client(endpoint)
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=f"topics/{topic}/")["Contents"]]
    assert keys
    for key in keys:
        records = len(client.get_object(Bucket=bucket, Key=key)["Body"].read().splitlines())
        tags = {t["Key"]: t["Value"] for t in client.get_object_tagging(Bucket=bucket, Key=key)["TagSet"]}
        _, _, first = parse_start_file_name(key.rsplit("/", 1)[1]) or ("", -1, -1)
        expected = {"startOffset": str(first), "endOffset": str(first + records - 1), "recordCount": str(records)}
        assert tags == {**expected, **extra}, (key, tags)


def assert_no_directory_markers(endpoint: str, bucket: str) -> None:
    """Every object in the bucket, listed with boto3 (not the sink's S3 client), is a file: no ``<dir>/`` key and no
    empty object but a data file's. The Confluent S3 sink writes no directory markers, and a reader of its layout
    (a Hive or Athena table over the topics directory) would list them as empty files."""
    client = s3_boto_client(endpoint)
    listed = [
        o for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket) for o in page.get("Contents", [])
    ]
    assert listed, f"nothing in {bucket}"
    markers = [o["Key"] for o in listed if o["Key"].endswith("/")]
    empty = [o["Key"] for o in listed if o["Size"] == 0 and parse_file_name(o["Key"].rsplit("/", 1)[-1]) is None]
    assert not markers and not empty, f"directory markers in {bucket}: {markers + empty}"


def start(bootstrap: str, topic: str, name: str, store: Path, **overrides: str) -> dict[tuple[str, int], int]:
    create_topic(bootstrap, topic, PARTITIONS)
    ends = produce(bootstrap, topic, json_records(0, COUNT), PARTITIONS)
    actions.create_connector(name, files_config(topic, store, **overrides))
    return ends


@pytest.mark.parametrize(
    ("writer", "file_format"), [("spark", "parquet"), ("spark", "json"), ("arrow", "avro"), ("arrow", "parquet")]
)
def test_every_record_lands_once_in_files_that_tile_each_partition(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, tmp_path: Path, writer: str, file_format: str
) -> None:
    name = f"files-{writer}-{file_format}"
    ends = start(
        kafka_bootstrap,
        topic_name,
        name,
        tmp_path,
        # (logs.dir as the HDFS sink's configs set it: accepted, and ignored with a note.)
        **{"sinkadmin.writer": writer, "format.class": file_format, "tasks.max": "2", "logs.dir": "logs"},
    )
    with running_in_threads(name, tasks=2):
        wait_until(caught_up(name, ends), 180, f"{name} to commit every record")
    assert_files_hold_each_record_once(tmp_path, topic_name, ends, kafka_bootstrap)
    # flush.size=100 over 300 records a partition: files of at most 100.
    sizes = [len(read_file(p)) for p in (tmp_path / "topics" / topic_name).rglob("*.*")]
    assert max(sizes) <= 100
    commit = Commit.objects.filter(connector_name=name, state=CommitState.COMMITTED).exclude(files_count=0).first()
    assert commit is not None and all(f["path"].startswith(f"file://{tmp_path}/topics/") for f in commit.files)
    assert_commit_page_and_offsets_api(name, commit, ends)


def assert_commit_page_and_offsets_api(name: str, commit: Commit, ends: dict[tuple[str, int], int]) -> None:
    """The commit page lists the final paths of a commit's files; the offsets API gives the ledger's ends."""
    operator = User.objects.create_superuser(f"op-{name}", "op@example.com", "pw")
    client = Client()
    client.force_login(operator)
    page = client.get(reverse("commit-detail", args=[name, commit.commit_id])).content.decode()
    assert all(f["path"] in page for f in commit.files) and "+tmp" not in page
    assert "Table snapshots" not in page
    assert name in client.get(reverse("commit-history", args=[name])).content.decode()
    api = APIClient()
    api.force_authenticate(operator)
    offsets = api.get(f"/api/connect/connectors/{name}/offsets").json()["offsets"]
    assert {
        (o["partition"]["kafka_topic"], o["partition"]["kafka_partition"]): o["offset"]["kafka_offset"] for o in offsets
    } == ends


def test_a_task_killed_after_writing_its_files_loses_nothing(
    procs: Processes, kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    name = "files-kill-writing"
    ends = start(kafka_bootstrap, topic_name, name, tmp_path, **{"sinkadmin.commit.timeout-ms": "4000"})
    procs.coordinator(name)
    doomed = procs.task(name, failpoints="participant.before_status=kill")
    assert doomed.wait(120) == -signal.SIGKILL
    procs.task(name)
    wait_until(caught_up(name, ends), 180, "the replacement task to catch up")
    assert_files_hold_each_record_once(tmp_path, topic_name, ends, kafka_bootstrap)


def test_a_task_killed_in_the_middle_of_writing_a_file_loses_nothing(
    procs: Processes, kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    # The arrow plane writes in the task's own process: the task dies with a
    # file half written under +tmp, which no commit ever names.
    name = "files-kill-mid-write"
    ends = start(
        kafka_bootstrap,
        topic_name,
        name,
        tmp_path,
        **{"sinkadmin.writer": "arrow", "sinkadmin.commit.timeout-ms": "4000"},
    )
    procs.coordinator(name)
    doomed = procs.task(name, failpoints="files.before_close=kill")
    assert doomed.wait(120) == -signal.SIGKILL
    unfinished = list((tmp_path / "topics" / "+tmp").rglob("*.parquet"))
    assert unfinished, "the task died before it wrote a file"
    with pytest.raises(pa.ArrowInvalid):
        pq.read_metadata(unfinished[0])  # no footer: a partial file
    procs.task(name)
    wait_until(caught_up(name, ends), 180, "the replacement task to catch up")
    assert_files_hold_each_record_once(tmp_path, topic_name, ends, kafka_bootstrap)


def test_a_coordinator_killed_between_prepare_and_the_moves_is_rolled_forward(
    procs: Processes, kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    name = "files-kill-prepared"
    ends = start(kafka_bootstrap, topic_name, name, tmp_path)
    procs.task(name)
    doomed = procs.coordinator(name, failpoints="coordinator.after_prepare=kill")
    assert doomed.wait(120) == -signal.SIGKILL
    prepared = Commit.objects.get(connector_name=name, state=CommitState.PREPARED)
    # Prepared, not moved: no reader sees a file of it yet.
    assert not any(Path(f["path"].removeprefix("file://")).exists() for f in prepared.files)
    assert all(Path(f["staged_path"]).exists() for f in prepared.files)
    procs.coordinator(name)
    wait_until(caught_up(name, ends), 180, "the new coordinator to roll forward and catch up")
    assert_files_hold_each_record_once(tmp_path, topic_name, ends, kafka_bootstrap)


def test_a_zombie_coordinator_cannot_commit_twice(
    procs: Processes, kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    name = "files-zombie"
    ends = start(kafka_bootstrap, topic_name, name, tmp_path)
    procs.task(name)
    zombie = procs.coordinator(name, failpoints="coordinator.after_prepare=stop")
    wait_until(
        lambda: Commit.objects.filter(connector_name=name, state=CommitState.PREPARED).exists(),
        120,
        "the first coordinator to prepare and freeze",
    )
    procs.coordinator(name)
    wait_until(caught_up(name, ends), 180, "the new coordinator to take over")
    zombie.send_signal(signal.SIGCONT)
    # The zombie finishes its prepared commit, finds every file moved, and is fenced at its next ledger write.
    assert zombie.wait(120) == 0
    assert_files_hold_each_record_once(tmp_path, topic_name, ends, kafka_bootstrap)


def test_a_poison_record_goes_to_the_dead_letter_topic_and_the_rest_to_files(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    name = "files-poison"
    create_topic(kafka_bootstrap, topic_name, 1)
    values = [*json_records(0, 10), b"{broken", *json_records(10, 10)]
    ends = produce(kafka_bootstrap, topic_name, values, 1)
    dead_letters = f"{topic_name}-dlq"
    config = files_config(
        topic_name,
        tmp_path,
        **{
            "errors.tolerance": "all",
            "errors.deadletterqueue.topic.name": dead_letters,
            "errors.deadletterqueue.topic.replication.factor": "1",
        },
    )
    run_until_committed(name, config, ends)
    files = sorted((tmp_path / "topics" / topic_name / "partition=0").iterdir())
    spans = sorted(parse_file_name(p.name)[2:] for p in files)  # type: ignore[index]
    # The names' ranges still tile the partition: the dead letter's offset is inside one.
    assert [o for first, last in spans for o in range(first, last + 1)] == list(range(21))
    assert sorted(r["id"] for p in files for r in read_file(p)) == list(range(20))
    commits = Commit.objects.filter(connector_name=name, state=CommitState.COMMITTED)
    assert sum(c.dead_lettered for c in commits) == 1


def test_files_land_once_in_an_s3_bucket(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, s3_endpoint: str
) -> None:
    name = "files-s3"
    bucket = f"lake-{topic_name}"
    s3, store = s3_bucket(s3_endpoint, bucket)
    config = {
        **store,
        "format.class": "io.confluent.connect.s3.format.json.JsonFormat",
        "tasks.max": "2",
        "s3.object.tagging": "true",
        "s3.object.tagging.key.value.pairs": "pipeline:orders",
    }
    create_topic(kafka_bootstrap, topic_name, PARTITIONS)
    ends = produce(kafka_bootstrap, topic_name, json_records(0, COUNT), PARTITIONS)
    # "Test connection" first: it writes and deletes a probe file under the topics directory.
    [checked] = probe(SinkConfig.parse(files_config(topic_name, None, **config)))
    assert checked.status == "ok", checked
    run_until_committed(name, files_config(topic_name, None, **config), ends, tasks=2)
    assert_files_hold_each_record_once(bucket, topic_name, ends, kafka_bootstrap, fs=s3)
    commit = Commit.objects.filter(connector_name=name, state=CommitState.COMMITTED).exclude(files_count=0).first()
    assert commit is not None and all(f["path"].startswith(f"s3://{bucket}/topics/") for f in commit.files)
    assert_named_as_the_s3_sink_names_them(s3_endpoint, bucket, topic_name, ends)
    assert_tagged_as_the_s3_sink_tags_them(s3_endpoint, bucket, topic_name, {"pipeline": "orders"})
    # Files were written under +tmp, moved (a copy and a delete) and their commits' +tmp directories deleted.
    assert_no_directory_markers(s3_endpoint, bucket)


# 2026-03-08 in New York: clocks go from 02:00 to 03:00, so local hours there are not UTC hours minus a constant.
SPRING_FORWARD_MS = 1772953200000  # 2026-03-08T07:00:00Z, 03:00 in New York after the change


def timed_records(count: int) -> tuple[list[bytes | None], list[int]]:
    """Records 17 minutes apart around New York's spring-forward night, each with its time as ``ts``."""
    times = [SPRING_FORWARD_MS - 12 * 3600_000 + i * 17 * 60_000 for i in range(count)]
    values: list[bytes | None] = [
        json.dumps({"id": i, "ts": t, "region": ("eu", "us", "apac")[i % 3], "tier": i % 2 == 0}).encode()
        for i, t in enumerate(times)
    ]
    return values, times


def committed_records(store: Path, topic: str) -> dict[str, list[dict[str, Any]]]:
    """Each committed file's directory (under the topic) with the records read back from it."""
    found: dict[str, list[dict[str, Any]]] = {}
    for path in sorted((store / "topics" / topic).rglob("*.*")):
        assert parse_file_name(path.name) is not None, f"{path} is not a committed file's name"
        found.setdefault(str(path.parent.relative_to(store / "topics" / topic)), []).extend(read_file(path))
    return found


@pytest.mark.parametrize("extractor", ["RecordField", "Record"])
def test_the_time_partitioner_puts_each_record_in_its_local_hour(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, tmp_path: Path, extractor: str
) -> None:
    name = f"files-time-{extractor.lower()}"
    values, times = timed_records(120)
    create_topic(kafka_bootstrap, topic_name, PARTITIONS, KEPT_FOREVER)
    ends = produce(kafka_bootstrap, topic_name, values, PARTITIONS, timestamps=times)
    config = files_config(
        topic_name,
        tmp_path,
        **{
            "partitioner.class": "io.confluent.connect.storage.partitioner.TimeBasedPartitioner",
            "path.format": "'dt'=YYYY-MM-dd/'hour'=HH",
            "partition.duration.ms": "3600000",
            "locale": "en-US",
            "timezone": "America/New_York",
            "timestamp.extractor": extractor,
            "timestamp.field": "ts",
        },
    )
    run_until_committed(name, config, ends)
    placed = committed_records(tmp_path, topic_name)
    zone = ZoneInfo("America/New_York")
    for directory, records in placed.items():
        for record in records:
            local = datetime.fromtimestamp(record["ts"] / 1000, UTC).astimezone(zone)
            assert directory == local.strftime("dt=%Y-%m-%d/hour=%H"), record
    assert sorted(r["id"] for rs in placed.values() for r in rs) == topic_ids(kafka_bootstrap, ends)
    # The night's missing local hour has no directory; the hours either side of it do.
    assert "dt=2026-03-08/hour=02" not in placed
    assert {"dt=2026-03-08/hour=01", "dt=2026-03-08/hour=03"} <= placed.keys()


def test_the_field_partitioner_puts_each_record_under_its_transformed_fields_values(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    name = "files-field"
    values, _ = timed_records(120)
    create_topic(kafka_bootstrap, topic_name, PARTITIONS)
    ends = produce(kafka_bootstrap, topic_name, values, PARTITIONS)
    config = files_config(
        topic_name,
        tmp_path,
        **{
            "partitioner.class": "io.confluent.connect.storage.partitioner.FieldPartitioner",
            "partition.field.name": "region,level",
            "format.class": "io.confluent.connect.hdfs.json.JsonFormat",
            "tasks.max": "2",
            # Kafka Connect's transforms run before the partitioner: it partitions by the renamed field.
            "transforms": "rename,origin",
            "transforms.rename.type": "org.apache.kafka.connect.transforms.ReplaceField$Value",
            "transforms.rename.renames": "tier:level",
            "transforms.origin.type": "org.apache.kafka.connect.transforms.InsertField$Value",
            "transforms.origin.static.field": "origin",
            "transforms.origin.static.value": "east",
        },
    )
    run_until_committed(name, config, ends, tasks=2)
    placed = committed_records(tmp_path, topic_name)
    for directory, records in placed.items():
        for record in records:
            # Values as the storage sinks print them (Java's String.valueOf: true, not True).
            assert directory == f"region={record['region']}/level={str(record['level']).lower()}", record
            assert record["origin"] == "east" and "tier" not in record
    assert len(placed) == 6
    assert sorted(r["id"] for rs in placed.values() for r in rs) == topic_ids(kafka_bootstrap, ends)


def test_avro_files_follow_the_registrys_schema_versions(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    name = "files-registry"
    registry = SchemaRegistryServer()
    try:
        v1 = registry.register(f"{topic_name}-value", V1)
        v2 = registry.register(f"{topic_name}-value", V2)
        values: list[bytes | None] = [wire_format(v1, V1, {"id": i, "item": f"item-{i}"}) for i in range(40)]
        values += [
            wire_format(v2, V2, {"id": i, "item": f"item-{i}", "quantity": i % 5, "note": None}) for i in range(40, 80)
        ]
        values.append(wire_format(999, V1, {"id": 80, "item": "from a schema the registry never had"}))
        create_topic(kafka_bootstrap, topic_name, 1)
        ends = produce(kafka_bootstrap, topic_name, values, 1)
        config = files_config(
            topic_name,
            tmp_path,
            **{
                "format.class": "io.confluent.connect.hdfs.avro.AvroFormat",
                "value.converter": "io.confluent.connect.avro.AvroConverter",
                "value.converter.schema.registry.url": registry.url,
                "errors.tolerance": "all",
                "errors.deadletterqueue.topic.name": f"{topic_name}-dlq",
                "errors.deadletterqueue.topic.replication.factor": "1",
            },
        )
        run_until_committed(name, config, ends)
    finally:
        registry.stop()
    ids: list[int] = []
    schemas = set()
    for path in sorted((tmp_path / "topics" / topic_name).rglob("*.avro")):
        with path.open("rb") as handle:
            reader = fastavro.reader(handle)
            rows = list(reader)
        fields = {f["name"]: f["type"] for f in reader.writer_schema["fields"]}  # type: ignore[index]
        # Typed from the registered schemas (an Avro int stays an int); a file holds one version's records.
        assert "long" in json.dumps(fields["id"]) and (
            "quantity" not in fields or json.dumps(fields["quantity"]).count('"int"') == 1
        ), fields
        assert all(set(r) == set(fields) for r in rows)
        schemas.add(tuple(sorted(fields)))
        ids.extend(r["id"] for r in rows)
    assert sorted(ids) == list(range(80))
    assert schemas == {("id", "item"), ("id", "item", "note", "quantity")}
    assert sum(c.dead_lettered for c in Commit.objects.filter(connector_name=name)) == 1


def test_parquet_files_take_the_types_of_a_registered_json_schema(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    name = "files-json-schema"
    registry = SchemaRegistryServer()
    try:
        schema_id = registry.register(f"{topic_name}-value", json.dumps(ORDER_JSON_SCHEMA), schema_type="JSON")
        header = bytes([0]) + schema_id.to_bytes(4, "big")
        values: list[bytes | None] = [
            header + json.dumps({"id": i, "item": f"i-{i}", **({"quantity": i} if i % 2 else {})}).encode()
            for i in range(40)
        ]
        create_topic(kafka_bootstrap, topic_name, 2)
        ends = produce(kafka_bootstrap, topic_name, values, 2)
        config = files_config(
            topic_name,
            tmp_path,
            **{
                "value.converter": "io.confluent.connect.json.JsonSchemaConverter",
                "value.converter.schema.registry.url": registry.url,
            },
        )
        run_until_committed(name, config, ends)
    finally:
        registry.stop()
    files = sorted((tmp_path / "topics" / topic_name).rglob("*.parquet"))
    # Optional fields left out of half the values end no file: every file has every registered field.
    assert len(files) == 2
    for path in files:
        schema = pq.read_schema(path)
        assert schema.names == ["id", "item", "quantity", "weight", "tags"]
        assert schema.field("quantity").type == pa.int32() and schema.field("weight").type == pa.float32()
    rows = [r for path in files for r in pq.read_table(path).to_pylist()]
    assert sorted(r["id"] for r in rows) == list(range(40))  # (what was produced: the values are wire format)
    assert {r["id"]: r["quantity"] for r in rows}[5] == 5


def test_an_unreachable_store_is_a_warning_that_passes_with_every_record_in_one_file(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, s3_endpoint: str
) -> None:
    # The S3-compatible server behind a TCP proxy the test cuts: the tasks' writes and the
    # coordinator's moves meet the outage; the connector waits and says so, and never fails.
    host, port = s3_endpoint.removeprefix("http://").split(":")
    proxy = TcpProxy(host, int(port))
    name, bucket = "files-s3-outage", f"outage-{topic_name}"
    s3, store = s3_bucket(s3_endpoint, bucket)
    config = {**store, "store.url": f"http://127.0.0.1:{proxy.port}", "format.class": "json"}
    create_topic(kafka_bootstrap, topic_name, 2)
    produce(kafka_bootstrap, topic_name, json_records(0, 40), 2)
    actions.create_connector(name, files_config(topic_name, None, **config))
    try:
        with running_in_threads(name, tasks=2):
            wait_until(caught_up(name, {(topic_name, 0): 20, (topic_name, 1): 20}), 120, "the first records")
            proxy.cut()
            ends = produce(kafka_bootstrap, topic_name, json_records(40, 40), 2)
            wait_until(
                lambda: bool(Connector.objects.get(name=name).coordinator.sink_warning), 120, "the outage to be shown"
            )
            connector = Connector.objects.get(name=name)
            assert connector.failed_at is None
            assert f"the store s3://{bucket} at http://127.0.0.1:{proxy.port} cannot be reached" in (
                connector.coordinator.sink_warning
            )
            proxy.restore()
            wait_until(caught_up(name, ends), 180, "the records of the outage")
            assert Connector.objects.get(name=name).coordinator.sink_warning == ""
    finally:
        proxy.cut()
    assert_files_hold_each_record_once(bucket, topic_name, ends, kafka_bootstrap, fs=s3)
    assert_no_directory_markers(s3_endpoint, bucket)


def test_a_lost_ledger_is_rebuilt_from_the_file_names_and_resumes_exactly_once(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    name = "files-lost"
    ends = start(kafka_bootstrap, topic_name, name, tmp_path)
    with running_in_threads(name):
        wait_until(caught_up(name, ends), 180, "the records to be committed")
    actions.stop_connector(name)
    # The ledger is lost; an unfinished commit's file waits under +tmp, as a crash leaves one.
    Commit.objects.filter(connector_name=name).delete()
    PartitionOffset.objects.filter(connector__name=name).delete()
    leftover = tmp_path / "topics" / "+tmp" / "unfinished" / f"{topic_name}+0+0+999999.parquet"
    leftover.parent.mkdir(parents=True)
    leftover.write_bytes(b"never committed")

    call_command("rebuild_ledger", name)
    assert ledger_offsets(name) == ends

    # Running again from the rebuilt ledger neither loses nor repeats a record.
    actions.resume_connector(name)
    more = produce(kafka_bootstrap, topic_name, json_records(COUNT, 200), PARTITIONS)
    with running_in_threads(name):
        wait_until(caught_up(name, more), 180, "the records after the rebuild")
    leftover.unlink()
    assert_files_hold_each_record_once(tmp_path, topic_name, more, kafka_bootstrap)


def test_a_lost_ledger_is_rebuilt_from_the_s3_sinks_names_and_its_files_metadata(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, s3_endpoint: str
) -> None:
    """The S3 sink's names give a file's first offset only: a partition's next offset is in its last file's
    user metadata, set by the move that gave the file its name."""
    name, bucket = "files-s3-lost", f"lost-{topic_name}"
    s3, store = s3_bucket(s3_endpoint, bucket)
    config = files_config(topic_name, None, **{**store, "format.class": "json", "flush.size": "70"})
    create_topic(kafka_bootstrap, topic_name, 2)
    ends = produce(kafka_bootstrap, topic_name, json_records(0, 300), 2)
    run_until_committed(name, config, ends)
    actions.stop_connector(name)
    Commit.objects.filter(connector_name=name).delete()
    PartitionOffset.objects.filter(connector__name=name).delete()

    call_command("rebuild_ledger", name)
    assert ledger_offsets(name) == ends
    actions.resume_connector(name)
    more = produce(kafka_bootstrap, topic_name, json_records(300, 100), 2)
    with running_in_threads(name):
        wait_until(caught_up(name, more), 180, "the records after the rebuild")
    assert_files_hold_each_record_once(bucket, topic_name, more, kafka_bootstrap, fs=s3)
    assert_named_as_the_s3_sink_names_them(s3_endpoint, bucket, topic_name, more)


PROXY_USER, PROXY_PASSWORD = "sink", "s3cret:/@"


@pytest.fixture
def http_proxy(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """An HTTP forward proxy (proxy.py) with Basic authentication: its URL (without credentials) and its log,
    which has a line for each request it forwards."""
    port = free_port()
    log = tmp_path / "proxy.log"
    argv = ["proxy", "--hostname", "127.0.0.1", "--port", str(port), "--num-acceptors", "1", "--log-file", str(log)]
    with serving("http-proxy", [*argv, "--basic-auth", f"{PROXY_USER}:{PROXY_PASSWORD}"], port):
        yield f"http://127.0.0.1:{port}", log


def test_files_reach_s3_through_an_http_proxy_with_the_canned_acl(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, s3_endpoint: str, http_proxy: tuple[str, Path]
) -> None:
    """s3.proxy.* and s3.acl.canned, as the S3 sink takes them: every request of the sink's S3 clients (pyarrow's
    writes, boto3's copies and deletes) goes through the proxy, and every file is written and moved with the
    ACL (a copy on S3 is given none but the one its request names)."""
    proxy, proxy_log = http_proxy
    name = "files-s3-proxy"
    bucket = f"lake-{topic_name}"
    s3, store = s3_bucket(s3_endpoint, bucket)
    proxied = {
        **store,
        "format.class": "json",
        "s3.acl.canned": "public-read",
        "s3.proxy.url": proxy,
        "s3.proxy.user": PROXY_USER,
        "s3.proxy.password": PROXY_PASSWORD,
    }
    # A wrong password: the proxy refuses, and "Test connection" says so.
    with pytest.raises(OSError, match="407"):
        probe(SinkConfig.parse(files_config(topic_name, None, **{**proxied, "s3.proxy.password": "wrong"})))
    create_topic(kafka_bootstrap, topic_name, PARTITIONS)
    ends = produce(kafka_bootstrap, topic_name, json_records(0, COUNT), PARTITIONS)
    run_until_committed(name, files_config(topic_name, None, **proxied), ends)
    assert_files_hold_each_record_once(bucket, topic_name, ends, kafka_bootstrap, fs=s3)
    client = s3_boto_client(s3_endpoint)
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix="topics/")["Contents"]]
    assert keys and all(k.startswith(f"topics/{topic_name}/") for k in keys)
    forwarded = proxy_log.read_text()
    at = f"{s3_endpoint.removeprefix('http://')}/{bucket}"
    for key in keys:
        grants = client.get_object_acl(Bucket=bucket, Key=key)["Grants"]
        assert {"Type": "Group", "URI": "http://acs.amazonaws.com/groups/global/AllUsers"} in [
            g["Grantee"] for g in grants if g["Permission"] == "READ"
        ], f"{key} is not public-read: {grants}"
        # Copied to its name (boto3's CopyObject, a PUT).
        assert f"PUT {at}/{quote(key, safe='/~')} " in forwarded, f"{key} was not copied through the proxy"
    # Written under +tmp (pyarrow's uploads), and deleted there once copied (boto3).
    assert f"POST {at}/topics/%2Btmp/" in forwarded and f"DELETE {at}/topics/%2Btmp/" in forwarded
    assert_no_directory_markers(s3_endpoint, bucket)
