"""A task writes with its copy of a table while nothing has changed the table,
and with the table as it is now once something has (sinks.iceberg.writer.TableWriter),
against the real SQL catalog on Postgres.

The copy is current when the catalog still points at the copy's metadata, or
at the metadata the coordinator's last commit made (the START's TableVersion)
and that commit left the copy's schema, spec and location alone. Each case
counts the catalog's table loads, the look-up the copy saves.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.types import StringType

from connectors.config import SinkConfig
from sinks.iceberg.tables import catalog_for, committed_version
from sinks.iceberg.writer import TableWriter
from sinks.iceberg.writes import TargetTable
from tests.conftest import sink_config
from tests.integration.helpers import alter
from workers.events import TableVersion

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

SAMPLES: list[bytes | None] = [json.dumps({"id": i, "name": f"n{i}"}).encode() for i in range(3)]


class Writer:
    """A task's TableWriter (arrow plane: no Spark needed to resolve tables), its catalog's loads counted."""

    def __init__(self, config: SinkConfig) -> None:
        self.tables = TableWriter(config)
        self.loads = 0
        catalog = self.tables.catalog
        load = catalog.load_table

        def counted(identifier: Any) -> Any:
            self.loads += 1
            return load(identifier)

        catalog.load_table = counted

    def created(self) -> TargetTable:
        """The table, auto-created from the samples; loads are counted from here."""
        created = self.target()
        self.loads = 0
        return created

    def target(self) -> TargetTable:
        """The table as the writer resolves it for a new staging round."""
        return self.tables.table(uuid.uuid4(), "db.copies", lambda: SAMPLES)


@pytest.fixture
def config(lake: dict[str, str], topic_name: str) -> SinkConfig:
    return SinkConfig.parse(sink_config(topic_name, "db.copies", **{"sinkadmin.writer": "arrow"}))


@pytest.fixture
def writer(config: SinkConfig) -> Iterator[Writer]:
    writer = Writer(config)
    yield writer
    writer.tables.close()


def someone_else(config: SinkConfig) -> Any:
    """The catalog as another writer (the coordinator, a person with Spark) uses it."""
    return catalog_for(config)


def commit_a_row(catalog: Any) -> TableVersion:
    """A commit as the coordinator makes one (a snapshot, nothing else), and what it says of the table after."""
    table = catalog.load_table("db.copies")
    table.append(pa.table({"id": pa.array([1], pa.int64()), "name": pa.array(["x"])}))
    return committed_version(table)


def test_a_copy_is_written_with_while_nothing_but_the_coordinators_commits_changed_the_table(
    config: SinkConfig, writer: Writer
) -> None:
    created = writer.created()
    assert writer.target() is created and writer.loads == 0  # unchanged: the catalog points at the copy
    with someone_else(config) as catalog:
        commit_a_row(catalog)
        # Without a START that vouches for the commit, the moved pointer is a change: the table is loaded.
        assert writer.target().schema == created.schema and writer.loads == 1
        for _ in range(2):
            writer.tables.tables_committed({"db.copies": commit_a_row(catalog)})
            assert writer.target().schema == created.schema and writer.loads == 1


def test_the_coordinators_commit_reports_the_version_that_vouches_for_the_copy(
    config: SinkConfig, writer: Writer
) -> None:
    # The whole chain but the control topic: a data file committed as the
    # coordinator commits one (IcebergCommitter), whose table_versions the
    # START carries to the task.
    from sinks.iceberg.committer import IcebergCommitter
    from workers.coordinator import PreparedCommit

    created = writer.created()
    data = Path(created.location.removeprefix("file://")) / "data" / "orders+0+0+1-c.parquet"
    data.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int64()), "name": ["a", "b"]}), data)
    committer = IcebergCommitter("copies", config)
    try:
        prepared = PreparedCommit(
            uuid.uuid4(),
            1,
            [{"table": "db.copies", "path": f"file://{data}", "topic": "orders", "partition": 0}],
            {},
            None,
        )
        committer.commit(prepared)
        versions = committer.table_versions
    finally:
        committer.close()
    with someone_else(config) as catalog:
        table = catalog.load_table("db.copies")
    assert versions == {"db.copies": committed_version(table)}
    assert len(table.scan().to_arrow()) == 2
    writer.tables.tables_committed(versions)
    assert writer.target() is created and writer.loads == 0


@pytest.mark.parametrize("change", ["column", "partition spec"])
def test_a_table_changed_by_someone_else_is_loaded_again(config: SinkConfig, writer: Writer, change: str) -> None:
    writer.created()
    with someone_else(config) as catalog:
        writer.tables.tables_committed({"db.copies": commit_a_row(catalog)})
        alter(catalog.load_table("db.copies"), change)
        # The START still vouches for the commit before the change; the catalog points past it.
        now = writer.target()
        assert writer.loads == 1
        # Then a commit after the change, which the next START reports: the copy is the changed table.
        after = commit_a_row(catalog)
        writer.tables.tables_committed({"db.copies": after})
        assert writer.target() == now and writer.loads == 1
    if change == "column":
        assert now.schema.find_field("note").field_type == StringType()
    else:
        assert [f.name for f in now.spec.fields] == ["id_bucket"]


def test_a_copy_the_start_reports_at_another_version_is_loaded_again(config: SinkConfig, writer: Writer) -> None:
    # Another task added a column, and the coordinator committed since: the
    # START's version is not the copy's, though the catalog points where it says.
    created = writer.created()
    with someone_else(config) as catalog:
        alter(catalog.load_table("db.copies"), "column")
        after = commit_a_row(catalog)
    writer.tables.tables_committed({"db.copies": after})
    now = writer.target()
    assert writer.loads == 1 and now.schema != created.schema
    assert now.schema.find_field("note") is not None


def test_a_task_evolving_after_another_added_the_column_adds_nothing_twice(config: SinkConfig, writer: Writer) -> None:
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    writer.created()
    other = TableWriter(config)
    try:
        other.table(uuid.uuid4(), "db.copies", lambda: SAMPLES)
        additions = Schema(NestedField(1, "note", StringType(), required=False))
        other.evolve(uuid.uuid4(), "db.copies", additions)
        # This task's copy lacks the column: it evolves from the table as it is now.
        evolved = writer.tables.evolve(uuid.uuid4(), "db.copies", additions)
    finally:
        other.close()
    assert [f.name for f in evolved.schema.fields].count("note") == 1
    with someone_else(config) as catalog:
        assert catalog.load_table("db.copies").schema() == evolved.schema


def test_a_column_added_from_a_copy_is_in_the_tables_name_mapping(config: SinkConfig, writer: Writer) -> None:
    # The task created the table; the coordinator's first commit then gave
    # it its name mapping (our files carry no field ids), which leaves the
    # schema as it was, so the START vouches for the task's copy, which has
    # no mapping. A column added by the task must still be in the mapping,
    # or readers cannot find its values in the files.
    from pyiceberg.schema import Schema
    from pyiceberg.table import TableProperties
    from pyiceberg.types import NestedField

    writer.created()
    with someone_else(config) as catalog:
        table = catalog.load_table("db.copies")
        with table.transaction() as tx:
            tx.set_properties({TableProperties.DEFAULT_NAME_MAPPING: table.schema().name_mapping.model_dump_json()})
        writer.tables.tables_committed({"db.copies": commit_a_row(catalog)})
        writer.target()
        assert writer.loads == 0  # the copy, vouched for
        writer.tables.evolve(uuid.uuid4(), "db.copies", Schema(NestedField(1, "note", StringType(), required=False)))
        mapping = catalog.load_table("db.copies").metadata.name_mapping()
    assert mapping is not None and "note" in [field.names[0] for field in mapping]
