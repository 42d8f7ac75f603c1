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
    PrefixKey,
    in_group_order,
)

_G_TABLES = "Tables"
_G_STORAGE = "Storage"
_G_COMMIT = "Commit control"
_G_SERVICES = "Table maintenance"
_G_HUDI = "Hudi write configs"
OPERATIONS = ("upsert", "insert", "bulk_insert", "delete")
TABLE_TYPES = ("COPY_ON_WRITE", "MERGE_ON_READ")
INDEX_TYPES = ("BUCKET", "SIMPLE", "GLOBAL_SIMPLE", "BLOOM", "GLOBAL_BLOOM", "RECORD_INDEX")

HUDI_OWN_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "target.base.path",
        KeyType.STRING,
        "Where the table is: an absolute path or file:// URL on storage every worker and Spark executor sees "
        "(local disk, or a shared mount), or s3a://bucket/path (S3 through Hadoop's S3A connector, configured "
        "in spark-defaults.conf). Created by the first commit. hoodie.base.path is its other name.",
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
        "The database the table belongs to (hoodie.database.name).",
        _G_TABLES,
        default="default",
        order=2,
    ),
    ConfigKey(
        "hoodie.table.type",
        KeyType.STRING,
        "COPY_ON_WRITE: a commit writes new versions of the base files it touches. MERGE_ON_READ: a commit "
        "appends its updates and deletes to log files beside them, and compaction merges them into new base "
        "files later (sinkadmin.maintenance.*, or hoodie.compact.inline); readers merge the two meanwhile.",
        _G_TABLES,
        default="COPY_ON_WRITE",
        choices=TABLE_TYPES,
        order=3,
    ),
    ConfigKey(
        "hoodie.datasource.write.operation",
        KeyType.STRING,
        "Hudi's write operation for each commit. upsert: a record replaces the row of its key (by the "
        "precombine field), tombstones, delete markers and _hoodie_is_deleted delete it. insert: records are "
        "added, filling small files first. bulk_insert: added into new files only. delete: every record "
        "deletes its key.",
        _G_TABLES,
        default="upsert",
        choices=OPERATIONS,
        importance=Importance.HIGH,
        order=4,
    ),
    ConfigKey(
        "hoodie.datasource.write.recordkey.field",
        KeyType.LIST,
        "Record field(s) that make the record key, by the key generator (hoodie.datasource.write.keygenerator."
        "class; by default Simple for one field and one partition field, Complex for more, Nonpartitioned for "
        "none). Required for upsert and delete; without it, insert and bulk_insert have Hudi generate keys.",
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
        "With upsert: of two records of one key, the one with the greater value of this field wins (of equal "
        "ones, the later in the topic), against the table's row too (Hudi's event-time ordering). A record "
        "without it is refused (errors.tolerance). Empty: the later record wins. With insert, used only when "
        "hoodie.combine.before.insert is true, as in Hudi.",
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
        "How Hudi's writer finds a key's file group. BUCKET: a hash of the key picks one of a fixed number of "
        "file groups per partition (cheap, for streams of upserts). RECORD_INDEX: a key-to-file index in the "
        "metadata table. SIMPLE, BLOOM and their GLOBAL_ forms: Hudi's lookups by the base files.",
        _G_TABLES,
        default="BUCKET",
        choices=INDEX_TYPES,
        importance=Importance.LOW,
        order=11,
    ),
    ConfigKey(
        "hoodie.bucket.index.num.buckets",
        KeyType.INT,
        "With the BUCKET index: file groups per partition, fixed for the table's life. Hudi's own default is "
        "256, too many files for most partitions written a commit a minute: here 4.",
        _G_TABLES,
        default="4",
        minimum=1,
        order=12,
    ),
    ConfigKey(
        "hoodie.allow.empty.commit",
        KeyType.BOOLEAN,
        "Must be false: an interval with no records writes no instant (an idle topic would add one every interval).",
        _G_COMMIT,
        default="false",
        choices=("false",),
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
        "How often the coordinator commits: each commit is one Hudi write, one instant on the table's "
        "timeline (hoodie.kafka.commit.interval.secs is its other name, in seconds).",
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
        "Run Hudi's compaction (merge-on-read tables, unless hoodie.compact.inline) and clustering "
        "(hoodie.clustering.async.enabled) beside the sink, between its commits, by Hudi's Spark procedures. "
        "Each run is recorded and shown with the connector. Cleaning and archival run after each commit, in "
        "Hudi's writer (hoodie.clean.*, hoodie.archive.*).",
        _G_SERVICES,
        default="true",
        order=1,
    ),
    ConfigKey(
        "sinkadmin.maintenance.interval-ms",
        KeyType.LONG,
        "Time between table service runs, from the end of one to the start of the next. Compaction is "
        "scheduled when hoodie.compact.inline.max.delta.commits delta commits wait (Hudi's trigger).",
        _G_SERVICES,
        default="600000",
        minimum=1000,
        order=2,
    ),
    ConfigKey(
        "hoodie.clustering.async.enabled",
        KeyType.BOOLEAN,
        "Cluster small base files at each table service run (Hudi's run_clustering, with its "
        "hoodie.clustering.plan.strategy.* keys). Not for tables with the BUCKET index, whose file groups are "
        "fixed.",
        _G_SERVICES,
        default="false",
        order=3,
    ),
)

