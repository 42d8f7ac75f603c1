"""The Iceberg sink's settings: checked per key for the form, API and admin, then typed for the runtime."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from connectors.config.definitions import CONVERTERS
from connectors.config.transforms import PartitionField, parse_partition_by
from connectors.config.validation import KeyRule, apply_key_rules, split_list
from connectors.java_regex import compile_java
from sinks.iceberg.plugin import ICEBERG

if TYPE_CHECKING:
    from connectors.config.definitions import CheckResult
    from connectors.config.validation import ConfigValidation, SinkConfig

IDENTIFIER_PART = re.compile(r"^[A-Za-z_][A-Za-z0-9_$-]*$")
TABLE_SETTINGS = ("partition-by", "route-regex", "id-columns", "commit-branch")
# Commits go to each table's main branch: a commit branch other than main is refused (readers of main would
# see records meant for another branch), main itself is what the sink does.
MAIN_BRANCH = KeyRule(
    ignored="commits go to each table's main branch",
    refused="commits go to each table's main branch: committing to another branch is not supported yet "
    "(readers of main would see these records)",
    harmless=("main",),
)
# The Iceberg Kafka Connect sink's keys that this sink does not take as its own keys, and what it does with
# each: ignored with a note when that changes nothing written, refused when it would.
KEY_RULES = {
    "iceberg.tables.default-commit-branch": MAIN_BRANCH,
    "iceberg.tables.schema-force-optional": KeyRule(
        ignored="columns are always created and added as optional (nullable), whatever the records' schema "
        "says; no value written differs",
    ),
    "iceberg.tables.schema-case-insensitive": KeyRule(
        ignored="record fields are matched to columns by their exact name, as with false",
        refused="record fields are matched to columns by their exact name: a field that differs from its column "
        "only in case would not be written to that column",
        harmless=("false",),
    ),
    "iceberg.tables.write-props.*": KeyRule(
        ignored="data files are written with this sink's own writer settings; a writer property changes how "
        "files are encoded, not the rows they hold",
    ),
    "iceberg.control.group-id-prefix": KeyRule(
        ignored="the control topic's consumers are this service's own, and where they are is kept in the "
        "commit ledger, not a consumer group",
    ),
    "iceberg.control.commit.threads": KeyRule(
        ignored="the coordinator commits each table in turn; the number of threads changes nothing written",
    ),
    "iceberg.control.commit.max-consecutive-failures": KeyRule(
        ignored="a failed commit is retried until it is made (a prepared commit is always rolled forward), "
        "so no count of failures stops the coordinator; nothing written changes",
    ),
    "iceberg.coordinator.transactional.prefix": KeyRule(
        ignored="the coordinator commits through the ledger in PostgreSQL, not a Kafka transaction, so it "
        "has no transactional id",
    ),
    "iceberg.hadoop-conf-dir": KeyRule(
        ignored="the catalog and its files are reached through pyiceberg, which reads no Hadoop configuration; "
        "storage settings are iceberg.catalog.* properties (e.g. iceberg.catalog.s3.endpoint)",
    ),
    "iceberg.hadoop.*": KeyRule(
        ignored="the catalog and its files are reached through pyiceberg, which reads no Hadoop configuration; "
        "storage settings are iceberg.catalog.* properties (e.g. iceberg.catalog.s3.endpoint)",
    ),
}
# The Iceberg catalog a connector without ``iceberg.catalog`` writes to (the project's own SQL catalog),
# and the name make run's Spark Connect server maps it under.
DEFAULT_CATALOG_NAME = "iceberg"


def _get(config: Mapping[str, str], name: str) -> str:
    value = config.get(name)
    if value is None or value == "":
        key = ICEBERG.key(name)
        return (key.default if key else None) or ""
    return value.strip()


def _flag(config: Mapping[str, str], name: str) -> bool:
    return _get(config, name).lower() == "true"


def check(result: ConfigValidation, config: dict[str, str]) -> None:
    """Per-key errors of an Iceberg sink config (beside the checks every plugin shares)."""
    apply_key_rules(result, config, KEY_RULES)
    _check_tables(result, config)
    _check_table_properties(result, config)
    _check_writer(result, config)
    _check_evolve_schema(result, config)
    _check_dead_letter_table(result, config)


def _is_table_name(name: str) -> bool:
    parts = name.split(".")
    return len(parts) >= 2 and all(IDENTIFIER_PART.match(p) for p in parts)


def _check_tables(result: ConfigValidation, config: dict[str, str]) -> None:
    tables = split_list(config.get("iceberg.tables"))
    route_field = config.get("iceberg.tables.route-field", "").strip()
    dynamic = _dynamic(config)
    if dynamic and not route_field:
        result.add(
            "iceberg.tables.dynamic-enabled",
            "dynamic routing names each record's table by a field of it: set iceberg.tables.route-field",
        )
    if dynamic and tables:
        result.ignore(
            "iceberg.tables",
            "with iceberg.tables.dynamic-enabled=true each record's table is named by iceberg.tables.route-field, "
            "as in Apache Iceberg's sink",
        )
    elif not tables and not dynamic:
        result.add("iceberg.tables", 'Missing required configuration "iceberg.tables" which has no default value.')
    for table in tables:
        if not _is_table_name(table):
            result.add("iceberg.tables", f"{table!r} must be namespace.table (letters, digits, '_')")
    if len(set(tables)) != len(tables):
        result.add("iceberg.tables", "lists a table twice")
    if route_field and not all(part for part in route_field.split(".")):
        result.add("iceberg.tables.route-field", "name a field of the records, nested with dots (_cdc.target)")
    converter, _ = _value_format(config)
    if route_field and converter in ("string", "bytearray"):
        result.add("iceberg.tables.route-field", "routing reads a field of each record; these values have none")
    for key, value in config.items():
        if not key.startswith("iceberg.table."):
            continue
        rest = key[len("iceberg.table.") :]
        table, _, setting = rest.rpartition(".")
        if setting not in TABLE_SETTINGS or not table:
            result.add(key, f"unknown table setting; use iceberg.table.<table>.{{{','.join(TABLE_SETTINGS)}}}")
            continue
        if dynamic:
            # (The settings of any table a record names: Iceberg's sink reads them by the table's name.)
            if not _is_table_name(table):
                result.add(key, f"{table!r} must be namespace.table (letters, digits, '_')")
        elif table not in tables:
            result.add(key, f"{table!r} is not one of iceberg.tables")
        if setting == "commit-branch":
            apply_key_rules(result, {key: value}, {key: MAIN_BRANCH})
        elif setting == "id-columns":
            if not split_list(value):
                result.add(key, "name the table's identifier column(s)")
        elif setting == "partition-by":
            _check_partition_by(result, key, value)
        elif setting == "route-regex":
            if dynamic:
                result.add(
                    key,
                    "with iceberg.tables.dynamic-enabled=true the route field's value names the table, so no "
                    "regex is matched: remove it, or route statically (dynamic-enabled=false)",
                )
            try:
                compile_java(value)
            except ValueError as exc:
                result.add(key, f"not a valid regular expression: {exc}")
            if not route_field:
                result.add(key, "route-regex needs iceberg.tables.route-field")
    if config.get("iceberg.tables.default-partition-by", "").strip():
        _check_partition_by(
            result, "iceberg.tables.default-partition-by", config["iceberg.tables.default-partition-by"]
        )
    if route_field and not dynamic and tables:
        # (Apache Iceberg's sink writes a table without a route-regex nothing when it routes by a field.)
        unrouted = [t for t in tables if f"iceberg.table.{t}.route-regex" not in config]
        if len(unrouted) == len(tables):
            result.add("iceberg.tables.route-field", "no table has iceberg.table.<table>.route-regex to match against")
        elif unrouted:
            result.add(
                "iceberg.tables",
                f"{', '.join(unrouted)} has no iceberg.table.<table>.route-regex, so with iceberg.tables.route-field "
                "no record would go to it: give it a route-regex or remove it",
            )
    _check_upserts(result, config, tables)


def _dynamic(config: Mapping[str, str]) -> bool:
    return config.get("iceberg.tables.dynamic-enabled", "false").strip().lower() == "true"


TABLE_PROPERTIES_PREFIX = "iceberg.tables.auto-create-props."
# The properties of the tables the sink creates, before a config's own (iceberg.tables.auto-create-props.*);
# upsert tables also get the row-level write modes (ROW_LEVEL_MODES) merge-on-read.
CREATED_TABLE_PROPERTIES = {"format-version": "2", "write.parquet.compression-codec": "zstd"}
# Iceberg's row-level write modes: an upsert commit is a MERGE (write.merge.mode picks how it writes); the
# others govern Spark's UPDATE and DELETE statements on the table.
ROW_LEVEL_MODES = ("write.merge.mode", "write.update.mode", "write.delete.mode")


def created_table_properties(config: Mapping[str, str], upserts: bool) -> dict[str, str]:
    """The properties a table the sink creates gets: the sink's own, then the config's."""
    own = dict(CREATED_TABLE_PROPERTIES)
    if upserts:
        own.update(dict.fromkeys(ROW_LEVEL_MODES, "merge-on-read"))
    given = {
        k[len(TABLE_PROPERTIES_PREFIX) :]: v.strip() for k, v in config.items() if k.startswith(TABLE_PROPERTIES_PREFIX)
    }
    return {**own, **given}


def _check_table_properties(result: ConfigValidation, config: dict[str, str]) -> None:
    for key, raw in config.items():
        if not key.startswith(TABLE_PROPERTIES_PREFIX):
            continue
        name, value = key[len(TABLE_PROPERTIES_PREFIX) :], raw.strip()
        if not name:
            result.add(key, "name the table property: iceberg.tables.auto-create-props.<property>")
        elif name == "format-version" and value not in ("1", "2", "3"):
            result.add(key, "the sink writes Iceberg format versions 1, 2 and 3 (3 through Spark's Iceberg runtime)")
        elif name in ROW_LEVEL_MODES and value not in ("copy-on-write", "merge-on-read"):
            result.add(key, "copy-on-write or merge-on-read")
    properties = created_table_properties(config, upserts=True)
    if (
        properties["format-version"] == "1"
        and properties["write.merge.mode"] == "merge-on-read"
        and (
            config.get("iceberg.tables.upsert-mode-enabled", "").strip().lower() == "true"
            or config.get("iceberg.tables.cdc-field", "").strip()
        )
    ):
        result.add(
            f"{TABLE_PROPERTIES_PREFIX}format-version",
            "format v1 tables have no delete files, so upserts into them are copy-on-write: set "
            f"{TABLE_PROPERTIES_PREFIX}write.merge.mode=copy-on-write, or format-version 2",
        )


def _check_partition_by(result: ConfigValidation, key: str, value: str) -> None:
    try:
        parse_partition_by(value)
    except ValueError as exc:
        result.add(key, str(exc))


def _check_upserts(result: ConfigValidation, config: dict[str, str], tables: list[str]) -> None:
    """Identifier columns key upserts only, and must be fields of the records' schema when it is known."""
    keyed = config.get("iceberg.tables.upsert-mode-enabled", "false").strip().lower() == "true" or bool(
        config.get("iceberg.tables.cdc-field", "").strip()
    )
    if not keyed:
        for key in ["iceberg.tables.default-id-columns", *(f"iceberg.table.{t}.id-columns" for t in tables)]:
            if config.get(key, "").strip():
                result.add(key, "identifier columns key upserts: set iceberg.tables.upsert-mode-enabled=true")
        if config.get("sinkadmin.upsert.ordering-field", "").strip():
            result.add(
                "sinkadmin.upsert.ordering-field",
                "an ordering field orders the records of a key, which only upserts have: set "
                "iceberg.tables.upsert-mode-enabled=true",
            )
        return
    # No identifier columns configured: upserts key a table by its own identifier fields, as Iceberg's sink
    # does; a table without any is refused when the sink first resolves it (sinks.iceberg.writer), with the reason.
    fields = _schema_fields(config)
    if fields is None or config.get("transforms", "").strip():
        return  # (transforms make the rows' fields other than the value schema's)
    for key in ["iceberg.tables.default-id-columns", *(f"iceberg.table.{t}.id-columns" for t in tables)]:
        absent = [c for c in split_list(config.get(key)) if c not in fields]
        if absent:
            result.add(
                key,
                f"{', '.join(absent)} is not a field of the value schema (value.converter.avro.schema), whose "
                f"fields are {', '.join(fields)}: a table created from it could not key its rows",
            )


