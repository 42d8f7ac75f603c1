"""A Hudi table's own settings against a connector's: the conflicts for which Hudi's writer refuses to write.

Hudi 1.2's Spark writer (``HoodieSparkSqlWriterInternal.writeInternal``,
on a table that exists, in append mode) checks the options it is given
against the table's config, ``.hoodie/hoodie.properties``, in
``HoodieWriterUtils.validateKeyGeneratorConfig`` and
``HoodieWriterUtils.validateTableConfig``, and refuses the write with
"Config conflict(key current value existing value)". Found there, a
conflict would fail the coordinator's write of a commit already prepared,
and every retry of it (DESIGN I9). ``conflicts`` replicates those two
checks rule by rule, as the 1.2.0 bundle (var/jars/spark/) compiles them,
with the options the sink's commit gives Hudi's writer (``writer_options``),
so the participants refuse such a config before their first commit is
prepared (``sinks.hudi.writer``) and "Test connection" reports the same
conflicts (``sinks.hudi.settings.probe``).

What Hudi does not refuse is not refused here either: a table type other
than the config's (Hudi writes the table as its hoodie.properties says), a
table name that differs only in case, a database name where the table has
none, a partition field where the table's key generator ignores it.

One way Hudi's check fails is not modelled: making the table's key
generator from the options can fail (a Simple one given two record key
fields, or no partition field). With the key generators the sink chooses,
that comes only with a record key, key generator or partition conflict,
which is reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from connectors.config.properties import load_properties
from sinks.hudi.plugin import SYNONYMS
from sinks.hudi.settings import writer_options

if TYPE_CHECKING:
    from sinks.hudi.settings import HudiSettings
    from workers.storage import StoragePath

# The table's config, and the copy Hudi reads when an update left the file missing
# (HoodieTableConfig.fetchConfigs).
PROPERTIES = ".hoodie/hoodie.properties"
PROPERTIES_BACKUP = ".hoodie/hoodie.properties.backup"

# The write options Hudi's checks read (DataSourceWriteOptions, HoodieWriteConfig).
RECORD_KEY = "hoodie.datasource.write.recordkey.field"
# DataSourceWriteOptions.ORDERING_FIELDS: in 1.2 the precombine field's key.
ORDERING = "hoodie.datasource.write.precombine.field"
KEY_GENERATOR = "hoodie.datasource.write.keygenerator.class"
KEY_GENERATOR_TYPE_OPTION = "hoodie.datasource.write.keygenerator.type"
PARTITION_PATH = "hoodie.datasource.write.partitionpath.field"
PARTITION_EXTRACTOR = "hoodie.datasource.partition_extractor_class"
PAYLOAD = "hoodie.datasource.write.payload.class"
WRITE_MERGE_MODE = "hoodie.write.record.merge.mode"
WRITE_MERGE_STRATEGY = "hoodie.write.record.merge.strategy.id"
DATABASE = "hoodie.database.name"
# SqlKeyGenerator.ORIGINAL_KEYGEN_CLASS_NAME: the key generator Spark SQL's wraps.
ORIGINAL_KEY_GENERATOR = "hoodie.sql.origin.keygen.class"
SQL_KEY_GENERATORS = (
    "org.apache.spark.sql.hudi.command.SqlKeyGenerator",
    "org.apache.spark.sql.hudi.command.MergeIntoKeyGenerator",
)
EXPRESSION_PAYLOAD = "org.apache.spark.sql.hudi.command.payload.ExpressionPayload"
VALIDATE_DUPLICATE_KEY_PAYLOAD = "org.apache.spark.sql.hudi.command.ValidateDuplicateKeyPayload"
OVERWRITE_WITH_LATEST_PAYLOAD = "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload"
DEFAULT_PAYLOAD = "org.apache.hudi.common.model.DefaultHoodieRecordPayload"

# The table config's keys (HoodieTableConfig).
TABLE_VERSION = "hoodie.table.version"
TABLE_INITIAL_VERSION = "hoodie.table.initial.version"
TABLE_RECORD_KEY = "hoodie.table.recordkey.fields"
# HoodieTableConfig.ORDERING_FIELDS, and its alternative (the name before 1.1).
TABLE_ORDERING = ("hoodie.table.ordering.fields", "hoodie.table.precombine.field")
TABLE_KEY_GENERATOR_CLASS = "hoodie.table.keygenerator.class"
TABLE_KEY_GENERATOR_TYPE = "hoodie.table.keygenerator.type"
TABLE_PARTITION_FIELDS = "hoodie.table.partition.fields"
TABLE_PARTITION_EXTRACTOR = "hoodie.table.partition_extractor_class"
TABLE_PAYLOAD = "hoodie.compaction.payload.class"
TABLE_LEGACY_PAYLOAD = "hoodie.table.legacy.payload.class"
TABLE_MERGE_MODE = "hoodie.record.merge.mode"
TABLE_MERGE_STRATEGY = "hoodie.record.merge.strategy.id"
TABLE_BASE_FILE_FORMAT = "hoodie.table.base.file.format"
# (Not compared by Hudi's checks: "Test connection" warns of it, sinks.hudi.settings.probe.)
TABLE_TYPE = "hoodie.table.type"
# The table versions whose rules differ (HoodieTableVersion's codes).
VERSION_EIGHT = 8
VERSION_NINE = 9
# HoodieTableVersion.current() in 1.2: what a table config without a version is taken as.
CURRENT_VERSION = VERSION_NINE

# DataSourceOptionsHelper.allAlternatives in 1.2: an option's older name, and the name Hudi looks it up by in
# the table config.
ALTERNATIVES = {
    "hoodie.datasource.view.type": "hoodie.datasource.query.type",
    "hoodie.datasource.write.storage.type": "hoodie.datasource.write.table.type",
    "hoodie.table.ro.file.format": "hoodie.table.base.file.format",
    "hoodie.table.rt.file.format": "hoodie.table.log.file.format",
}

# KeyGeneratorType's class names, by the type the table config names (hoodie.table.keygenerator.type).
KEY_GENERATOR_TYPES = {
    "SIMPLE": "org.apache.hudi.keygen.SimpleKeyGenerator",
    "SIMPLE_AVRO": "org.apache.hudi.keygen.SimpleAvroKeyGenerator",
    "COMPLEX": "org.apache.hudi.keygen.ComplexKeyGenerator",
    "COMPLEX_AVRO": "org.apache.hudi.keygen.ComplexAvroKeyGenerator",
    "TIMESTAMP": "org.apache.hudi.keygen.TimestampBasedKeyGenerator",
    "TIMESTAMP_AVRO": "org.apache.hudi.keygen.TimestampBasedAvroKeyGenerator",
    "CUSTOM": "org.apache.hudi.keygen.CustomKeyGenerator",
    "CUSTOM_AVRO": "org.apache.hudi.keygen.CustomAvroKeyGenerator",
    "NON_PARTITION": "org.apache.hudi.keygen.NonpartitionedKeyGenerator",
    "NON_PARTITION_AVRO": "org.apache.hudi.keygen.NonpartitionedAvroKeyGenerator",
    "GLOBAL_DELETE": "org.apache.hudi.keygen.GlobalDeleteKeyGenerator",
    "GLOBAL_DELETE_AVRO": "org.apache.hudi.keygen.GlobalAvroDeleteKeyGenerator",
    "AUTO_RECORD": "org.apache.hudi.keygen.AutoRecordGenWrapperKeyGenerator",
    "AUTO_RECORD_AVRO": "org.apache.hudi.keygen.AutoRecordGenWrapperAvroKeyGenerator",
    "HOODIE_TABLE_METADATA": "org.apache.hudi.metadata.HoodieTableMetadataKeyGenerator",
    "SPARK_SQL": "org.apache.spark.sql.hudi.command.SqlKeyGenerator",
    "SPARK_SQL_UUID": "org.apache.spark.sql.hudi.command.UuidKeyGenerator",
    "SPARK_SQL_MERGE_INTO": "org.apache.spark.sql.hudi.command.MergeIntoKeyGenerator",
}
# SparkKeyGenUtils.getPartitionColumns: key generators whose partition path fields are "field:type" pairs, and
# those that partition by nothing whatever the partition path fields say.
CUSTOM_KEY_GENERATORS = ("org.apache.hudi.keygen.CustomKeyGenerator", "org.apache.hudi.keygen.CustomAvroKeyGenerator")
UNPARTITIONED_KEY_GENERATORS = (
    "org.apache.hudi.keygen.NonpartitionedKeyGenerator",
    "org.apache.hudi.keygen.NonpartitionedAvroKeyGenerator",
    "org.apache.hudi.keygen.GlobalDeleteKeyGenerator",
    "org.apache.hudi.keygen.GlobalAvroDeleteKeyGenerator",
)

# The config's keys for the options the sink gives Hudi under Hudi's names (``writer_options``).
CONFIG_KEYS = {
    "hoodie.table.name": "target.table.name",
    DATABASE: "target.database.name",
    "hoodie.datasource.write.table.type": "hoodie.table.type",
}


@dataclass(frozen=True)
class TableConflict:
    """A write option whose value Hudi's writer refuses against the table's config."""

    # The option, as the sink gives it to Hudi's writer, and the config key that sets it.
    option: str
    config_key: str
    config_value: str
    # The table config's key Hudi compares it with, and its value there (None: the table has none).
    table_key: str
    table_value: str | None
    # How the config's value came about, where the sink derived it (the key generator).
    note: str = ""

    def __str__(self) -> str:
        named = self.config_key if self.config_key == self.option else f"{self.config_key} ({self.option})"
        there = "not set" if self.table_value is None else repr(self.table_value)
        note = f" ({self.note})" if self.note else ""
        return f"{named} is {self.config_value!r} here{note}, {there} in the table ({self.table_key})"


def read_table_config(base: StoragePath) -> dict[str, str] | None:
    """The table config at ``base`` (local or s3a://), as Hudi reads it; None when no table is there."""
    import pyarrow.fs as pafs

    fs, root = base.filesystem()
    for name in (PROPERTIES, PROPERTIES_BACKUP):
        path = f"{root.rstrip('/')}/{name}"
        if fs.get_file_info(path).type != pafs.FileType.File:
            continue
        with fs.open_input_stream(path) as stream:
            # (Properties.store escapes what is not Latin-1; Properties.load reads the file as Latin-1.)
            return load_properties(stream.read().decode("latin-1"))
    return None


def _same_ignoring_case(a: str, b: str) -> bool:
    """Spark's resolver without spark.sql.caseSensitive (its default): String.equalsIgnoreCase."""
    return len(a) == len(b) and all(
        x == y or x.upper() == y.upper() or x.lower() == y.lower() for x, y in zip(a, b, strict=True)
    )


def _version(table: Mapping[str, str], key: str) -> int | None:
    value = table.get(key)
    return int(value) if value is not None else None


def _key_in_table_config(key: str, table: Mapping[str, str]) -> str:
    """HoodieWriterUtils.getKeyInTableConfig: from table version 9 on, the payload and merge options are
    compared with the table config's own keys for them."""
    if (_version(table, TABLE_VERSION) or 0) < VERSION_NINE:
        return key
    if key in (TABLE_PAYLOAD, PAYLOAD):
        return TABLE_LEGACY_PAYLOAD if table.get(TABLE_LEGACY_PAYLOAD, "").strip() else TABLE_PAYLOAD
    return {WRITE_MERGE_MODE: TABLE_MERGE_MODE, WRITE_MERGE_STRATEGY: TABLE_MERGE_STRATEGY}.get(key, key)


def _ignores_payload(incoming: str, table: Mapping[str, str]) -> bool:
    """HoodieWriterUtils.shouldIgnorePayloadValidation."""
    if incoming == VALIDATE_DUPLICATE_KEY_PAYLOAD:
        return True
    version = _version(table, TABLE_VERSION) or CURRENT_VERSION
    initial = _version(table, TABLE_INITIAL_VERSION) or CURRENT_VERSION
    if (
        version == VERSION_EIGHT
        and initial < VERSION_EIGHT
        and incoming == OVERWRITE_WITH_LATEST_PAYLOAD
        and table.get(TABLE_PAYLOAD) == DEFAULT_PAYLOAD
    ):
        return True
    # (From version 9 the merge mode decides, unless it is CUSTOM.)
    return version >= VERSION_NINE and table.get(TABLE_MERGE_MODE, "") != "CUSTOM"


def _ignored(key: str, value: str, options: Mapping[str, str], table: Mapping[str, str]) -> bool:
    """HoodieWriterUtils.shouldIgnoreConfig: the options compared with no table config key."""
    expression_payload = options.get(PAYLOAD, "") == EXPRESSION_PAYLOAD
    return (
        key == TABLE_BASE_FILE_FORMAT
        or (expression_payload and key in (PAYLOAD, TABLE_PAYLOAD, WRITE_MERGE_MODE, WRITE_MERGE_STRATEGY))
        or (key == PAYLOAD and _ignores_payload(value, table))
        or (key == DATABASE and not table.get(ALTERNATIVES.get(key, key)))
    )


def table_key_generator(table: Mapping[str, str]) -> str | None:
    """KeyGeneratorType.getKeyGeneratorClassName: the table's key generator class, named or by its type.
    Raises ValueError where Hudi cannot tell it (a type it does not know, or USER_PROVIDED without a class)."""
    if TABLE_KEY_GENERATOR_CLASS in table:
        return table[TABLE_KEY_GENERATOR_CLASS]
    if TABLE_KEY_GENERATOR_TYPE not in table:
        return None
    kind = table[TABLE_KEY_GENERATOR_TYPE]
    if kind not in KEY_GENERATOR_TYPES:
        raise ValueError(f"{TABLE_KEY_GENERATOR_TYPE}={kind} names no key generator class")
    return KEY_GENERATOR_TYPES[kind]


def _java_split(text: str, separator: str) -> list[str]:
    """String.split: the trailing empty pieces dropped."""
    pieces = text.split(separator)
    while len(pieces) > 1 and pieces[-1] == "":
        pieces.pop()
    return pieces


def _partition_columns(key_generator: str | None, options: Mapping[str, str]) -> str:
    """SparkKeyGenUtils.getPartitionColumns: the partition fields a key generator takes from the options."""
    fields = options.get(PARTITION_PATH, "")
    if key_generator is None:
        # (HoodieSparkKeyGeneratorFactory takes the options' key generator type, else infers one from the fields:
        # none without partition fields. The sink always names a class, so this is for completeness.)
        kind = options.get(KEY_GENERATOR_TYPE_OPTION, "").upper()
        key_generator = KEY_GENERATOR_TYPES.get(kind) or (None if fields else UNPARTITIONED_KEY_GENERATORS[0])
    if key_generator in CUSTOM_KEY_GENERATORS:
        return ",".join(_java_split(piece, ":")[0] for piece in _java_split(fields, ","))
    if key_generator in UNPARTITIONED_KEY_GENERATORS:
        return ""
    return fields


def _table_partition_fields(table: Mapping[str, str]) -> str | None:
    """HoodieTableConfig.getPartitionFieldProp: the table's partition fields, without a custom key generator's
    types."""
    if TABLE_PARTITION_FIELDS not in table:
        return None
    pieces = [p for p in _java_split(table[TABLE_PARTITION_FIELDS], ",") if p]
    return ",".join(_java_split(p, ":")[0] for p in pieces)


def conflicts(options: Mapping[str, str], table: Mapping[str, str], config: Mapping[str, str]) -> list[TableConflict]:
    """The conflicts for which Hudi 1.2's writer refuses ``options`` (its write options) on a table whose config
    is ``table`` (HoodieWriterUtils.validateKeyGeneratorConfig and validateTableConfig, in append mode);
    ``config``: the connector's config, to name its keys."""
    # (Spark hands the options over case-insensitively: HoodieWriterUtils looks them up so.)
    lookup = {k.lower(): v for k, v in options.items()}

    def option(key: str) -> str | None:
        return lookup.get(key.lower())

    def conflict(key: str, value: str, table_key: str, table_value: str | None, note: str = "") -> TableConflict:
        config_key = CONFIG_KEYS.get(key, key)
        named = next((s for s, target in SYNONYMS.items() if target == config_key and config.get(s, "").strip()), None)
        if not config.get(config_key, "").strip() and named is not None:
            config_key = named
        return TableConflict(key, config_key, value, table_key, table_value, note)

    found: list[TableConflict] = []
    # Every option the table config holds under the same key (or its alternative's), compared ignoring case.
    for key, value in options.items():
        if _ignored(key, value, lookup, table):
            continue
        table_key = _key_in_table_config(key, table)
        existing = table.get(ALTERNATIVES.get(table_key, table_key))
        if existing is not None and not _same_ignoring_case(existing, value):
            found.append(conflict(key, value, table_key, table.get(table_key)))
    version = _version(table, TABLE_VERSION)
    # The record key fields, compared as written: a table without any takes none either.
    record_key, table_record_key = option(RECORD_KEY), table.get(TABLE_RECORD_KEY)
    if (
        version is not None
        and version > 1
        and (
            (record_key is not None and table_record_key is not None and record_key != table_record_key)
            or (record_key and table_record_key is None)
        )
    ):
        found.append(conflict(RECORD_KEY, record_key or "", TABLE_RECORD_KEY, table_record_key))
    # The ordering (precombine) fields, where both name some.
    ordering = option(ORDERING)
    table_ordering_key = next((k for k in TABLE_ORDERING if k in table), TABLE_ORDERING[0])
    table_ordering = table.get(table_ordering_key)
    if ordering is not None and table_ordering is not None and ordering != table_ordering:
        found.append(conflict(ORDERING, ordering, table_ordering_key, table_ordering))
    # The key generator: its class as the options name it (Spark SQL's unwrapped), against the table's.
    key_generator = option(KEY_GENERATOR)
    if key_generator in SQL_KEY_GENERATORS:
        key_generator = option(ORIGINAL_KEY_GENERATOR)
    try:
        table_generator = table_key_generator(table)
    except ValueError as exc:
        found.append(conflict(KEY_GENERATOR, key_generator or "", TABLE_KEY_GENERATOR_TYPE, None, str(exc)))
        table_generator = None
    if key_generator is not None and table_generator is not None and key_generator != table_generator:
        found.append(
            conflict(KEY_GENERATOR, key_generator, _table_key_generator_key(table), table_generator, _derived(config))
        )
    # The partition fields as the table's key generator (else the options') takes them.
    partition_path = option(PARTITION_PATH)
    table_partitions = _table_partition_fields(table)
    if partition_path is not None and table_partitions is not None:
        current = _partition_columns(table_generator if table_generator is not None else key_generator, lookup)
        if current != table_partitions:
            found.append(conflict(PARTITION_PATH, partition_path, TABLE_PARTITION_FIELDS, table_partitions))
    # The partition value extractor, where both name one.
    extractor, table_extractor = option(PARTITION_EXTRACTOR), table.get(TABLE_PARTITION_EXTRACTOR)
    if extractor is not None and table_extractor is not None and extractor != table_extractor:
        found.append(conflict(PARTITION_EXTRACTOR, extractor, TABLE_PARTITION_EXTRACTOR, table_extractor))
    # From version 9: a merge strategy where the table has none (unless Spark SQL's MERGE INTO writes).
    strategy = option(WRITE_MERGE_STRATEGY)
    if (
        (version or 0) >= VERSION_NINE
        and (option(PAYLOAD) or "") != EXPRESSION_PAYLOAD
        and not table.get(TABLE_MERGE_STRATEGY)
        and strategy
    ):
        found.append(conflict(WRITE_MERGE_STRATEGY, strategy, TABLE_MERGE_STRATEGY, None))
    return found


def _table_key_generator_key(table: Mapping[str, str]) -> str:
    return TABLE_KEY_GENERATOR_CLASS if TABLE_KEY_GENERATOR_CLASS in table else TABLE_KEY_GENERATOR_TYPE


def _derived(config: Mapping[str, str]) -> str:
    """How the sink chose the key generator, where the config does not name one (``writer_options``)."""
    if config.get(KEY_GENERATOR, "").strip():
        return ""
    return f"the sink's choice for these record key and partition path fields; {KEY_GENERATOR} sets another"


def table_conflicts(settings: HudiSettings, config: Mapping[str, str]) -> list[TableConflict] | None:
    """The conflicts of the connector's write options with the table at its base path; None when no table is
    there yet (its first commit creates it with the config's settings)."""
    table = read_table_config(settings.base)
    if table is None:
        return None
    return conflicts(writer_options(settings, config), table, config)


def conflicts_message(settings: HudiSettings, found: list[TableConflict]) -> str:
    """What the participants refuse a config with, and "Test connection" reports: each conflict, and the way
    out."""
    return (
        f"the Hudi table at {settings.base_path} was created with other settings than this connector's, and Hudi's "
        f"writer refuses to write to it so (its config conflicts with the table's): {'; '.join(map(str, found))}. "
        "Point target.base.path at another directory (the first commit creates a table there), or set these keys "
        "as the table has them (its .hoodie/hoodie.properties), then restart the connector"
    )
