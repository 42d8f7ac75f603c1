"""The Confluent S3 sink's S3 keys (S3SinkConnectorConfig) on the files sink: each is honoured, ignored with a
note (ignoring it changes nothing written) or refused with why; none is refused as a typo, which they are not.
"""

from __future__ import annotations

import gzip
import json
import uuid
from pathlib import Path

import pytest

from connectors.config import SinkConfig, validate_config
from sinks.files.layout import parse_file_name
from sinks.files.settings import Storage
from sinks.files.writer import PartitionFiles

TYPO = "a typo would be a lost setting"


def s3_config(**overrides: str) -> dict[str, str]:
    return {
        "connector.class": "io.confluent.connect.s3.S3SinkConnector",
        "topics": "events",
        "s3.bucket.name": "lake",
        "store.url": "http://127.0.0.1:9000",
        "format.class": "io.confluent.connect.s3.format.json.JsonFormat",
        "flush.size": "1000",
        **overrides,
    }


# key=value -> the words of the note it is ignored with.
IGNORED = {
    "s3.compression.type=none": None,  # (honoured: a key of the sink)
    "s3.path.style.access.enabled=true": None,
    "s3.credentials.provider.class=com.amazonaws.auth.DefaultAWSCredentialsProviderChain": "default credentials",
    "s3.credentials.provider.class=software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider": "chain",
    "s3.credentials.provider.access_key_id=x": "not loaded here",
    "s3.acl.canned=private": "as with private",
    "s3.object.tagging=false": "as with false",
    "s3.object.tagging.key.value.pairs=team:data": "not tagged",
    "s3.object.behavior.on.tagging.error=fail": "not tagged",
    "s3.http.send.expect.continue=false": "changes no file",
    "s3.send.digest=true": "changes no file",
    "s3.wan.mode=true": "Transfer Acceleration",
    "s3.elastic.buffer.enable=true": "changes no file",
    "s3.elastic.buffer.init.capacity=65536": "changes no file",
    "s3.schema.partition.affix.type=NONE": "as with NONE",
}
# key=value -> the words of the reason it is refused with.
REFUSED = {
    "s3.credentials.provider.class=com.example.VaultCredentials": "set aws.access.key.id",
    "s3.ssl.enabled=false": "follows store.url's scheme",
    "s3.acl.canned=public-read": "canned ACLs are not supported yet",
    "s3.object.tagging=true": "object tagging is not supported yet",
    "s3.proxy.url=http://proxy:3128": "through a proxy is not supported yet",
    "s3.proxy.user=me": "through a proxy is not supported yet",
    "s3.schema.partition.affix.type=PREFIX": "named by its partitioner only",
    "s3.compression.type=zstd": "must be one of none, gzip",
    "s3.compression.level=10": "no more than 9",
}


@pytest.mark.parametrize("setting", list(IGNORED))
def test_s3_keys_whose_value_means_what_the_sink_does_are_accepted(setting: str) -> None:
    key, value = setting.split("=", 1)
    result = validate_config(s3_config(**{key: value}))
    assert result.ok, result.errors
    note = IGNORED[setting]
    if note is not None:
        assert note in result.notes[key][0], result.notes


@pytest.mark.parametrize("setting", list(REFUSED))
def test_s3_keys_the_sink_cannot_honour_are_refused_with_why_not_as_typos(setting: str) -> None:
    key, value = setting.split("=", 1)
    [why] = validate_config(s3_config(**{key: value})).errors[key]
    assert REFUSED[setting] in why and TYPO not in why


def test_an_s3_typo_is_still_refused_as_one() -> None:
    [why] = validate_config(s3_config(**{"s3.compresion.type": "gzip"})).errors["s3.compresion.type"]
    assert TYPO in why


def test_gzip_of_parquet_or_avro_files_is_noted_as_the_s3_sink_ignores_it() -> None:
    result = validate_config(s3_config(**{"format.class": "parquet", "s3.compression.type": "gzip"}))
    assert result.ok and "parquet.codec" in result.notes["s3.compression.type"][0]
    assert not SinkConfig.parse(
        s3_config(**{"format.class": "parquet", "s3.compression.type": "gzip"})
    ).settings.gzipped


@pytest.mark.parametrize("level", ["-1", "1", "9"])
def test_gzip_writes_json_files_as_the_s3_sink_names_them(tmp_path: Path, level: str) -> None:
    config = SinkConfig.parse(
        {
            "connector.class": "files",
            "topics": "events",
            "store.url": str(tmp_path),
            "format.class": "json",
            "flush.size": "3",
            "s3.compression.type": "gzip",
            "s3.compression.level": level,
        }
    )
    files = PartitionFiles(config, config.settings, uuid.uuid4(), "events", 0)
    records = [json.dumps({"id": i}).encode() for i in range(5)]
    files.write(list(range(5)), [0] * 5, records, [None] * 5)
    files.close_all()
    names = [Path(f.path).name for f in files.closed]
    assert names == ["events+0+0000000000+0000000002.json.gz", "events+0+0000000003+0000000004.json.gz"]
    assert [parse_file_name(name) for name in names] == [("events", 0, 0, 2), ("events", 0, 3, 4)]
    lines = [
        line for f in files.closed for line in gzip.decompress(Path(f.staged_path or "").read_bytes()).splitlines()
    ]
    assert [json.loads(line)["id"] for line in lines] == list(range(5))
    assert all(f.bytes == Path(f.staged_path or "").stat().st_size for f in files.closed)


def test_path_style_access_is_the_s3_clients_addressing() -> None:
    def virtual(storage: Storage) -> bool:
        fs, _ = storage.filesystem()
        return bool(fs.__reduce__()[1][0]["force_virtual_addressing"])

    default = SinkConfig.parse(s3_config()).settings.storage
    assert default.path_style and not virtual(default)
    hosted = SinkConfig.parse(s3_config(**{"s3.path.style.access.enabled": "false"})).settings.storage
    assert virtual(hosted)
