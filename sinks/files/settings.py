"""The files sink's settings: checked per key for the form, API and admin, then typed for the runtime."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from connectors.config.definitions import CheckResult, CheckStatus
from connectors.config.validation import KeyRule, apply_key_rules
from sinks.files.layout import (
    DAILY_FORMAT,
    DAY_MS,
    HOUR_MS,
    HOURLY_FORMAT,
    TimePartitioning,
    file_name,
    java_locale,
    joda_tokens,
    locale_fields,
    parse_file_name,
    parse_start_file_name,
)
from sinks.files.plugin import COMPRESSION_LEVEL_MAX, FILES, FORMAT_EXTENSIONS, FORMATS, PARTITIONERS, S3_OBJECT_ACLS

if TYPE_CHECKING:
    import pyarrow.fs as pafs

    from connectors.config.validation import ConfigValidation, SinkConfig

S3_CLASS = "io.confluent.connect.s3.S3SinkConnector"
HDFS_CLASSES = (
    "io.confluent.connect.hdfs.HdfsSinkConnector",
    "io.confluent.connect.hdfs3.Hdfs3SinkConnector",
    "HdfsSinkConnector",
    "Hdfs3SinkConnector",
)
# Keys of the Confluent sinks accepted and ignored, because ignoring them changes nothing that is written.
IGNORED_KEYS = {
    "logs.dir": "the commit ledger (in this service's PostgreSQL) is this sink's write-ahead log, so there is no "
    "log directory",
}
HIVE_OFF = "Hive integration is not supported (hive.integration), so its settings change nothing written"
# The AWS SDKs' default credentials chains, as s3.credentials.provider.class names them (v1's and v2's).
AWS_DEFAULT_CREDENTIALS = (
    "com.amazonaws.auth.DefaultAWSCredentialsProviderChain",
    "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider",
)
S3_CLIENT_MEMORY = "how the S3 client buffers a file's parts in memory; it changes no file"
# Keys of the Confluent sinks that this sink does not take as its own keys, and what it does with each: ignored
# with a note when that changes nothing written, refused when it would.
KEY_RULES = {
    **{key: KeyRule(ignored=reason) for key, reason in IGNORED_KEYS.items()},
    "storage.class": KeyRule(
        ignored="storage follows store.url (file://, hdfs://) or s3.bucket.name, as this storage class does",
        refused="storage follows store.url (file://, hdfs://) or s3.bucket.name; remove storage.class",
        harmless=(
            "io.confluent.connect.hdfs.storage.HdfsStorage",
            "io.confluent.connect.hdfs3.storage.HdfsStorage",
            "io.confluent.connect.s3.storage.S3Storage",
        ),
    ),
    "schema.compatibility": KeyRule(
        ignored="records with a new schema start a new file, as with NONE",
        refused="records with a new schema start a new file (as with NONE); projecting records to another schema "
        "is not supported",
        harmless=("NONE",),
    ),
    "hive.integration": KeyRule(
        ignored="the topics directory is not registered with Hive, as with false",
        refused="Hive integration is not supported: register the topics directory with your metastore",
        harmless=("false",),
    ),
    "hive.*": KeyRule(ignored=HIVE_OFF),
    "s3.ssea.name": KeyRule(refused="server-side encryption is not supported yet"),
    "s3.sse.customer.key": KeyRule(refused="server-side encryption is not supported yet"),
    "s3.sse.kms.key.id": KeyRule(refused="server-side encryption is not supported yet"),
    "s3.part.size": KeyRule(
        ignored="files are uploaded by the S3 client in parts of its own size; the part size changes no file",
    ),
    "s3.part.retries": KeyRule(ignored="the S3 client retries with its own policy; retries change no file"),
    "s3.retry.backoff.ms": KeyRule(ignored="the S3 client retries with its own policy; retries change no file"),
    "hdfs.authentication.kerberos": KeyRule(
        ignored="HDFS is reached without Kerberos, as with false",
        refused="Kerberos is not supported yet",
        harmless=("false",),
    ),
    # The S3 sink's other S3 keys (S3SinkConnectorConfig).
    "s3.credentials.provider.class": KeyRule(
        ignored="credentials are aws.access.key.id and aws.secret.access.key, or without them the AWS default "
        "credentials chain (environment, profile, instance role), as with this class",
        refused="a Java credentials provider cannot be loaded here: set aws.access.key.id and "
        "aws.secret.access.key, or leave both empty for the AWS default credentials chain (environment, profile, "
        "instance role)",
        harmless=AWS_DEFAULT_CREDENTIALS,
    ),
    "s3.credentials.provider.*": KeyRule(
        ignored="settings of the class s3.credentials.provider.class names, which is not loaded here (only the "
        "AWS default chain is accepted there, and it takes no settings)",
    ),
    "s3.ssl.enabled": KeyRule(
        refused="not a key of the S3 sink (it is Trino's and Flink's): whether S3 is reached over TLS follows "
        "store.url's scheme, https:// or http:// (AWS itself, without store.url: https); remove it",
    ),
    "s3.http.send.expect.continue": KeyRule(
        ignored="an HTTP handshake of the S3 client's multipart uploads; it changes no file",
    ),
    "s3.send.digest": KeyRule(ignored="an integrity check of the S3 client's uploads; it changes no file"),
    "s3.wan.mode": KeyRule(
        ignored="files reach the bucket through store.url or its region's endpoint, never S3 Transfer "
        "Acceleration's; the endpoint changes no file",
    ),
    "s3.elastic.buffer.enable": KeyRule(ignored=S3_CLIENT_MEMORY),
    "s3.elastic.buffer.init.capacity": KeyRule(ignored=S3_CLIENT_MEMORY),
    "s3.schema.partition.affix.type": KeyRule(
        ignored="directories are not named after the records' schema, as with NONE",
        refused="directories named after the records' schema are not supported: a topic's directories are named "
        "by its partitioner only (as with NONE)",
        harmless=("NONE",),
    ),
}


def default_format(config: Mapping[str, str]) -> str | None:
    """The format of a config without format.class: the HDFS sinks' default (AvroFormat); the S3 sink and
    ``files`` have none."""
    connector_class = config.get("connector.class", "").strip()
    return "avro" if connector_class in HDFS_CLASSES or connector_class.rsplit(".", 1)[-1] in HDFS_CLASSES else None


def canonical(value: str, names: Mapping[str, tuple[str, ...]]) -> str | None:
    value = value.strip()
    for short, classes in names.items():
        if value == short or value in classes:
            return short
    return None


def _get(config: Mapping[str, str], name: str) -> str:
    value = config.get(name)
    if value is None or value == "":
        key = FILES.key(name)
        return (key.default if key else None) or ""
    return value.strip()


def _store_url(config: Mapping[str, str]) -> str:
    return _get(config, "store.url") or _get(config, "hdfs.url")


def check(result: ConfigValidation, config: dict[str, str]) -> None:
    """Per-key errors of a files sink config (beside the checks every plugin shares)."""
    apply_key_rules(result, config, KEY_RULES)
    _check_storage(result, config)
    if config.get("format.class") and canonical(config["format.class"], FORMATS) is None:
        result.add(
            "format.class",
            f"unknown format {config['format.class']!r}; use parquet, avro or json (or a Confluent format class)",
        )
    elif not config.get("format.class") and default_format(config) is None:
        result.add("format.class", 'Missing required configuration "format.class" which has no default value.')
    _check_compression(result, config)
    schedule = int(_get(config, "rotate.schedule.interval.ms")) if _int(config, "rotate.schedule.interval.ms") else -1
    if schedule > 0 and config.get("sinkadmin.commit.interval-ms"):
        for key in ("rotate.schedule.interval.ms", "sinkadmin.commit.interval-ms"):
            result.add(key, "both set the commit interval: set one")
    if schedule == 0:
        result.add("rotate.schedule.interval.ms", "must be -1 (unset) or a positive interval")
    _check_partitioner(result, config)


def _check_compression(result: ConfigValidation, config: dict[str, str]) -> None:
    """s3.compression.*: gzip's levels, and a compression the S3 sink applies to JSON files only."""
    if _int(config, "s3.compression.level") and int(_get(config, "s3.compression.level")) > COMPRESSION_LEVEL_MAX:
        result.add(
            "s3.compression.level",
            f"Invalid value {_get(config, 's3.compression.level')} for configuration s3.compression.level: "
            f"Value must be no more than {COMPRESSION_LEVEL_MAX}",
        )
    compression = config.get("s3.compression.type", "").strip()
    format_name = canonical(config.get("format.class", ""), FORMATS) or default_format(config)
    if compression == "gzip" and format_name in ("parquet", "avro"):
        result.ignore(
            "s3.compression.type",
            f"the S3 sink compresses JSON files only, and so does this sink: {format_name} files are compressed "
            f"by {format_name}.codec",
        )


