"""Iceberg tables through pyiceberg: catalog, auto-create, schema mapping, and
the idempotent commit of a ledger entry's files (DESIGN I2, I4, I6)."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.manifest import DataFile as IcebergDataFile
from pyiceberg.manifest import DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionField as IcebergPartitionField
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    Transform,
    TruncateTransform,
    VoidTransform,
    YearTransform,
)
from pyiceberg.typedef import Record
from pyiceberg.types import (
    BinaryType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    NestedField,
    PrimitiveType,
    StringType,
    StructType,
    TimestamptzType,
    UUIDType,
)
from pyiceberg.utils.properties import property_as_bool

from connectors.config import SinkConfig
from connectors.config.secrets import redact
from connectors.config.transforms import PartitionField
from workers import schemas
from workers.failpoints import failpoint
from workers.locks import advisory_lock

# What talks to a catalog is imported where it is used: Spark's Python
# workers import this module for its schema functions, and each of them would
# pay about a second for pyiceberg's catalog, table and I/O modules and
# SQLAlchemy (participants and coordinators import those at start-up, see
# sinks.iceberg.runtime).
if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from sinks.iceberg.spark_commits import SparkTables
    from workers.events import TableVersion

log = logging.getLogger(__name__)

# Snapshot summary properties: enough to rebuild the ledger from the tables.
PROP_CONNECTOR = "sinkadmin.connector"
PROP_COMMIT_ID = "sinkadmin.commit-id"
PROP_EPOCH = "sinkadmin.epoch"
PROP_OFFSETS = "sinkadmin.offsets"
PROP_WATERMARK = "sinkadmin.watermark"

METADATA_FIELDS: dict[str, tuple[str, IcebergType]] = {
    "topic": ("_kafka_topic", StringType()),
    "partition": ("_kafka_partition", IntegerType()),
    "offset": ("_kafka_offset", LongType()),
    "timestamp": ("_kafka_timestamp", TimestamptzType()),
    # The key's type follows the key converter; string is the common case.
    "key": ("_kafka_key", StringType()),
}


def default_catalog_properties() -> dict[str, str]:
    """The project's own Postgres as an Iceberg SQL catalog, warehouse from LAKE_WAREHOUSE."""
    from django.conf import settings
    from sqlalchemy.engine import URL

    db = settings.DATABASES["default"]
    uri = URL.create(
        "postgresql+psycopg",
        username=db.get("USER") or None,
        password=db.get("PASSWORD") or None,
        host=db.get("HOST") or None,
        port=int(db["PORT"]) if db.get("PORT") else None,
        database=db.get("NAME"),
    ).render_as_string(hide_password=False)
    warehouse = settings.LAKE_WAREHOUSE
    if "://" not in warehouse:
        Path(warehouse).mkdir(parents=True, exist_ok=True)
        warehouse = Path(warehouse).resolve().as_uri()
    return {"type": "sql", "uri": uri, "warehouse": warehouse, "init_catalog_tables": "true"}


class SparkCatalogUnmappable(ValueError):
    """A catalog Spark cannot open with the jars this project loads (sinkadmin.services.spark_conf)."""


# Iceberg's SparkCatalog: the class every spark.sql.catalog.<name> of an Iceberg catalog names.
SPARK_CATALOG_CLASS = "org.apache.iceberg.spark.SparkCatalog"
# Iceberg's FileIO for S3 (iceberg-aws-bundle, jvm/spark/pom.xml).
S3_FILE_IO = "org.apache.iceberg.aws.s3.S3FileIO"
# pyiceberg's own settings, which Iceberg's Java catalogs do not take.
PYICEBERG_ONLY = ("type", "uri", "init_catalog_tables", "py-io-impl")
# Iceberg's JdbcCatalog keeps the connections it opened in a pool for the catalog's life, and Spark never
# closes a catalog: the Spark server would hold a connection for every catalog configuration it has opened
# (each session of sinks.iceberg.maintenance.SparkProcedures has its own) until it stops. PostgreSQL closes
# them once idle (settings.SPARK_CATALOG_IDLE_TIMEOUT_SECONDS, its idle_session_timeout given with each
# connection's options), and the next use connects again (decision 005: per use, as pyiceberg's does).
JDBC_APPLICATION_NAME = "sinkadmin Spark catalog"
# SQLSTATE of PostgreSQL's "terminating connection due to idle-session timeout": Iceberg's JdbcClientPool
# makes a connection the server closed so again (it retries its SQLSTATEs of a lost connection, and these).
IDLE_SESSION_TERMINATED = "57P05"
# A SQL catalog's connection parameters (its uri's query, as libpq names them) that PostgreSQL's JDBC driver
# takes, and its names for them.
LIBPQ_TO_PGJDBC = {
    "sslmode": "sslmode",
    "sslcert": "sslcert",
    "sslkey": "sslkey",
    "sslrootcert": "sslrootcert",
    "sslpassword": "sslpassword",
    "options": "options",
    "connect_timeout": "connectTimeout",
    "application_name": "ApplicationName",
}


