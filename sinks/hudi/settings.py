"""The Hudi sink's settings: checked per key for the form, API and admin, then typed for the runtime."""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from connectors.config.definitions import CheckResult, CheckStatus
from connectors.config.validation import KeyRule, apply_key_rules, closest
from connectors.smt import parse_chain
from connectors.smt.debezium import DebeziumTransform, ExtractNewRecordState
from connectors.smt.kafka import Filter, RecordIsTombstone
from sinks.hudi.config_keys import HUDI_CONFIG_KEYS
from sinks.hudi.plugin import HUDI, HUDI_WRITE_CONFIG_FAMILIES, SYNONYMS, TABLE_TYPES
from workers.storage import LOCAL_SCHEMES, S3A, StoragePath

if TYPE_CHECKING:
    from connectors.config.validation import ConfigValidation, SinkConfig

# A Hudi schema provider types the table's columns; this sink types them from the records as the value
# converter decodes them, so a schema provider it ignored would give other column types.
SCHEMA_PROVIDER = KeyRule(
    refused="the table's columns are typed from the records as value.converter decodes them (an Avro schema "
    "comes from value.converter.schema.registry.url or value.converter.avro.schema); a Hudi schema provider is "
    "not read, and ignoring it would type the columns differently: remove it",
)
# Metastore sync (Hudi's meta sync, and its older hive_sync name): refused on, accepted off.
METASTORE_SYNC = KeyRule(
    ignored="the table is not synced to a metastore, as with false",
    refused="the table is not synced to a metastore: register its base path with yours (set false)",
    harmless=("false",),
)
METASTORE_SYNC_OFF = (
    "the table is not synced to a metastore (hoodie.meta.sync.enable), so its sync settings change nothing written"
)
# Keys of Hudi's Kafka Connect sink and write configs that this sink does not take as its own keys, and what it
# does with each: ignored with a note when that changes nothing written, refused when it would.
KEY_RULES = {
    "hoodie.kafka.control.topic": KeyRule(
        ignored="the coordinator's control topic is sinkadmin.control.topic; which topic carries the commit "
        "protocol changes nothing written",
    ),
    # Hudi's sink reaches its control topic with these; here the control topic is on the cluster the
    # topics are read from.
    "bootstrap.servers": KeyRule(
        ignored="the control topic is on the Kafka cluster the topics are read from (this service's "
        "KAFKA_BOOTSTRAP_SERVERS)",
    ),
    "hoodie.schemaprovider.class": SCHEMA_PROVIDER,
    "hoodie.streamer.schemaprovider.*": SCHEMA_PROVIDER,
    "hoodie.deltastreamer.schemaprovider.*": SCHEMA_PROVIDER,
    "hoodie.meta.sync.enable": METASTORE_SYNC,
    "hoodie.datasource.hive_sync.enable": METASTORE_SYNC,
    "hoodie.meta.sync.*": KeyRule(ignored=METASTORE_SYNC_OFF),
    "hoodie.datasource.hive_sync.*": KeyRule(ignored=METASTORE_SYNC_OFF),
    # Hudi's sink commits despite records its writer failed on (true, its default): they are left out.
    "hoodie.kafka.allow.commit.on.errors": KeyRule(
        ignored="a commit completes only once Hudi's writer has written every one of its records, as with false",
        refused="a commit completes only once Hudi's writer has written every one of its records (otherwise it "
        "fails and is written again), never without those it failed on: set false. Records the sink cannot "
        "decode or key are handled before the write, by errors.tolerance (all: skipped, or to "
        "errors.deadletterqueue.topic.name)",
        harmless=("false",),
    ),
}
# Keys this sink requires, under either of their names (SYNONYMS).
REQUIRED = ("target.base.path", "target.table.name")
KAFKA_COMPACTION = "hoodie.kafka.compaction.async.enable"