def _schema_fields(config: dict[str, str]) -> list[str] | None:
    """The top-level fields of the value schema the config itself gives (the avro converter's), if any."""
    text = config.get("value.converter.avro.schema", "")
    if CONVERTERS.get(config.get("value.converter", "json").strip()) != "avro" or not text:
        return None
    try:
        schema = json.loads(text)
    except ValueError:
        return None  # (refused per key by the shared converter checks)
    fields = schema.get("fields") if isinstance(schema, dict) else None
    if not isinstance(fields, list):
        return None
    return [str(f.get("name")) for f in fields if isinstance(f, dict)]


def _value_format(config: dict[str, str]) -> tuple[str | None, bool]:
    """The value converter's short name, and whether values come in Kafka Connect's schema envelope."""
    return (
        CONVERTERS.get(config.get("value.converter", "json").strip()),
        config.get("value.converter.schemas.enable", "false").strip().lower() == "true",
    )


def _check_writer(result: ConfigValidation, config: dict[str, str]) -> None:
    writer = config.get("sinkadmin.writer", "spark").strip()
    evolve = config.get("iceberg.tables.evolve-schema-enabled", "false").strip().lower() == "true"
    converter, envelope = _value_format(config)
    if writer == "arrow" and evolve and converter == "json" and envelope:
        # (The envelopes' schemas are collected by a Spark pass over the commit's records.)
        result.add(
            "sinkadmin.writer", "schema evolution from Kafka Connect envelopes needs the spark data plane; use spark"
        )