def spark_catalog_conf(name: str, properties: Mapping[str, str]) -> dict[str, str]:
    """The Spark configuration (``spark.sql.catalog.<name>.*``, as Iceberg's Spark docs name it) of the
    catalog pyiceberg opens with ``properties``: Spark then sees the sink's tables by name.

    pyiceberg's SQL catalog on PostgreSQL is Iceberg's JdbcCatalog (the same
    ``iceberg_tables`` rows, through the PostgreSQL JDBC driver Spark loads);
    REST, Hive and Glue catalogs keep their type and URI. Every other
    property (warehouse, credential, token, s3.*, ...) is passed through, the
    names being Iceberg's in both; a catalog with ``s3.*`` properties reads its files with Iceberg's
    S3FileIO, which those properties configure. Spark's catalog caches no table: the sink
    commits outside Spark, and a cached table is read as it was first found.
    """
    from sqlalchemy.engine import make_url

    prefix = f"spark.sql.catalog.{name}"
    kind = properties.get("type", "")
    uri = properties.get("uri", "")
    if not kind:
        kind = "rest" if uri.startswith(("http://", "https://")) else "sql" if "://" in uri else ""
    conf = {prefix: SPARK_CATALOG_CLASS, f"{prefix}.cache-enabled": "false"}
    if kind == "sql":
        url = make_url(uri)
        if url.get_backend_name() != "postgresql":
            raise SparkCatalogUnmappable(
                f"catalog {name!r}: a SQL catalog on {url.get_backend_name()} has no JDBC driver in Spark"
                " (the PostgreSQL driver is loaded)"
            )
        conf[f"{prefix}.type"] = "jdbc"
        conf[f"{prefix}.uri"] = f"jdbc:postgresql://{url.host or '127.0.0.1'}:{url.port or 5432}/{url.database}"
        if url.username:
            conf[f"{prefix}.jdbc.user"] = url.username
        if url.password:
            conf[f"{prefix}.jdbc.password"] = str(url.password)
        conf[f"{prefix}.jdbc.ApplicationName"] = JDBC_APPLICATION_NAME
        for key, value in url.query.items():
            # The URI's connection parameters (libpq's names) as the JDBC driver's.
            driver_key = LIBPQ_TO_PGJDBC.get(key)
            if driver_key is None:
                raise SparkCatalogUnmappable(
                    f"catalog {name!r}: the connection parameter {key!r} of its uri has no counterpart in Spark's "
                    f"JDBC catalog (it takes {', '.join(sorted(LIBPQ_TO_PGJDBC))})"
                )
            conf[f"{prefix}.jdbc.{driver_key}"] = value if isinstance(value, str) else value[-1]
    elif kind in ("rest", "hive", "glue"):
        conf[f"{prefix}.type"] = kind
        if uri:
            conf[f"{prefix}.uri"] = uri
    else:
        raise SparkCatalogUnmappable(f"catalog {name!r}: Spark has no Iceberg catalog of type {kind or '(none)'!r}")
    conf.update({f"{prefix}.{key}": value for key, value in properties.items() if key not in PYICEBERG_ONLY})
    if kind == "sql":
        conf.update(_idle_sessions_closed(prefix, conf))
    if "io-impl" not in properties and any(key.startswith("s3.") for key in properties):
        # The FileIO the s3.* properties are Iceberg's settings of (Hadoop's, the default, reads none of them).
        conf[f"{prefix}.io-impl"] = S3_FILE_IO
    return conf


def _idle_sessions_closed(prefix: str, conf: Mapping[str, str]) -> dict[str, str]:
    """The JDBC catalog's settings that have PostgreSQL close its idle connections and Iceberg make them again,
    added to the catalog's own ``jdbc.options`` and ``retryable_status_codes`` (in ``conf``); none when the
    timeout is 0."""
    from django.conf import settings

    timeout_ms = settings.SPARK_CATALOG_IDLE_TIMEOUT_SECONDS * 1000
    options = conf.get(f"{prefix}.jdbc.options", "").strip()
    if not timeout_ms or "idle_session_timeout" in options:
        return {}
    codes = [c.strip() for c in conf.get(f"{prefix}.retryable_status_codes", "").split(",") if c.strip()]
    return {
        f"{prefix}.jdbc.options": f"{options} -c idle_session_timeout={timeout_ms}".strip(),
        f"{prefix}.retryable_status_codes": ",".join(dict.fromkeys([*codes, IDLE_SESSION_TERMINATED])),
    }


