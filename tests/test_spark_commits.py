"""What a format v3 table's commit asks Spark (sinks.iceberg.spark_commits): the columns it adds, in Spark's
DDL; the rows it appends, projected onto the table's columns; the keys it deletes, matched null-safely."""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import (
    DecimalType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
)
from pyspark.sql.types import LongType as SparkLong
from pyspark.sql.types import StringType as SparkString
from pyspark.sql.types import StructField
from pyspark.sql.types import StructType as SparkStruct

from sinks.iceberg.spark_commits import (
    DELETES_ONLY,
    INCOMING,
    KEY_INDEX,
    added_columns,
    commit_branch,
    key_match,
    projection,
    spark_type,
    spark_unreadable,
    staged_names,
    write_commit_keys,
)
from sinks.iceberg.tables import missing_fields
from sinks.iceberg.upserts import winners


def test_iceberg_types_are_spark_ddl_and_a_time_column_is_refused() -> None:
    assert spark_type(DecimalType(38, 2), "amount") == "decimal(38, 2)"
    assert spark_type(TimestamptzType(), "at") == "timestamp"
    assert spark_type(TimestampType(), "at") == "timestamp_ntz"
    element = StructType(NestedField(3, "a b", LongType(), required=False))
    assert spark_type(ListType(2, element, element_required=False), "xs") == "array<struct<`a b`: bigint>>"
    assert spark_type(MapType(4, StringType(), 5, IntegerType()), "m") == "map<string, int>"
    with pytest.raises(ValueError, match=r"column 'event.at' of type time cannot be added to a format v3 table"):
        spark_type(StructType(NestedField(7, "at", TimeType(), required=False)), "event")


def test_new_columns_are_added_at_the_top_or_in_the_struct_the_table_has() -> None:
    existing = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "after", StructType(NestedField(3, "name", StringType(), required=False)), required=False),
    )
    candidate = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(
            2,
            "after",
            StructType(
                NestedField(3, "name", StringType(), required=False),
                NestedField(4, "email", StringType(), required=False),
            ),
            required=False,
        ),
        NestedField(5, "source", StructType(NestedField(6, "lsn", LongType(), required=False)), required=False),
    )
    missing = missing_fields(existing, candidate)
    assert missing is not None
    assert added_columns(existing, missing) == ["`after`.`email` string", "`source` struct<`lsn`: bigint>"]


def test_rows_are_projected_onto_the_tables_columns_by_name_missing_ones_null() -> None:
    target = SparkStruct(
        [
            StructField("id", SparkLong()),
            StructField(
                "after", SparkStruct([StructField("name", SparkString()), StructField("email", SparkString())])
            ),
            StructField("note", SparkString()),
        ]
    )
    source = SparkStruct(
        [
            StructField("after", SparkStruct([StructField("name", SparkString())])),
            StructField("id", SparkLong()),
            StructField("dropped", SparkString()),
        ]
    )
    assert projection(target, source) == [
        "`id` AS `id`",
        "IF(`after` IS NULL, NULL, named_struct('name', `after`.`name`, 'email', CAST(NULL AS string))) AS `after`",
        "CAST(NULL AS string) AS `note`",
    ]


def test_keys_match_null_safely_column_by_column() -> None:
    assert key_match(["id", "after.region"], "t", "k") == (
        "t.`id` <=> k.`id` AND t.`after`.`region` <=> k.`after`.`region`"
    )


def test_each_commit_has_branches_of_its_own() -> None:
    commit_id = uuid.uuid4()
    assert commit_branch(str(commit_id)) == f"sinkadmin_{commit_id.hex}_"
    assert not commit_branch(str(uuid.uuid4())).startswith(commit_branch(str(commit_id)))