# Hudi's optimistic concurrency, with the sink's conflict check (jvm/hudi-fence): a write of a commit that
# another write has already completed fails under Hudi's lock, before its instant completes (the coordinator
# killed mid-write, whose write goes on in the Spark server while its successor writes the same commit).
CONFLICT_STRATEGY = "sinkadmin.hudi.OneInstantPerCommit"
# Hudi's lock in the Spark application's JVM, which runs every write and table service of the table (the
# Spark Connect server; a worker's own Spark dies with its process, and its writes with it).
DEFAULT_LOCK_PROVIDER = "org.apache.hudi.client.transaction.lock.InProcessLockProvider"
CONCURRENCY = {
    "hoodie.write.concurrency.mode": (
        "OPTIMISTIC_CONCURRENCY_CONTROL",
        "the sink's writes and table services run under Hudi's optimistic concurrency, whose pre-commit check "
        "keeps each commit in one instant (docs/hudi-sink.md)",
    ),
    "hoodie.cleaner.policy.failed.writes": (
        "LAZY",
        "with optimistic concurrency Hudi rolls back a failed write once its heartbeat has expired, not a write "
        "still running (a killed coordinator's, in the Spark server)",
    ),
    "hoodie.write.lock.conflict.resolution.strategy": (
        CONFLICT_STRATEGY,
        "the sink's strategy is Hudi's own check with one rule more (a table holds each commit in one instant)",
    ),
}


def concurrency_options(raw: Mapping[str, str]) -> dict[str, str]:
    """The options of Hudi's optimistic concurrency for every write and table service of the table: the
    config's lock provider (a table other jobs write too needs a shared one), or Hudi's in-process lock."""
    options = {key: wanted for key, (wanted, _) in CONCURRENCY.items()}
    options["hoodie.write.lock.provider"] = raw.get("hoodie.write.lock.provider", "").strip() or DEFAULT_LOCK_PROVIDER
    return options


def _get(config: Mapping[str, str], name: str) -> str:
    value = config.get(name)
    if value is None or value == "":
        for synonym, target in SYNONYMS.items():
            if target == name and config.get(synonym):
                return config[synonym].strip()
        key = HUDI.key(name)
        return (key.default if key else None) or ""
    return value.strip()


def _fields(config: Mapping[str, str], name: str) -> tuple[str, ...]:
    return tuple(f.strip() for f in _get(config, name).split(",") if f.strip())


