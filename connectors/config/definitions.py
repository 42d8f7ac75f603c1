"""Config keys of the sink plugins, shaped like Kafka Connect's ConfigDef, and the ``Plugin`` a sink
package defines (``sinks.registry`` lists them).

Key names follow the Kafka Connect connector a sink replaces where the
meaning is the same, so a config written for that connector works here
unchanged. Keys with no counterpart there live under ``sinkadmin.``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


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
    # Whether a choice is taken in any case, trimmed (the Confluent connectors' enum keys, whose validator
    # lower-cases the value: behavior.on.null.values=IGNORE).
    choices_any_case: bool = False
    minimum: int | None = None
    order: int = 0
    width: str = "MEDIUM"
    display_name: str = ""
    dependents: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return self.display_name or self.name


class CheckStatus(StrEnum):
    OK = "ok"
    WARNING = "warning"
    ERROR = "error"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class CheckResult:
    """One check of "Test connection" (a plugin's ``probe`` returns its store's)."""

    name: str
    status: str
    detail: str


@dataclass(frozen=True)
class SourceCluster:
    """Where a sink's topics are read, when it is not the product's own cluster (``Plugin.source``)."""

    bootstrap: str
    client: dict[str, str]
    # Whether a topic of that cluster is read: one the config names or matches and does not exclude (the
    # mirror's topics.exclude), or one the sink always reads (the mirror's heartbeats topics).
    selects: Callable[[str], bool]


@dataclass(frozen=True)
class PrefixKey:
    """A family of keys sharing a prefix, e.g. ``iceberg.catalog.*``."""

    prefix: str
    documentation: str
    group: str
    # Segments after the prefix, e.g. ``<table>.partition-by`` has pattern "{table}.{setting}".
    pattern: str = "*"
    # For a pattern "{item}.{setting}": the list key whose items name the first segment, and the
    # settings each item has (what the form suggests as a user types a key of the family).
    items_key: str = ""
    settings: tuple[str, ...] = ()

    def suggestions(self, config: Mapping[str, str]) -> list[str]:
        """The family's keys to offer for ``config``: one per item and setting, or the bare prefix."""
        if not self.items_key:
            return [self.prefix]
        items = [i.strip() for i in config.get(self.items_key, "").split(",") if i.strip()]
        placeholder = "<" + self.pattern.split("}", 1)[0].lstrip("{") + ">"
        return [f"{self.prefix}{item}.{setting}" for item in items or [placeholder] for setting in self.settings]


@dataclass(frozen=True)
class MappedKey:
    """A key of the connector a sink replaces that means one of the sink's own keys, in other units (Hudi's
    ``hoodie.kafka.commit.interval.secs`` is ``sinkadmin.commit.interval-ms`` / 1000): its whole-number
    value times ``scale`` is the sink's key's value, where the config does not set that key itself. The
    config is stored as written; the mapping applies wherever it is read (``Plugin.with_mapped_keys``)."""

    name: str
    target: str
    scale: int = 1

    def value(self, raw: str) -> str | None:
        """The target key's value for ``raw``, or None when ``raw`` is no whole number."""
        try:
            return str(int(raw.strip()) * self.scale)
        except ValueError:
            return None