# Families of Hudi's write configs passed to its writer as written (Hudi's names, meanings and defaults).
HUDI_WRITE_CONFIG_PREFIXES: tuple[tuple[str, str], ...] = (
    ("hoodie.compact.", "Compaction of merge-on-read tables (hoodie.compact.inline, ...inline.max.delta.commits)."),
    ("hoodie.compaction.", "Compaction strategy and its limits."),
    (
        "hoodie.datasource.compaction.",
        "Whether the writer compacts (false) or leaves it to the maintenance (true, the default).",
    ),
    ("hoodie.clean.", "Cleaning of old file slices after each commit (hoodie.clean.automatic, ...)."),
    ("hoodie.cleaner.", "The cleaner's policy and what it retains."),
    ("hoodie.archive.", "Archival of the timeline."),
    ("hoodie.keep.", "Instants the active timeline keeps (hoodie.keep.min.commits, hoodie.keep.max.commits)."),
    ("hoodie.clustering.", "Clustering's plan and execution strategies."),
    ("hoodie.metadata.", "The metadata table (on by default, as in Hudi) and its indexes."),
    ("hoodie.index.", "Index settings beyond its type."),
    ("hoodie.bucket.", "The bucket index."),
    ("hoodie.bloom.", "The bloom index."),
    ("hoodie.record.index.", "The record-level index."),
    ("hoodie.record.merge.", "How records of one key merge (hoodie.record.merge.mode)."),
    ("hoodie.parquet.", "Base files (hoodie.parquet.max.file.size, ...small.file.limit, compression)."),
    ("hoodie.logfile.", "Merge-on-read log files."),
    ("hoodie.combine.", "Combining records of one key within a write (hoodie.combine.before.insert, ...)."),
    ("hoodie.datasource.write.keygenerator.", "The key generator (class, type, options)."),
    ("hoodie.datasource.write.payload.", "The record payload class."),
    ("hoodie.write.", "Hudi's writer (concurrency, markers, table version, ...)."),
    ("hoodie.client.", "Hudi's write client (hoodie.client.heartbeat.interval_in_ms, ...tolerable.misses)."),
    ("hoodie.upsert.", "Upsert parallelism and shuffle."),
    ("hoodie.insert.", "Insert parallelism and shuffle."),
    ("hoodie.bulkinsert.", "Bulk insert parallelism and sort mode."),
    ("hoodie.memory.", "Memory of merges and compaction."),
)
# The families' prefixes, as Hudi's writer and its procedures are given them.
HUDI_WRITE_CONFIG_FAMILIES: tuple[str, ...] = tuple(prefix for prefix, _ in HUDI_WRITE_CONFIG_PREFIXES)
HUDI_PREFIX_KEYS: tuple[PrefixKey, ...] = tuple(
    PrefixKey(prefix, f"{doc} Passed to Hudi's writer as written.", _G_HUDI)
    for prefix, doc in HUDI_WRITE_CONFIG_PREFIXES
)

# Hudi's own names of keys of this sink (its write configs, its Spark datasource's, its 1.x table config's),
# accepted as the same keys, with what each says.
SYNONYMS = {
    "hoodie.base.path": "target.base.path",
    "hoodie.table.name": "target.table.name",
    "hoodie.datasource.write.table.type": "hoodie.table.type",
    "hoodie.table.ordering.fields": "hoodie.datasource.write.precombine.field",
    "hoodie.write.record.merge.mode": "hoodie.record.merge.mode",
}
SYNONYM_DOCS = {
    "hoodie.datasource.write.table.type": "The table type by Hudi's Spark datasource's name: COPY_ON_WRITE or "
    "MERGE_ON_READ, as hoodie.table.type.",
    "hoodie.table.ordering.fields": "Hudi 1.x's name for the ordering (precombine) field: "
    "hoodie.datasource.write.precombine.field. One field: ordering by several is not supported yet.",
    "hoodie.write.record.merge.mode": "Hudi 1.x's write config for the merge mode (HoodieWriteConfig), which it "
    "stores in the table config as hoodie.record.merge.mode: COMMIT_TIME_ORDERING, EVENT_TIME_ORDERING.",
}

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
                name,
                KeyType.STRING,
                SYNONYM_DOCS.get(name, f"Hudi's name for {target}."),
                _G_TABLES,
                importance=Importance.LOW,
                order=20,
            )
            for name, target in SYNONYMS.items()
        )
    ),
    prefix_keys=(*HUDI_PREFIX_KEYS, *SHARED_PREFIX_KEYS),
    title="Hudi tables",
    description="Topics into an Apache Hudi table, copy-on-write or merge-on-read, written by Hudi's own Spark "
    "writer: one instant per commit, upserts, inserts, bulk inserts and deletes with Hudi's indexes, key "
    "generators and payloads; compaction, clustering, cleaning and archival by Hudi; read by Spark, Trino and "
    "hudi-rs.",
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
    # (Hudi's Kafka Connect sink writes every record to its one table: a routing transform renames
    # the topic for the chain's later predicates only.)
    writes_by_topic=False,
    probe="sinks.hudi.settings:probe",
    destinations="sinks.hudi.settings:destinations",
    maintenance="Compaction of merge-on-read log files and clustering of small files, by Hudi's Spark "
    "procedures, each an instant on the table's timeline.",
    runtime="sinks.hudi.runtime",
    namespaces=("sinkadmin.", "hoodie."),
)