def _check_evolve_schema(result: ConfigValidation, config: dict[str, str]) -> None:
    key = "iceberg.tables.evolve-schema-enabled"
    if config.get(key, "false").strip().lower() != "true":
        return
    converter, _ = _value_format(config)
    if converter in ("string", "bytearray"):
        result.add(key, "schema evolution adds columns for the fields of records; these values have none")


def _check_dead_letter_table(result: ConfigValidation, config: dict[str, str]) -> None:
    key = "errors.deadletterqueue.table.name"
    table = config.get(key, "").strip()
    if not table:
        return
    if not _is_table_name(table):
        result.add(key, f"{table!r} must be namespace.table (letters, digits, '_')")
    if table in split_list(config.get("iceberg.tables")):
        result.add(key, "the dead-letter table cannot be one of iceberg.tables")
    if config.get("errors.tolerance", "none").strip() != "all":
        result.add(key, "a dead-letter table needs errors.tolerance=all")


@dataclass(frozen=True)
class TableTarget:
    name: str
    partition_by: tuple[PartitionField, ...]
    route_regex: re.Pattern[str] | None
    # The columns that identify a row, for upserts (iceberg.table.<name>.id-columns or the default).
    id_columns: tuple[str, ...] = ()


@dataclass(frozen=True)
class IcebergMaintenance:
    """What the Iceberg sink's maintenance does (``sinkadmin.maintenance.*``, see sinks.iceberg.maintenance);
    when it runs is the connector's MaintenanceSchedule."""

    target_file_size_bytes: int
    min_input_files: int
    max_snapshot_age_ms: int
    min_snapshots_to_keep: int
    orphan_older_than_ms: int
    delete_file_threshold: int = 5


