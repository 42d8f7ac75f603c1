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
    added_columns,
    commit_branch,
    key_match,
    projection,
    spark_type,
    write_deleted_keys,
)
from sinks.iceberg.tables import missing_fields


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


def test_the_deleted_keys_file_holds_the_identifier_columns_of_the_deleting_rows(tmp_path: Path) -> None:
    """Spark counts the table's rows of these keys: a delete of a key the table lacks is counted apart."""
    first, second = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3], "region": ["x", "y", "z"], "op": ["d", "u", "d"]}), first)
    pq.write_table(pa.table({"id": [3, 4], "region": ["z", "w"], "op": ["d", "d"]}), second)
    deleted = pa.array(["1\x1fx", "3\x1fz", "4\x1fw"])
    target = write_deleted_keys([str(first), str(second)], ["id", "region"], deleted, str(tmp_path / "k.parquet"), {})
    assert pq.read_table(target).to_pylist() == [
        {"id": 1, "region": "x"},
        {"id": 3, "region": "z"},
        {"id": 3, "region": "z"},
        {"id": 4, "region": "w"},
    ]
