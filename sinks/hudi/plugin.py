"""The Hudi sink's config definitions: the keys of Hudi's Kafka Connect sink and write configs where the
meaning is the same.

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
    MappedKey,
    Plugin,
    in_group_order,
)

_G_TABLES = "Tables"
_G_STORAGE = "Storage"
_G_COMMIT = "Commit control"
_G_SERVICES = "Table maintenance"
OPERATIONS = ("upsert", "insert", "bulk_insert")
# Hudi's cleaning policies (HoodieCleaningPolicy), as sinks/hudi/cleaning.py plans them.
KEEP_LATEST_COMMITS = "KEEP_LATEST_COMMITS"
KEEP_LATEST_FILE_VERSIONS = "KEEP_LATEST_FILE_VERSIONS"
KEEP_LATEST_BY_HOURS = "KEEP_LATEST_BY_HOURS"
CLEANER_POLICIES = (KEEP_LATEST_COMMITS, KEEP_LATEST_FILE_VERSIONS, KEEP_LATEST_BY_HOURS)

HUDI_OWN_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "target.base.path",
        KeyType.STRING,
        "Where the table is: an absolute path or file:// URL on storage every worker and Spark executor sees "
        "(local disk, or a shared mount). Created on the first commit. hoodie.base.path is its other name.",
        _G_STORAGE,
        importance=Importance.HIGH,
        order=1,
    ),
    ConfigKey(
        "target.table.name",
        KeyType.STRING,
        "The table's name (hoodie.table.name is its other name).",
        _G_TABLES,
        importance=Importance.HIGH,
        order=1,
    ),
    ConfigKey(
        "target.database.name",
        KeyType.STRING,
        "The database the table belongs to (in hoodie.properties and its checksum).",
        _G_TABLES,
        default="default",
        order=2,
    ),
    ConfigKey(
        "hoodie.table.type",
        KeyType.STRING,
        "COPY_ON_WRITE: each commit writes new versions of the base files it touches. MERGE_ON_READ is not supported.",
        _G_TABLES,
        default="COPY_ON_WRITE",
        choices=("COPY_ON_WRITE", "MERGE_ON_READ"),
        order=3,
    ),
    ConfigKey(
        "hoodie.datasource.write.operation",
        KeyType.STRING,
        "upsert: a record replaces the row of its key (by the precombine field), tombstones and delete markers "
        "delete it; keys are placed in file groups by the bucket index. insert: records are appended, filling "
        "small files first. bulk_insert: appended into new files only.",
        _G_TABLES,
        default="upsert",
        choices=OPERATIONS,
        importance=Importance.HIGH,
        order=4,
    ),
    ConfigKey(
        "hoodie.datasource.write.recordkey.field",
        KeyType.LIST,
        "Record field(s) that make the record key (several: the key is f1:v1,f2:v2, as ComplexKeyGenerator "
        "makes it). Required for upsert; without it inserts are keyed by topic, partition and offset.",
        _G_TABLES,
        importance=Importance.HIGH,
        order=5,
    ),
    ConfigKey(
        "hoodie.datasource.write.partitionpath.field",
        KeyType.LIST,
        "Record field(s) whose values name the partition directories. Empty: one unpartitioned table.",
        _G_TABLES,
        order=6,
    ),
    ConfigKey(
        "hoodie.datasource.write.precombine.field",
        KeyType.STRING,
        "With upsert: of two records of one key, the one with the greater value of this field wins (a tie: "
        "the later one). A record without it is refused (errors.tolerance). Empty: the later record wins.",
        _G_TABLES,
        order=7,
    ),
    ConfigKey(
        "hoodie.datasource.write.hive_style_partitioning",
        KeyType.BOOLEAN,
        "Name partition directories field=value instead of value.",
        _G_TABLES,
        default="false",
        order=8,
    ),
    ConfigKey(
        "hoodie.payload.delete.field",
        KeyType.STRING,
        "With upsert: a record whose field of this name holds hoodie.payload.delete.marker deletes its key. "
        "A record with _hoodie_is_deleted=true does too, as in Hudi.",
        _G_TABLES,
        order=9,
    ),
    ConfigKey(
        "hoodie.payload.delete.marker",
        KeyType.STRING,
        "The value of hoodie.payload.delete.field that marks a delete.",
        _G_TABLES,
        order=10,
    ),
    ConfigKey(
        "hoodie.index.type",
        KeyType.STRING,
        "How upserts find a key's file group: BUCKET (a hash of the key picks one of a fixed number of file "
        "groups per partition, as Hudi's bucket index does).",
        _G_TABLES,
        default="BUCKET",
        choices=("BUCKET",),
        importance=Importance.LOW,
        order=11,
    ),
    ConfigKey(
        "hoodie.bucket.index.num.buckets",
        KeyType.INT,
        "File groups per partition for upserts; fixed for the table's life. Hudi's own default is 256, too many "
        "files for most partitions written a commit a minute: here 4.",
        _G_TABLES,
        default="4",
        minimum=1,
        order=12,
    ),
    ConfigKey(
        "hoodie.parquet.max.file.size",
        KeyType.LONG,
        "Target size of base files written by inserts: a file group takes records until it is about this size.",
        _G_STORAGE,
        default="125829120",
        minimum=1024,
        order=2,
    ),
    ConfigKey(
        "hoodie.parquet.small.file.limit",
        KeyType.LONG,
        "Inserts add records to a partition's files smaller than this (rewriting them) before opening new "
        "ones. 0: never.",
        _G_STORAGE,
        default="104857600",
        minimum=0,
        order=3,
    ),
    ConfigKey(
        "hoodie.table.base.file.format",
        KeyType.STRING,
        "Format of base files.",
        _G_STORAGE,
        default="PARQUET",
        choices=("PARQUET",),
        importance=Importance.LOW,
        order=4,
    ),
    ConfigKey(
        "hoodie.allow.empty.commit",
        KeyType.BOOLEAN,
        "Complete an instant even for an interval with no records (Hudi's own default is true; here false, so "
        "an idle topic does not add an instant every interval).",
        _G_COMMIT,
        default="false",
        importance=Importance.LOW,
        order=6,
    ),
    ConfigKey(
        "sinkadmin.control.topic",
        KeyType.STRING,
        "Control topic for commit coordination (one partition).",
        _G_COMMIT,
        default="control-hudi",
        order=1,
    ),
    ConfigKey(
        "sinkadmin.commit.interval-ms",
        KeyType.LONG,
        "How often the coordinator commits: each commit is one instant on the table's timeline.",
        _G_COMMIT,
        default="60000",
        minimum=100,
        importance=Importance.HIGH,
        order=2,
    ),
    ConfigKey(
        "sinkadmin.commit.timeout-ms",
        KeyType.LONG,
        "How long the coordinator waits for write statuses; then it commits the partitions that answered.",
        _G_COMMIT,
        default="30000",
        minimum=100,
        order=3,
    ),
    ConfigKey(
        "sinkadmin.maintenance.enabled",
        KeyType.BOOLEAN,
        "Run Hudi's table services beside the sink, in the coordinator: clustering of small files "
        "(hoodie.clustering.*) and cleaning of old file slices (hoodie.clean.*). Each run is recorded and shown "
        "with the connector.",
        _G_SERVICES,
        default="true",
        order=1,
    ),
    ConfigKey(
        "sinkadmin.maintenance.interval-ms",
        KeyType.LONG,
        "Time between table service runs, from the end of one to the start of the next. (Hudi cleans after "
        "every commit: here the old slices of at most one interval wait for the next run.)",
        _G_SERVICES,
        default="3600000",
        minimum=1000,
        order=2,
    ),
    ConfigKey(
        "hoodie.clustering.async.enabled",
        KeyType.BOOLEAN,
        "Cluster small file groups of insert and bulk_insert tables at each table service run: one Spark job "
        "rewrites them into files of hoodie.clustering.plan.strategy.target.file.max.bytes, and one "
        "replacecommit swaps them in (sinks/hudi/clustering.py). Hudi's own default is false; here true, as "
        "bulk_insert opens new files every commit. Upsert tables keep their bucket index's file groups and "
        "are not clustered.",
        _G_SERVICES,
        default="true",
        order=8,
    ),
    ConfigKey(
        "hoodie.clustering.plan.strategy.small.file.limit",
        KeyType.LONG,
        "Base files smaller than this are clustered.",
        _G_SERVICES,
        default="314572800",
        minimum=1,
        order=9,
    ),
    ConfigKey(
        "hoodie.clustering.plan.strategy.target.file.max.bytes",
        KeyType.LONG,
        "Size of the files clustering writes.",
        _G_SERVICES,
        default="1073741824",
        minimum=1024,
        order=10,
    ),
    ConfigKey(
        "hoodie.clustering.plan.strategy.max.bytes.per.group",
        KeyType.LONG,
        "Bytes of small files one clustering group (one Spark task) reads at most.",
        _G_SERVICES,
        default="2147483648",
        minimum=1024,
        order=11,
    ),
    ConfigKey(
        "hoodie.clustering.plan.strategy.max.num.groups",
        KeyType.INT,
        "Clustering groups one run plans at most; the rest wait for the next run.",
        _G_SERVICES,
        default="30",
        minimum=1,
        order=12,
    ),
    ConfigKey(
        "hoodie.clean.automatic",
        KeyType.BOOLEAN,
        "Clean old file slices at each table service run: each commit that rewrites a file group leaves its "
        "previous slice behind until cleaning deletes it.",
        _G_SERVICES,
        default="true",
        order=3,
    ),
    ConfigKey(
        "hoodie.cleaner.policy",
        KeyType.STRING,
        "Which slices cleaning keeps. KEEP_LATEST_COMMITS: every slice the latest "
        "hoodie.cleaner.commits.retained commits read (queries and time travel within them). "
        "KEEP_LATEST_BY_HOURS: the same over hoodie.cleaner.hours.retained hours. KEEP_LATEST_FILE_VERSIONS: "
        "the hoodie.cleaner.fileversions.retained newest slices of each file group.",
        _G_SERVICES,
        default=KEEP_LATEST_COMMITS,
        choices=CLEANER_POLICIES,
        order=4,
    ),
    ConfigKey(
        "hoodie.cleaner.commits.retained",
        KeyType.INT,
        "KEEP_LATEST_COMMITS: the commits whose view of the table stays readable.",
        _G_SERVICES,
        default="10",
        minimum=1,
        order=5,
    ),
    ConfigKey(
        "hoodie.cleaner.hours.retained",
        KeyType.INT,
        "KEEP_LATEST_BY_HOURS: the hours of commits whose view of the table stays readable.",
        _G_SERVICES,
        default="24",
        minimum=1,
        order=6,
    ),
    ConfigKey(
        "hoodie.cleaner.fileversions.retained",
        KeyType.INT,
        "KEEP_LATEST_FILE_VERSIONS: slices kept per file group, the newest first.",
        _G_SERVICES,
        default="3",
        minimum=1,
        order=7,
    ),
)

# Hudi's own names of two keys (its write configs), accepted as the same keys.
SYNONYMS = {"hoodie.base.path": "target.base.path", "hoodie.table.name": "target.table.name"}

HUDI = Plugin(
    short_name="hudi",
    class_name="org.apache.hudi.connect.HoodieSinkConnector",
    aliases=("hudi", "org.apache.hudi.connect.HudiSinkConnector"),
    version="0.1.0",
    keys=in_group_order(
        SHARED_KEYS
        + HUDI_OWN_KEYS
        + tuple(
            ConfigKey(
                name, KeyType.STRING, f"Hudi's name for {target}.", _G_TABLES, importance=Importance.LOW, order=20
            )
            for name, target in SYNONYMS.items()
        )
    ),
    prefix_keys=SHARED_PREFIX_KEYS,
    title="Hudi tables",
    description="Topics into an Apache Hudi Copy-on-Write table (table version 6): one instant per commit, "
    "upserts by record key through a bucket index, or appends; read by Spark, Trino and hudi-rs.",
    control_topic_key="sinkadmin.control.topic",
    commit_interval_key="sinkadmin.commit.interval-ms",
    commit_timeout_key="sinkadmin.commit.timeout-ms",
    allow_empty_key="hoodie.allow.empty.commit",
    # The Hudi Kafka Connect sink's coordinator keys, in seconds.
    mapped_keys=(
        MappedKey("hoodie.kafka.commit.interval.secs", "sinkadmin.commit.interval-ms", scale=1000),
        MappedKey("hoodie.kafka.coordinator.write.timeout.secs", "sinkadmin.commit.timeout-ms", scale=1000),
    ),
    check="sinks.hudi.settings:check",
    parse="sinks.hudi.settings:HudiSettings.parse",
    maintained=True,
    recoverable=True,
    probe="sinks.hudi.settings:probe",
    destinations="sinks.hudi.settings:destinations",
    maintenance="Clustering of small files by Spark and cleaning of old file slices, each an instant on the "
    "table's timeline.",
    runtime="sinks.hudi.runtime",
    namespaces=("sinkadmin.", "hoodie."),
)
