"""The plain-file sink's config definitions: the Confluent HDFS and S3 sinks' keys where the meaning is the same.

Kept free of the data plane's imports: the web process reads it for forms,
the API and validation.
"""

from __future__ import annotations

from connectors.config.definitions import (
    SHARED_KEYS,
    SHARED_PREFIX_KEYS,
    ConfigKey,
    Importance,
    KeyType,
    Plugin,
    in_group_order,
)

_G_STORAGE = "Storage"
_G_FORMAT = "Format"
_G_LAYOUT = "Layout"
_G_COMMIT = "Commit control"

# format.class: short name -> the names the Confluent sinks give it.
FORMATS: dict[str, tuple[str, ...]] = {
    "parquet": (
        "io.confluent.connect.hdfs.parquet.ParquetFormat",
        "io.confluent.connect.hdfs3.parquet.ParquetFormat",
        "io.confluent.connect.s3.format.parquet.ParquetFormat",
    ),
    "avro": (
        "io.confluent.connect.hdfs.avro.AvroFormat",
        "io.confluent.connect.hdfs3.avro.AvroFormat",
        "io.confluent.connect.s3.format.avro.AvroFormat",
    ),
    "json": (
        "io.confluent.connect.hdfs.json.JsonFormat",
        "io.confluent.connect.hdfs3.json.JsonFormat",
        "io.confluent.connect.s3.format.json.JsonFormat",
    ),
}
FORMAT_EXTENSIONS = {"parquet": "parquet", "avro": "avro", "json": "json"}

# partitioner.class: short name -> the storage-common (and older HDFS) class names.
PARTITIONERS: dict[str, tuple[str, ...]] = {
    "default": (
        "io.confluent.connect.storage.partitioner.DefaultPartitioner",
        "io.confluent.connect.hdfs.partitioner.DefaultPartitioner",
    ),
    "field": (
        "io.confluent.connect.storage.partitioner.FieldPartitioner",
        "io.confluent.connect.hdfs.partitioner.FieldPartitioner",
    ),
    "time": (
        "io.confluent.connect.storage.partitioner.TimeBasedPartitioner",
        "io.confluent.connect.hdfs.partitioner.TimeBasedPartitioner",
    ),
    "hourly": (
        "io.confluent.connect.storage.partitioner.HourlyPartitioner",
        "io.confluent.connect.hdfs.partitioner.HourlyPartitioner",
    ),
    "daily": (
        "io.confluent.connect.storage.partitioner.DailyPartitioner",
        "io.confluent.connect.hdfs.partitioner.DailyPartitioner",
    ),
}
TIMESTAMP_EXTRACTORS = ("Record", "RecordField", "Wallclock")
PARQUET_CODECS = ("none", "uncompressed", "snappy", "gzip", "lz4", "brotli", "zstd")
AVRO_CODECS = ("null", "deflate", "snappy", "bzip2", "xz", "zstandard")
# s3.acl.canned: S3's canned ACLs of an object (PutObject's and CopyObject's x-amz-acl). The S3 sink also takes
# log-delivery-write, which S3 grants on buckets only.
S3_OBJECT_ACLS = (
    "private",
    "public-read",
    "public-read-write",
    "authenticated-read",
    "aws-exec-read",
    "bucket-owner-read",
    "bucket-owner-full-control",
)
# s3.compression.type: the S3 sink's compressions of JSON files (its CompressionType), and gzip's highest level.
COMPRESSION_TYPES = ("none", "gzip")
COMPRESSION_LEVEL_MAX = 9

