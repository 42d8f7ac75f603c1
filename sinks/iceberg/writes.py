"""The tables of an Iceberg commit as the writers see them: resolved (or created) per staging round."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema

from connectors.config.transforms import PartitionField
from sinks.iceberg.settings import TableTarget
from sinks.iceberg.tables import spec_fields, upsert_key
from workers.writes import SAMPLES, Values, narrow_type, sample_values, uri


def arrow_schema(schema: Schema) -> pa.Schema:
    """The Arrow schema the data planes write an Iceberg schema's columns with."""
    # Imported here: pyiceberg's I/O module is slow for Spark's Python workers
    # to import, and they get TargetTable's arrow_schema computed
    # (docs/benchmarks.md, "Measurements behind the runtime's design").
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    return pa.schema([f.with_type(narrow_type(f.type)) for f in schema_to_pyarrow(schema, include_field_ids=False)])


# The catalog properties pyiceberg's FileIO reads (its s3.*, gcs.*, adls.*, hdfs.* and client.* keys): what the
# writers are given to reach the tables' files, without the catalog's own connection settings.
FILE_IO_PREFIXES = ("s3.", "gcs.", "adls.", "hdfs.", "oss.", "client.", "py-io-impl")


def file_io_properties(catalog_properties: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in catalog_properties.items() if k.startswith(FILE_IO_PREFIXES)}


def table_filesystem(location: str, io_properties: Mapping[str, str] = {}) -> tuple[pafs.FileSystem, str]:
    """The filesystem of a table's file or directory at ``location``, reached as the table's own FileIO reaches
    it, and the path there: a local path by pyarrow; any other (``s3://``, ``s3a://``, ``gs://``...) by
    pyiceberg's PyArrowFileIO with the catalog's properties (``s3.endpoint``, ``s3.access-key-id``,
    ``s3.region``...), as the catalog's readers reach it, rather than with the environment's settings."""
    if "://" not in location or location.startswith("file:"):
        return pafs.FileSystem.from_uri(uri(location))
    # Imported here: pyiceberg's I/O module is slow for Spark's Python workers to import (arrow_schema).
    from pyiceberg.io.pyarrow import PyArrowFileIO

    scheme, netloc, path = PyArrowFileIO.parse_location(location)
    return _file_io(frozenset(io_properties.items())).fs_by_scheme(scheme, netloc), path


@functools.cache
def _file_io(io_properties: frozenset[tuple[str, str]]) -> Any:
    """One FileIO per catalog's properties in a process: it keeps a filesystem (an S3 client) per bucket."""
    from pyiceberg.io.pyarrow import PyArrowFileIO

    return PyArrowFileIO(dict(io_properties))


@dataclass(frozen=True)
class TargetTable:
    """A table records are written to, as resolved (or created) for a commit."""

    target: TableTarget
    schema: Schema
    location: str
    # The table's current partition spec (what the Arrow data plane splits by).
    spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC
    # The catalog's properties, with which its files are reached (table_filesystem): s3.endpoint,
    # s3.access-key-id... Secrets among them: never shown.
    io_properties: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    # The columns' Arrow types, computed where the table is resolved and
    # pickled with it to Spark's Python workers (see arrow_schema).
    arrow_schema: pa.Schema = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "arrow_schema", arrow_schema(self.schema))

    @property
    def id_columns(self) -> tuple[str, ...]:
        return upsert_key(self.target.id_columns, self.schema)

    @property
    def partition_by(self) -> tuple[PartitionField, ...]:
        """The spec as transforms of source columns (what the Spark data plane splits by)."""
        return spec_fields(self.spec, self.schema)


@dataclass(frozen=True)
class WritePlan:
    """The tables of a staging round, as resolved so far."""

    tables: tuple[TargetTable, ...]
    # "arrow": participants decode; "spark": they stage raw records for Spark.
    engine: str
    # Missing tables that no record so far can create, and why (``Unshaped``): their records are bad.
    unshaped: Mapping[str, str] = field(default_factory=dict)

    def table(self, name: str) -> TargetTable | None:
        return next((t for t in self.tables if t.target.name == name), None)

    def with_table(self, table: TargetTable) -> WritePlan:
        """The plan with ``table`` resolved (in place of its earlier version)."""
        name = table.target.name
        tables = (*(t for t in self.tables if t.target.name != name), table)
        return WritePlan(tables, self.engine, {k: v for k, v in self.unshaped.items() if k != name})

    def with_unshaped(self, name: str, why: str) -> WritePlan:
        return WritePlan(
            tuple(t for t in self.tables if t.target.name != name), self.engine, {**self.unshaped, name: why}
        )


class Unshaped(ValueError):
    """A missing table cannot be created: no record staged so far gives it columns (none is a JSON object, or,
    with ``value.converter.schemas.enable=true``, none carries Kafka Connect's schema envelope). Not the
    connector's failure: each such record is a bad record, with its converter's reason, and follows
    ``errors.tolerance`` as Kafka Connect's converter would make it; the table is created from the first
    record that can shape it."""


class NotCreated(Unshaped):
    """A table a record names (dynamic routing) is missing and is not created
    (``iceberg.tables.auto-create-enabled=false``): its records are bad records, whichever they are."""


def shaped[T](batches: Iterable[Values], shape: Callable[[Callable[[], Sequence[bytes | None]]], T]) -> T:
    """``shape`` (the tables, a plan), given the values a missing table is created from: the first ``SAMPLES``
    staged without an error, read from ``batches`` only if ``shape`` asks for them.

    If those cannot shape the table (``Unshaped``), a record past them may: each batch's good values are
    tried in turn, and ``batches`` is read no further than the first batch that shapes it, so that a large
    commit is never held whole. ``Unshaped`` (the last reason) when no batch does.
    """
    pending = iter(batches)
    tried: list[Values] = []

    @functools.cache
    def first() -> Sequence[bytes | None]:
        found: list[bytes | None] = []
        for values, errors in pending:
            tried.append((values, errors))
            found += sample_values(values, errors, limit=SAMPLES - len(found))
            if len(found) == SAMPLES:
                break
        return found

    try:
        return shape(first)
    except Unshaped as unshaped:
        reason = unshaped
    if isinstance(reason, NotCreated) or len(first()) < SAMPLES:
        raise reason  # (no record creates it, or every good value was among them)
    # (The batches before the last one tried had all their good values among the first.)
    for values, errors in itertools.chain(tried[-1:], pending):
        try:
            return shape(functools.partial(sample_values, values, errors, limit=len(values)))
        except Unshaped as still:
            reason = still
    raise reason
