"""The Confluent S3 sink's S3 keys (S3SinkConnectorConfig) on the files sink: each is honoured, ignored with a
note (ignoring it changes nothing written) or refused with why; none is refused as a typo, which they are not.
And the time partitioner's ``locale``: a locale Java knows, honoured where path.format prints names.
"""

from __future__ import annotations

import gzip
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from connectors.config import SinkConfig, validate_config
from sinks.files.layout import java_locale, parse_file_name
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
    "s3.acl.canned=private": None,  # (honoured, as are the other canned ACLs of objects)
    "s3.acl.canned=bucket-owner-full-control": None,
    "s3.proxy.url=http://proxy:3128": None,
    "s3.object.tagging=false": None,
    "s3.object.tagging=true": None,  # (honoured: the S3 sink's tags)
    "s3.object.tagging.key.value.pairs=team:data": "not tagged (s3.object.tagging=false)",
    "s3.object.behavior.on.tagging.error=fail": "not tagged (s3.object.tagging=false)",
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
    "s3.acl.canned=log-delivery-write": "a bucket's ACL",
    "s3.acl.canned=public": "unknown canned ACL 'public'; use one of private, public-read",
    "s3.object.behavior.on.tagging.error=warn": "ignore, fail",
    "s3.proxy.url=socks5://proxy:1080": "is not a proxy URL: use http://host:port",
    "s3.proxy.url=http://proxy:3128/path": "has no path",
    "s3.proxy.url=http://proxy:port": "not a proxy URL",
    "s3.proxy.user=me": "set s3.proxy.url too",
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


# s3.object.tagging.key.value.pairs (with s3.object.tagging=true) -> the words of the reason it is refused with.
TAG_PAIRS_REFUSED = {
    "team": "is not key:value",
    "url:http://x": "is not key:value (the S3 sink reads a pair up to its second ':'",
    ":data": "a tag key of 1 to 128 characters",
    "aws.x:y, aws:z:w": "is not key:value",
    "AWS;x:y": "letters, digits, spaces and + - = . _ : / @ only",
    "team:a\tb": "letters, digits, spaces and + - = . _ : / @ only",
    "endOffset:9": "one of the tags every file gets",
    "team:a, team:b": "given twice",
    ",".join(f"k{n}:v" for n in range(8)): "at most 10 tags",
}


@pytest.mark.parametrize("pairs", list(TAG_PAIRS_REFUSED))
def test_tags_s3_would_refuse_are_refused_at_validation(pairs: str) -> None:
    config = s3_config(**{"s3.object.tagging": "true", "s3.object.tagging.key.value.pairs": pairs})
    [why] = validate_config(config).errors["s3.object.tagging.key.value.pairs"]
    assert TAG_PAIRS_REFUSED[pairs] in why


def test_tagging_applies_to_s3_only_and_its_pairs_are_the_files_tags(tmp_path: Path) -> None:
    local = {
        "connector.class": "files",
        "topics": "t",
        "store.url": str(tmp_path),
        "format.class": "json",
        "flush.size": "9",
    }
    [why] = validate_config({**local, "s3.object.tagging": "true"}).errors["s3.object.tagging"]
    assert "applies to S3 storage only" in why
    assert validate_config({**local, "s3.object.tagging": "false"}).ok
    tagging = SinkConfig.parse(
        s3_config(**{"s3.object.tagging": "true", "s3.object.tagging.key.value.pairs": " team : data ,env:prod"})
    ).settings.tagging
    assert tagging is not None and not tagging.fail
    assert tagging.tags(5, 9, 4) == {
        "startOffset": "5",
        "endOffset": "9",
        "recordCount": "4",
        "team": "data",
        "env": "prod",
    }
    assert SinkConfig.parse(s3_config()).settings.tagging is None
    # Its settings on a store that is not S3 change nothing, and say so.
    noted = validate_config({**local, "s3.object.tagging.key.value.pairs": "team:data"})
    assert noted.ok and "not tagged" in noted.notes["s3.object.tagging.key.value.pairs"][0]


@pytest.mark.parametrize("value", ["FAIL", " Fail ", "fail"])
def test_the_s3_sinks_enum_keys_are_taken_in_any_case_as_it_takes_them(value: str) -> None:
    """The S3 sink's validator of s3.object.behavior.on.tagging.error and behavior.on.null.values lower-cases
    the value: a config written FAIL works there, and here."""
    config = s3_config(
        **{
            "s3.object.tagging": "TRUE",
            "s3.object.behavior.on.tagging.error": value,
            "behavior.on.null.values": value.replace("ail", "AIL"),
        }
    )
    assert validate_config(config).ok, validate_config(config).errors
    settings = SinkConfig.parse(config).settings
    assert settings.tagging is not None and settings.tagging.fail and settings.null_values == "fail"
    [why] = validate_config(s3_config(**{"behavior.on.null.values": "skip"})).errors["behavior.on.null.values"]
    assert "must be one of ignore, fail" in why


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
        # (pyarrow's S3 client, behind the handler that leaves its directory markers out.)
        return bool(fs.handler.native.__reduce__()[1][0]["force_virtual_addressing"])  # type: ignore[attr-defined]

    default = SinkConfig.parse(s3_config()).settings.storage
    assert default.path_style and not virtual(default)
    hosted = SinkConfig.parse(s3_config(**{"s3.path.style.access.enabled": "false"})).settings.storage
    assert virtual(hosted)