def _int(config: Mapping[str, str], name: str) -> bool:
    try:
        int(_get(config, name))
    except ValueError:
        return False
    return True


def _check_storage(result: ConfigValidation, config: dict[str, str]) -> None:
    url = _store_url(config)
    try:
        urlsplit(url)
    except ValueError as exc:
        result.add(
            "hdfs.url" if config.get("hdfs.url") and not config.get("store.url") else "store.url", f"not a URL: {exc}"
        )
        return
    bucket = _get(config, "s3.bucket.name")
    _check_s3_client(result, config, bool(bucket))
    if config.get("store.url") and config.get("hdfs.url"):
        result.add("hdfs.url", "set store.url or hdfs.url (its older name), not both")
    if _get(config, "connector.class") in (S3_CLASS, S3_CLASS.rsplit(".", 1)[-1]) and not bucket:
        result.add("s3.bucket.name", 'Missing required configuration "s3.bucket.name" which has no default value.')
    if bucket:
        if url and urlsplit(url).scheme not in ("http", "https"):
            result.add("store.url", "with s3.bucket.name, store.url is the S3 endpoint: an http(s) URL")
        if bool(_get(config, "aws.access.key.id")) != bool(_get(config, "aws.secret.access.key")):
            result.add("aws.secret.access.key", "set both aws.access.key.id and aws.secret.access.key, or neither")
        return
    if not url:
        result.add("store.url", "set store.url (a file:// or hdfs:// URL, or a path), or s3.bucket.name")
        return
    scheme = urlsplit(url).scheme
    if scheme not in ("", "file", "hdfs", "viewfs"):
        result.add(
            "store.url", f"{scheme}:// is not a store this sink writes to: use file://, hdfs:// or s3.bucket.name"
        )
    elif scheme in ("", "file") and not urlsplit(url).path.startswith("/"):
        result.add("store.url", "a local store must be an absolute path (every worker and executor reads it)")
    topics_dir = _get(config, "topics.dir")
    if topics_dir.startswith("/") or ".." in topics_dir.split("/"):
        result.add("topics.dir", "a directory under the store: relative, without '..'")


