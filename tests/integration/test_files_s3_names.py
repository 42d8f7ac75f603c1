"""The S3 sink's names (``<topic>+<partition>+<first offset>.<ext>``) on an S3-compatible server (moto): a name
says where a file's records start, not where they end, so the commit that moved a file there, and its
partition's next offset, are in the file's user metadata (``sinks.files.committer.move``)."""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import replace

import pytest

from connectors.config import SinkConfig
from sinks.files.committer import COMMIT_METADATA, NEXT_OFFSET_METADATA, FilesCommitter, committed_file_ranges, move
from sinks.files.settings import ObjectTagging
from sinks.files.writer import PartitionFiles
from tests.conftest import s3_boto_client, s3_client
from workers.coordinator import CommitNotApplied, PreparedCommit

# moto and the writer and committer in this process: no broker, no Spark.
pytestmark = [pytest.mark.integration, pytest.mark.beside]

TOPIC = "orders"


def s3_config(endpoint: str, bucket: str, **keys: str) -> SinkConfig:
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
            **keys,
        }
    )


def commit(config: SinkConfig, ids: range, tombstones: tuple[int, ...] = ()) -> PreparedCommit:
    """A prepared commit of partition 0's offsets ``ids``, each record ``{"id": offset}`` (those in ``tombstones``
    without a value), its file staged."""
    commit_id = uuid.uuid4()
    files = PartitionFiles(config, config.settings, commit_id, TOPIC, 0)
    values = [None if i in tombstones else json.dumps({"id": i}).encode() for i in ids]
    files.write(list(ids), [0] * len(ids), values, [None] * len(ids))
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


def test_files_are_tagged_with_their_offsets_and_count_and_a_commit_rolled_forward_tags_them(s3_endpoint: str) -> None:
    """s3.object.tagging=true: each file gets the S3 sink's tags (its first and last records' offsets, its record
    count) and the configured pairs, when its commit moves it; a commit whose moves were done before a crash,
    and whose tags were not, is rolled forward and tags its files then."""
    bucket = f"tags-{uuid.uuid4().hex[:8]}"
    s3_client(s3_endpoint).create_dir(bucket)
    config = s3_config(
        s3_endpoint,
        bucket,
        **{
            "s3.object.tagging": "true",
            "s3.object.tagging.key.value.pairs": "team:data, env:prod",
            "behavior.on.null.values": "ignore",
        },
    )
    client = s3_boto_client(s3_endpoint)

    def tags(first: int) -> dict[str, str]:
        key = f"topics/{TOPIC}/partition=0/{TOPIC}+0+{first:010d}.json"
        return {t["Key"]: t["Value"] for t in client.get_object_tagging(Bucket=bucket, Key=key)["TagSet"]}

    # Offsets 0..6 less 3 (a tombstone, skipped with behavior.on.null.values=ignore): six records.
    prepared = commit(config, range(0, 7), tombstones=(3,))
    FilesCommitter("tags", config).commit(prepared)
    assert tags(0) == {"startOffset": "0", "endOffset": "6", "recordCount": "6", "team": "data", "env": "prod"}

    # The coordinator died after the move and before the tags: the next one finds the move done, and tags.
    crashed = commit(config, range(7, 9))
    fs, _ = config.settings.storage.filesystem()
    moved = crashed.files[0]
    metadata = {COMMIT_METADATA: str(crashed.commit_id), NEXT_OFFSET_METADATA: "9"}
    move(fs, moved["staged_path"], moved["path"].removeprefix("s3://"), metadata)
    assert tags(7) == {}
    FilesCommitter("tags", config).commit(crashed)
    assert tags(7) == {"startOffset": "7", "endOffset": "8", "recordCount": "2", "team": "data", "env": "prod"}

    # Offsets rewound to 7, and a commit of them whose temporary file is gone: its move cannot be finished, and
    # the file of the commit before at that name keeps its own tags.
    rewound = commit(config, range(7, 12))
    client.delete_object(Bucket=bucket, Key=rewound.files[0]["staged_path"].split("/", 1)[1])
    with pytest.raises(RuntimeError, match="holds another commit's file"):
        FilesCommitter("tags", config).commit(rewound)
    assert tags(7)["recordCount"] == "2"