@dataclass(frozen=True)
class IcebergSettings:
    """A valid Iceberg sink config's own settings, typed (``SinkConfig.settings``)."""

    # The tables iceberg.tables lists (none with dynamic routing).
    tables: tuple[TableTarget, ...]
    route_field: str | None
    auto_create: bool
    evolve_schema: bool
    # Keyed writes (sinks.iceberg.upserts): iceberg.tables.upsert-mode-enabled, or a CDC field.
    upsert_mode: bool
    cdc_field: str | None
    # sinkadmin.upsert.ordering-field: what orders a key's records within a commit (None: stream order).
    ordering_field: str | None
    catalog_name: str
    # ``iceberg.catalog.*`` keys without the prefix (pyiceberg's property names).
    catalog_properties: dict[str, str]
    maintenance: IcebergMaintenance
    # errors.deadletterqueue.table.name: where records that cannot be converted go (sinks.iceberg.dead_letters).
    dead_letter_table: str | None = None
    # The properties of the tables the sink creates (``created_table_properties``).
    table_properties: Mapping[str, str] = field(default_factory=lambda: dict(CREATED_TABLE_PROPERTIES))
    # iceberg.tables.dynamic-enabled: each record's table is named by its route field's value.
    dynamic: bool = False
    # The per-table keys (iceberg.table.<table>.<setting>) and their defaults, for a table no list names.
    raw_table_settings: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def unwraps_in_decoder(self) -> bool:
        """Whether the writer's decoders may apply a chain to columns (``SinkConfig.columnar_chain``):
        for one table, the records not routed (``sinks.iceberg.routing.router_for``: a router reads the records
        before their table's decoder), nor new fields typed from them (schema evolution), which both need the
        transformed records themselves."""
        return self.route_field is None and not self.dynamic and len(self.tables) == 1 and not self.evolve_schema

    @property
    def table_names(self) -> list[str]:
        """Every table the sink writes: the targets, then the dead-letter table (a commit whose records
        were all bad is found there only)."""
        return [t.name for t in self.tables] + ([self.dead_letter_table] if self.dead_letter_table else [])

    def target(self, name: str) -> TableTarget:
        """The table ``name`` as the sink writes it: one iceberg.tables lists, or one a record names
        (dynamic routing), with its iceberg.table.<name>.* settings or the defaults."""
        for target in self.tables:
            if target.name == name:
                return target
        return _table_target(name, self.raw_table_settings)

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> IcebergSettings:
        dynamic = _dynamic(raw)
        tables = () if dynamic else tuple(_table_target(name, raw) for name in split_list(raw.get("iceberg.tables")))
        prefix = "iceberg.catalog."
        return cls(
            tables=tables,
            route_field=raw.get("iceberg.tables.route-field") or None,
            auto_create=_flag(raw, "iceberg.tables.auto-create-enabled"),
            evolve_schema=_flag(raw, "iceberg.tables.evolve-schema-enabled"),
            upsert_mode=_flag(raw, "iceberg.tables.upsert-mode-enabled") or bool(raw.get("iceberg.tables.cdc-field")),
            cdc_field=raw.get("iceberg.tables.cdc-field") or None,
            ordering_field=raw.get("sinkadmin.upsert.ordering-field", "").strip() or None,
            catalog_name=raw.get("iceberg.catalog") or DEFAULT_CATALOG_NAME,
            catalog_properties={k[len(prefix) :]: v for k, v in raw.items() if k.startswith(prefix)},
            maintenance=IcebergMaintenance(
                target_file_size_bytes=int(_get(raw, "sinkadmin.maintenance.rewrite.target-file-size-bytes")),
                min_input_files=int(_get(raw, "sinkadmin.maintenance.rewrite.min-input-files")),
                delete_file_threshold=int(_get(raw, "sinkadmin.maintenance.rewrite.delete-file-threshold")),
                max_snapshot_age_ms=int(_get(raw, "sinkadmin.maintenance.expire.max-snapshot-age-ms")),
                min_snapshots_to_keep=int(_get(raw, "sinkadmin.maintenance.expire.min-snapshots-to-keep")),
                orphan_older_than_ms=int(_get(raw, "sinkadmin.maintenance.orphans.older-than-ms")),
            ),
            dead_letter_table=raw.get("errors.deadletterqueue.table.name", "").strip() or None,
            table_properties=created_table_properties(
                raw,
                upserts=_flag(raw, "iceberg.tables.upsert-mode-enabled") or bool(raw.get("iceberg.tables.cdc-field")),
            ),
            dynamic=dynamic,
            raw_table_settings={
                k: v
                for k, v in raw.items()
                if k.startswith("iceberg.table.")
                or k in ("iceberg.tables.default-partition-by", "iceberg.tables.default-id-columns")
            },
        )