def check(result: ConfigValidation, config: dict[str, str]) -> None:
    """Per-key errors of a Hudi sink config (beside the checks every plugin shares)."""
    apply_key_rules(result, config, KEY_RULES)
    for synonym, target in SYNONYMS.items():
        if config.get(synonym) and config.get(target) and config[synonym].strip() != config[target].strip():
            result.add(synonym, f"set {target} or {synonym} (its Hudi name), not both with different values")
        if target in REQUIRED and not _get(config, target):
            result.add(target, f'Missing required configuration "{target}" which has no default value.')
    table_type = config.get("hoodie.datasource.write.table.type", "").strip()
    if table_type and table_type not in TABLE_TYPES:
        result.add(
            "hoodie.datasource.write.table.type",
            f"Invalid value {table_type} for configuration hoodie.datasource.write.table.type: must be one of "
            f"{', '.join(TABLE_TYPES)}",
        )
    precombine_key = _named(config, "hoodie.datasource.write.precombine.field")
    if precombine_key and len(_fields(config, "hoodie.datasource.write.precombine.field")) > 1:
        result.add(
            precombine_key,
            "ordering a key's records by more than one field is not supported yet: name one field (records of a "
            "key with equal values of it are ordered by their offsets)",
        )
    base = _get(config, "target.base.path")
    # Errors of the base path go on the key the config names it with (hoodie.base.path is its Hudi name).
    base_key = (
        "hoodie.base.path"
        if config.get("hoodie.base.path") and not config.get("target.base.path")
        else "target.base.path"
    )
    try:
        parts = urlsplit(base)
    except ValueError as exc:
        result.add(base_key, f"not a path or URL: {exc}")
        base = ""
    if base:
        scheme = parts.scheme.lower()
        if scheme in ("s3", "s3n"):
            result.add(base_key, f"{scheme}:// is not Hadoop's S3 connector: write s3a://{parts.netloc}{parts.path}")
        elif scheme == S3A:
            if not parts.netloc:
                result.add(base_key, "an s3a:// base path names its bucket: s3a://<bucket>/<path>")
        elif scheme == "hdfs":
            result.add(
                base_key,
                "hdfs:// base paths are not supported: the sink reads the table's timeline and writes each commit's "
                "rows with hudi-rs and pyarrow, which reach local paths and S3 only",
            )
        elif scheme not in LOCAL_SCHEMES:
            result.add(base_key, f"{scheme}:// is not supported: use a local path, a file:// URL or s3a://")
        elif not (parts.path if scheme else base).startswith("/"):
            result.add(base_key, "must be an absolute path (every worker and executor reads it)")
    for key, (wanted, why) in CONCURRENCY.items():
        if config.get(key, "").strip() and config[key].strip().upper() != wanted.upper():
            result.add(key, f"must be {wanted} (or unset): {why}")
    operation = _get(config, "hoodie.datasource.write.operation").lower()
    keys = _fields(config, "hoodie.datasource.write.recordkey.field")
    if operation in ("upsert", "delete") and not keys:
        result.add(
            "hoodie.datasource.write.recordkey.field",
            f"{operation} needs the record key field(s); or set hoodie.datasource.write.operation=insert",
        )
    combine_on_insert = config.get("hoodie.combine.before.insert", "false").strip().lower() == "true"
    if operation != "upsert":
        if precombine_key and not (operation == "insert" and combine_on_insert):
            result.ignore(
                precombine_key,
                f"Hudi's writer merges records by it on upsert, and on insert with hoodie.combine.before.insert="
                f"true; this connector's operation is {operation}",
            )
        if config.get("hoodie.payload.delete.field"):
            result.add(
                "hoodie.payload.delete.field",
                f"only upserts apply delete markers: remove it, or set operation=upsert ({operation})",
            )
    index = _get(config, "hoodie.index.type").upper()
    if index == "BUCKET" and not keys and config.get("hoodie.index.type"):
        result.add(
            "hoodie.index.type",
            "the BUCKET index hashes the record key: name hoodie.datasource.write.recordkey.field, or another index",
        )
    if config.get("hoodie.clustering.async.enabled", "false").strip().lower() == "true" and index == "BUCKET":
        result.add(
            "hoodie.clustering.async.enabled",
            "a table with the BUCKET index keeps its file groups (its keys are hashed to them): clustering would "
            "move keys out of their buckets; use another hoodie.index.type to cluster",
        )
    if bool(config.get("hoodie.payload.delete.field")) != bool(config.get("hoodie.payload.delete.marker")):
        result.add("hoodie.payload.delete.marker", "set both hoodie.payload.delete.field and its marker, or neither")
    converter = config.get("value.converter", "json")
    if converter in ("string", "bytearray", "org.apache.kafka.connect.storage.StringConverter") and keys:
        # (Hudi's own sink reads StringConverter values as JSON text, typed by its schema provider.)
        result.add(
            "hoodie.datasource.write.recordkey.field",
            f"values read with the {converter} converter have no fields (each is one text or bytes column): for "
            "JSON text use value.converter=json, whose columns are typed from the records; or avro",
        )
    _check_kafka_compaction(result, config)
    _check_write_configs(result, config)
    if operation == "upsert":
        _check_deletes_as_tombstones(result, config)
        _check_deletes_as_rows(result, config)


def _check_write_configs(result: ConfigValidation, config: dict[str, str]) -> None:
    """Hudi's write configs, which pass to its writer as written (HUDI_WRITE_CONFIG_FAMILIES), against the keys
    Hudi 1.2 declares (sinks.hudi.config_keys): a boolean's value must be one (Hudi reads any other as false),
    a number's must parse as one (Hudi fails the write otherwise: after its commit is prepared), and a key Hudi
    does not declare that is a near miss of one it does is a typo Hudi would ignore. (A key far
    from any passes: a custom strategy's or lock provider's setting, which Hudi's writer hands it.)"""
    known = HUDI_CONFIG_KEYS.keys() | {key.name for key in HUDI.keys}
    for key, value in config.items():
        if not key.startswith(HUDI_WRITE_CONFIG_FAMILIES) or key in result.errors or not value.strip():
            continue
        if key in HUDI_CONFIG_KEYS:
            value_type = HUDI_CONFIG_KEYS[key]
            if value_type == BOOLEAN and value.strip().lower() not in ("true", "false"):
                result.add(
                    key,
                    f"Invalid value {value} for configuration {key}: Expected value to be either true or false "
                    "(Hudi reads any other value as false)",
                )
            elif (expected := unparsed_number(value_type, value.strip())) is not None:
                result.add(key, f"Invalid value {value} for configuration {key}: Expected {expected}")
        elif guess := closest(key, known):
            result.add(key, f"not a key of Hudi's write configs (Hudi 1.2 would ignore it): did you mean {guess}?")


