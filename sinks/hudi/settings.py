"""The Hudi sink's settings: checked per key for the form, API and admin, then typed for the runtime."""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from connectors.config.definitions import CheckResult, CheckStatus
from connectors.config.validation import KeyRule, apply_key_rules
from sinks.hudi.plugin import HUDI, KEEP_LATEST_COMMITS, SYNONYMS

if TYPE_CHECKING:
    import pyarrow.fs as pafs

    from connectors.config.validation import ConfigValidation, SinkConfig
    from sinks.hudi.table import HudiTableSpec

# A Hudi schema provider types the table's columns; this sink types them from the records as the value
# converter decodes them, so a schema provider it ignored would give other column types.
SCHEMA_PROVIDER = KeyRule(
    refused="the table's columns are typed from the records as value.converter decodes them (an Avro schema "
    "comes from value.converter.schema.registry.url or value.converter.avro.schema); a Hudi schema provider is "
    "not read, and ignoring it would type the columns differently: remove it",
)
METASTORE_SYNC_OFF = (
    "the table is not synced to a metastore (hoodie.meta.sync.enable), so its sync settings change nothing written"
)
# Keys of Hudi's Kafka Connect sink and write configs that this sink does not take as its own keys, and what it
# does with each: ignored with a note when that changes nothing written, refused when it would.
KEY_RULES = {
    "hoodie.metadata.enable": KeyRule(
        ignored="the metadata table is not written, as with false",
        refused="the metadata table is not written: readers list the partitions (set false or remove the key)",
        harmless=("false",),
    ),
    "hoodie.datasource.write.keygenerator.class": KeyRule(
        ignored="keys are made as SimpleKeyGenerator (one field), ComplexKeyGenerator (several) or "
        "NonpartitionedKeyGenerator (no partition field) make them",
        refused="keys are made as SimpleKeyGenerator (one field) or ComplexKeyGenerator (several) make them; "
        "another key generator would make other keys: remove the key",
        harmless=(
            "org.apache.hudi.keygen.SimpleKeyGenerator",
            "org.apache.hudi.keygen.ComplexKeyGenerator",
            "org.apache.hudi.keygen.NonpartitionedKeyGenerator",
        ),
    ),
    "hoodie.datasource.write.payload.class": KeyRule(
        ignored="records merge by the precombine field, as this payload merges them",
        refused="records merge as DefaultHoodieRecordPayload merges them (by the precombine field); another "
        "payload would merge them otherwise: remove the key",
        harmless=(
            "org.apache.hudi.common.model.DefaultHoodieRecordPayload",
            "org.apache.hudi.common.model.EventTimeAvroPayload",
        ),
    ),
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
    "hoodie.keep.max.commits": KeyRule(
        ignored="completed instants are not archived: the timeline keeps them all, which changes no row",
    ),
    "hoodie.keep.min.commits": KeyRule(
        ignored="completed instants are not archived: the timeline keeps them all, which changes no row",
    ),
    "hoodie.meta.sync.enable": KeyRule(
        ignored="the table is not synced to a metastore, as with false",
        refused="the table is not synced to a metastore: register its base path with yours (set false)",
        harmless=("false",),
    ),
    "hoodie.datasource.hive_sync.enable": KeyRule(
        ignored="the table is not synced to a metastore, as with false",
        refused="the table is not synced to a metastore: register its base path with yours (set false)",
        harmless=("false",),
    ),
    "hoodie.meta.sync.*": KeyRule(ignored=METASTORE_SYNC_OFF),
    "hoodie.datasource.hive_sync.*": KeyRule(ignored=METASTORE_SYNC_OFF),
}


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
        if not _get(config, target):
            result.add(target, f'Missing required configuration "{target}" which has no default value.')
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
        scheme = parts.scheme
        if scheme not in ("", "file"):
            result.add(
                base_key,
                f"{scheme}:// base paths are not supported yet: use a path (or file:// URL) on storage every worker "
                "and Spark executor sees",
            )
        elif not (parts.path if scheme else base).startswith("/"):
            result.add(base_key, "must be an absolute path (every worker and executor reads it)")
    if _get(config, "hoodie.table.type") == "MERGE_ON_READ":
        result.add(
            "hoodie.table.type",
            "MERGE_ON_READ needs Hudi's log files, which this sink does not write: use COPY_ON_WRITE",
        )
    operation = _get(config, "hoodie.datasource.write.operation").lower()
    keys = _fields(config, "hoodie.datasource.write.recordkey.field")
    if operation == "upsert" and not keys:
        result.add(
            "hoodie.datasource.write.recordkey.field",
            "upsert needs the record key field(s); or set hoodie.datasource.write.operation=insert",
        )
    if operation != "upsert":
        # Hudi's own writer ignores the precombine field on insert; a delete marker it would still apply
        # (DefaultHoodieRecordPayload drops a marked record on insert too), which this sink does not.
        if config.get("hoodie.datasource.write.precombine.field"):
            result.ignore(
                "hoodie.datasource.write.precombine.field",
                f"only upserts merge records by key, and this connector's operation is {operation}",
            )
        if config.get("hoodie.payload.delete.field"):
            result.add(
                "hoodie.payload.delete.field",
                f"only upserts apply delete markers: remove it, or set operation=upsert ({operation})",
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


@dataclass(frozen=True)
class CleanerConfig:
    """``hoodie.clean.automatic`` and the cleaner's policy keys (Hudi's names and defaults)."""

    automatic: bool = True
    policy: str = KEEP_LATEST_COMMITS
    commits_retained: int = 10
    file_versions_retained: int = 3
    hours_retained: int = 24


@dataclass(frozen=True)
class ClusteringConfig:
    """``hoodie.clustering.async.enabled`` and the size-based plan strategy's keys (Hudi's names)."""

    enabled: bool = True
    small_file_limit: int = 314572800
    target_file_max_bytes: int = 1073741824
    max_bytes_per_group: int = 2147483648
    max_num_groups: int = 30


@dataclass(frozen=True)
class HudiSettings:
    base_path: str
    table_name: str
    database: str
    operation: str
    record_key_fields: tuple[str, ...]
    partition_fields: tuple[str, ...]
    precombine_field: str | None
    hive_style_partitioning: bool
    delete_field: str | None
    delete_marker: str | None
    num_buckets: int
    max_file_size: int
    small_file_limit: int
    cleaner: CleanerConfig
    clustering: ClusteringConfig

    @property
    def upsert(self) -> bool:
        return self.operation == "upsert"

    def spec(self) -> HudiTableSpec:
        from sinks.hudi.table import HudiTableSpec

        return HudiTableSpec(
            name=self.table_name,
            database=self.database,
            record_key_fields=self.record_key_fields,
            partition_fields=self.partition_fields,
            precombine_field=self.precombine_field,
            hive_style_partitioning=self.hive_style_partitioning,
        )

    def filesystem(self) -> tuple[pafs.FileSystem, str]:
        import pyarrow.fs as pafs

        return pafs.LocalFileSystem(), self.base_path

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> HudiSettings:
        base = _get(raw, "target.base.path")
        if "://" in base:
            base = urlsplit(base).path
        return cls(
            base_path=os.path.normpath(base) if base else "",
            table_name=_get(raw, "target.table.name"),
            database=_get(raw, "target.database.name"),
            operation=_get(raw, "hoodie.datasource.write.operation").lower(),
            record_key_fields=_fields(raw, "hoodie.datasource.write.recordkey.field"),
            partition_fields=_fields(raw, "hoodie.datasource.write.partitionpath.field"),
            precombine_field=_get(raw, "hoodie.datasource.write.precombine.field") or None,
            hive_style_partitioning=_get(raw, "hoodie.datasource.write.hive_style_partitioning").lower() == "true",
            delete_field=_get(raw, "hoodie.payload.delete.field") or None,
            delete_marker=_get(raw, "hoodie.payload.delete.marker") or None,
            num_buckets=int(_get(raw, "hoodie.bucket.index.num.buckets")),
            max_file_size=int(_get(raw, "hoodie.parquet.max.file.size")),
            small_file_limit=int(_get(raw, "hoodie.parquet.small.file.limit")),
            cleaner=CleanerConfig(
                automatic=_get(raw, "hoodie.clean.automatic").lower() == "true",
                policy=_get(raw, "hoodie.cleaner.policy").upper(),
                commits_retained=int(_get(raw, "hoodie.cleaner.commits.retained")),
                file_versions_retained=int(_get(raw, "hoodie.cleaner.fileversions.retained")),
                hours_retained=int(_get(raw, "hoodie.cleaner.hours.retained")),
            ),
            clustering=ClusteringConfig(
                enabled=_get(raw, "hoodie.clustering.async.enabled").lower() == "true",
                small_file_limit=int(_get(raw, "hoodie.clustering.plan.strategy.small.file.limit")),
                target_file_max_bytes=int(_get(raw, "hoodie.clustering.plan.strategy.target.file.max.bytes")),
                max_bytes_per_group=int(_get(raw, "hoodie.clustering.plan.strategy.max.bytes.per.group")),
                max_num_groups=int(_get(raw, "hoodie.clustering.plan.strategy.max.num.groups")),
            ),
        )


def probe(config: SinkConfig) -> list[CheckResult]:
    """Write and delete a file at the base path, and check a table already there is this one."""
    from sinks.hudi.table import HudiTable

    settings: HudiSettings = config.settings
    fs, base = settings.filesystem()
    fs.create_dir(base, recursive=True)
    path = f"{base}/.sinkadmin-probe-{uuid.uuid4().hex[:8]}"
    with fs.open_output_stream(path) as stream:
        stream.write(b"probe")
    fs.delete_file(path)
    table = HudiTable(fs, base, settings.spec())
    found = table.stored_properties()
    if found is None:
        return [CheckResult("Table", CheckStatus.OK, f"{base} is writable; the table is created by the first commit")]
    HudiTable.create_or_load(fs, base, settings.spec())  # raises if it is another table
    detail = f"Hudi table {found.get('hoodie.table.name')} at {base}, {len(table.completed())} commits"
    return [CheckResult("Table", CheckStatus.OK, detail)]


def destinations(config: Mapping[str, Any]) -> list[str]:
    """The table's base path (the list and detail pages' "writes to")."""
    base = _get({k: str(v) for k, v in config.items()}, "target.base.path")
    return [base] if base else []