FILES_OWN_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "store.url",
        KeyType.STRING,
        "Where the files go: a file:// URL or an absolute path (local disk, or a mount every Spark executor "
        "sees), or an hdfs:// URL. With s3.bucket.name, the S3 endpoint (as the S3 sink reads this key); "
        "empty for AWS itself.",
        _G_STORAGE,
        importance=Importance.HIGH,
        order=1,
    ),
    ConfigKey(
        "hdfs.url",
        KeyType.STRING,
        "The HDFS sink's older name for store.url.",
        _G_STORAGE,
        importance=Importance.LOW,
        order=2,
    ),
    ConfigKey(
        "topics.dir",
        KeyType.STRING,
        "Directory under the store (or bucket) that holds a directory per topic.",
        _G_STORAGE,
        default="topics",
        importance=Importance.HIGH,
        order=3,
    ),
    ConfigKey(
        "s3.bucket.name",
        KeyType.STRING,
        "The S3 bucket the files go to (S3 and S3-compatible storage).",
        _G_STORAGE,
        order=4,
    ),
    ConfigKey("s3.region", KeyType.STRING, "The bucket's region.", _G_STORAGE, default="us-west-2", order=5),
    ConfigKey(
        "aws.access.key.id",
        KeyType.STRING,
        "S3 access key id. Empty: the AWS default credentials chain (environment, profile, instance role).",
        _G_STORAGE,
        order=6,
    ),
    ConfigKey("aws.secret.access.key", KeyType.PASSWORD, "S3 secret access key.", _G_STORAGE, order=7),
    ConfigKey(
        "s3.path.style.access.enabled",
        KeyType.BOOLEAN,
        "true (the S3 sink's default): requests to a store.url endpoint name the bucket in the path "
        "(http://endpoint/bucket/key), as S3-compatible servers expect; AWS itself (no store.url) is reached "
        "by virtual host (bucket.s3.region.amazonaws.com), the same bucket and objects. false: by virtual host "
        "everywhere.",
        _G_STORAGE,
        default="true",
        importance=Importance.LOW,
        order=8,
    ),
    ConfigKey(
        "s3.acl.canned",
        KeyType.STRING,
        "The canned ACL every file is written and moved with, as S3 names it: private, public-read, "
        "public-read-write, authenticated-read, aws-exec-read, bucket-owner-read or bucket-owner-full-control "
        "(a bucket of another account, whose owner is to read the files). Empty: none, so S3 makes each file "
        "private to the account that wrote it.",
        _G_STORAGE,
        importance=Importance.LOW,
        order=9,
    ),
    ConfigKey(
        "s3.proxy.url",
        KeyType.STRING,
        "An HTTP proxy S3 is reached through, as a URL: http://host:port (or https:// to reach the proxy over "
        "TLS). Its user and password may be in the URL, or in s3.proxy.user and s3.proxy.password, which win.",
        _G_STORAGE,
        importance=Importance.LOW,
        order=10,
    ),
    ConfigKey("s3.proxy.user", KeyType.STRING, "The proxy's user name (Basic authentication).", _G_STORAGE, order=11),
    ConfigKey("s3.proxy.password", KeyType.PASSWORD, "The proxy user's password.", _G_STORAGE, order=12),
    ConfigKey(
        "s3.object.tagging",
        KeyType.BOOLEAN,
        "true: each file is tagged, as the S3 sink tags it, with startOffset and endOffset (the offsets of its "
        "first and last records) and recordCount, when its commit moves it to its name (a lifecycle rule or a "
        "reader can select files by them).",
        _G_STORAGE,
        default="false",
        importance=Importance.LOW,
        order=13,
    ),
    ConfigKey(
        "s3.object.tagging.key.value.pairs",
        KeyType.LIST,
        "More tags for every file, with s3.object.tagging=true: key:value pairs, comma-separated "
        "(team:data,env:prod); at most 7, as S3 takes 10 tags on an object.",
        _G_STORAGE,
        importance=Importance.LOW,
        order=14,
    ),
    ConfigKey(
        "s3.object.behavior.on.tagging.error",
        KeyType.STRING,
        "What a file S3 would not tag does (tags refused, or the permission s3:PutObjectTagging missing): ignore "
        "(logged; the file is committed untagged) or fail (its commit is not applied, and is retried at the "
        "connector's next start). A store that cannot be reached is an outage either way, retried.",
        _G_STORAGE,
        default="ignore",
        choices=("ignore", "fail"),
        choices_any_case=True,
        importance=Importance.LOW,
        order=15,
    ),
    ConfigKey(
        "format.class",
        KeyType.CLASS,
        "File format: parquet, avro or json (JSON lines), or the Confluent sinks' format class names. Required, "
        "except with the HDFS sinks' class names, whose default is theirs: avro.",
        _G_FORMAT,
        importance=Importance.HIGH,
        order=1,
    ),
    ConfigKey(
        "parquet.codec",
        KeyType.STRING,
        "Compression of Parquet files.",
        _G_FORMAT,
        default="snappy",
        choices=PARQUET_CODECS,
        order=2,
    ),
    ConfigKey(
        "avro.codec",
        KeyType.STRING,
        "Compression of Avro files' blocks.",
        _G_FORMAT,
        default="null",
        choices=AVRO_CODECS,
        order=3,
    ),
    ConfigKey(
        "s3.compression.type",
        KeyType.STRING,
        "Compression of JSON files, as the S3 sink's: gzip writes <name>.json.gz files. Parquet and Avro files "
        "are compressed by parquet.codec and avro.codec (the S3 sink applies this key to JSON files only, too).",
        _G_FORMAT,
        default="none",
        choices=COMPRESSION_TYPES,
        importance=Importance.LOW,
        order=4,
    ),
    ConfigKey(
        "s3.compression.level",
        KeyType.INT,
        "gzip's level for s3.compression.type=gzip: 0 (none) to 9 (smallest); -1, zlib's default (6).",
        _G_FORMAT,
        default="-1",
        minimum=-1,
        importance=Importance.LOW,
        order=5,
    ),
    ConfigKey(
        "flush.size",
        KeyType.INT,
        "Records per file: a file is closed when it holds this many. Every commit also closes the files it wrote.",
        _G_COMMIT,
        importance=Importance.HIGH,
        required=True,
        minimum=1,
        order=0,
    ),
    ConfigKey(
        "rotate.interval.ms",
        KeyType.LONG,
        "Close a file when a record's timestamp (from timestamp.extractor) is this far past the file's first "
        "record's. -1: never by time.",
        _G_COMMIT,
        default="-1",
        minimum=-1,
        order=1,
    ),
    ConfigKey(
        "rotate.schedule.interval.ms",
        KeyType.LONG,
        "Close every file on this wall-clock schedule: here, the commit interval (each commit closes its "
        "files). Set this or sinkadmin.commit.interval-ms. -1: unset.",
        _G_COMMIT,
        default="-1",
        minimum=-1,
        order=2,
    ),
    ConfigKey(
        "sinkadmin.control.topic",
        KeyType.STRING,
        "Control topic for commit coordination (one partition).",
        _G_COMMIT,
        default="control-files",
        order=3,
    ),
    ConfigKey(
        "sinkadmin.commit.interval-ms",
        KeyType.LONG,
        "How often the coordinator commits: the longest a record waits to be in a file under its final name.",
        _G_COMMIT,
        default="60000",
        minimum=100,
        importance=Importance.HIGH,
        order=4,
    ),
    ConfigKey(
        "sinkadmin.commit.timeout-ms",
        KeyType.LONG,
        "How long the coordinator waits for write statuses; then it commits the partitions that answered.",
        _G_COMMIT,
        default="30000",
        minimum=100,
        order=5,
    ),
    ConfigKey(
        "behavior.on.null.values",
        KeyType.STRING,
        "Records with a null value (tombstones): fail (a bad record, handled by errors.tolerance: none fails "
        "the connector, all skips the record, to the dead-letter topic when one is set) or ignore (counted as "
        "skipped). fail is the S3 sink's default; the HDFS sinks have no such key and do not skip tombstones.",
        _G_COMMIT,
        default="fail",
        choices=("ignore", "fail"),
        choices_any_case=True,
        order=6,
    ),
    ConfigKey(
        "partitioner.class",
        KeyType.CLASS,
        "How records are spread over directories: default (partition=<kafka partition>), field (by "
        "partition.field.name), time (path.format), hourly, daily, or the storage-common class names.",
        _G_LAYOUT,
        default="default",
        importance=Importance.HIGH,
        order=1,
    ),
    ConfigKey(
        "partition.field.name",
        KeyType.LIST,
        "Record fields the field partitioner names directories after (<field>=<value>); nested fields as a.b.",
        _G_LAYOUT,
        order=2,
    ),
    ConfigKey(
        "path.format",
        KeyType.STRING,
        "Directories of the time partitioner, a Joda-Time pattern: e.g. 'year'=YYYY/'month'=MM/'day'=dd/'hour'=HH.",
        _G_LAYOUT,
        order=3,
    ),
    ConfigKey(
        "partition.duration.ms",
        KeyType.LONG,
        "Time span of one directory of the time partitioner.",
        _G_LAYOUT,
        default="-1",
        minimum=-1,
        order=4,
    ),
    ConfigKey(
        "locale",
        KeyType.STRING,
        "Locale of the time partitioner's directory names (e.g. en-US).",
        _G_LAYOUT,
        order=5,
    ),
    ConfigKey(
        "timezone",
        KeyType.STRING,
        "Time zone of the time partitioner's directories (an IANA name, e.g. UTC or Europe/Paris).",
        _G_LAYOUT,
        order=6,
    ),
    ConfigKey(
        "timestamp.extractor",
        KeyType.STRING,
        "Which time places a record in a time directory and drives rotate.interval.ms: Record (the Kafka "
        "timestamp), RecordField (timestamp.field), Wallclock (the time it is written).",
        _G_LAYOUT,
        default="Wallclock",
        choices=TIMESTAMP_EXTRACTORS,
        order=7,
    ),
    ConfigKey(
        "timestamp.field",
        KeyType.STRING,
        "The record field RecordField reads: epoch milliseconds, or an ISO-8601 text.",
        _G_LAYOUT,
        default="timestamp",
        order=8,
    ),
    ConfigKey(
        "filename.offset.zero.pad.width",
        KeyType.INT,
        "Digits the offsets in file names are zero-padded to, so names sort by offset.",
        _G_LAYOUT,
        default="10",
        minimum=0,
        order=9,
    ),
    ConfigKey(
        "directory.delim",
        KeyType.STRING,
        "Separator of directories in the layout.",
        _G_LAYOUT,
        default="/",
        importance=Importance.LOW,
        order=10,
    ),
    ConfigKey(
        "file.delim",
        KeyType.STRING,
        "Separator of topic, partition and offsets in file names.",
        _G_LAYOUT,
        default="+",
        importance=Importance.LOW,
        order=11,
    ),
)