# The types of Hudi's config keys (sinks.hudi.config_keys) whose values Hudi parses.
BOOLEAN = "boolean"
# Integer.parseInt's and Long.parseLong's ranges.
WHOLE_NUMBER_RANGES = {"integer": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}
NUMBER = "number"
# What Integer.parseInt and Long.parseLong take: an optional sign and decimal digits (of any script, as
# Character.digit reads them), and nothing else: no spaces, no point, no exponent, no underscores.
WHOLE_NUMBER = re.compile(r"[+-]?\d+")
# What Double.parseDouble and Float.parseFloat take (Double.valueOf's grammar): NaN, Infinity, a decimal with an
# optional exponent or a hexadecimal one with its binary exponent, with an optional f/d suffix; once
# String.trim has dropped the spaces and control characters around it.
DECIMAL_NUMBER = re.compile(
    r"[+-]?(NaN|Infinity|(([0-9]+\.?[0-9]*([eE][+-]?[0-9]+)?|\.[0-9]+([eE][+-]?[0-9]+)?"
    r"|0[xX]([0-9a-fA-F]+\.?|[0-9a-fA-F]*\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?))"
)
JAVA_TRIMMED = "".join(chr(c) for c in range(0x21))


def unparsed_number(value_type: str, value: str) -> str | None:
    """What Hudi expects of a value of a key it parses as a number (``value_type``: an integer, a long or a
    number, sinks.hudi.config_keys), when it cannot parse ``value`` as one; None when it can, or does not parse
    that key as a number."""
    if value_type in WHOLE_NUMBER_RANGES:
        low, high = WHOLE_NUMBER_RANGES[value_type]
        if WHOLE_NUMBER.fullmatch(value) and low <= int(value) <= high:
            return None
        parser = "Integer.parseInt" if value_type == "integer" else "Long.parseLong"
        return (
            f"an integer from {low} to {high} (Hudi reads it with {parser}: digits with an optional sign, "
            "no spaces, no decimal point)"
        )
    if value_type == NUMBER:
        if DECIMAL_NUMBER.fullmatch(value.strip(JAVA_TRIMMED)):
            return None
        return "a number (Hudi reads it with Double.parseDouble: 0.35, -2, 1e-9)"
    return None


def _named(config: Mapping[str, str], name: str) -> str | None:
    """The key a config sets ``name`` with: its own, or one of its Hudi names (SYNONYMS); None when unset."""
    if config.get(name, "").strip():
        return name
    return next((s for s, target in SYNONYMS.items() if target == name and config.get(s, "").strip()), None)


def _check_kafka_compaction(result: ConfigValidation, config: dict[str, str]) -> None:
    """Hudi's Kafka Connect sink schedules a merge-on-read table's compactions after its commits with
    hoodie.kafka.compaction.async.enable=true (its default), for another job to execute, and none with false.
    Here the sink's maintenance compacts the table beside the sink (or Hudi's writer within each write, with
    hoodie.compact.inline=true), so true is what the sink does, and false only where nothing compacts it."""
    value = config.get(KAFKA_COMPACTION, "").strip().lower()
    if not value:
        return
    if value not in ("true", "false"):
        result.add(
            KAFKA_COMPACTION,
            f"Invalid value {config[KAFKA_COMPACTION]} for configuration {KAFKA_COMPACTION}: Expected value to be "
            "either true or false",
        )
    elif _get(config, "hoodie.table.type").upper() != "MERGE_ON_READ":
        result.ignore(KAFKA_COMPACTION, "a copy-on-write table has no compaction (Hudi's sink ignores it there too)")
    elif value == "true":
        result.ignore(
            KAFKA_COMPACTION,
            "the table's compactions run asynchronously to its writes, as with true: executed beside the sink by "
            "its maintenance (sinkadmin.maintenance.*), or within each write with hoodie.compact.inline=true",
        )
    elif _get(config, "sinkadmin.maintenance.enabled").lower() == "false" and (
        config.get("hoodie.compact.inline", "").strip().lower() != "true"
    ):
        result.ignore(
            KAFKA_COMPACTION,
            "the sink compacts nothing (sinkadmin.maintenance.enabled=false, hoodie.compact.inline unset), as Hudi's "
            "sink with false: compaction is left to another job",
        )
    else:
        result.add(
            KAFKA_COMPACTION,
            "with false Hudi's sink leaves the table's compaction to another job; here the sink compacts it, by its "
            "maintenance (sinkadmin.maintenance.enabled, true by default) or within each write "
            "(hoodie.compact.inline=true): to leave compaction to another job, set sinkadmin.maintenance.enabled="
            "false and leave hoodie.compact.inline unset; or remove this key",
        )


