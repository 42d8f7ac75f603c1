"""The Iceberg sink's config definitions: the Iceberg Kafka Connect sink's keys where the meaning is the same.

Kept free of the data plane's imports: the web process reads it for forms,
the API and validation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from connectors.config.definitions import (
    SHARED_KEYS,
    SHARED_PREFIX_KEYS,
    ConfigKey,
    Importance,
    KeyType,
    Plugin,
    PrefixKey,
    in_group_order,
)

_G_TABLES = "Tables"
_G_COMMIT = "Commit control"
_G_CATALOG = "Catalog"
_G_KAFKA = "Kafka clients"
_G_MAINTENANCE = "Table maintenance"
# The group of the errors.* keys every plugin shares.
_G_ERRORS = "Error handling"

ICEBERG_OWN_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "iceberg.tables",
        KeyType.LIST,
        "Comma-separated target tables, as namespace.table. Required unless iceberg.tables.dynamic-enabled.",
        _G_TABLES,
        importance=Importance.HIGH,
        order=1,
    ),
    ConfigKey(
        "iceberg.tables.route-field",
        KeyType.STRING,
        "Record field (nested with dots: _cdc.target) whose value picks each record's tables: matched against "
        "iceberg.table.<table>.route-regex, or with iceberg.tables.dynamic-enabled the table's name (lower-cased). "
        "Without it every record goes to every table. A record without a value goes to no table (counted as "
        "skipped).",
        _G_TABLES,
        order=2,
    ),
    ConfigKey(
        "iceberg.tables.dynamic-enabled",
        KeyType.BOOLEAN,
        "Write each record to the table its iceberg.tables.route-field names (as namespace.table, lower-cased) "
        "instead of the tables iceberg.tables lists: one connector for many tables, e.g. Debezium's topics with "
        "DebeziumTransform's _cdc.target. Tables missing are created if iceberg.tables.auto-create-enabled.",
        _G_TABLES,
        default="false",
        order=2,
    ),
    ConfigKey(
        "iceberg.tables.auto-create-enabled",
        KeyType.BOOLEAN,
        "Create missing tables (and namespaces), with a schema from the converter or the first records.",
        _G_TABLES,
        default="false",
        order=3,
    ),
    ConfigKey(
        "iceberg.tables.default-partition-by",
        KeyType.STRING,
        "Partition fields of the tables this sink creates (Iceberg transforms, e.g. 'days(ts), bucket(16, id)'), "
        "for each table without its own iceberg.table.<table>.partition-by.",
        _G_TABLES,
        importance=Importance.LOW,
        order=4,
    ),
    ConfigKey(
        "iceberg.tables.evolve-schema-enabled",
        KeyType.BOOLEAN,
        "Add columns to the table for new record fields (top-level, and in structs), typed as auto-create "
        "types them: from the Kafka Connect schema envelope, the Avro schema in the config, or the values "
        "of plain JSON (arrow data plane).",
        _G_TABLES,
        default="false",
        order=4,
    ),
    ConfigKey(
        "iceberg.tables.default-id-columns",
        KeyType.LIST,
        "Columns that identify a row (its key) in every table, for upserts: a record replaces the row of its "
        "key. iceberg.table.<table>.id-columns overrides it per table.",
        _G_TABLES,
        importance=Importance.LOW,
        order=5,
    ),
    ConfigKey(
        "iceberg.tables.upsert-mode-enabled",
        KeyType.BOOLEAN,
        "Upsert instead of append: in each commit the last record of a key replaces the table's row of that key, "
        "merge-on-read (position deletes) or copy-on-write (data files rewritten) as the table's write.merge.mode "
        "says; tables created for upserts are merge-on-read. Keys are the identifier columns, or without them "
        "the table's own identifier fields.",
        _G_TABLES,
        default="false",
        order=6,
    ),
    ConfigKey(
        "iceberg.tables.cdc-field",
        KeyType.STRING,
        "Record field holding the change's operation, as the Iceberg sink reads it: a value starting with D "
        "deletes the row of the record's key; U and I upsert it. Implies upserts (needs the identifier columns).",
        _G_TABLES,
        order=7,
    ),
    ConfigKey(
        "sinkadmin.upsert.ordering-field",
        KeyType.STRING,
        "Record field (nested with dots: _cdc.ts, __source_ts_ms, __lsn) that orders the records of a key, as "
        "Hudi's precombine field does: in a commit the greatest wins (of equal ones the later in the stream), "
        "and a record less than the table's row of its key is not applied. For change events whose keys cross "
        "Kafka partitions, a source position (a Debezium event's source.lsn or source.ts_ms). Empty: stream "
        "order (each partition's offsets; later commits win). Upserts only.",
        _G_TABLES,
        default="",
        importance=Importance.LOW,
        order=8,
    ),
    ConfigKey(
        "sinkadmin.metadata-columns",
        KeyType.LIST,
        "Kafka metadata to add as columns _kafka_<name>: any of key, topic, partition, offset, timestamp.",
        _G_TABLES,
        default="",
        importance=Importance.LOW,
        order=8,
    ),
    ConfigKey(
        "iceberg.control.topic",
        KeyType.STRING,
        "Control topic for commit coordination (one partition).",
        _G_COMMIT,
        default="control-iceberg",
        order=1,
    ),
    ConfigKey(
        "iceberg.control.commit.interval-ms",
        KeyType.LONG,
        "How often the coordinator commits.",
        _G_COMMIT,
        default="300000",
        minimum=100,
        importance=Importance.HIGH,
        order=2,
    ),
    ConfigKey(
        "iceberg.control.commit.timeout-ms",
        KeyType.LONG,
        "How long the coordinator waits for write statuses; then it commits the partitions that answered. "
        "After a commit that some task did not answer in time, the next waits twice as long (up to 8 times "
        "this) until every task answers in time.",
        _G_COMMIT,
        default="30000",
        minimum=100,
        order=3,
    ),
    ConfigKey(
        "sinkadmin.commit.allow-empty",
        KeyType.BOOLEAN,
        "Write a snapshot even for an interval with no records.",
        _G_COMMIT,
        default="false",
        importance=Importance.LOW,
        order=5,
    ),
    ConfigKey(
        "errors.deadletterqueue.table.name",
        KeyType.STRING,
        "Iceberg table (namespace.table) for records that cannot be converted (with errors.tolerance=all), "
        "written in the same commit as the good records and created if missing. Its columns: the record as "
        "consumed (topic, partition, offset, timestamp, key, value, headers) and the error (error_stage, "
        "error_class_name, error_exception_class_name, error_exception_message: Kafka Connect's "
        "__connect.errors.* headers). A dead-letter topic may be set beside it.",
        _G_ERRORS,
        order=5,
    ),
    ConfigKey("iceberg.catalog", KeyType.STRING, "Catalog name.", _G_CATALOG, default="iceberg", order=1),
    ConfigKey(
        "iceberg.catalog.type",
        KeyType.STRING,
        "pyiceberg catalog type: sql (default: this service's Postgres), rest, glue, hive, ...",
        _G_CATALOG,
        default="sql",
        order=2,
    ),
    # Table maintenance (workers/maintenance.py), by Iceberg's Spark procedures.
    # Key suffixes follow their options of the same meaning
    # (rewrite_data_files' target-file-size-bytes and min-input-files,
    # history.expire.*, remove_orphan_files' older_than).
    ConfigKey(
        "sinkadmin.maintenance.enabled",
        KeyType.BOOLEAN,
        "Maintain the connector's tables beside the sink with Iceberg's Spark procedures: compact small data "
        "files (rewrite_data_files), rewrite manifests, expire old snapshots and remove orphan files. Each run is "
        "recorded and shown with the connector.",
        _G_MAINTENANCE,
        default="true",
        order=1,
    ),
    ConfigKey(
        "sinkadmin.maintenance.interval-ms",
        KeyType.LONG,
        "Time between maintenance runs, from the end of one to the start of the next.",
        _G_MAINTENANCE,
        default="3600000",
        minimum=1000,
        order=2,
    ),
    ConfigKey(
        "sinkadmin.maintenance.rewrite.target-file-size-bytes",
        KeyType.LONG,
        "Size compaction aims its files at (rewrite_data_files' target-file-size-bytes). Files under three "
        "quarters of it are small; small files of one table partition are rewritten together into files of "
        "about this size.",
        _G_MAINTENANCE,
        default="134217728",
        minimum=1024,
        order=3,
    ),
    ConfigKey(
        "sinkadmin.maintenance.rewrite.min-input-files",
        KeyType.INT,
        "Small files a table partition must have before compaction rewrites them, unless together they "
        "exceed the target size (rewrite_data_files' min-input-files); and manifests a table must have "
        "before they are rewritten.",
        _G_MAINTENANCE,
        default="5",
        minimum=2,
        order=4,
    ),
    ConfigKey(
        "sinkadmin.maintenance.rewrite.delete-file-threshold",
        KeyType.INT,
        "Position delete files a data file must have (merge-on-read upserts add one per commit that updates or "
        "deletes its rows) before compaction rewrites it without its deleted rows, whatever its size "
        "(rewrite_data_files' delete-file-threshold). The delete files left are then compacted by "
        "rewrite_position_delete_files.",
        _G_MAINTENANCE,
        default="5",
        minimum=1,
        order=5,
    ),
    ConfigKey(
        "sinkadmin.maintenance.expire.max-snapshot-age-ms",
        KeyType.LONG,
        "Snapshots older than this are expired (readers can no longer travel back to them), and the files "
        "only they referenced are deleted. The current snapshot, the min-snapshots-to-keep latest, branch and "
        "tag heads, and each connector's latest commit and latest commit of each partition (the ledger is rebuilt "
        "from them) are always kept.",
        _G_MAINTENANCE,
        default="86400000",
        minimum=60000,
        order=6,
    ),
    ConfigKey(
        "sinkadmin.maintenance.expire.min-snapshots-to-keep",
        KeyType.INT,
        "Latest snapshots kept whatever their age.",
        _G_MAINTENANCE,
        default="1",
        minimum=1,
        order=7,
    ),
    ConfigKey(
        "sinkadmin.maintenance.orphans.older-than-ms",
        KeyType.LONG,
        "Files under a table's location that no snapshot or metadata references (from writes that never "
        "committed) are deleted once they are older than this. The window protects files of writes in "
        "flight, so it is at least a day, as Iceberg's remove_orphan_files requires. A prepared commit's "
        "files are never deleted, however old.",
        _G_MAINTENANCE,
        default="259200000",
        minimum=86400000,
        order=8,
    ),
)


ICEBERG_PREFIX_KEYS: tuple[PrefixKey, ...] = (
    PrefixKey(
        "iceberg.catalog.", "Catalog properties passed to pyiceberg (uri, warehouse, credentials...).", _G_CATALOG
    ),
    PrefixKey(
        "iceberg.table.",
        "Per-table settings: <table>.partition-by (Iceberg transforms, e.g. "
        "'days(ts), bucket(16, id)'), <table>.route-regex, <table>.id-columns.",
        _G_TABLES,
        pattern="{table}.{setting}",
        items_key="iceberg.tables",
        settings=("partition-by", "route-regex", "id-columns"),
    ),
    PrefixKey(
        "iceberg.tables.auto-create-props.",
        "Iceberg table properties of the tables the sink creates (format-version, write.merge.mode, "
        "write.parquet.compression-codec...), over the sink's own: format-version 2, zstd Parquet, and for "
        "upsert tables write.merge.mode, write.update.mode and write.delete.mode merge-on-read. Format-version "
        "3 tables (deletion vectors) are written through Spark's Iceberg runtime.",
        _G_TABLES,
    ),
    PrefixKey("iceberg.kafka.", "Kafka client properties for the control topic clients.", _G_KAFKA),
    *SHARED_PREFIX_KEYS,
)


def iceberg_tables(config: Mapping[str, Any]) -> list[str]:
    """The tables a connector writes, as its pages show them: the ones it lists, or with dynamic routing
    what names them."""
    if str(config.get("iceberg.tables.dynamic-enabled", "false")).strip().lower() == "true":
        return [f"the tables its records' {str(config.get('iceberg.tables.route-field', '')).strip()} names"]
    return [t.strip() for t in str(config.get("iceberg.tables", "")).split(",") if t.strip()]


ICEBERG = Plugin(
    short_name="iceberg",
    class_name="org.apache.iceberg.connect.IcebergSinkConnector",
    aliases=("iceberg", "io.tabular.iceberg.connect.IcebergSinkConnector", "IcebergSinkConnector"),
    version="0.1.0",
    keys=in_group_order(SHARED_KEYS + ICEBERG_OWN_KEYS),
    prefix_keys=ICEBERG_PREFIX_KEYS,
    title="Iceberg tables",
    description="Topics into Apache Iceberg tables through a catalog (SQL, REST, Glue, Hive): one snapshot per "
    "table and commit, with schema evolution, partitioning, routing and table maintenance.",
    control_topic_key="iceberg.control.topic",
    commit_interval_key="iceberg.control.commit.interval-ms",
    commit_timeout_key="iceberg.control.commit.timeout-ms",
    maintained=True,
    recoverable=True,
    # (Apache Iceberg's sink routes by iceberg.tables (and a record field), never by the topic, whose
    # original it keeps for offsets: a routing transform renames the topic for the chain's later predicates only.)
    writes_by_topic=False,
    versioned_tables=True,
    check="sinks.iceberg.settings:check",
    parse="sinks.iceberg.settings:IcebergSettings.parse",
    probe="sinks.iceberg.settings:probe",
    destinations="sinks.iceberg.plugin:iceberg_tables",
    maintenance="Compaction, manifest rewrite, snapshot expiry and orphan removal by Iceberg's Spark procedures, "
    "between the sink's commits.",
    runtime="sinks.iceberg.runtime",
    namespaces=("sinkadmin.", "iceberg."),
)