FILES = Plugin(
    short_name="files",
    class_name="io.confluent.connect.hdfs.HdfsSinkConnector",
    aliases=(
        "files",
        "io.confluent.connect.hdfs3.Hdfs3SinkConnector",
        "io.confluent.connect.s3.S3SinkConnector",
    ),
    version="0.1.0",
    keys=in_group_order(SHARED_KEYS + FILES_OWN_KEYS),
    prefix_keys=SHARED_PREFIX_KEYS,
    title="Plain files",
    description="Topics as Parquet, Avro or JSON-lines files in the Confluent HDFS / S3 sinks' layout, on local "
    "disk, HDFS or S3: each file named after the offsets it holds and visible only once its commit is done.",
    control_topic_key="sinkadmin.control.topic",
    commit_interval_key="sinkadmin.commit.interval-ms",
    commit_timeout_key="sinkadmin.commit.timeout-ms",
    interval_override_key="rotate.schedule.interval.ms",
    recoverable=True,
    check="sinks.files.settings:check",
    parse="sinks.files.settings:FilesSettings.parse",
    probe="sinks.files.settings:probe",
    destinations="sinks.files.settings:destinations",
    runtime="sinks.files.runtime",
    # (The Confluent sinks' own keys share no prefix; these are the families whose keys it knows.)
    namespaces=("sinkadmin.", "s3.", "hdfs.", "hive."),
)