def _check_deletes_as_rows(result: ConfigValidation, config: dict[str, str]) -> None:
    """Debezium's unwrap with ``delete.tombstone.handling.mode=rewrite`` (or the older ``delete.handling.mode=
    rewrite``) makes each delete a row of the deleted state with ``__deleted=true``. An upsert deletes by such a
    row only with a delete marker that names it (``hoodie.payload.delete.field``); without one, each delete
    would be written as a live row, in silence. (With ``rewrite-with-tombstone`` the tombstone that follows each
    such row deletes the key, where a tombstone can: neither event-time ordering nor a partitioned table.)"""
    if config.get("hoodie.payload.delete.field", "").strip():
        return
    precombine = _get(config, "hoodie.datasource.write.precombine.field")
    tombstones_delete = not (
        event_time_ordering(precombine, _get(config, "hoodie.record.merge.mode").upper())
        or _fields(config, "hoodie.datasource.write.partitionpath.field")
    )
    chain = parse_chain(config)[0]
    for step in chain.steps if chain is not None else ():
        unwrap = step.transformation
        if (
            isinstance(unwrap, DebeziumTransform)
            and _get(config, "hoodie.datasource.write.operation").lower() == "upsert"
        ):
            result.add(
                f"transforms.{step.alias}.type",
                "the Iceberg sink's DebeziumTransform makes each delete a row of the deleted state with _cdc.op=D, "
                "and without hoodie.payload.delete.field nothing marks it a delete: every deleted row would be "
                "upserted as a live row. Set hoodie.payload.delete.field=_cdc.op and hoodie.payload.delete.marker=D",
            )
            continue
        if not isinstance(unwrap, ExtractNewRecordState) or unwrap.delete != "rewrite":
            continue
        if unwrap.keep_tombstones and tombstones_delete:
            continue
        mode = f"transforms.{step.alias}.delete.tombstone.handling.mode"
        key = mode if config.get(mode, "").strip() else f"transforms.{step.alias}.delete.handling.mode"
        result.add(
            key,
            "Debezium's unwrap makes each delete a row of the deleted state with __deleted=true, and without "
            "hoodie.payload.delete.field nothing marks it a delete: every deleted row would be upserted as a live "
            "row. Set hoodie.payload.delete.field=__deleted and hoodie.payload.delete.marker=true",
        )


# Hudi's indexes that know a key across partitions (a key is one record whatever its partition path).
GLOBAL_INDEXES = ("GLOBAL_SIMPLE", "GLOBAL_BLOOM", "RECORD_INDEX")


def event_time_ordering(precombine_field: str | None, merge_mode: str) -> bool:
    """Whether Hudi orders a key's records by the precombine field (its EVENT_TIME_ORDERING merge mode, its
    default with a precombine field), not by commit; ``merge_mode``: hoodie.record.merge.mode, upper case."""
    return bool(precombine_field) and merge_mode != "COMMIT_TIME_ORDERING"