@dataclass(frozen=True)
class Plugin:
    """A sink plugin: its config definitions, and where the rest of it lives.

    The validator, the settings parser and the runtime are named by import
    path (``module:function``), as entry points are, so that the config layer
    (the web process) never imports a sink's data plane.
    """

    short_name: str
    class_name: str
    aliases: tuple[str, ...]
    version: str
    keys: tuple[ConfigKey, ...]
    prefix_keys: tuple[PrefixKey, ...] = field(default_factory=tuple)
    # The keys the shared coordinator reads, as this sink's family names them (the product's own by default).
    control_topic_key: str = "sinkadmin.control.topic"
    commit_interval_key: str = "sinkadmin.commit.interval-ms"
    commit_timeout_key: str = "sinkadmin.commit.timeout-ms"
    # A key of the sink's family that, set above 0, is the commit interval
    # instead (the files sink's rotate.schedule.interval.ms).
    interval_override_key: str = ""
    # The boolean key that makes the coordinator commit intervals with no records.
    allow_empty_key: str = "sinkadmin.commit.allow-empty"
    # Capabilities: which of the runtime contract's protocols (workers.sink) its runtime module follows.
    # False for a sink that needs no coordinator: its tasks commit on their own (the Kafka
    # mirror's transactions), so the supervisor starts tasks only (workers.sink.SelfCommittingSink).
    coordinated: bool = True
    # Its runtime maintains its tables beside the coordinator (workers.sink.MaintainedSink).
    maintained: bool = False
    # Where it writes a record depends on the record's topic (the files sink's directories and file names):
    # transforms that rename topics (RegexRouter, TimestampRouter) would move records, and are refused until
    # the sink follows them. False for a sink whose replaced connector writes every record to its configured
    # tables whatever its topic (Iceberg's and Hudi's Kafka Connect sinks): a renamed topic then matters only
    # to the chain's later predicates (TopicNameMatches), as there.
    writes_by_topic: bool = True
    # Its store records each commit, so a lost ledger can be rebuilt from it (workers.sink.RecoverableSink).
    recoverable: bool = False
    # Its committer tells what each commit left the tables at, and its writer keeps copies of them
    # (workers.sink.VersionedCommitter and VersionedWriter).
    versioned_tables: bool = False
    # What the UI's plugin chooser says of it.
    title: str = ""
    description: str = ""
    # ``check(result, config)``: the sink's own per-key checks (connectors.config.validation).
    check: str = ""
    # ``parse(raw) -> settings``: the sink's typed settings, as SinkConfig.settings.
    parse: str = ""
    # ``probe(config) -> [CheckResult]``: reach the sink's store for "Test connection", as the
    # runtime will (raises with why not, shown as the "Store" check's error).
    probe: str = ""
    # ``destinations(config) -> [str]``: where the sink writes (tables, a directory), as
    # the list and detail pages show and search it. Read from the stored config alone.
    destinations: str = ""
    # What its runtime's table maintenance does (the Iceberg sink's compaction, expiry
    # and orphan removal), as the detail page says above the runs; empty: none, no runs shown.
    maintenance: str = ""
    # ``source(config) -> SourceCluster``: the cluster the sink's topics are read from, when it
    # is not the product's own (the mirror's source cluster).
    source: str = ""
    # A module with ``read_offsets(name, config)`` and ``alter_offsets(name, config, changes)``, for a
    # sink that keeps its own offsets (the mirror's group on its target cluster): the offsets API reads
    # and moves those, and the ledger follows. Empty: the ledger's offsets are the truth.
    offsets: str = ""
    # Its runtime module: the protocols of workers.sink its capabilities above name.
    runtime: str = ""
    # Key prefixes this sink owns (its own, and the replaced connector's): an unknown key under one is refused
    # as a typo, where Kafka Connect would pass it through (connectors.config.validation).
    namespaces: tuple[str, ...] = ("sinkadmin.",)
    # Keys of the replaced connector taken as this sink's own, in their units (MappedKey).
    mapped_keys: tuple[MappedKey, ...] = ()
    # Classes of the replaced connectors whose job this sink does, but not under their class (their defaults or
    # key meanings differ): a config naming one is refused with how to write it for this sink.
    related_classes: tuple[tuple[str, str], ...] = ()

    def key(self, name: str) -> ConfigKey | None:
        return next((k for k in self.keys if k.name == name), None)

    def with_mapped_keys(self, raw: Mapping[str, str]) -> dict[str, str]:
        """``raw`` with the value of each mapped key's target that only its mapped key sets."""
        config = dict(raw)
        for mapped in self.mapped_keys:
            value = mapped.value(config.get(mapped.name) or "")
            if value is not None and not (config.get(mapped.target) or "").strip():
                config[mapped.target] = value
        return config

    def namespace_of(self, name: str) -> str | None:
        """The namespace this sink owns that ``name`` is in, if any."""
        return next((prefix for prefix in self.namespaces if name.startswith(prefix)), None)

    @property
    def groups(self) -> list[str]:
        seen: list[str] = []
        for key in self.keys:
            if key.group not in seen:
                seen.append(key.group)
        return seen

    def names(self, connector_class: str) -> bool:
        """Whether ``connector_class`` names this plugin (its short name, a class name, or a class's simple name)."""
        names = (self.class_name, *self.aliases)
        return connector_class in names or any(
            "." in name and connector_class == name.rsplit(".", 1)[-1] for name in names
        )