def default_spark_catalog_conf() -> dict[str, str]:
    """The Spark configuration of the project's own catalog (a connector without ``iceberg.catalog``)."""
    from sinks.iceberg.settings import DEFAULT_CATALOG_NAME

    return spark_catalog_conf(DEFAULT_CATALOG_NAME, default_catalog_properties())


def connector_spark_catalog_conf(config: SinkConfig) -> dict[str, str]:
    """The Spark configuration of an Iceberg connector's catalog (``iceberg.catalog`` and its keys)."""
    return spark_catalog_conf(config.settings.catalog_name, connector_catalog_properties(config))


def connector_catalog_properties(config: SinkConfig) -> dict[str, str]:
    """pyiceberg's properties of a connector's catalog: its ``iceberg.catalog.*`` keys, over the project's
    own SQL catalog (default_catalog_properties) unless they name another catalog."""
    properties = dict(config.settings.catalog_properties)
    if properties.get("type", "sql") != "sql" or "uri" in properties:
        return properties
    return {**default_catalog_properties(), **properties}


def catalog_for(config: SinkConfig) -> Catalog:
    from pyiceberg.catalog import load_catalog

    properties = connector_catalog_properties(config)
    if properties.get("init_catalog_tables") != "true":
        catalog = load_catalog(config.settings.catalog_name, **properties)
    else:
        # pyiceberg creates its catalog tables with check-then-create; several
        # processes starting at once would race, so creation is serialized.
        with advisory_lock("sinkadmin.iceberg-catalog-init"):
            catalog = load_catalog(config.settings.catalog_name, **properties)
    return _unpooled(catalog)


def catalog_outage(exc: BaseException, config: SinkConfig) -> str | None:
    """Why the connector's catalog cannot be reached, if ``exc`` or what caused it says so.

    An outage is a connection that is refused, lost or times out, or a host
    that does not resolve: it passes, and what met it is retried. An error
    the catalog answered with (no such table, a conflict, a refused
    password) is not one.
    """
    for error in _causes(exc):
        if _is_connection_error(error):
            uri = config.settings.catalog_properties.get("uri")
            where = f" at {redact(uri)}" if uri else " (the project's database)"
            reason = next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)
            return f"cannot reach the catalog '{config.settings.catalog_name}'{where}: {redact(reason)}"
    return None