TAGGING_SETTINGS = ("s3.object.tagging.key.value.pairs", "s3.object.behavior.on.tagging.error")
S3_CLIENT_KEYS = ("s3.acl.canned", "s3.proxy.url", "s3.proxy.user", "s3.proxy.password", "s3.object.tagging")


def _check_s3_client(result: ConfigValidation, config: dict[str, str], s3: bool) -> None:
    """s3.acl.canned, s3.proxy.* and s3.object.tagging*: S3's canned ACLs of objects; a proxy URL S3's clients
    can take; tags S3 takes."""
    if not s3:
        for key in S3_CLIENT_KEYS:
            if _get(config, key) and not (key == "s3.object.tagging" and _get(config, key).lower() == "false"):
                result.add(key, "applies to S3 storage only (s3.bucket.name), and files go to store.url")
        for key in TAGGING_SETTINGS:
            if key in config:
                result.ignore(key, "files go to store.url, not S3, and are not tagged, so it changes nothing")
        return
    if _get(config, "s3.object.tagging").lower() == "true":
        try:
            ObjectTagging.parse(config)
        except ValueError as exc:
            result.add("s3.object.tagging.key.value.pairs", str(exc))
    else:
        for key in TAGGING_SETTINGS:
            if key in config:
                result.ignore(key, "objects are not tagged (s3.object.tagging=false), so it changes nothing")
    acl = _get(config, "s3.acl.canned")
    if acl == "log-delivery-write":
        result.add("s3.acl.canned", "log-delivery-write is a bucket's ACL: S3 does not grant it on the files written")
    elif acl and acl not in S3_OBJECT_ACLS:
        result.add("s3.acl.canned", f"unknown canned ACL {acl!r}; use one of {', '.join(S3_OBJECT_ACLS)}")
    url = _get(config, "s3.proxy.url")
    if url:
        try:
            proxy = S3Proxy.parse(config)
        except ValueError as exc:
            result.add("s3.proxy.url", str(exc))
        else:
            if bool(proxy.user) != bool(proxy.password):
                result.add("s3.proxy.password", "set the proxy's user and password, or neither")
    else:
        for key in ("s3.proxy.user", "s3.proxy.password"):
            if _get(config, key):
                result.add(key, "set s3.proxy.url too: the proxy's user and password need its URL")