def test_a_copy_s3_refuses_with_its_tags_is_made_without_them_when_tagging_errors_are_ignored(
    s3_endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A bucket policy may let the temporary files be tagged and not the final ones: the copy that names the tags
    is refused. With s3.object.behavior.on.tagging.error=ignore the file is copied again without them (eleven
    tags here, which S3 refuses in a copy as it would a tagging it does not allow)."""
    bucket = f"tagcopy-{uuid.uuid4().hex[:8]}"
    s3_client(s3_endpoint).create_dir(bucket)
    config = s3_config(s3_endpoint, bucket, **{"s3.object.tagging": "true"})
    prepared = commit(config, range(0, 2))
    staged, target = prepared.files[0]["staged_path"], prepared.files[0]["path"].removeprefix("s3://")
    metadata = {COMMIT_METADATA: str(prepared.commit_id), NEXT_OFFSET_METADATA: "2"}
    fs, _ = config.settings.storage.filesystem()
    committer = FilesCommitter("tag-copy", config)
    with caplog.at_level(logging.WARNING, logger="sinks.files.committer"):
        committer._move(fs, staged, target, metadata, {f"k{n}": "v" for n in range(11)})
    assert "refused its copy with its tags" in caplog.text
    client = s3_boto_client(s3_endpoint)
    key = target.split("/", 1)[1]
    assert client.get_object(Bucket=bucket, Key=key)["Metadata"] == {
        "sinkadmin-commit-id": str(prepared.commit_id),
        "sinkadmin-next-offset": "2",
    }
    assert client.get_object_tagging(Bucket=bucket, Key=key)["TagSet"] == []
    # With fail, the refusal is the commit's.
    failing = replace(config, settings=replace(config.settings, tagging=ObjectTagging(fail=True)))
    again = commit(config, range(2, 4))
    with pytest.raises(OSError, match="cannot be greater than 10"):
        FilesCommitter("tag-copy", failing)._move(
            fs,
            again.files[0]["staged_path"],
            again.files[0]["path"].removeprefix("s3://"),
            {COMMIT_METADATA: str(again.commit_id), NEXT_OFFSET_METADATA: "4"},
            {f"k{n}": "v" for n in range(11)},
        )


@pytest.mark.parametrize("on_error", ["ignore", "fail"])
def test_tags_s3_refuses_leave_the_files_committed_untagged_or_fail_the_commit_before_any_is_visible(
    s3_endpoint: str, on_error: str, caplog: pytest.LogCaptureFixture
) -> None:
    """s3.object.behavior.on.tagging.error: tags S3 refuses (eight pairs besides the three offsets' tags: S3 takes
    ten; the config's validation refuses them, so they are set here behind it) are logged and the files committed
    untagged (ignore), or fail the commit, saying which file and why, before any of its files is at its name
    (fail): nothing is half applied, and the next start rolls the commit forward."""
    bucket = f"tagerr-{uuid.uuid4().hex[:8]}"
    s3_client(s3_endpoint).create_dir(bucket)
    config = s3_config(s3_endpoint, bucket, **{"flush.size": "2"})
    too_many = ObjectTagging(tuple((f"k{n}", "v") for n in range(8)), fail=on_error == "fail")
    config = replace(config, settings=replace(config.settings, tagging=too_many))
    prepared = commit(config, range(0, 6))
    assert len(prepared.files) == 3
    committer = FilesCommitter("tag-errors", config)
    client = s3_boto_client(s3_endpoint)
    final = [f"topics/{TOPIC}/partition=0/{TOPIC}+0+{first:010d}.json" for first in (0, 2, 4)]
    listed = [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])]
    if on_error == "ignore":
        with caplog.at_level(logging.WARNING, logger="sinks.files.committer"):
            committer.commit(prepared)
        assert caplog.text.count("committed untagged (s3.object.behavior.on.tagging.error=ignore)") == 3
        assert "cannot be greater than 10" in caplog.text
        for key in final:
            assert client.get_object(Bucket=bucket, Key=key)["Body"].read().count(b"\n") == 2
            assert client.get_object_tagging(Bucket=bucket, Key=key)["TagSet"] == []
        return
    with pytest.raises(CommitNotApplied, match=r"to s3://.*\+0000000000\.json: S3 did not tag it") as failed:
        committer.commit(prepared)
    assert "cannot be greater than 10" in str(failed.value)
    # No file of the commit is at its name: each is still where its task wrote it.
    assert [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])] == listed
    # S3 takes the tags again (a permission granted): the next start rolls the commit forward, tagged.
    FilesCommitter("tag-errors", replace(config, settings=replace(config.settings, tagging=ObjectTagging()))).commit(
        prepared
    )
    for key, first in zip(final, (0, 2, 4), strict=True):
        tags = {t["Key"]: t["Value"] for t in client.get_object_tagging(Bucket=bucket, Key=key)["TagSet"]}
        assert tags == {"startOffset": str(first), "endOffset": str(first + 1), "recordCount": "2"}