def test_the_canned_acl_and_the_proxy_reach_both_s3_clients() -> None:
    storage = SinkConfig.parse(
        s3_config(
            **{
                "s3.acl.canned": "bucket-owner-full-control",
                "s3.proxy.url": "http://me:old@proxy.internal:3128",
                "s3.proxy.password": "p@ss:/",
            }
        )
    ).settings.storage
    fs, _ = storage.filesystem()
    native = fs.handler.native.__reduce__()[1][0]  # type: ignore[attr-defined]
    assert dict(native["default_metadata"]) == {b"ACL": b"bucket-owner-full-control"}
    # (s3.proxy.password wins over the URL's.)
    want = {"scheme": "http", "host": "proxy.internal", "port": 3128, "username": "me", "password": "p@ss:/"}
    assert native["proxy_options"] == want
    boto = fs.handler._s3()  # type: ignore[attr-defined]
    assert boto.meta.config.proxies == {"http": "http://me:p%40ss%3A%2F@proxy.internal:3128"} | {
        "https": "http://me:p%40ss%3A%2F@proxy.internal:3128"
    }
    plain = SinkConfig.parse(s3_config()).settings.storage
    assert plain.acl is None and plain.proxy is None
    # private, S3's default, is sent as no ACL: a bucket with ACLs disabled (AWS's default) refuses x-amz-acl.
    assert SinkConfig.parse(s3_config(**{"s3.acl.canned": "private"})).settings.storage.acl is None


def test_an_ipv6_proxy_is_named_in_brackets_to_both_s3_clients() -> None:
    storage = SinkConfig.parse(s3_config(**{"s3.proxy.url": "http://[::1]:3128"})).settings.storage
    assert storage.proxy is not None and storage.proxy.host == "::1"
    assert storage.proxy.url() == "http://[::1]:3128"
    assert storage.proxy.pyarrow_options() == {"scheme": "http", "host": "[::1]", "port": 3128}


@pytest.mark.parametrize("key", ["s3.acl.canned", "s3.proxy.url"])
def test_s3_client_keys_on_a_store_that_is_not_s3_are_refused(key: str) -> None:
    config = {**s3_config(**{key: "private" if key == "s3.acl.canned" else "http://proxy:3128"})}
    del config["s3.bucket.name"]
    config |= {"connector.class": "files", "store.url": "/data/lake"}
    [why] = validate_config(config).errors[key]
    assert "applies to S3 storage only" in why


def test_a_proxy_user_needs_a_password() -> None:
    [why] = validate_config(s3_config(**{"s3.proxy.url": "http://me@proxy:3128"})).errors["s3.proxy.password"]
    assert "user and password, or neither" in why


# The time partitioner's locale. The Confluent sinks make it with Java's new Locale(value) and print path.format
# with it (Joda-Time): numbers are the same in every locale, month and day names are not.


def time_config(locale: str, path_format: str = "'year'=YYYY/'month'=MM/'day'=dd", **overrides: str) -> dict[str, str]:
    return s3_config(
        **{
            "partitioner.class": "io.confluent.connect.storage.partitioner.TimeBasedPartitioner",
            "path.format": path_format,
            "partition.duration.ms": "86400000",
            "timezone": "UTC",
            "timestamp.extractor": "Record",
            "locale": locale,
            **overrides,
        }
    )


def directory(config: dict[str, str], moment: datetime) -> str:
    """The directory the config's time partitioner gives a record of ``moment``."""
    partitioning = SinkConfig.parse(config).settings.time
    assert partitioning is not None
    return partitioning.directory(int(moment.timestamp() * 1000))


# Java locales, as BCP 47 tags or as Java prints them (Locale.toString()), in any case.
VALID_LOCALES = ["en-US", "en_US", "EN_us", "en-GB", "fr-FR", "fr_FR", "de", "ja", "fil", "zh-Hant-TW", "es-419",
                 "en_US_POSIX", "ja_JP_JP", "de-CH-1996"]  # fmt: skip