def _check_partitioner(result: ConfigValidation, config: dict[str, str]) -> None:
    name = canonical(_get(config, "partitioner.class"), PARTITIONERS)
    if name is None:
        result.add(
            "partitioner.class",
            f"unknown partitioner {_get(config, 'partitioner.class')!r}; use default, field, time, hourly or daily "
            "(or a storage-common partitioner class)",
        )
        return
    fields = [f.strip() for f in _get(config, "partition.field.name").split(",") if f.strip()]
    if name == "field" and not fields:
        result.add("partition.field.name", "the field partitioner needs the fields to name directories after")
    if name in ("time", "hourly", "daily"):
        timezone = _get(config, "timezone")
        if not timezone:
            result.add("timezone", "the time partitioners need a time zone (e.g. UTC)")
        else:
            try:
                ZoneInfo(timezone)
            except (ZoneInfoNotFoundError, ValueError):
                result.add("timezone", f"unknown time zone {timezone!r}; use an IANA name such as UTC or Europe/Paris")
        # The directories' pattern, if it is one (None: path.format is refused below).
        path_format: str | None = {"hourly": HOURLY_FORMAT, "daily": DAILY_FORMAT}.get(name, "")
        if name == "time":
            path_format = _get(config, "path.format")
            if not path_format:
                result.add("path.format", "the time partitioner needs path.format (e.g. 'year'=YYYY/'month'=MM)")
            else:
                try:
                    joda_tokens(path_format)
                except ValueError as exc:
                    result.add("path.format", str(exc))
                    path_format = None
            if _int(config, "partition.duration.ms") and int(_get(config, "partition.duration.ms")) <= 0:
                result.add("partition.duration.ms", "the time partitioner needs the span of a directory, above 0")
        _check_locale(result, _get(config, "locale"), path_format)
        if _get(config, "timestamp.extractor") == "RecordField" and not _get(config, "timestamp.field"):
            result.add("timestamp.field", "RecordField needs the field that holds each record's time")
    elif name in ("default", "field") and config.get("path.format"):
        result.add("path.format", f"the {name} partitioner does not use path.format; use partitioner.class=time")


def _check_locale(result: ConfigValidation, value: str, path_format: str | None) -> None:
    """``locale``: a locale Java knows, and one whose names this sink writes where path.format prints names.

    Empty is English (the Confluent sinks refuse it). Numbers are the same in every locale, so a valid locale is
    accepted whatever it is when path.format prints none; month and day names are written in English only.
    """
    if not value:
        return
    try:
        locale = java_locale(value)
    except ValueError as exc:
        result.add("locale", f"unknown locale {value!r}: {exc}; use a Java locale such as en-US, en_US or fr-FR")
        return
    fields = locale_fields(path_format) if path_format else []
    if not fields or locale.english:
        return
    named = ", ".join(dict.fromkeys(fields))
    if locale.bare:
        # Java names months and days in this language: names this sink does not have.
        result.add(
            "locale",
            f"path.format prints names ({named}), which this sink writes in English only, and Java writes them in "
            f"the language of {value!r}: use numbers in path.format (MM, dd, e), or an English locale (en-US)",
        )
        return
    # The Confluent sinks' new Locale(value) reads the whole of "fr-FR" as a language, one Java has no names for,
    # and falls back to English names: the names written here, so the directories are the same.
    result.ignore(
        "locale",
        f"path.format's names ({named}) are written in English, as the Confluent sinks write them for {value!r}: "
        f'their new Locale("{value}") reads the whole value as a language, one Java has no names for',
    )