def _check_deletes_as_tombstones(result: ConfigValidation, config: dict[str, str]) -> None:
    """Debezium's unwrap makes each delete a tombstone by default (``delete.tombstone.handling.mode=tombstone``).
    A tombstone deletes its key only where nothing more is needed to find and order its row: under event-time
    ordering it has no precombine value, and in a partitioned table no partition values, so every delete would
    go to the dead letters (``sinks.hudi.writer``). Such a config is refused, with the way that works: deletes as
    rows that carry the key's fields and a delete marker. So is one that keeps the tombstone Debezium sends after
    each delete (``rewrite-with-tombstone``, or the older ``drop.tombstones=false``): each would be a bad record."""
    precombine = _get(config, "hoodie.datasource.write.precombine.field")
    event_time = event_time_ordering(precombine, _get(config, "hoodie.record.merge.mode").upper())
    partitioned = bool(_fields(config, "hoodie.datasource.write.partitionpath.field"))
    if not (event_time or partitioned):
        return
    # (Rows marked deleted find their key by its partition path too, under an index that is not global.)
    index = (
        ""
        if not partitioned or _get(config, "hoodie.index.type").upper() in GLOBAL_INDEXES
        else "; and, the table being partitioned, a global index (hoodie.index.type=GLOBAL_SIMPLE or RECORD_INDEX): "
        "with another, a delete whose before lacks the partition fields (PostgreSQL sends the key alone unless the "
        "table's REPLICA IDENTITY is FULL) deletes nothing, and a key an update moves to another partition is kept "
        "in both"
    )

    def why_not(event_time: bool) -> str:
        return (
            f"a tombstone has no value of the precombine field ({precombine}) to order it by"
            if event_time
            else "a tombstone has no partition field values to find its row by (a partitioned table)"
        )

    chain = parse_chain(config)[0]
    tombstones_filtered = False
    for step in chain.steps if chain is not None else ():
        if (
            isinstance(step.transformation, Filter)
            and isinstance(step.predicate, RecordIsTombstone)
            and not step.negate
        ):
            tombstones_filtered = True  # (a Filter of tombstones before a step: none reach it)
        elif isinstance(step.transformation, DebeziumTransform) and not tombstones_filtered:
            # It passes Debezium's tombstones on, one after each delete (tombstones.on.delete, Debezium's default).
            result.add(
                f"transforms.{step.alias}.type",
                f"the Iceberg sink's DebeziumTransform passes on the tombstone Debezium sends after each delete, and "
                f"{why_not(event_time)}: every such tombstone would go to the dead letters (or fail the connector). "
                "Drop them first: a Filter under a RecordIsTombstone predicate before it (transforms=drop,"
                f"{step.alias}; transforms.drop.type=org.apache.kafka.connect.transforms.Filter; transforms.drop."
                "predicate=tombstone; predicates=tombstone; predicates.tombstone.type=org.apache.kafka.connect."
                "transforms.predicates.RecordIsTombstone)" + index,
            )
        if isinstance(step.transformation, ExtractNewRecordState) and step.transformation.delete == "tombstone":
            legacy = f"transforms.{step.alias}.delete.handling.mode"
            key = legacy if config.get(legacy) else f"transforms.{step.alias}.delete.tombstone.handling.mode"
            result.add(
                key,
                f"Debezium's unwrap makes each delete a tombstone here, and {why_not(event_time)}: every delete would go to the "
                "dead letters. Set delete.tombstone.handling.mode=rewrite with hoodie.payload.delete.field=__deleted "
                "and hoodie.payload.delete.marker=true, so that a delete is a row of its key marked deleted" + index,
            )
        elif isinstance(step.transformation, ExtractNewRecordState) and step.transformation.keep_tombstones:
            mode = f"transforms.{step.alias}.delete.tombstone.handling.mode"
            key = mode if config.get(mode, "").strip() else f"transforms.{step.alias}.drop.tombstones"
            result.add(
                key,
                f"Debezium's unwrap keeps the tombstone that follows each delete here, and {why_not(event_time)}: "
                "every such tombstone would go to the dead letters (or fail the connector). Set "
                "delete.tombstone.handling.mode=rewrite, which drops them, with hoodie.payload.delete.field=__deleted "
                "and hoodie.payload.delete.marker=true, so that a delete is a row of its key marked deleted" + index,
            )


