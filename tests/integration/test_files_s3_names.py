"""The S3 sink's names (``<topic>+<partition>+<first offset>.<ext>``) on an S3-compatible server (moto): a name
says where a file's records start, not where they end, so the commit that moved a file there, and its
partition's next offset, are in the file's user metadata (``sinks.files.committer.move``)."""

from __future__ import annotations

import json
import uuid

import pytest

from connectors.config import SinkConfig
from sinks.files.committer import FilesCommitter, committed_file_ranges
from sinks.files.writer import PartitionFiles
from tests.conftest import s3_boto_client, s3_client
from workers.coordinator import PreparedCommit

# moto and the writer and committer in this process: no broker, no Spark.
pytestmark = [pytest.mark.integration, pytest.mark.beside]

TOPIC = "orders"


def s3_config(endpoint: str, bucket: str) -> SinkConfig:
    return SinkConfig.parse(
        {
            "connector.class": "io.confluent.connect.s3.S3SinkConnector",
            "topics": TOPIC,
            "s3.bucket.name": bucket,
            "s3.region": "us-east-1",
            "store.url": endpoint,
            "aws.access.key.id": "test",
            "aws.secret.access.key": "test",
            "format.class": "io.confluent.connect.s3.format.json.JsonFormat",
            "flush.size": "1000",
        }
    )


def commit(config: SinkConfig, ids: range) -> PreparedCommit:
    """A prepared commit of partition 0's offsets ``ids``, each record ``{"id": offset}``, its file staged."""
    commit_id = uuid.uuid4()
    files = PartitionFiles(config, config.settings, commit_id, TOPIC, 0)
    files.write(list(ids), [0] * len(ids), [json.dumps({"id": i}).encode() for i in ids], [None] * len(ids))
    files.close_all()
    offsets = {TOPIC: {"0": [ids.start, ids.stop]}}
    return PreparedCommit(commit_id, 1, [f.as_dict() for f in files.closed], offsets, None)


def test_a_name_given_again_once_offsets_are_rewound_holds_the_new_records_and_a_retried_move_changes_nothing(
    s3_endpoint: str,
) -> None:
    bucket = f"names-{uuid.uuid4().hex[:8]}"
    s3_client(s3_endpoint).create_dir(bucket)
    config = s3_config(s3_endpoint, bucket)
    client = s3_boto_client(s3_endpoint)
    key = f"topics/{TOPIC}/partition=0/{TOPIC}+0+0000000000.json"

    def committed() -> tuple[list[int], dict[str, str]]:
        found = client.get_object(Bucket=bucket, Key=key)
        return [json.loads(line)["id"] for line in found["Body"].read().splitlines()], found["Metadata"]

    first = commit(config, range(0, 5))
    FilesCommitter("names", config).commit(first)
    assert committed() == (
        list(range(5)),
        {"sinkadmin-commit-id": str(first.commit_id), "sinkadmin-next-offset": "5"},
    )
    # The commit rolled forward again (a zombie, or a successor): its file is there, done.
    FilesCommitter("names", config).commit(first)
    assert committed()[0] == list(range(5))

    # The offsets rewound to 0 (the REST API's offsets, or a reset): the next commit's file has the same name,
    # and replaces the first's, as the S3 sink replaces an object.
    again = commit(config, range(0, 10))
    FilesCommitter("names", config).commit(again)
    assert committed() == (
        list(range(10)),
        {"sinkadmin-commit-id": str(again.commit_id), "sinkadmin-next-offset": "10"},
    )
    assert committed_file_ranges(config)[0] == {(TOPIC, 0): (0, 10)}

    # A file moved by this sink before its files named their commits, its temporary file gone (the move done, the
    # ledger not told): a commit prepared then and rolled forward now finds it done.
    legacy = commit(config, range(10, 12))
    legacy_key = f"topics/{TOPIC}/partition=0/{TOPIC}+0+0000000010.json"
    client.copy_object(
        Bucket=bucket,
        Key=legacy_key,
        CopySource={"Bucket": bucket, "Key": legacy.files[0]["staged_path"].split("/", 1)[1]},
    )
    client.delete_object(Bucket=bucket, Key=legacy.files[0]["staged_path"].split("/", 1)[1])
    FilesCommitter("names", config).commit(legacy)
    assert client.head_object(Bucket=bucket, Key=legacy_key)["Metadata"] == {}
    client.delete_object(Bucket=bucket, Key=legacy_key)

    # A file this sink's S3 class named with both offsets before 2026-11-30, in the same directory, counts too
    # when a lost ledger is rebuilt; a file of another topic's name in this topic's directory does not.
    for name in (f"{TOPIC}+0+0000000010+0000000019.json", "other+0+0000000050+0000000059.json"):
        client.put_object(Bucket=bucket, Key=f"topics/{TOPIC}/partition=0/{name}", Body=b'{"id": 10}\n')
    assert committed_file_ranges(config)[0] == {(TOPIC, 0): (0, 20)}
