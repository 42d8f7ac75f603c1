"""Config keys of the sink plugins, shaped like Kafka Connect's ConfigDef.

Key names follow the Iceberg Kafka Connect sink where the meaning is the same,
so a config written for that sink works here unchanged. Keys with no
counterpart there live under ``sinkadmin.``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class KeyType(StrEnum):
    # The names Kafka Connect reports in /connector-plugins/{p}/config.
    STRING = "STRING"
    INT = "INT"
    LONG = "LONG"
    BOOLEAN = "BOOLEAN"
    LIST = "LIST"
    PASSWORD = "PASSWORD"
    CLASS = "CLASS"


class Importance(StrEnum):
    HIGH = "HIGH"
    MEDIUM = "MEDIUM"
    LOW = "LOW"


@dataclass(frozen=True)
class ConfigKey:
    name: str
    type: KeyType
    documentation: str
    group: str
    default: str | None = None
    importance: Importance = Importance.MEDIUM
    required: bool = False
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    order: int = 0
    width: str = "MEDIUM"
    display_name: str = ""
    dependents: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return self.display_name or self.name


@dataclass(frozen=True)
class PrefixKey:
    """A family of keys sharing a prefix, e.g. ``iceberg.catalog.*``."""

    prefix: str
    documentation: str
    group: str
    # Segments after the prefix, e.g. ``<table>.partition-by`` has pattern "{table}.partition-by".
    pattern: str = "*"


@dataclass(frozen=True)
class Plugin:
    short_name: str
    class_name: str
    aliases: tuple[str, ...]
    version: str
    keys: tuple[ConfigKey, ...]
    prefix_keys: tuple[PrefixKey, ...] = field(default_factory=tuple)

    def key(self, name: str) -> ConfigKey | None:
        return next((k for k in self.keys if k.name == name), None)

    @property
    def groups(self) -> list[str]:
        seen: list[str] = []
        for key in self.keys:
            if key.group not in seen:
                seen.append(key.group)
        return seen


CONVERTERS: dict[str, str] = {
    # short name -> canonical name; Kafka Connect class names map to the same.
    "json": "json",
    "org.apache.kafka.connect.json.JsonConverter": "json",
    "string": "string",
    "org.apache.kafka.connect.storage.StringConverter": "string",
    "bytearray": "bytearray",
    "org.apache.kafka.connect.converters.ByteArrayConverter": "bytearray",
    "avro": "avro",
    "io.confluent.connect.avro.AvroConverter": "avro",
}

METADATA_COLUMNS = ("key", "topic", "partition", "offset", "timestamp")

_G_CONNECTOR = "Connector"
_G_TABLES = "Tables"
_G_CONVERT = "Converters"
_G_COMMIT = "Commit control"
_G_ERRORS = "Error handling"
_G_CATALOG = "Catalog"
_G_KAFKA = "Kafka clients"
_G_STAGING = "Staging"

ICEBERG_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "connector.class",
        KeyType.STRING,
        "The sink: 'iceberg' or the Iceberg sink's Connect class name.",
        _G_CONNECTOR,
        importance=Importance.HIGH,
        required=True,
        order=1,
    ),
    ConfigKey(
        "tasks.max",
        KeyType.INT,
        "Maximum number of worker tasks that host this connector's partitions.",
        _G_CONNECTOR,
        default="1",
        importance=Importance.HIGH,
        minimum=1,
        order=2,
    ),
    ConfigKey(
        "topics",
        KeyType.LIST,
        "Comma-separated topics to read. Set this or topics.regex.",
        _G_CONNECTOR,
        importance=Importance.HIGH,
        order=3,
    ),
    ConfigKey(
        "topics.regex",
        KeyType.STRING,
        "Regular expression of topics to read. Set this or topics.",
        _G_CONNECTOR,
        importance=Importance.HIGH,
        order=4,
    ),
    ConfigKey(
        "consumer.auto.offset.reset",
        KeyType.STRING,
        "Where a new connector starts reading a partition it has no committed offset for.",
        _G_CONNECTOR,
        default="earliest",
        choices=("earliest", "latest"),
        order=5,
    ),
    ConfigKey(
        "iceberg.tables",
        KeyType.LIST,
        "Comma-separated target tables, as namespace.table.",
        _G_TABLES,
        importance=Importance.HIGH,
        required=True,
        order=1,
    ),
    ConfigKey(
        "iceberg.tables.route-field",
        KeyType.STRING,
        "Record field whose value is matched against iceberg.table.<name>.route-regex to pick tables. "
        "Without it every record goes to every table.",
        _G_TABLES,
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
        "Identifier columns of auto-created tables.",
        _G_TABLES,
        importance=Importance.LOW,
        order=5,
    ),
    ConfigKey(
        "iceberg.tables.upsert-mode-enabled",
        KeyType.BOOLEAN,
        "Upsert instead of append. Not supported yet: must be false.",
        _G_TABLES,
        default="false",
        importance=Importance.LOW,
        order=6,
    ),
    ConfigKey(
        "sinkadmin.metadata-columns",
        KeyType.LIST,
        "Kafka metadata to add as columns _kafka_<name>: any of key, topic, partition, offset, timestamp.",
        _G_TABLES,
        default="",
        importance=Importance.LOW,
        order=7,
    ),
    ConfigKey(
        "key.converter",
        KeyType.STRING,
        "How record keys are decoded: json, string, bytearray, avro, or a Kafka Connect converter class name.",
        _G_CONVERT,
        default="string",
        order=1,
    ),
    ConfigKey(
        "value.converter",
        KeyType.STRING,
        "How record values are decoded: json, string, bytearray, avro, or a Kafka Connect converter class name.",
        _G_CONVERT,
        default="json",
        importance=Importance.HIGH,
        order=2,
    ),
    ConfigKey(
        "value.converter.schemas.enable",
        KeyType.BOOLEAN,
        "JSON values carry Kafka Connect's {schema, payload} envelope.",
        _G_CONVERT,
        default="false",
        order=3,
    ),
    ConfigKey(
        "value.converter.avro.schema",
        KeyType.STRING,
        "Avro schema (JSON) of the values, for the avro converter. Confluent wire-format values "
        "(magic byte + schema id) are accepted too.",
        _G_CONVERT,
        order=4,
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
        "How long the coordinator waits for write statuses; then it commits the partitions that answered.",
        _G_COMMIT,
        default="30000",
        minimum=100,
        order=3,
    ),
    ConfigKey(
        "sinkadmin.commit.max-records",
        KeyType.LONG,
        "End a commit before its interval once its partitions have staged this many records, so a backlog "
        "is committed in bounded steps. 0: only the interval (or a partition reaching "
        "sinkadmin.staging.max-bytes) ends a commit.",
        _G_COMMIT,
        default="0",
        minimum=0,
        order=4,
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
        "errors.tolerance",
        KeyType.STRING,
        "none: a record that cannot be converted fails the connector. all: it goes to the dead-letter "
        "topic (if set) and is counted.",
        _G_ERRORS,
        default="none",
        choices=("none", "all"),
        order=1,
    ),
    ConfigKey(
        "errors.deadletterqueue.topic.name",
        KeyType.STRING,
        "Topic for records that cannot be converted (with errors.tolerance=all).",
        _G_ERRORS,
        order=2,
    ),
    ConfigKey(
        "errors.deadletterqueue.topic.replication.factor",
        KeyType.INT,
        "Replication factor of the dead-letter topic when it is created.",
        _G_ERRORS,
        default="3",
        minimum=1,
        importance=Importance.LOW,
        order=3,
    ),
    ConfigKey(
        "errors.deadletterqueue.context.headers.enable",
        KeyType.BOOLEAN,
        "Add __connect.errors.* headers to dead-letter records. Defaults to true here, unlike Kafka "
        "Connect, so the reason is never lost.",
        _G_ERRORS,
        default="true",
        order=4,
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
    ConfigKey(
        "sinkadmin.writer",
        KeyType.STRING,
        "The data plane: who decodes records and writes data files. spark: the host's Spark (SPARK_REMOTE / "
        "SPARK_MASTER), one job per task and commit, while the participants go on consuming. arrow: each "
        "participant decodes as it consumes, with no JVM (for hosts without Spark). Both decode with the same "
        "JSON decoder and give the same rows. auto: spark (kept for configs written for earlier versions).",
        _G_STAGING,
        default="spark",
        choices=("spark", "arrow", "auto"),
        order=0,
    ),
    ConfigKey(
        "sinkadmin.staging.buffer-bytes",
        KeyType.LONG,
        "Bytes a participant buffers per partition before it decodes them (arrow) or spills them to a "
        "staging file (spark).",
        _G_STAGING,
        default="8388608",
        minimum=65536,
        importance=Importance.LOW,
        order=1,
    ),
    ConfigKey(
        "sinkadmin.staging.max-bytes",
        KeyType.LONG,
        "Staged bytes per partition after which the partition is paused and the commit ends early.",
        _G_STAGING,
        default="1073741824",
        minimum=1048576,
        importance=Importance.LOW,
        order=2,
    ),
    ConfigKey(
        "security.protocol",
        KeyType.STRING,
        "Protocol of every Kafka client the connector creates.",
        _G_KAFKA,
        default="PLAINTEXT",
        choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
        order=1,
    ),
    ConfigKey("sasl.mechanism", KeyType.STRING, "SASL mechanism.", _G_KAFKA, order=2),
    ConfigKey(
        "sasl.jaas.config",
        KeyType.PASSWORD,
        "JAAS login config (username and password are taken from it).",
        _G_KAFKA,
        order=3,
    ),
    ConfigKey("sasl.username", KeyType.STRING, "SASL username.", _G_KAFKA, order=4),
    ConfigKey("sasl.password", KeyType.PASSWORD, "SASL password.", _G_KAFKA, order=5),
    ConfigKey(
        "ssl.truststore.location",
        KeyType.STRING,
        "CA bundle (PEM) for TLS.",
        _G_KAFKA,
        importance=Importance.LOW,
        order=6,
    ),
    ConfigKey(
        "ssl.key.password",
        KeyType.PASSWORD,
        "Password of the client key.",
        _G_KAFKA,
        importance=Importance.LOW,
        order=7,
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
    ),
    PrefixKey("iceberg.kafka.", "Kafka client properties for the control topic clients.", _G_KAFKA),
    PrefixKey("consumer.override.", "Kafka properties for the source consumer.", _G_KAFKA),
    PrefixKey("producer.override.", "Kafka properties for the control and dead-letter producers.", _G_KAFKA),
    PrefixKey("ssl.", "Kafka TLS settings for every client.", _G_KAFKA),
    PrefixKey("sasl.", "Kafka SASL settings for every client.", _G_KAFKA),
    PrefixKey("value.converter.", "Value converter settings.", _G_CONVERT),
    PrefixKey("key.converter.", "Key converter settings.", _G_CONVERT),
    PrefixKey("errors.", "Error handling settings.", _G_ERRORS),
)

ICEBERG = Plugin(
    short_name="iceberg",
    class_name="org.apache.iceberg.connect.IcebergSinkConnector",
    aliases=("iceberg", "io.tabular.iceberg.connect.IcebergSinkConnector", "IcebergSinkConnector"),
    version="0.1.0",
    keys=ICEBERG_KEYS,
    prefix_keys=ICEBERG_PREFIX_KEYS,
)

PLUGINS: tuple[Plugin, ...] = (ICEBERG,)

# Class names of sinks we plan to replace but do not run yet, so a config
# written for them gets a specific message instead of "unknown class".
NOT_YET_SUPPORTED = {
    "org.apache.hudi.connect.HoodieSinkConnector": "the Hudi sink is not supported yet",
    "io.confluent.connect.hdfs3.Hdfs3SinkConnector": "the HDFS sink is not supported yet",
    "io.confluent.connect.s3.S3SinkConnector": "the S3 sink is not supported yet",
}

# Keys whose values are secrets: never returned by the API or shown in the UI.
SECRET_SUFFIXES = (".password", ".secret", ".key", "jaas.config", "secret.access.key", "credential")


def is_secret_key(name: str, plugin: Plugin | None = ICEBERG) -> bool:
    definition = plugin.key(name) if plugin else None
    if definition is not None and definition.type is KeyType.PASSWORD:
        return True
    lowered = name.lower()
    return lowered.endswith(SECRET_SUFFIXES) or "password" in lowered or "secret" in lowered


def resolve_plugin(connector_class: str) -> Plugin | None:
    for plugin in PLUGINS:
        if (
            connector_class in (plugin.class_name, *plugin.aliases)
            or connector_class.rsplit(".", 1)[-1] == (plugin.class_name.rsplit(".", 1)[-1])
        ):
            return plugin
    return None