# locale -> the words of why it is refused.
UNKNOWN_LOCALES = {
    "klingon": "'klingon' is not a language Java knows",
    "xx-YY": "'xx' is not a language Java knows",
    "english": "'english' is not a language Java knows",
    "US": "'US' is a region, not a language",
    "en-XX": "'XX' is not a region Java knows",
    "en--US": "an empty part",
    "en-US-x": "'x' is not a variant",
    "en US": "'en US' is not a language Java knows",
}


@pytest.mark.parametrize("locale", VALID_LOCALES)
def test_a_locale_java_knows_is_accepted_where_path_format_prints_numbers(locale: str) -> None:
    for config in (time_config(locale), time_config(locale, **{"partitioner.class": "hourly"})):
        result = validate_config(config)
        assert result.ok, result.errors
    # Numbers are the same in every locale: the directory is the one an English locale gives.
    moment = datetime(2026, 3, 7, 15, 30, tzinfo=UTC)
    assert (
        directory(time_config(locale), moment) == directory(time_config("en-US"), moment) == "year=2026/month=03/day=07"
    )


@pytest.mark.parametrize("locale", list(UNKNOWN_LOCALES))
@pytest.mark.parametrize("partitioner", ["time", "daily"])
def test_a_locale_java_would_not_understand_is_refused_on_its_key_with_why(locale: str, partitioner: str) -> None:
    result = validate_config(time_config(locale, **{"partitioner.class": partitioner}))
    assert list(result.errors) == ["locale"], result.errors
    [why] = result.errors["locale"]
    assert why.startswith(f"unknown locale {locale!r}: ") and UNKNOWN_LOCALES[locale] in why, why
    with pytest.raises(ValueError, match=r"Java knows|region, not|empty part|variant"):
        java_locale(locale)


def test_an_english_locale_prints_english_names_as_joda_does() -> None:
    # Java 17 and 25 print these (Joda-Time 2.12 with new Locale("en-US")) for March 7th, 2026, a Saturday.
    moment = datetime(2026, 3, 7, 15, 30, tzinfo=UTC)
    for locale in ("en-US", "en_GB", "en", ""):
        config = time_config(locale, "'m'=MMM/'d'=EEE/'h'=a", **{"partition.duration.ms": "3600000"})
        assert validate_config(config).ok
        assert directory(config, moment) == "m=Mar/d=Sat/h=PM"
    # The full names (as Java 8 and 25 print them for en-US, and every Java for "en").
    assert directory(time_config("en", "MMMM/EEEE"), moment) == "March/Saturday"
    abbreviated = [directory(time_config("en-US", "MMM"), datetime(2026, m, 1, tzinfo=UTC)) for m in range(1, 13)]
    assert abbreviated == ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
    days = [directory(time_config("en-US", "EEE"), datetime(2026, 3, d, tzinfo=UTC)) for d in range(2, 9)]
    assert days == ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]


@pytest.mark.parametrize(
    ("locale", "path_format", "words"),
    [
        # Java writes French names for a bare language: names this sink does not write.
        ("fr", "'month'=MMMM", ["(MMMM)", "Java writes them in the language of 'fr'", "use numbers"]),
        ("ja", "'day'=EEE/'half'=a", ["(EEE, a)", "use numbers"]),
    ],
)
def test_a_locale_whose_names_this_sink_does_not_write_is_refused_where_path_format_prints_names(
    locale: str, path_format: str, words: list[str]
) -> None:
    result = validate_config(time_config(locale, path_format))
    assert list(result.errors) == ["locale"], result.errors
    [why] = result.errors["locale"]
    assert "writes in English only" in why and all(w in why for w in words), why
    # The same locale with numbers in path.format is accepted.
    assert validate_config(time_config(locale, "'month'=MM")).ok


@pytest.mark.parametrize(("locale", "path_format"), [("fr-FR", "'month'=MMM"), ("de_DE", "'zone'=z")])
def test_a_locale_with_a_region_is_taken_with_english_names_as_the_confluent_sinks_take_it(
    locale: str, path_format: str
) -> None:
    # Their new Locale("fr-FR") reads it all as a language Java has no names for: they write English names.
    result = validate_config(time_config(locale, path_format))
    assert result.ok, result.errors
    [note] = result.notes["locale"]
    assert "written in English" in note and f'new Locale("{locale}")' in note, note
    moment = datetime(2026, 3, 7, 15, 30, tzinfo=UTC)
    assert directory(time_config(locale, "'m'=MMM"), moment) == "m=Mar"


def test_a_locale_beside_a_refused_path_format_is_checked_alone() -> None:
    result = validate_config(time_config("fr", "'q'=qq"))
    assert list(result.errors) == ["path.format"] and "not supported" in result.errors["path.format"][0]
    result = validate_config(time_config("klingon", "'unterminated"))
    assert sorted(result.errors) == ["locale", "path.format"]
