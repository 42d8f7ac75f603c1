"""The Iceberg sink's dead-letter table (``errors.deadletterqueue.table.name``).

Records that cannot be converted (with ``errors.tolerance=all``) become rows
of an Iceberg table that analysts can query, as Redpanda's Iceberg topics
write them to a ``<topic>~dlq`` table: the record as it was consumed (before
the converter and the transforms: ``workers.dead_letters``), and
the error as Kafka Connect's ``__connect.errors.*`` headers name it. Their
data files are part of the commit that skips them: the ledger entry that
moves the offsets past a bad record also adds it to the dead-letter table,
so a record is in exactly one of the two tables (DESIGN I8).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

from sinks.iceberg.arrow_writer import ArrowTableOutput, publish_decoded
from sinks.iceberg.writes import TargetTable
from workers.dead_letters import dead_letter_rows, source_cluster_originals
from workers.events import DataFile
from workers.staging import StagedPartition
from workers.writes import BadRecord, WriteRefused

# The columns of workers.dead_letters.DEAD_LETTER_SCHEMA, as Iceberg types them.
DEAD_LETTER_TABLE_SCHEMA = Schema(
    NestedField(1, "topic", StringType(), required=False, doc="__connect.errors.topic"),
    NestedField(2, "partition", IntegerType(), required=False, doc="__connect.errors.partition"),
    NestedField(3, "offset", LongType(), required=False, doc="__connect.errors.offset"),
    NestedField(4, "timestamp", TimestamptzType(), required=False, doc="the record's Kafka timestamp"),
    NestedField(5, "key", BinaryType(), required=False, doc="the record's key as consumed"),
    NestedField(6, "value", BinaryType(), required=False, doc="the record's value as consumed"),
    NestedField(
        7,
        "headers",
        ListType(
            12,
            StructType(
                NestedField(13, "key", StringType(), required=False),
                NestedField(14, "value", BinaryType(), required=False),
            ),
            element_required=False,
        ),
        required=False,
        doc="the record's headers as consumed",
    ),
    NestedField(8, "error_stage", StringType(), required=False, doc="__connect.errors.stage"),
    NestedField(9, "error_class_name", StringType(), required=False, doc="__connect.errors.class.name"),
    NestedField(
        10,
        "error_exception_class_name",
        StringType(),
        required=False,
        doc="__connect.errors.exception.class.name",
    ),
    NestedField(11, "error_exception_message", StringType(), required=False, doc="__connect.errors.exception.message"),
)


def check_dead_letter_table(name: str, table: Any) -> None:
    """A dead-letter table must have every dead-letter column (an existing table may have more): checked
    before the write, so that no commit is prepared that could not be applied (I9)."""
    have = {f.name for f in table.schema().fields}
    missing = [f.name for f in DEAD_LETTER_TABLE_SCHEMA.fields if f.name not in have]
    if missing:
        raise WriteRefused(
            f"the dead-letter table {name} (errors.deadletterqueue.table.name) has no column "
            f"{', '.join(missing)}; name a new table, which the sink creates, or add the columns"
        )


def table_columns(rows: pa.Table) -> pa.Table:
    """Dead letters in the table's types: the Kafka timestamp (milliseconds, -1 for none) as a timestamp."""
    index = rows.schema.get_field_index("timestamp")
    millis = rows.column(index)
    millis = pc.if_else(pc.less(millis, 0), pa.scalar(None, pa.int64()), millis)
    stamp = millis.cast(pa.timestamp("ms", tz="UTC")).cast(pa.timestamp("us", tz="UTC"))
    return rows.set_column(index, "timestamp", stamp)


def write_dead_letters(
    table: TargetTable,
    commit_id: uuid.UUID,
    staging_id: uuid.UUID,
    staged: Sequence[StagedPartition],
    bad: Sequence[BadRecord],
    config: Mapping[str, str],
    row_group_bytes: int,
) -> list[DataFile]:
    """The commit's bad records as data files of the dead-letter table, one per source partition: as consumed,
    as the dead-letter topic has them (``dead_letter_rows`` reads those staged changed again from their topic)."""
    by_source = {(s.topic, s.partition): s for s in staged}
    raw = {source: s.path for source, s in by_source.items() if s.path is not None}
    files: list[DataFile] = []
    for (topic, partition), rows in dead_letter_rows(bad, raw, config, source_cluster_originals(config)):
        source = by_source[(topic, partition)]
        output = ArrowTableOutput(
            table,
            f"{table.location.rstrip('/')}/data/_tmp/{staging_id}-dead-letters",
            f"{topic}+{partition}+{source.start}",
            row_group_bytes,
        )
        output.write(table_columns(rows))
        files.extend(publish_decoded(commit_id, dataclasses.replace(source, files=output.close()), table.io_properties))
    return files