@dataclass(frozen=True)
class S3Proxy:
    """s3.proxy.url, with s3.proxy.user and s3.proxy.password (which win over the URL's own)."""

    scheme: str
    host: str
    port: int
    user: str = ""
    password: str = ""

    @classmethod
    def parse(cls, config: Mapping[str, str]) -> S3Proxy:
        url = _get(config, "s3.proxy.url")
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise ValueError(f"not a proxy URL ({exc}): use http://host:port") from exc
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r} is not a proxy URL: use http://host:port (or https://)")
        if parts.path.strip("/") or parts.query or parts.fragment:
            raise ValueError(f"{url!r}: a proxy URL has no path, query or fragment: use http://host:port")
        return cls(
            scheme=parts.scheme,
            host=parts.hostname,
            port=port or (443 if parts.scheme == "https" else 80),
            user=_get(config, "s3.proxy.user") or unquote(parts.username or ""),
            password=_get(config, "s3.proxy.password") or unquote(parts.password or ""),
        )

    @property
    def netloc_host(self) -> str:
        """The host as a URL names it: an IPv6 address in brackets."""
        return f"[{self.host}]" if ":" in self.host else self.host

    def pyarrow_options(self) -> dict[str, Any]:
        """As pyarrow's S3FileSystem takes it (``proxy_options``)."""
        options: dict[str, Any] = {"scheme": self.scheme, "host": self.netloc_host, "port": self.port}
        if self.user:
            options |= {"username": self.user, "password": self.password}
        return options

    def url(self) -> str:
        """As botocore takes it (its ``proxies``): the credentials in the URL, quoted."""
        credentials = f"{quote(self.user, safe='')}:{quote(self.password, safe='')}@" if self.user else ""
        return f"{self.scheme}://{credentials}{self.netloc_host}:{self.port}"


# The tags the S3 sink gives a file (s3.object.tagging), and the rules S3 holds tags to: at most 10 on an
# object; a key of 1 to 128 characters (not starting "aws:", which a key read up to a ':' cannot); a value of up
# to 256; letters, digits, white space and + - = . _ : / @.
OFFSET_TAGS = ("startOffset", "endOffset", "recordCount")
MAX_TAGS = 10
_TAG_TEXT = re.compile(r"[\w +\-=._:/@]*")


@dataclass(frozen=True)
class ObjectTagging:
    """s3.object.tagging=true: each committed file on S3 is tagged, as the S3 sink tags it, with the offsets of its
    first and last records and its record count, and the ``extra`` pairs (s3.object.tagging.key.value.pairs).
    ``fail``: s3.object.behavior.on.tagging.error=fail (a file that cannot be tagged fails its commit), else
    ignore (it is logged)."""

    extra: tuple[tuple[str, str], ...] = ()
    fail: bool = False

    def tags(self, first: int, last: int, records: int) -> dict[str, str]:
        offsets = dict(zip(OFFSET_TAGS, (str(first), str(last), str(records)), strict=True))
        return offsets | dict(self.extra)

    @classmethod
    def parse(cls, config: Mapping[str, str]) -> ObjectTagging:
        """From the config; ValueError for pairs that S3 or the S3 sink would not take as they are written."""
        extra: dict[str, str] = {}
        for pair in (p.strip() for p in _get(config, "s3.object.tagging.key.value.pairs").split(",")):
            if not pair:
                continue
            if pair.count(":") != 1:
                raise ValueError(
                    f"{pair!r} is not key:value (the S3 sink reads a pair up to its second ':', so a tag's "
                    "value cannot hold one)"
                )
            key, value = (part.strip() for part in pair.split(":"))
            if not key or len(key) > 128 or len(value) > 256:
                raise ValueError(f"{pair!r}: S3 takes a tag key of 1 to 128 characters and a value of up to 256")
            if not _TAG_TEXT.fullmatch(key) or not _TAG_TEXT.fullmatch(value):
                raise ValueError(f"{pair!r}: S3 takes tags of letters, digits, spaces and + - = . _ : / @ only")
            if key in OFFSET_TAGS:
                raise ValueError(f"{pair!r}: {key} is one of the tags every file gets ({', '.join(OFFSET_TAGS)})")
            if key in extra:
                raise ValueError(f"{pair!r}: the tag {key} is given twice")
            extra[key] = value
        if len(extra) + len(OFFSET_TAGS) > MAX_TAGS:
            raise ValueError(
                f"{len(extra)} tags besides {', '.join(OFFSET_TAGS)}: S3 takes at most {MAX_TAGS} tags on an object"
            )
        return cls(tuple(extra.items()), _get(config, "s3.object.behavior.on.tagging.error").strip().lower() == "fail")