@dataclass(frozen=True)
class HudiSettings:
    """A valid Hudi sink config's own settings, typed (``SinkConfig.settings``); the rest of Hudi's write
    configs go to its writer as written (``writer_options``)."""

    # The table's directory, with what the workers need to reach it (on S3, its bucket's S3A settings).
    base: StoragePath
    table_name: str
    database: str
    table_type: str
    operation: str
    record_key_fields: tuple[str, ...]
    partition_fields: tuple[str, ...]
    precombine_field: str | None
    hive_style_partitioning: bool
    delete_field: str | None
    delete_marker: str | None
    index_type: str
    clustering: bool
    # hoodie.record.merge.mode as the config says it ("": Hudi's default).
    merge_mode: str = ""

    @property
    def base_path(self) -> str:
        """The base path as Spark and Hudi take it: a local path, or an s3a:// URL."""
        return self.base.uri

    @property
    def upsert(self) -> bool:
        return self.operation == "upsert"

    @property
    def partition_columns(self) -> tuple[str, ...]:
        """The partition path's fields as columns: a CustomKeyGenerator's ``field:type`` without its type."""
        return tuple(c for c in dict.fromkeys(f.split(":")[0].strip() for f in self.partition_fields) if c)

    @property
    def identity_partition_fields(self) -> tuple[str, ...]:
        """The partition path's fields that make records the same record to Hudi's index beside the record key:
        with an index that is not global (BUCKET, SIMPLE, BLOOM: Hudi's HoodieKey), the partition fields (as
        columns: a CustomKeyGenerator's ``field:type`` without its type); none with a global one. A commit keeps
        one record per key and these (``sinks.hudi.commit.latest_per_key``), as Hudi's own deduplication does."""
        if self.index_type in GLOBAL_INDEXES:
            return ()
        return tuple(c for c in self.partition_columns if c not in self.record_key_fields)

    @property
    def merge_on_read(self) -> bool:
        return self.table_type == "MERGE_ON_READ"

    @property
    def event_time_ordering(self) -> bool:
        return event_time_ordering(self.precombine_field, self.merge_mode)

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> HudiSettings:
        base = _get(raw, "target.base.path")
        return cls(
            base=StoragePath.parse(base) if base else StoragePath(""),
            table_name=_get(raw, "target.table.name"),
            database=_get(raw, "target.database.name"),
            table_type=_get(raw, "hoodie.table.type").upper(),
            operation=_get(raw, "hoodie.datasource.write.operation").lower(),
            record_key_fields=_fields(raw, "hoodie.datasource.write.recordkey.field"),
            partition_fields=_fields(raw, "hoodie.datasource.write.partitionpath.field"),
            precombine_field=_get(raw, "hoodie.datasource.write.precombine.field") or None,
            hive_style_partitioning=_get(raw, "hoodie.datasource.write.hive_style_partitioning").lower() == "true",
            delete_field=_get(raw, "hoodie.payload.delete.field") or None,
            delete_marker=_get(raw, "hoodie.payload.delete.marker") or None,
            # (Without a record key, as keyless inserts are, there is nothing to hash: Hudi's SIMPLE index.)
            index_type=(
                _get(raw, "hoodie.index.type").upper()
                if raw.get("hoodie.index.type") or _fields(raw, "hoodie.datasource.write.recordkey.field")
                else "SIMPLE"
            ),
            clustering=_get(raw, "hoodie.clustering.async.enabled").lower() == "true",
            merge_mode=_get(raw, "hoodie.record.merge.mode").upper(),
        )


KEY_GENERATORS = "org.apache.hudi.keygen."