def test_the_keys_file_holds_each_keys_winning_identifier_columns_and_what_spark_needs_of_it(tmp_path: Path) -> None:
    """One row per key (its index among the commit's keys), flagged when the commit only deletes it (Spark
    counts the table's rows of those), with its winning record's ordering value (Spark keeps a later row)."""
    first, second = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(
        pa.table({"id": [1, 2, 1], "region": ["x", "y", "x"], "op": ["d", "u", "u"], "ts": [5, 1, 3]}), first
    )
    pq.write_table(pa.table({"id": [3, 2], "region": ["z", "y"], "op": ["d", "d"], "ts": [2, None]}), second)
    paths = [str(first), str(second)]
    found = winners(paths, ["id", "region"], "op", "ts")
    target, incoming = write_commit_keys(paths, ["id", "region"], found, str(tmp_path / "k.parquet"), {})
    assert incoming
    rows = sorted(pq.read_table(target).to_pylist(), key=lambda r: r["id"])
    assert [{k: r[k] for k in ("id", "region", DELETES_ONLY, INCOMING)} for r in rows] == [
        # (The delete's ts 5 beats the update's 3; a key the commit writes too is not counted if absent.)
        {"id": 1, "region": "x", DELETES_ONLY: False, INCOMING: 5},
        {"id": 2, "region": "y", DELETES_ONLY: False, INCOMING: 1},  # (a null orders first)
        {"id": 3, "region": "z", DELETES_ONLY: True, INCOMING: 2},
    ]
    assert [found.keys[r[KEY_INDEX]].as_py() for r in rows] == ["1\x1fx", "2\x1fy", "3\x1fz"]
    unordered = winners(paths, ["id", "region"], "op")
    assert not write_commit_keys(paths, ["id", "region"], unordered, str(tmp_path / "u.parquet"), {})[1]


def test_a_column_renamed_since_the_rows_were_written_is_read_by_its_old_name() -> None:
    """Iceberg keeps a renamed field's old name in the table's name mapping: the commit's files, written
    before the rename, are read by it, not taken for a column added since (null)."""
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import new_table_metadata
    from pyiceberg.table.sorting import UNSORTED_SORT_ORDER

    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "quantity", LongType(), required=False),
        NestedField(3, "after", StructType(NestedField(4, "email", StringType(), required=False)), required=False),
    )
    mapping = (
        '[{"field-id": 1, "names": ["id"]}, {"field-id": 2, "names": ["qty", "quantity"]}, '
        '{"field-id": 3, "names": ["after"], "fields": [{"field-id": 4, "names": ["mail", "email"]}]}]'
    )
    metadata = new_table_metadata(
        schema, UNPARTITIONED_PARTITION_SPEC, UNSORTED_SORT_ORDER, "/t", {"schema.name-mapping.default": mapping}
    )
    table = Table(("db", "t"), metadata, "/t/v1.metadata.json", PyArrowFileIO(), None)  # type: ignore[arg-type]
    names = staged_names(table)
    assert names[("quantity",)] == ("quantity", "qty") and names[("after", "email")] == ("email", "mail")
    target = SparkStruct(
        [
            StructField("id", SparkLong()),
            StructField("quantity", SparkLong()),
            StructField("after", SparkStruct([StructField("email", SparkString())])),
        ]
    )
    source = SparkStruct(
        [
            StructField("id", SparkLong()),
            StructField("qty", SparkLong()),
            StructField("after", SparkStruct([StructField("mail", SparkString())])),
        ]
    )
    assert projection(target, source, names) == [
        "`id` AS `id`",
        "`qty` AS `quantity`",
        "IF(`after` IS NULL, NULL, named_struct('email', `after`.`mail`)) AS `after`",
    ]


def test_columns_spark_cannot_read_in_the_staged_files_are_named() -> None:
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "event", StructType(NestedField(3, "at", TimeType(), required=False)), required=False),
    )
    assert spark_unreadable(schema) == "column 'event.at' of type time"
    assert spark_unreadable(Schema(NestedField(1, "id", LongType(), required=True))) is None