@dataclass(frozen=True)
class Storage:
    """Where files go: a pyarrow filesystem and the root path on it (no trailing slash)."""

    url: str
    bucket: str | None = None
    region: str = "us-west-2"
    access_key: str | None = None
    secret_key: str | None = None
    # s3.path.style.access.enabled: with store.url, the bucket in the path (pyarrow's way with an endpoint);
    # false: in the host name, everywhere.
    path_style: bool = True
    # s3.acl.canned: the canned ACL of every object written or copied (None: none sent).
    acl: str | None = None
    proxy: S3Proxy | None = None

    def filesystem(self) -> tuple[pafs.FileSystem, str]:
        """The file system and the root path on it. On S3, pyarrow's S3 client behind ``ObjectsOnlyS3``: objects
        are written, moved and deleted without the zero-byte directory markers pyarrow writes (the Confluent S3
        sink writes none); local and HDFS stores have real directories, made as files need them."""
        import pyarrow.fs as pafs

        if self.bucket:
            from sinks.files.s3 import ObjectsOnlyS3

            endpoint = urlsplit(self.url) if self.url else None
            native = pafs.S3FileSystem(
                access_key=self.access_key,
                secret_key=self.secret_key,
                region=self.region,
                endpoint_override=endpoint.netloc if endpoint else None,
                scheme=endpoint.scheme if endpoint else "https",
                allow_bucket_creation=False,
                force_virtual_addressing=not self.path_style,
                # (Objects are written with it; copies are boto3's, with it too: sinks.files.s3.)
                default_metadata={"ACL": self.acl} if self.acl else None,
                proxy_options=self.proxy.pyarrow_options() if self.proxy else None,
            )
            return pafs.PyFileSystem(ObjectsOnlyS3(native, self)), self.bucket
        if urlsplit(self.url).scheme in ("", "file"):
            return pafs.LocalFileSystem(), self.root()
        fs, path = pafs.FileSystem.from_uri(self.url)
        return fs, path.rstrip("/")

    def root(self) -> str:
        """The root path on the store (the bucket on S3), known without reaching it."""
        if self.bucket:
            return self.bucket
        if urlsplit(self.url).scheme in ("", "file"):
            return os.path.normpath(urlsplit(self.url).path if "://" in self.url else self.url)
        return urlsplit(self.url).path.rstrip("/")

    def uri(self, path: str) -> str:
        """A path on this store as a URL readers and the UI understand."""
        if self.bucket:
            return f"s3://{path}"
        if urlsplit(self.url).scheme in ("", "file"):
            return f"file://{path}"
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc}{path}"