def writer_options(settings: HudiSettings, raw: Mapping[str, str]) -> dict[str, str]:
    """The options of Hudi's Spark writer for this connector: its Hudi write configs (the families of
    ``HUDI_WRITE_CONFIG_FAMILIES``) as the validation read them, and what the sink's keys say in Hudi's names.
    A value is trimmed, as Kafka Connect trims its keys' values and the validation reads them: Hudi would read
    " true" as false, and fail on " 5" for a number. An empty one is left out: unset, as in the config's form."""
    options = {k: v.strip() for k, v in raw.items() if k.startswith(HUDI_WRITE_CONFIG_FAMILIES) and v.strip()}
    options.update(
        {
            "hoodie.table.name": settings.table_name,
            "hoodie.database.name": settings.database,
            "hoodie.datasource.write.table.type": settings.table_type,
            "hoodie.datasource.write.operation": settings.operation,
            "hoodie.datasource.write.partitionpath.field": ",".join(settings.partition_fields),
            "hoodie.datasource.write.hive_style_partitioning": str(settings.hive_style_partitioning).lower(),
            "hoodie.index.type": settings.index_type,
        }
    )
    if settings.index_type == "BUCKET":
        options["hoodie.bucket.index.num.buckets"] = _get(raw, "hoodie.bucket.index.num.buckets")
    if settings.record_key_fields:
        options["hoodie.datasource.write.recordkey.field"] = ",".join(settings.record_key_fields)
    if (
        settings.event_time_ordering
        and settings.precombine_field
        and (settings.upsert or options.get("hoodie.combine.before.insert") == "true")
    ):
        # (In commit-time ordering Hudi has no ordering field: given one, it would make the table event-time.)
        options["hoodie.datasource.write.precombine.field"] = settings.precombine_field
    if "hoodie.datasource.write.keygenerator.class" not in options:
        if not settings.partition_fields:
            generator = "NonpartitionedKeyGenerator"
        elif len(settings.partition_fields) == 1 and len(settings.record_key_fields) <= 1:
            generator = "SimpleKeyGenerator"
        else:
            generator = "ComplexKeyGenerator"
        options["hoodie.datasource.write.keygenerator.class"] = KEY_GENERATORS + generator
    if settings.merge_on_read:
        # Hudi's Spark writer compacts a merge-on-read table inline unless its compaction is async; async, it
        # schedules compactions and the sink's maintenance runs them beside the sink (sinks.hudi.services).
        inline = raw.get("hoodie.compact.inline", "false").strip().lower() == "true"
        options.setdefault("hoodie.datasource.compaction.async.enable", "false" if inline else "true")
    if settings.index_type == "RECORD_INDEX":
        options.setdefault("hoodie.metadata.record.index.enable", "true")
    if "." in (settings.delete_field or ""):
        # A field nested in a struct (the Iceberg sink's DebeziumTransform's _cdc.op), which Hudi's payloads read at
        # the top level only: the sink flags each delete itself (_hoodie_is_deleted, sinks.hudi.writer).
        options.pop("hoodie.payload.delete.field", None)
        options.pop("hoodie.payload.delete.marker", None)
    options.update(concurrency_options(raw))
    return options


def probe(config: SinkConfig) -> list[CheckResult]:
    """Write and delete a file at the base path, and check that a table already there takes this connector's
    writes: every conflict for which Hudi's writer would refuse them, as the participants find them
    (sinks.hudi.table_config.conflicts); and, as a warning, a table type other than the config's, which Hudi
    does not refuse (it writes the table as its type says) but which the sink's table services follow."""
    from sinks.hudi import timeline
    from sinks.hudi.table_config import TABLE_TYPE, conflicts, conflicts_message, read_table_config

    settings: HudiSettings = config.settings
    base = settings.base_path
    probe_file = f".sinkadmin-probe-{uuid.uuid4().hex[:8]}"
    settings.base.write_bytes(probe_file, b"probe")
    settings.base.delete(probe_file)
    table = read_table_config(settings.base)
    if table is None:
        return [CheckResult("Table", CheckStatus.OK, f"{base} is writable; the table is created by the first commit")]
    found = conflicts(writer_options(settings, config.raw), table, config.raw)
    if found:
        return [CheckResult("Table", CheckStatus.ERROR, conflicts_message(settings, found))]
    commits = len(timeline.completed_instants(settings.base))
    detail = f"Hudi table {settings.table_name} ({settings.table_type}) at {base}, {commits} commits"
    table_type = table.get(TABLE_TYPE)
    if table_type is not None and table_type != settings.table_type:
        return [
            CheckResult(
                "Table",
                CheckStatus.WARNING,
                f"Hudi table {settings.table_name} at {base}, {commits} commits, is {table_type}, not "
                f"{settings.table_type} as hoodie.table.type says: Hudi's writer writes it as {table_type} all the "
                f"same, but the sink's table services follow hoodie.table.type; set it to {table_type}",
            )
        ]
    return [CheckResult("Table", CheckStatus.OK, detail)]


def destinations(config: Mapping[str, Any]) -> list[str]:
    """The table's base path (the list and detail pages' "writes to")."""
    base = _get({k: str(v) for k, v in config.items()}, "target.base.path")
    return [base] if base else []