def _table_target(name: str, raw: Mapping[str, str]) -> TableTarget:
    return TableTarget(
        name=name,
        partition_by=tuple(
            parse_partition_by(
                raw.get(f"iceberg.table.{name}.partition-by") or raw.get("iceberg.tables.default-partition-by", "")
            )
        ),
        route_regex=compile_java(raw[f"iceberg.table.{name}.route-regex"])
        if f"iceberg.table.{name}.route-regex" in raw
        else None,
        id_columns=tuple(
            split_list(raw.get(f"iceberg.table.{name}.id-columns") or raw.get("iceberg.tables.default-id-columns"))
        ),
    )


def probe(config: SinkConfig) -> list[CheckResult]:
    """The catalog loads and lists, and the tables exist (or will be created): what the runtime will
    need of it, with the catalog built as the runtime builds it (``sinks.iceberg.tables.catalog_for``)."""
    from connectors.config.definitions import CheckResult, CheckStatus
    from sinks.iceberg.tables import catalog_for

    settings: IcebergSettings = config.settings
    try:
        catalog = catalog_for(config)
        # Loading is lazy for some catalog types; listing proves the catalog answers.
        catalog.list_namespaces()
    except Exception as exc:  # every catalog raises its own types; the message is what the user needs
        return [
            CheckResult("Iceberg catalog", CheckStatus.ERROR, f"{settings.catalog_name}: {_first_line(exc)}"),
            CheckResult("Tables", CheckStatus.SKIPPED, "needs the catalog"),
        ]
    try:
        found = [CheckResult("Iceberg catalog", CheckStatus.OK, f"catalog {settings.catalog_name!r} loaded and listed")]
        if settings.dynamic:
            what = "created on first records" if settings.auto_create else "must exist (auto-create is off)"
            named = f"named by each record's {settings.route_field}: {what}"
            return [*found, CheckResult("Tables", CheckStatus.OK, named)]
        missing = [t.name for t in settings.tables if not catalog.table_exists(t.name)]
        if not missing:
            return [*found, CheckResult("Tables", CheckStatus.OK, f"{len(settings.tables)} table(s) exist")]
        if settings.auto_create:
            return [
                *found,
                CheckResult("Tables", CheckStatus.OK, f"will be created on first records: {', '.join(missing)}"),
            ]
        return [
            *found,
            CheckResult(
                "Tables",
                CheckStatus.ERROR,
                f"missing: {', '.join(missing)} (create them or set iceberg.tables.auto-create-enabled)",
            ),
        ]
    finally:
        # A SQL catalog keeps a connection pool; a check that left it open would hold database
        # connections for every click on "Test connection".
        catalog.close()


def _first_line(exc: BaseException) -> str:
    return (str(exc) or type(exc).__name__).splitlines()[0][:500]