@dataclass(frozen=True)
class FilesSettings:
    storage: Storage
    topics_dir: str
    format: str
    parquet_codec: str
    avro_codec: str
    flush_size: int
    rotate_interval_ms: int
    partitioner: str
    partition_fields: tuple[str, ...]
    time: TimePartitioning | None
    timestamp_extractor: str
    timestamp_field: str
    pad_width: int
    directory_delim: str
    file_delim: str
    null_values: str
    # s3.compression.type and .level, for JSON files (gzip: <name>.json.gz).
    compression: str = "none"
    compression_level: int = -1
    # The S3 sink's names (<topic>+<partition>+<first offset>.<ext>), or the HDFS sinks' with the last offset
    # too: by connector.class, as the sink each class names does.
    first_offset_names: bool = False
    tagging: ObjectTagging | None = None

    def file_name(self, topic: str, partition: int, first: int, last: int) -> str:
        """A committed file's name, in its topic's partition's directory."""
        end = None if self.first_offset_names else last
        return file_name(topic, partition, first, end, self.extension, self.pad_width, self.file_delim)

    def parse_file_name(self, name: str, topic: str | None = None) -> tuple[str, int, int, int | None] | None:
        """(topic, partition, first offset, last offset, or None in the S3 sink's names) of a committed file's
        name; None for another file. With ``topic``, the directory the file is in: a name of that topic only,
        and besides the S3 sink's names, the HDFS sinks' (this sink's S3 class wrote them until 2026-11-30)."""
        found: list[tuple[str, int, int, int | None] | None] = []
        if self.first_offset_names:
            start = parse_start_file_name(name, self.file_delim)
            found.append((*start, None) if start else None)
        if not self.first_offset_names or topic is not None:
            found.append(parse_file_name(name, self.file_delim))
        return next((f for f in found if f is not None and topic in (None, f[0])), None)

    def topics_path(self, root: str) -> str:
        """``<root>/<topics.dir>``: the directory the topics' directories are in."""
        return f"{root}/{self.topics_dir}" if self.topics_dir else root

    @property
    def gzipped(self) -> bool:
        """Whether files are gzip streams: JSON files with s3.compression.type=gzip, as the S3 sink writes them."""
        return self.format == "json" and self.compression == "gzip"

    @property
    def extension(self) -> str:
        return FORMAT_EXTENSIONS[self.format] + (".gz" if self.gzipped else "")

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> FilesSettings:
        partitioner = canonical(_get(raw, "partitioner.class"), PARTITIONERS) or "default"
        time = None
        if partitioner in ("time", "hourly", "daily"):
            path_format = {"hourly": HOURLY_FORMAT, "daily": DAILY_FORMAT}.get(partitioner) or _get(raw, "path.format")
            duration = {"hourly": HOUR_MS, "daily": DAY_MS}.get(partitioner) or int(_get(raw, "partition.duration.ms"))
            time = TimePartitioning(path_format, duration, _get(raw, "timezone"))
        secret: Any = _get(raw, "aws.secret.access.key") or None
        return cls(
            storage=Storage(
                url=_store_url(raw),
                bucket=_get(raw, "s3.bucket.name") or None,
                region=_get(raw, "s3.region"),
                access_key=_get(raw, "aws.access.key.id") or None,
                secret_key=secret,
                path_style=_get(raw, "s3.path.style.access.enabled").lower() != "false",
                # (private is S3's default: sent as no ACL, which a bucket with ACLs disabled, AWS's default
                # for new buckets, takes; it refuses an x-amz-acl other than bucket-owner-full-control.)
                acl=None if _get(raw, "s3.acl.canned") in ("", "private") else _get(raw, "s3.acl.canned"),
                proxy=S3Proxy.parse(raw) if _get(raw, "s3.proxy.url") else None,
            ),
            topics_dir=_get(raw, "topics.dir").strip("/"),
            format=canonical(_get(raw, "format.class"), FORMATS) or default_format(raw) or "parquet",
            parquet_codec=_get(raw, "parquet.codec"),
            avro_codec=_get(raw, "avro.codec"),
            flush_size=int(_get(raw, "flush.size")),
            rotate_interval_ms=int(_get(raw, "rotate.interval.ms")),
            partitioner=partitioner,
            partition_fields=tuple(f.strip() for f in _get(raw, "partition.field.name").split(",") if f.strip()),
            time=time,
            timestamp_extractor=_get(raw, "timestamp.extractor"),
            timestamp_field=_get(raw, "timestamp.field"),
            pad_width=int(_get(raw, "filename.offset.zero.pad.width")),
            directory_delim=_get(raw, "directory.delim") or "/",
            file_delim=_get(raw, "file.delim") or "+",
            null_values=_get(raw, "behavior.on.null.values").strip().lower(),
            compression=_get(raw, "s3.compression.type"),
            compression_level=int(_get(raw, "s3.compression.level")),
            first_offset_names=_get(raw, "connector.class") in (S3_CLASS, S3_CLASS.rsplit(".", 1)[-1]),
            tagging=ObjectTagging.parse(raw) if _get(raw, "s3.object.tagging").lower() == "true" else None,
        )


def probe(config: SinkConfig) -> list[CheckResult]:
    """Write and delete a file under the topics directory: what the tasks and the commit will do there."""
    settings: FilesSettings = config.settings
    fs, root = settings.storage.filesystem()
    folder = settings.topics_path(root)
    path = f"{folder}/_sinkadmin-probe-{uuid.uuid4().hex[:8]}"
    # (On S3 neither this nor the delete below leaves a directory marker: sinks.files.s3.)
    fs.create_dir(folder, recursive=True)
    with fs.open_output_stream(path) as stream:
        stream.write(b"probe")
    fs.delete_file(path)
    return [CheckResult("Store", CheckStatus.OK, f"wrote and deleted a file under {settings.storage.uri(folder)}")]


def destinations(config: Mapping[str, Any]) -> list[str]:
    """The topics directory, as a URI (the list and detail pages' "writes to")."""
    try:
        settings = FilesSettings.parse({k: str(v) for k, v in config.items()})
    except (KeyError, ValueError):
        return []
    return [settings.storage.uri(settings.topics_path(settings.storage.root()))]