def _causes(exc: BaseException) -> Iterable[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _is_connection_error(error: BaseException) -> bool:
    import requests
    from sqlalchemy import exc as sql_errors

    if isinstance(error, ConnectionError | TimeoutError | requests.ConnectionError | requests.Timeout):
        return True
    if isinstance(error, sql_errors.OperationalError | sql_errors.InterfaceError):
        # SQLSTATE class 08 is a connection exception, 57P a server shutting
        # down or starting, 53300 a server with no connection left; a driver
        # that never reached a server has none.
        state = getattr(error.orig, "sqlstate", None)
        return state is None or state.startswith(("08", "57P", "53300"))
    return False


def _unpooled(catalog: Catalog) -> Catalog:
    """A SQL catalog that connects for each use instead of keeping a pool.

    A runner keeps its catalog for its life and uses it a few times a
    commit. Pooled, each runner held a catalog connection at rest beside its
    Django one (2.3 Postgres backends a runner, bench/runner_cost.py), and
    twenty connectors exhausted Postgres's default 100 connections. A
    connection per use costs a few milliseconds a commit (a local socket).
    """
    from pyiceberg.catalog.sql import SqlCatalog
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    if isinstance(catalog, SqlCatalog):
        pooled = catalog.engine
        catalog.engine = create_engine(pooled.url, poolclass=NullPool, echo=pooled.echo)
        pooled.dispose()
    return catalog


# --- schema mapping -----------------------------------------------------------


def iceberg_schema(columns: pa.Schema) -> Schema:
    """The Iceberg schema of columns typed by ``workers.schemas`` (their field ids are Iceberg's)."""
    from pyiceberg.io.pyarrow import pyarrow_to_schema

    return pyarrow_to_schema(columns)


def infer_schema_from_json(samples: Iterable[Any]) -> Schema:
    """The table schema of sample JSON values (``workers.schemas.infer_schema_from_json``)."""
    return iceberg_schema(schemas.infer_schema_from_json(samples))


def schema_from_connect(connect_schema: Mapping[str, Any]) -> Schema:
    """The table schema for Kafka Connect's JSON envelope schema of a struct."""
    return iceberg_schema(schemas.schema_from_connect(connect_schema))


def schema_from_avro(avro_schema: Mapping[str, Any]) -> Schema:
    """The table schema for an Avro record schema; every column optional."""
    return iceberg_schema(schemas.schema_from_avro(avro_schema))


def schema_from_json_schema(json_schema: Mapping[str, Any]) -> Schema | None:
    """The table schema for a JSON Schema of objects; None when it names no properties."""
    columns = schemas.schema_from_json_schema(json_schema)
    return iceberg_schema(columns) if columns is not None else None


def schemas_from_registered(texts: Iterable[str], schema_type: str) -> list[Schema]:
    """Table schemas for the schemas (AVRO or JSON) a Schema Registry holds (``workers.schemas``)."""
    return [iceberg_schema(columns) for columns in schemas.schemas_from_registered(texts, schema_type)]


def with_metadata_columns(schema: Schema, columns: Iterable[str]) -> Schema:
    fields = list(schema.fields)
    next_id = schema.highest_field_id
    existing = {f.name for f in fields}
    for column in columns:
        name, field_type = METADATA_FIELDS[column]
        if name not in existing:
            next_id += 1
            fields.append(NestedField(field_id=next_id, name=name, field_type=field_type, required=False))
    return Schema(*fields)


def identifier_columns(schema: Schema) -> tuple[str, ...]:
    """The names of the schema's identifier fields (its row key, as Iceberg records it), in field order."""
    return tuple(f.name for f in schema.fields if f.field_id in schema.identifier_field_ids)


def upsert_key(configured: Sequence[str], schema: Schema) -> tuple[str, ...]:
    """The columns upserts key a table's rows by: its configured identifier columns
    (``iceberg.table.<t>.id-columns``), else the table's own identifier fields, as Iceberg's sink does."""
    return tuple(configured) or identifier_columns(schema)


def keyed_schema(schema: Schema, id_columns: Sequence[str]) -> tuple[Schema, str | None]:
    """``schema`` with ``id_columns`` as its identifier fields, for a table the sink creates for upserts.

    Iceberg wants identifier fields required, primitive and not floating point
    (a NaN is no key), so those columns are made required: the upsert decoder
    refuses a row whose key is null (``UnappliableRows``), so none is written.
    Returns the schema unchanged, and why, when a column cannot be one: a
    column that is not a top-level field, or of another type.
    """
    by_name = {f.name: f for f in schema.fields}
    for column in id_columns:
        found = by_name.get(column)
        if found is None:
            return schema, f"{column} is not a top-level column of the table"
        if not isinstance(found.field_type, PrimitiveType) or isinstance(found.field_type, FloatType | DoubleType):
            return (
                schema,
                f"{column} is a {found.field_type} column, which Iceberg does not take as an identifier field",
            )
    fields = [f.model_copy(update={"required": True}) if f.name in id_columns else f for f in schema.fields]
    return Schema(*fields, identifier_field_ids=[by_name[c].field_id for c in id_columns]), None


_TRANSFORMS: dict[str, Transform[Any, Any]] = {
    "identity": IdentityTransform(),
    "year": YearTransform(),
    "month": MonthTransform(),
    "day": DayTransform(),
    "hour": HourTransform(),
    "void": VoidTransform(),
}


def spec_fields(spec: PartitionSpec, schema: Schema) -> tuple[PartitionField, ...]:
    """A partition spec in the connector's terms (transform of a source column)."""
    fields = []
    for field in spec.fields:
        column = schema.find_column_name(field.source_id) or ""
        transform = field.transform
        if isinstance(transform, BucketTransform):
            fields.append(PartitionField("bucket", column, transform.num_buckets))
        elif isinstance(transform, TruncateTransform):
            fields.append(PartitionField("truncate", column, transform.width))
        else:
            name = next(n for n, t in _TRANSFORMS.items() if type(t) is type(transform))
            fields.append(PartitionField(name, column))
    return tuple(fields)


def partition_spec(schema: Schema, fields: Iterable[PartitionField]) -> PartitionSpec:
    spec_fields = []
    for index, pf in enumerate(fields):
        source = schema.find_field(pf.column)
        if pf.transform == "bucket":
            transform: Transform[Any, Any] = BucketTransform(pf.argument or 1)
        elif pf.transform == "truncate":
            transform = TruncateTransform(pf.argument or 1)
        else:
            transform = _TRANSFORMS[pf.transform]
        if not transform.can_transform(source.field_type):
            raise ValueError(
                f"{pf}: column {pf.column} has type {source.field_type}, which {transform} cannot partition"
            )
        name = pf.column if pf.transform == "identity" else f"{pf.column}_{pf.transform}"
        spec_fields.append(
            IcebergPartitionField(source_id=source.field_id, field_id=1000 + index, transform=transform, name=name)
        )
    return PartitionSpec(*spec_fields)


# --- committing ----------------------------------------------------------------


def partition_values_json(spec: PartitionSpec, values: Sequence[Any]) -> str:
    """A data file's partition (Iceberg's internal values, one per field of ``spec``) as JSON text.

    The participant that split the rows knows each file's partition; the
    committer cannot always work it out from the file's column bounds (a
    bucket is a hash), so it travels with the file, stamped with its spec.
    """
    encoded = [
        value.hex() if isinstance(value, bytes) else str(value) if isinstance(value, Decimal) else value
        for value in values
    ]
    return json.dumps({"spec-id": spec.spec_id, "values": encoded}, separators=(",", ":"))


def partition_record(spec: PartitionSpec, partition_type: StructType, text: str, path: str) -> Record:
    """The partition record of a data file from what ``partition_values_json`` made of it,
    for a table whose current spec is ``spec`` (``partition_type``: its values' types)."""
    parsed = json.loads(text)
    if parsed["spec-id"] != spec.spec_id:
        raise ValueError(
            f"{path} was written for partition spec {parsed['spec-id']}, but the table's spec is now "
            f"{spec.spec_id}: the commit is retried and its records written again"
        )
    values = []
    for field, encoded in zip(partition_type.fields, parsed["values"], strict=True):
        value = encoded
        if encoded is not None and isinstance(field.field_type, DecimalType):
            value = Decimal(encoded)
        elif encoded is not None and isinstance(field.field_type, (BinaryType, FixedType, UUIDType)):
            value = bytes.fromhex(encoded)
        values.append(value)
    return Record(*values)


@dataclass(frozen=True)
class CommitFile:
    """A data file a commit adds to a table."""

    path: str
    # JSON from partition_values_json; None: read from the file's bounds, as
    # for files Spark wrote (only transforms whose value the bounds give).
    partition_values: str | None = None


@dataclass(frozen=True)
class TableCommit:
    """What one ledger entry adds to one table."""

    connector: str
    commit_id: str
    epoch: int
    files: tuple[CommitFile, ...]
    # {"topic": {"partition": [start, end]}} of the whole commit.
    offsets: Mapping[str, Mapping[str, list[int]]]
    watermark_ms: int | None

    def summary(self) -> dict[str, str]:
        props = {
            PROP_CONNECTOR: self.connector,
            PROP_COMMIT_ID: self.commit_id,
            PROP_EPOCH: str(self.epoch),
            PROP_OFFSETS: json.dumps(self.offsets, sort_keys=True, separators=(",", ":")),
        }
        if self.watermark_ms is not None:
            props[PROP_WATERMARK] = str(self.watermark_ms)
        return props


def snapshot_of_commit(table: Table, connector: str, commit_id: str, snapshot_id: int | None = None) -> int | None:
    """The snapshot holding ``commit_id``, if the table has it (or the snapshot ``snapshot_id`` and its
    ancestors: a branch's).

    Commits of one connector are strictly sequential, so only snapshots after
    the connector's latest one need a look: the walk stops at the first
    snapshot this connector wrote. Cost grows with other writers' snapshots
    since then, not with the table's history.
    """
    from pyiceberg.table.snapshots import ancestors_of

    current = table.current_snapshot() if snapshot_id is None else table.snapshot_by_id(snapshot_id)
    if current is None:
        return None
    for snapshot in ancestors_of(current, table.metadata):
        summary = snapshot.summary
        if summary is not None and summary.additional_properties.get(PROP_CONNECTOR) == connector:
            if summary.additional_properties.get(PROP_COMMIT_ID) == commit_id:
                return snapshot.snapshot_id
            return None
    return None


def data_files(table: Table, files: Iterable[CommitFile]) -> list[IcebergDataFile]:
    """Iceberg's description of each file: statistics from its footer, partition from the participant.

    What pyiceberg's ``add_files`` does, except that it can only infer a
    partition from the file's column bounds, which a bucket is not.
    """
    spec = table.spec()
    partition_type = spec.partition_type(table.schema())
    return [
        describe_data_file(
            table,
            f.path,
            None if f.partition_values is None else partition_record(spec, partition_type, f.partition_values, f.path),
        )
        for f in files
    ]


def describe_data_file(table: Table, path: str, partition: Record | None) -> IcebergDataFile:
    """A Parquet file of the table's current spec, with ``partition`` (None: from its column bounds)."""
    from pyiceberg.io.pyarrow import (
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
    )

    schema, spec = table.schema(), table.spec()
    input_file = table.io.new_input(path)
    with input_file.open() as stream:
        footer = pq.read_metadata(stream)
    statistics = data_file_statistics_from_parquet_metadata(
        footer, compute_statistics_plan(schema, table.metadata.properties), parquet_path_to_id_mapping(schema)
    )
    data_file = IcebergDataFile.from_args(
        content=DataFileContent.DATA,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=partition if partition is not None else statistics.partition(spec, schema),
        file_size_in_bytes=len(input_file),
        sort_order_id=None,
        equality_ids=None,
        key_metadata=None,
        **statistics.to_serialized_dict(),
    )
    # (Not a field of the manifest entry, so from_args would drop it: set beside it, as pyiceberg's reader does.)
    data_file.spec_id = table.metadata.default_spec_id
    return data_file


def without_automatic_retries(table: Table) -> Table:
    """``table`` with pyiceberg's own commit retries off, for commits that check the table themselves.

    pyiceberg (0.12) retries a commit that lost a race by applying its
    snapshot again on top of the winner's. For an append that is a second copy
    of the files when the winner was the same commit (a coordinator and its
    zombie both finishing one prepared commit). Our loops reload the table and
    ask whether it holds the commit before trying again, so pyiceberg must
    not retry first: its retry count is a table property, read from the
    metadata the transaction starts from, and only this in-memory copy says 0
    (commits send updates, never this copy of the properties).
    """
    from pyiceberg.table import TableProperties

    properties = {**table.metadata.properties, TableProperties.COMMIT_NUM_RETRIES: "0"}
    table.metadata = table.metadata.model_copy(update={"properties": properties})
    return table


def table_version(table: Table) -> str:
    """What a copy of the table must still match for records to be written with it.

    The table's identity, current schema, partition spec and location: what
    a task decodes and lays out files by (``workers.writes.TargetTable``).
    Not its snapshot, which every commit moves and no write depends on.
    """
    metadata = table.metadata
    return (
        f"{metadata.table_uuid} schema {metadata.current_schema_id} spec {metadata.default_spec_id} {metadata.location}"
    )


def committed_version(table: Table) -> TableVersion:
    """The table as a commit just left it: its ``table_version`` and current metadata file."""
    from workers.events import TableVersion

    return TableVersion(table_version(table), table.metadata_location)


def metadata_location(catalog: Catalog, name: str) -> str | None:
    """Where the catalog says the table's metadata is now, without reading it; None if it has no such
    table, or is not a SQL catalog (which answers with one query; others send the whole metadata)."""
    from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    if not isinstance(catalog, SqlCatalog):
        return None
    # (As SqlCatalog.load_table finds the row.)
    with Session(catalog.engine) as session:
        return session.scalar(
            select(IcebergTables.metadata_location).where(
                IcebergTables.catalog_name == catalog.name,
                IcebergTables.table_namespace == catalog.namespace_to_string(catalog.namespace_from(name)),
                IcebergTables.table_name == catalog.table_name_from(name),
            )
        )


@dataclass(frozen=True)
class CommittedTable:
    """A table holding a commit: its snapshot of the commit, and the table as the commit left it."""

    snapshot_id: int
    table: TableVersion


def commit_to_table(
    catalog: Catalog, table_name: str, commit: TableCommit, attempts: int = 8, spark: SparkTables | None = None
) -> CommittedTable:
    """Add the commit's files to the table in one snapshot, exactly once.

    The check for an existing snapshot and the append happen against the same
    table metadata, and the catalog's commit asserts that the branch has not
    moved since. So a concurrent commit (a zombie coordinator, another
    writer) makes ours fail, and the retry re-checks before appending again.

    A format v3 table's commit is made through ``spark`` (``sinks.iceberg.spark_commits``).
    """
    from pyiceberg.table import TableProperties

    from sinks.iceberg.spark_commits import SparkCommit, through_spark, written_by_spark

    for attempt in range(attempts):
        table = without_automatic_retries(catalog.load_table(table_name))
        existing = snapshot_of_commit(table, commit.connector, commit.commit_id)
        if existing is not None:
            return CommittedTable(existing, committed_version(table))
        if written_by_spark(table):
            change = SparkCommit(tuple(f.path for f in commit.files))
            return through_spark(spark, table_name).commit(catalog, table_name, commit, change)
        added = data_files(table, commit.files)
        failpoint("iceberg.before_snapshot")  # (a test's coordinator freezes here: a zombie with the table loaded)
        try:
            with table.transaction() as tx:
                if tx.table_metadata.name_mapping() is None:
                    # Our files carry no field ids: readers match their
                    # columns by name, as add_files arranges.
                    mapping = tx.table_metadata.schema().name_mapping.model_dump_json()
                    tx.set_properties({TableProperties.DEFAULT_NAME_MAPPING: mapping})
                update = tx.update_snapshot(snapshot_properties=commit.summary())
                merge = property_as_bool(
                    tx.table_metadata.properties,
                    TableProperties.MANIFEST_MERGE_ENABLED,
                    TableProperties.MANIFEST_MERGE_ENABLED_DEFAULT,
                )
                with update.merge_append() if merge else update.fast_append() as append:
                    for data_file in added:
                        append.append_data_file(data_file)
        except CommitFailedException:
            log.info(
                "commit %s on %s raced another writer (attempt %d); re-checking",
                commit.commit_id,
                table_name,
                attempt + 1,
            )
            continue
        snapshot = table.current_snapshot()
        assert snapshot is not None
        return CommittedTable(snapshot.snapshot_id, committed_version(table))
    raise CommitFailedException(f"could not commit {commit.commit_id} to {table_name} after {attempts} attempts")


def load_table(catalog: Catalog, name: str) -> Table | None:
    try:
        return catalog.load_table(name)
    except NoSuchTableError:
        return None


def create_table(
    catalog: Catalog,
    name: str,
    schema: Schema,
    partition_by: Iterable[PartitionField],
    properties: Mapping[str, str] | None = None,
    spark: SparkTables | None = None,
) -> Table:
    """Create the table (and its namespace) with ``properties`` (None: the sink's own,
    ``sinks.iceberg.settings.CREATED_TABLE_PROPERTIES``); if another process won the race, load theirs.

    A format version pyiceberg cannot write (3) is reached by creating the table at 2, then upgrading it
    through ``spark``'s Iceberg runtime, before any snapshot: a table left at 2 by a creator that died
    between the two is upgraded by the next."""
    from sinks.iceberg.settings import CREATED_TABLE_PROPERTIES
    from sinks.iceberg.spark_commits import SPARK_WRITTEN_FORMAT, through_spark

    namespace = tuple(name.split(".")[:-1])
    # The tasks of a connector (and connectors sharing a namespace) find it
    # missing at the same time, and catalogs differ in how they report a lost
    # race (the SQL catalog raises a constraint violation): creation is
    # serialized, per namespace and per table so that connectors creating
    # different tables do not queue behind each other.
    if not catalog.namespace_exists(namespace):
        with advisory_lock(f"sinkadmin.create-namespace:{'.'.join(namespace)}"):
            if not catalog.namespace_exists(namespace):
                with contextlib.suppress(NamespaceAlreadyExistsError):
                    catalog.create_namespace(namespace)
    created = dict(CREATED_TABLE_PROPERTIES if properties is None else properties)
    version = int(created.get("format-version", "2"))
    if version >= SPARK_WRITTEN_FORMAT:
        spark = through_spark(spark, name)
        created["format-version"] = str(SPARK_WRITTEN_FORMAT - 1)
    with advisory_lock(f"sinkadmin.create-table:{name}"):
        try:
            table = catalog.create_table(
                name, schema=schema, partition_spec=partition_spec(schema, partition_by), properties=created
            )
        except TableAlreadyExistsError:
            table = catalog.load_table(name)
        if spark is not None and table.metadata.format_version < version and table.current_snapshot() is None:
            spark.upgrade(name, version)
            table = catalog.load_table(name)
        return table


def _missing_fields(existing: StructType, candidate: StructType) -> list[NestedField]:
    have = {f.name: f for f in existing.fields}
    missing = []
    for f in candidate.fields:
        mine = have.get(f.name)
        if mine is None:
            missing.append(f)
        elif isinstance(mine.field_type, StructType) and isinstance(f.field_type, StructType):
            nested = _missing_fields(mine.field_type, f.field_type)
            if nested:
                missing.append(NestedField(f.field_id, f.name, StructType(*nested), required=False))
    return missing


def missing_fields(existing: Schema, candidate: Schema) -> Schema | None:
    """The fields of ``candidate`` that ``existing`` lacks, by name (nested ones under their struct), or None."""
    fields = _missing_fields(existing.as_struct(), candidate.as_struct())
    return Schema(*fields) if fields else None


def evolve_table(
    catalog: Catalog,
    name: str,
    additions: Schema,
    table: Table | None = None,
    attempts: int = 5,
    spark: SparkTables | None = None,
) -> Table:
    """The table with the fields of ``additions`` it lacks added, as optional columns (nested ones in their struct).

    ``table``: the table as the caller has it, if it does: the catalog is
    only asked when that lacks a field. An update then starts from the table
    as the catalog has it now, never from the caller's: a task's copy
    (sinks.iceberg.writer.TableWriter) can be older than the table in what its
    schema is not, and pyiceberg derives the name mapping it writes with the
    new columns from the metadata it starts from, so from a copy older than
    the coordinator's first commit, which sets the mapping, the columns'
    names would be missing from it and their values unreadable.

    Only missing fields are added: a field the table has keeps its type
    (records that do not fit it are bad records), and a schema with nothing
    new changes nothing. Tasks that see the same new field race to add it:
    the catalog's commit asserts the schema it started from, so the loser
    reloads and finds the column there.

    A format v3 table's columns are added through ``spark``'s Iceberg runtime (``ALTER TABLE ... ADD
    COLUMNS``), which fails on a column another process added meanwhile: the loser reloads, as above.
    """
    from sinks.iceberg.spark_commits import ICEBERG_COMMIT_FAILED, through_spark, written_by_spark
    from workers.writes import WriteRefused

    if table is not None and missing_fields(table.schema(), additions) is None:
        return table
    for attempt in range(attempts):
        table = catalog.load_table(name)
        missing = missing_fields(table.schema(), additions)
        if missing is None:
            return table
        if written_by_spark(table):
            spark = through_spark(spark, name)
            try:
                spark.add_columns(name, table.schema(), missing)
            except ValueError as exc:
                raise WriteRefused(str(exc)) from exc  # (a type Spark has none of: refused before the prepare)
            except RuntimeError as exc:
                if "already exists" not in str(exc) and ICEBERG_COMMIT_FAILED not in str(exc):
                    raise
                log.info("schema update of %s raced another writer (attempt %d); retrying", name, attempt + 1)
                continue
            log.info("%s: added columns %s (through Spark)", name, ", ".join(missing.column_names))
            return catalog.load_table(name)
        try:
            with table.update_schema() as update:
                update.union_by_name(missing)
        except CommitFailedException:
            log.info("schema update of %s raced another writer (attempt %d); retrying", name, attempt + 1)
            continue
        log.info("%s: added columns %s", name, ", ".join(missing.column_names))
        return catalog.load_table(name)
    raise CommitFailedException(f"could not update the schema of {name} after {attempts} attempts")


def every_table(catalog: Catalog) -> list[str]:
    """Every table of the catalog, in every namespace (nested ones too), by name."""
    found: list[str] = []
    pending = [tuple(ns) for ns in catalog.list_namespaces()]
    while pending:
        namespace = pending.pop()
        found += [".".join(identifier) for identifier in catalog.list_tables(namespace)]
        pending += [tuple(ns) for ns in catalog.list_namespaces(namespace) if tuple(ns) != namespace]
    return sorted(found)


def recovered_commits(catalog: Catalog, table_names: Iterable[str], connector: str) -> list[Any]:
    """Every commit of ``connector`` found in the snapshot summaries of the tables (the whole history)."""
    import uuid
    from datetime import UTC, datetime

    from connectors.actions.ledger import RecoveredCommit

    found: dict[str, dict[str, Any]] = {}
    for name in table_names:
        table = load_table(catalog, name)
        if table is None:
            continue
        for snapshot in table.snapshots():
            props = snapshot.summary.additional_properties if snapshot.summary else {}
            if props.get(PROP_CONNECTOR) != connector or PROP_COMMIT_ID not in props:
                continue
            entry = found.setdefault(
                props[PROP_COMMIT_ID], {"snapshots": {}, "props": props, "ts": snapshot.timestamp_ms}
            )
            entry["snapshots"][name] = snapshot.snapshot_id
    commits = []
    for commit_id, entry in found.items():
        props = entry["props"]
        offsets = json.loads(props.get(PROP_OFFSETS, "{}"))
        watermark = props.get(PROP_WATERMARK)
        commits.append(
            RecoveredCommit(
                commit_id=uuid.UUID(commit_id),
                epoch=int(props.get(PROP_EPOCH, 0)),
                committed_at=datetime.fromtimestamp(entry["ts"] / 1000, tz=UTC),
                snapshot_ids=entry["snapshots"],
                ranges={(topic, int(p)): (r[0], r[1]) for topic, parts in offsets.items() for p, r in parts.items()},
                watermark=datetime.fromtimestamp(int(watermark) / 1000, tz=UTC) if watermark else None,
            )
        )
    return commits