def resolve(function_path: str) -> Any:
    """The function a plugin names as ``module:function``."""
    module, _, name = function_path.partition(":")
    found: Any = importlib.import_module(module)
    for part in name.split("."):
        found = getattr(found, part)
    return found


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
    # JSON values in the Confluent wire format (a Schema Registry's JSON
    # Schema id before each): decoded as JSON once the header is checked.
    "json-schema": "json",
    "io.confluent.connect.json.JsonSchemaConverter": "json",
}
# Converters whose values carry a Schema Registry schema id, and the schema type it names.
REGISTRY_CONVERTERS = {
    "avro": "AVRO",
    "io.confluent.connect.avro.AvroConverter": "AVRO",
    "json-schema": "JSON",
    "io.confluent.connect.json.JsonSchemaConverter": "JSON",
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
_G_MAINTENANCE = "Table maintenance"
# The order groups are shown in, whichever plugin's keys they hold.
GROUP_ORDER = (
    _G_CONNECTOR,
    _G_TABLES,
    "Storage",
    "Format",
    "Layout",
    _G_CONVERT,
    _G_COMMIT,
    _G_ERRORS,
    _G_CATALOG,
    _G_STAGING,
    _G_MAINTENANCE,
    _G_KAFKA,
    "Clusters",
    "Topics",
    "Delivery",
)


def in_group_order(keys: tuple[ConfigKey, ...]) -> tuple[ConfigKey, ...]:
    """Keys grouped as forms and /config/validate show them (a stable sort: each group keeps its order)."""
    return tuple(sorted(keys, key=lambda k: GROUP_ORDER.index(k.group) if k.group in GROUP_ORDER else len(GROUP_ORDER)))


SHARED_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "connector.class",
        KeyType.STRING,
        "The sink plugin: its short name (iceberg, files) or the Connect class name of the connector it "
        "replaces, as GET /connector-plugins lists them.",
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
        "sinkadmin.offsets.out-of-range",
        KeyType.STRING,
        "What the connector does when a partition's committed offset is below the log start (retention "
        "deleted records before they were committed). fail: the connector fails and says which records are "
        "gone. skip: it moves on to the log start and records the skipped offsets in the commit ledger. An "
        "offset above the log end (the topic was recreated or truncated) always fails the connector.",
        _G_CONNECTOR,
        default="fail",
        choices=("fail", "skip"),
        order=6,
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
        "How record values are decoded: json, string, bytearray, avro, json-schema (JSON in the Confluent wire "
        "format, through a Schema Registry), or a Kafka Connect converter class name.",
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
        "Avro schema (JSON) of the values, for the avro converter without a Schema Registry. Confluent "
        "wire-format values (magic byte + schema id) are accepted too.",
        _G_CONVERT,
        order=4,
    ),
    # The Schema Registry keys of Confluent's AvroConverter.
    ConfigKey(
        "value.converter.schema.registry.url",
        KeyType.LIST,
        "Schema Registry URL(s), comma-separated, for the avro and json-schema converters: each value is in "
        "the Confluent wire format (magic byte 0, the 4-byte schema id, the record). Avro values are decoded "
        "with the schema the registry holds under that id, and new schema versions add their new fields to "
        "the tables (with iceberg.tables.evolve-schema-enabled); JSON values are checked against the "
        "registry's ids and decoded as plain JSON.",
        _G_CONVERT,
        order=5,
    ),
    ConfigKey(
        "value.converter.basic.auth.credentials.source",
        KeyType.STRING,
        "Where the registry's HTTP basic auth credentials come from: USER_INFO (basic.auth.user.info) or URL "
        "(user:password@ in the registry URL).",
        _G_CONVERT,
        choices=("USER_INFO", "URL"),
        order=6,
    ),
    ConfigKey(
        "value.converter.basic.auth.user.info",
        KeyType.PASSWORD,
        "user:password for the registry, with basic.auth.credentials.source=USER_INFO.",
        _G_CONVERT,
        order=7,
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
        "sinkadmin.commit.write-target-ms",
        KeyType.LONG,
        "How long one commit's write should take. Each task stages for a commit at most what its writer "
        "wrote in this long at its last writes' pace, and then asks for the commit's end: under a backlog, "
        "commits are sized so that each is written in about this long, and a record waits about the interval "
        "plus this. 0: the commit interval, and at least 1500 (a Spark job's fixed cost then stays a small "
        "part of each write).",
        _G_COMMIT,
        default="0",
        minimum=0,
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
        "Bytes a participant buffers per partition before it decodes them (arrow, at most 1 MiB) or spills "
        "them to a staging file (spark, at most 2 MiB), so that little is left to do when a commit ends. "
        "The arrow plane's Parquet row groups and the files sink's are this large.",
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

# Prefix keys every plugin passes to its Kafka clients and converters.
SHARED_PREFIX_KEYS: tuple[PrefixKey, ...] = (
    PrefixKey(
        "consumer.override.",
        "Kafka properties for the source consumer (librdkafka's, or the Java client's names it has), checked per key.",
        _G_KAFKA,
    ),
    PrefixKey(
        "producer.override.",
        "Kafka properties for the control and dead-letter producers, checked per key.",
        _G_KAFKA,
    ),
    PrefixKey("ssl.", "Kafka TLS settings for every client.", _G_KAFKA),
    PrefixKey("sasl.", "Kafka SASL settings for every client.", _G_KAFKA),
    PrefixKey("value.converter.", "Value converter settings.", _G_CONVERT),
    PrefixKey("key.converter.", "Key converter settings.", _G_CONVERT),
    PrefixKey("errors.", "Error handling settings.", _G_ERRORS),
)

# Keys whose values are secrets: never returned by the API or shown in the UI.
SECRET_SUFFIXES = (".password", ".secret", ".key", "jaas.config", "secret.access.key", "credential")


def is_secret_key(name: str, plugin: Plugin | None = None) -> bool:
    """Whether ``name``'s value is a secret: a PASSWORD key of ``plugin`` (or of every plugin's shared
    keys), or a name that says so."""
    definition = (plugin.key(name) if plugin else None) or next((k for k in SHARED_KEYS if k.name == name), None)
    if definition is not None and definition.type is KeyType.PASSWORD:
        return True
    lowered = name.lower()
    return lowered.endswith(SECRET_SUFFIXES) or "password" in lowered or "secret" in lowered
