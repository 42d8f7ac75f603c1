"""sinks.iceberg.upserts without servers: which records of a commit win, how files are rewritten or rows
deleted by position (a SQL catalog on SQLite, read back by pyiceberg), and which rows an upsert refuses."""

from __future__ import annotations

import json
import tempfile
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sinks.iceberg.tables import CommitFile, TableCommit
from sinks.iceberg.upserts import (
    ABSENT_KEY_DELETES,
    COPY_ON_WRITE,
    MERGE_MODE,
    MERGE_ON_READ,
    POSITION_DELETE_SCHEMA,
    STALE_RECORDS,
    RewriteUnit,
    UnappliableRows,
    UpsertRewrite,
    commit_upserts,
    deleted_positions,
    integer_where,
    key_column,
    winners,
)
from workers.json_decoder import JsonDecoder
from workers.staging import RecordChunk, StagedPartition
from workers.writes import WriteRefused


def write(path: Path, rows: list[dict[str, object]]) -> str:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return f"file://{path}"


def test_the_last_record_of_a_key_wins_and_a_delete_removes_it(tmp_path: Path) -> None:
    first = write(
        tmp_path / "a.parquet",
        [{"id": 1, "op": "I", "v": "a1"}, {"id": 2, "op": "I", "v": "a2"}, {"id": 1, "op": "U", "v": "a1'"}],
    )
    second = write(tmp_path / "b.parquet", [{"id": 2, "op": " d", "v": None}, {"id": 3, "op": "I", "v": "b3"}])
    found = winners([first, second], ["id"], "op")
    # a.parquet: row 0 is superseded by row 2; row 1 by b.parquet's delete; b.parquet's delete itself goes.
    assert found.dropped == ((0, 1), (0,))
    assert sorted(found.keys.to_pylist()) == ["1", "2", "3"] and sorted(found.typed_keys) == [1, 2, 3]


def test_an_ordering_field_decides_which_record_of_a_key_wins_across_partitions(tmp_path: Path) -> None:
    # Two partitions' files of one commit (stream order: all of partition 0, then partition 1), with the
    # events' source positions in a nested field, as Debezium's transforms carry them.
    def event(key: int, lsn: int | None, op: str, v: str | None) -> dict[str, object]:
        return {"id": key, "v": v, "_cdc": {"op": op, "lsn": lsn}}

    partition0 = write(
        tmp_path / "p0.parquet",
        [event(1, 30, "U", "1@30"), event(2, 10, "U", "2@10"), event(3, 50, "D", None), event(4, None, "U", "4@-")],
    )
    partition1 = write(
        tmp_path / "p1.parquet",
        [event(1, 20, "U", "1@20"), event(2, 40, "U", "2@40"), event(3, 45, "U", "3@45"), event(4, 5, "U", "4@5")],
    )
    found = winners([partition0, partition1], ["id"], "_cdc.op", "_cdc.lsn")
    # Key 1: partition 0's greater position wins though partition 1 comes later in the stream; key 2:
    # partition 1's; key 3: the delete at 50 wins over the update at 45 (so neither is written); key 4: a
    # record without a position orders first.
    assert found.dropped == ((1, 2, 3), (0, 2))
    assert found.deleted_keys.to_pylist() == []  # (key 3 was written in the commit: not an absent-key delete)
    # Ties (and no ordering field) keep the stream's order: the later record wins.
    tied = write(tmp_path / "tied.parquet", [event(5, 7, "U", "first"), event(5, 7, "U", "second")])
    assert winners([tied], ["id"], "_cdc.op", "_cdc.lsn").dropped == ((0,),)
    # Stream order alone: partition 1 wins every key (key 3 is then its update, after the delete).
    assert winners([partition0, partition1], ["id"], "_cdc.op").dropped == ((0, 1, 2, 3), ())


def test_integer_keys_are_looked_up_as_numbers_in_a_table_or_by_hashing_and_text_keys_are_not() -> None:
    keys = np.array([-5, 3, 7, 1 << 40], dtype=np.int64)
    column = pa.chunked_array([pa.array([7, 8, -5], pa.int32()), pa.array([3, 1 << 20], pa.int32())])
    # (The keys' span is beyond the table's: hashed.)
    assert integer_where(column, keys).tolist() == [0, 2, 3]
    assert integer_where(column, keys[:3]).tolist() == [0, 2, 3]  # (a span of 12: the table)
    assert integer_where(pa.array([1, None, 3]), keys) is None
    assert integer_where(pa.array(["3", "7"]), keys) is None
    assert integer_where(pa.array([1, 2], pa.int64()), np.zeros(0, dtype=np.int64)).tolist() == []
    # What a commit's files give: every file's identifier column of an integer type, else text keys only.
    rows = [{"id": 9, "v": "a"}, {"id": 2, "v": "b"}, {"id": 9, "v": "c"}]
    with tempfile.TemporaryDirectory() as directory:
        first = write(Path(directory) / "a.parquet", rows)
        assert winners([first], ["id"], None).integer_keys.tolist() == [2, 9]  # type: ignore[union-attr]
        text = write(Path(directory) / "b.parquet", [{"id": "9", "v": "d"}])
        assert winners([first, text], ["id"], None).integer_keys is None


def test_composite_keys_join_their_columns() -> None:
    rows = pa.table({"a": [1, 1, None], "b": ["x", "y", "x"]})
    keys = key_column(rows, ["a", "b"]).to_pylist()
    assert len(set(keys)) == 3 and keys[0] == "1\x1fx"


def test_a_live_file_loses_the_rows_of_the_commits_keys_and_own_files_their_dropped_rows(tmp_path: Path) -> None:
    live = write(tmp_path / "live.parquet", [{"id": i, "v": f"old{i}"} for i in range(5)])
    untouched = write(tmp_path / "other.parquet", [{"id": 10, "v": "x"}])
    own = write(tmp_path / "own.parquet", [{"id": 1, "v": "new1"}, {"id": 1, "v": "newer1"}])
    job = UpsertRewrite(
        (RewriteUnit(live, own=False), RewriteUnit(untouched, own=False), RewriteUnit(own, own=True, dropped=(0,))),
        ("id",),
        pa.array(["1", "3"]),
        "c0ffee",
    )
    rewritten, kept, trimmed = (job.run_unit(n) for n in range(job.count))
    assert kept == {"path": None, "found": [], "stale": []}
    assert rewritten["records"] == 3 and "-upsert-c0ffee-" in rewritten["path"]
    assert pq.read_table(rewritten["path"].removeprefix("file://")).column("id").to_pylist() == [0, 2, 4]
    assert pq.read_table(trimmed["path"].removeprefix("file://")).to_pylist() == [{"id": 1, "v": "newer1"}]


def _commit(
    catalog: Any, tmp_path: Path, number: int, rows: list[dict[str, object]], ordering_field: str | None = None
) -> None:
    path = write(tmp_path / f"commit-{number}.parquet", rows)
    commit = TableCommit("mor", f"commit-{number}", 1, (CommitFile(path),), {"t": {"0": [number, number + 1]}}, None)
    commit_upserts(
        catalog,
        "db.t",
        commit,
        [CommitFile(path)],
        ["id"],
        "op",
        lambda job: [job.run_unit(n) for n in range(job.count)],
        ordering_field=ordering_field,
    )


def _sql_catalog(tmp_path: Path, text_ids: bool = False, **properties: str) -> Any:
    """A SQL catalog (SQLite) with the table db.t (id, op, v, lsn): its id a long, or text with ``text_ids``."""
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    tmp_path.mkdir(exist_ok=True)
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/warehouse")
    catalog.create_namespace("db")
    schema = Schema(
        NestedField(1, "id", StringType() if text_ids else LongType(), required=False),
        NestedField(2, "op", StringType(), required=False),
        NestedField(3, "v", StringType(), required=False),
        NestedField(4, "lsn", LongType(), required=False),
    )
    catalog.create_table("db.t", schema, properties={"format-version": "2", **properties})
    return catalog


def test_merge_on_read_commits_add_position_deletes_and_rewrite_no_data_file(tmp_path: Path) -> None:
    catalog = _sql_catalog(tmp_path, **{MERGE_MODE: MERGE_ON_READ})
    _commit(catalog, tmp_path, 1, [{"id": i, "op": "c", "v": f"v{i}"} for i in range(6)])
    # Two updates of key 1 (the first superseded within the commit), a delete of 2 and of 99 (never
    # written), a new key 7.
    _commit(
        catalog,
        tmp_path,
        2,
        [
            {"id": 1, "op": "u", "v": "v1'"},
            {"id": 1, "op": "u", "v": "v1''"},
            {"id": 2, "op": "d", "v": None},
            {"id": 99, "op": "d", "v": None},
            {"id": 7, "op": "c", "v": "v7"},
        ],
    )
    # Key 1 again: its row of commit 2 goes; commit 1's row of it is already deleted and is not again.
    _commit(catalog, tmp_path, 3, [{"id": 1, "op": "u", "v": "v1'''"}, {"id": 3, "op": "d", "v": None}])
    table = catalog.load_table("db.t")
    rows = {r["id"]: r["v"] for r in table.scan().to_arrow().to_pylist()}
    assert rows == {0: "v0", 1: "v1'''", 4: "v4", 5: "v5", 7: "v7"}
    snapshots = table.snapshots()
    assert [s.summary.operation.value for s in snapshots] == ["append", "overwrite", "overwrite"]
    for snapshot in snapshots[1:]:
        summary = snapshot.summary
        assert "deleted-data-files" not in summary.additional_properties, "a data file was removed"
        assert int(summary["added-position-delete-files"]) >= 1
    # Commit 2: keys 1 and 2 in commit 1's file; in its own, the superseded update of 1 and both deletes.
    assert snapshots[1].summary["added-position-deletes"] == str(2 + 3)
    assert snapshots[1].summary[ABSENT_KEY_DELETES] == "1"
    # Commit 3: key 1 in commit 2's file (not again in commit 1's), key 3 in commit 1's, the delete itself.
    assert snapshots[2].summary["added-position-deletes"] == str(1 + 1 + 1)
    assert ABSENT_KEY_DELETES not in snapshots[2].summary.additional_properties


@pytest.mark.parametrize("mode", [MERGE_ON_READ, COPY_ON_WRITE])
def test_a_record_older_than_the_tables_row_of_its_key_by_the_ordering_field_is_not_applied(
    tmp_path: Path, mode: str
) -> None:
    catalog = _sql_catalog(tmp_path, **{MERGE_MODE: mode})
    _commit(catalog, tmp_path, 1, [{"id": i, "op": "c", "v": f"v{i}@{i}0", "lsn": i * 10} for i in (1, 2, 3)], "lsn")
    # Key 1's update and key 3's delete are older than the table's rows (they reached another Kafka partition,
    # committed later); key 2's update is newer; key 4 is new; key 5's older record is superseded in the commit
    # by its newer one.
    _commit(
        catalog,
        tmp_path,
        2,
        [
            {"id": 1, "op": "u", "v": "v1@5", "lsn": 5},
            {"id": 2, "op": "u", "v": "v2@25", "lsn": 25},
            {"id": 3, "op": "d", "v": None, "lsn": 15},
            {"id": 5, "op": "c", "v": "v5@9", "lsn": 9},
            {"id": 4, "op": "c", "v": "v4@1", "lsn": 1},
            {"id": 5, "op": "u", "v": "v5@8", "lsn": 8},
        ],
        "lsn",
    )
    table = catalog.load_table("db.t")
    rows = {r["id"]: r["v"] for r in table.scan().to_arrow().to_pylist()}
    assert rows == {1: "v1@10", 2: "v2@25", 3: "v3@30", 4: "v4@1", 5: "v5@9"}
    summary = table.current_snapshot().summary.additional_properties
    assert summary[STALE_RECORDS] == "2" and ABSENT_KEY_DELETES not in summary
    # Equal positions: the commit's record is the later (as Hudi breaks ties).
    _commit(catalog, tmp_path, 3, [{"id": 2, "op": "u", "v": "v2@25'", "lsn": 25}], "lsn")
    assert {r["id"]: r["v"] for r in catalog.load_table("db.t").scan().to_arrow().to_pylist()}[2] == "v2@25'"


def test_more_keys_than_a_list_filters_prune_the_files_outside_their_span(tmp_path: Path) -> None:
    catalog = _sql_catalog(tmp_path, **{MERGE_MODE: MERGE_ON_READ})
    # Two commits' files: keys 0..1999, then 5000..6999 (an auto-increment id's inserts).
    _commit(catalog, tmp_path, 1, [{"id": i, "op": "c", "v": "old"} for i in range(2000)])
    _commit(catalog, tmp_path, 2, [{"id": i, "op": "c", "v": "old"} for i in range(5000, 7000)])
    jobs: list[Any] = []

    def run_units(job: Any) -> list[dict[str, Any]]:
        jobs.append(job)
        return [job.run_unit(n) for n in range(job.count)]

    # 1,500 updates of keys 5200..6699: only the second file's bounds cross their span.
    path = write(tmp_path / "commit-3.parquet", [{"id": i, "op": "u", "v": "new"} for i in range(5200, 6700)])
    commit = TableCommit("mor", "commit-3", 1, (CommitFile(path),), {"t": {"0": [3, 4]}}, None)
    commit_upserts(catalog, "db.t", commit, [CommitFile(path)], ["id"], "op", run_units)
    (job,) = jobs
    live = [unit.path for unit in job.units if not unit.own]
    assert [path.rsplit("/", 1)[1] for path in live] == ["commit-2.parquet"]
    rows = {r["id"]: r["v"] for r in catalog.load_table("db.t").scan().to_arrow().to_pylist()}
    assert len(rows) == 4000
    assert {k for k, v in rows.items() if v == "new"} == set(range(5200, 6700))


def test_the_positions_delete_files_delete_are_read_by_data_file_with_or_without_their_statistics(
    tmp_path: Path,
) -> None:
    def deletes(name: str, rows: list[tuple[str, int]], **options: Any) -> str:
        table = pa.Table.from_pylist([{"file_path": f, "pos": p} for f, p in rows], schema=POSITION_DELETE_SCHEMA)
        pq.write_table(table, tmp_path / name, row_group_size=2, **options)
        return str(tmp_path / name)

    a, b, c = "s3://w/t/data/a.parquet", "s3://w/t/data/b.parquet", "s3://w/t/data/c.parquet"
    only_a = deletes("only-a.parquet", [(a, 1), (a, 4), (a, 9)])  # one data file's, as an upsert writes them
    a_and_c = deletes("a-and-c.parquet", [(a, 2), (c, 3), (c, 5)])  # row groups: (a, c), then (c)
    unsorted = deletes("no-stats.parquet", [(c, 7), (a, 6), (b, 8)], write_statistics=False)
    files = [only_a, a_and_c, unsorted]
    assert sorted(deleted_positions(files, a)) == [1, 2, 4, 6, 9]
    assert sorted(deleted_positions(files, b)) == [8]  # (between a's and c's paths: read, and found)
    assert sorted(deleted_positions(files, c)) == [3, 5, 7]
    assert deleted_positions(files, "s3://w/t/data/d.parquet").size == 0
    assert deleted_positions([], a).size == 0


def test_copy_on_write_rewrites_the_files_holding_the_keys(tmp_path: Path) -> None:
    catalog = _sql_catalog(tmp_path)
    _commit(catalog, tmp_path, 1, [{"id": i, "op": "c", "v": f"v{i}"} for i in range(4)])
    _commit(catalog, tmp_path, 2, [{"id": 1, "op": "u", "v": "v1'"}, {"id": 5, "op": "d", "v": None}])
    table = catalog.load_table("db.t")
    assert {r["id"]: r["v"] for r in table.scan().to_arrow().to_pylist()} == {0: "v0", 1: "v1'", 2: "v2", 3: "v3"}
    summary = table.current_snapshot().summary
    assert summary["deleted-data-files"] == "1" and "added-position-delete-files" not in summary.additional_properties
    assert summary[ABSENT_KEY_DELETES] == "1"


@pytest.mark.parametrize("ordering_field", [None, "lsn"])
def test_copy_on_write_into_a_table_with_delete_files_keeps_the_deleted_rows_deleted(
    tmp_path: Path, ordering_field: str | None
) -> None:
    # Merge-on-read commits first (delete files), then the table's mode changes to copy-on-write.
    catalog = _sql_catalog(tmp_path, **{MERGE_MODE: MERGE_ON_READ})
    _commit(catalog, tmp_path, 1, [{"id": i, "op": "c", "v": f"v{i}", "lsn": i} for i in range(6)], ordering_field)
    _commit(
        catalog,
        tmp_path,
        2,
        [{"id": 1, "op": "u", "v": "v1'", "lsn": 11}, {"id": 2, "op": "d", "v": None, "lsn": 12}],
        ordering_field,
    )
    table = catalog.load_table("db.t")
    with table.transaction() as tx:
        tx.set_properties({MERGE_MODE: COPY_ON_WRITE})
    # Key 3 updated: commit 1's file, which holds deleted rows of keys 1 and 2, is rewritten; keys 1 and 2
    # stay as commit 2 left them. (With the ordering field, key 4's older update there is stale and not applied.)
    _commit(
        catalog,
        tmp_path,
        3,
        [{"id": 3, "op": "u", "v": "v3'", "lsn": 13}, {"id": 4, "op": "u", "v": "v4-old", "lsn": 1}]
        if ordering_field
        else [{"id": 3, "op": "u", "v": "v3'", "lsn": 13}],
        ordering_field,
    )
    table = catalog.load_table("db.t")
    expected = {0: "v0", 1: "v1'", 3: "v3'", 4: "v4", 5: "v5"}
    assert {r["id"]: r["v"] for r in table.scan().to_arrow().to_pylist()} == expected
    summary = table.current_snapshot().summary
    assert summary["deleted-data-files"] == "1" and "added-position-delete-files" not in summary.additional_properties
    # The rewritten file holds the live rows only: readable without the delete files, which no longer apply.
    (rewritten,) = [t for t in table.scan().plan_files() if "/commit-1-upsert-" in t.file.file_path]
    rows = pq.read_table(rewritten.file.file_path.removeprefix("file://")).to_pylist()
    assert sorted(r["id"] for r in rows) == [0, 4, 5] and not rewritten.delete_files
    if ordering_field:
        assert summary[STALE_RECORDS] == "1"


def test_delete_files_an_upsert_cannot_apply_are_refused_with_what_to_do(tmp_path: Path) -> None:
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

    from sinks.iceberg.row_delta import commit_row_delta

    catalog = _sql_catalog(tmp_path, **{MERGE_MODE: MERGE_ON_READ})
    _commit(catalog, tmp_path, 1, [{"id": i, "op": "c", "v": f"v{i}"} for i in range(3)])
    # An equality delete file, as Flink's upserts write them (deleting id 1).
    table = catalog.load_table("db.t")
    path = tmp_path / "eq-deletes.parquet"
    pq.write_table(pa.table({"id": pa.array([1], pa.int64())}), path)
    equality = DataFile.from_args(
        content=DataFileContent.EQUALITY_DELETES,
        file_path=f"file://{path}",
        file_format=FileFormat.PARQUET,
        partition=table.scan().plan_files()[0].file.partition,
        record_count=1,
        file_size_in_bytes=path.stat().st_size,
        equality_ids=[1],
    )
    equality.spec_id = 0
    commit_row_delta(table, {}, [], [], [equality])
    with pytest.raises(ValueError, match="has equality delete files, which an upsert cannot apply: compact them"):
        _commit(catalog, tmp_path, 2, [{"id": 2, "op": "u", "v": "v2'"}])


def test_rows_without_a_key_or_with_an_unknown_operation_are_bad_records_with_the_reason() -> None:
    decoder = JsonDecoder(pa.schema([("id", pa.int64()), ("_cdc", pa.struct([("op", pa.string())]))]))
    values = [
        b'{"id": 1, "_cdc": {"op": "I"}}',
        b'{"_cdc": {"op": "U"}}',
        b'{"id": 3, "_cdc": {"op": "t"}}',
        b'{"id": 4, "_cdc": {"op": " d"}}',
        b'{"id": 5, "_cdc": {"op": "r"}}',
        b'{"id": 6}',
    ]
    decoded = decoder.decode(values, [None] * len(values))
    # (The decoded rows, refused by the sink: ArrowPartitionWriter takes them out, as its own refusals.)
    reasons = dict(UnappliableRows(("id",), "_cdc.op")(decoded.columns))
    assert sorted(reasons) == [1, 2, 5]
    assert reasons[1].startswith("no value for id, an identifier column of upsert mode")
    assert "iceberg.tables.cdc-field _cdc.op is 't': no operation an upsert knows" in reasons[2]
    assert "is None" in reasons[5]


def test_merge_on_read_deletes_rows_of_files_of_an_older_partition_spec(tmp_path: Path) -> None:
    from pyiceberg.transforms import IdentityTransform

    catalog = _sql_catalog(tmp_path, **{MERGE_MODE: MERGE_ON_READ})
    with catalog.load_table("db.t").update_spec() as spec:
        spec.add_field("op", IdentityTransform(), "op")
    table = catalog.load_table("db.t")
    table.append(pa.table({"id": pa.array([1, 2, 3], pa.int64()), "op": ["c", "c", "r"], "v": ["a", "b", "c"]}))
    # The spec changes: the files above are of the older spec, and the commit's own of the new one.
    with catalog.load_table("db.t").update_spec() as spec:
        spec.add_field("v", IdentityTransform(), "v")
    path = write(tmp_path / "update.parquet", [{"id": 2, "op": "u", "v": "b'"}, {"id": 3, "op": "d", "v": None}])
    own = CommitFile(path, json.dumps({"spec-id": 2, "values": ["u", "b'"]}))
    commit_upserts(
        catalog,
        "db.t",
        TableCommit("mor", "commit-1", 1, (own,), {}, None),
        [own],
        ["id"],
        "op",
        lambda job: [job.run_unit(n) for n in range(job.count)],
    )
    table = catalog.load_table("db.t")
    assert {r["id"]: r["v"] for r in table.scan().to_arrow().to_pylist()} == {1: "a", 2: "b'"}
    specs = {task.file.spec_id for task in table.scan().plan_files()} | {
        d.spec_id for task in table.scan().plan_files() for d in task.delete_files
    }
    assert len(specs) == 2


def _table_writer(tmp_path: Path, **keys: str) -> Any:
    from connectors.config import SinkConfig
    from sinks.iceberg.writer import TableWriter

    config = SinkConfig.parse(
        {
            "connector.class": "org.apache.iceberg.connect.IcebergSinkConnector",
            "topics": "orders",
            "iceberg.tables": "db.t",
            "iceberg.catalog.type": "sql",
            "iceberg.catalog.uri": f"sqlite:///{tmp_path}/catalog.db",
            "iceberg.catalog.warehouse": f"file://{tmp_path}/warehouse",
            "sinkadmin.writer": "arrow",
            "iceberg.tables.auto-create-enabled": "true",
            "iceberg.tables.upsert-mode-enabled": "true",
            **keys,
        }
    )
    return TableWriter(config)


@pytest.mark.django_db
def test_a_table_created_for_upserts_has_its_id_columns_as_required_identifier_fields(tmp_path: Path) -> None:
    writer = _table_writer(tmp_path, **{"iceberg.tables.default-id-columns": "id, region"})
    plan = writer.table(uuid.uuid4(), "db.t", lambda: [json.dumps({"id": 1, "region": "eu", "v": "a"}).encode()])
    schema = writer.catalog.load_table("db.t").schema()
    assert schema.identifier_field_names() == {"id", "region"}
    assert [(f.name, f.required) for f in schema.fields] == [("id", True), ("region", True), ("v", False)]
    assert plan.id_columns == ("id", "region")
    # The arrow plane writes the key columns required, and refuses a row without its key with that reason.
    staging_id = uuid.uuid4()
    writer.table(staging_id, "db.t", lambda: [json.dumps({"id": 1, "region": "eu", "v": "a"}).encode()])
    sink = writer.sink(staging_id, "orders", 0, 0, tmp_path / "staging")
    values = [{"id": 1, "region": "eu", "v": "a"}, {"region": "eu", "v": "keyless"}, {"id": 2, "region": "us"}]
    encoded: list[bytes | None] = [json.dumps(v).encode() for v in values]
    sink.write(RecordChunk("orders", 0, [0, 1, 2], [None] * 3, [None] * 3, encoded, [None] * 3, [None] * 3))
    staged = sink.finish(StagedPartition("orders", 0, 0, 3, 3, None, None))
    assert [(b.offset, b.reason) for b in staged.bad] == [
        (1, "no value for id, an identifier column of upsert mode: the row has no key")
    ]
    (written,) = staged.files
    assert not pq.read_schema(written.path).field("id").nullable
    assert pq.read_table(written.path).column("id").to_pylist() == [1, 2]
    # A column Iceberg takes as no identifier field: the table is created without any, and upserts key it
    # by the configured column all the same.
    # A bytes column (base64 in JSON, decoded by the same decoder): the key columns are identifier fields, and
    # a keyless row is refused as above.
    avro = json.dumps(
        {"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"}, {"name": "blob", "type": "bytes"}]}
    )
    (tmp_path / "b").mkdir()
    with_bytes = _table_writer(
        tmp_path / "b",
        **{"iceberg.tables.default-id-columns": "id", "value.converter": "avro", "value.converter.avro.schema": avro},
    )
    with_bytes.table(staging_id := uuid.uuid4(), "db.t", lambda: [])
    created = with_bytes.catalog.load_table("db.t").schema()
    assert created.identifier_field_names() == {"id"} and created.find_field("id").required
    sink = with_bytes.sink(staging_id, "orders", 0, 0, tmp_path / "b" / "staging")
    blobs: list[bytes | None] = [b'{"id": 1, "blob": "AAEC"}', b'{"blob": "AAEC"}']
    sink.write(RecordChunk("orders", 0, [0, 1], [None] * 2, [None] * 2, blobs, [None] * 2, [None] * 2))
    staged = sink.finish(StagedPartition("orders", 0, 0, 2, 2, None, None))
    assert [(b.offset, b.reason) for b in staged.bad] == [
        (1, "no value for id, an identifier column of upsert mode: the row has no key")
    ]
    assert pq.read_table(staged.files[0].path).to_pylist() == [{"id": 1, "blob": b"\x00\x01\x02"}]
    doubles = _table_writer(tmp_path / "d", **{"iceberg.tables.default-id-columns": "score"})
    (tmp_path / "d").mkdir()
    plan = doubles.table(uuid.uuid4(), "db.t", lambda: [json.dumps({"score": 1.5, "v": "a"}).encode()])
    assert doubles.catalog.load_table("db.t").schema().identifier_field_ids == []
    assert plan.id_columns == ("score",)


@pytest.mark.django_db
def test_without_id_columns_upserts_key_a_table_by_its_identifier_fields_and_refuse_one_without(
    tmp_path: Path,
) -> None:
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    writer = _table_writer(tmp_path)
    writer.catalog.create_namespace("db")
    keyed = Schema(
        NestedField(1, "v", StringType(), required=False),
        NestedField(2, "id", LongType(), required=True),
        identifier_field_ids=[2],
    )
    writer.catalog.create_table("db.t", keyed, properties={"format-version": "2"})
    assert writer.table(uuid.uuid4(), "db.t", lambda: []).id_columns == ("id",)

    unkeyed = _table_writer(tmp_path / "u")
    (tmp_path / "u").mkdir()
    unkeyed.catalog.create_namespace("db")
    unkeyed.catalog.create_table("db.t", Schema(NestedField(1, "id", LongType(), required=False)))
    with pytest.raises(WriteRefused, match=r"no identifier fields and none are configured.*SET IDENTIFIER FIELDS"):
        unkeyed.table(uuid.uuid4(), "db.t", lambda: [])


@pytest.mark.django_db
def test_a_table_upserts_could_not_key_is_refused_before_it_is_created(tmp_path: Path) -> None:
    # Debezium's envelopes, not unwrapped: the table they would create has no id column.
    envelope = {"before": None, "after": {"id": 1, "v": "a"}, "op": "c", "source": {"table": "t"}}
    writer = _table_writer(tmp_path, **{"iceberg.tables.default-id-columns": "id"})
    with pytest.raises(
        WriteRefused,
        match=r"the records for table db\.t \(not created\) have no column id .* Debezium change events .*"
        r"DebeziumTransform .* Name columns the records have",
    ):
        writer.table(uuid.uuid4(), "db.t", lambda: [json.dumps(envelope).encode()])
    # No id columns at all: the table created would have no identifier fields.
    unkeyed = _table_writer(tmp_path)
    with pytest.raises(WriteRefused, match=r"no id columns are configured.*db\.t, which the records would create"):
        unkeyed.table(uuid.uuid4(), "db.t", lambda: [json.dumps({"id": 1}).encode()])
    # Neither left a table behind, which would stay when the config is mended.
    assert not writer.catalog.table_exists("db.t")
    # Plain JSON where the config says Kafka Connect's envelope: no schema to create the table from.
    enveloped = _table_writer(
        tmp_path,
        **{
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter.schemas.enable": "true",
            "iceberg.tables.default-id-columns": "id",
        },
    )
    with pytest.raises(ValueError, match=r"no record carries a Kafka Connect schema envelope .*set it to false"):
        enveloped.table(uuid.uuid4(), "db.t", lambda: [json.dumps({"id": 1}).encode()])


@pytest.mark.django_db
def test_an_ordering_field_the_table_lacks_or_cannot_compare_is_refused_with_the_reason(tmp_path: Path) -> None:
    sample = [json.dumps({"id": 1, "v": "a", "_cdc": {"op": "U", "lsn": 7}}).encode()]
    keys = {"iceberg.tables.default-id-columns": "id"}
    assert _table_writer(tmp_path, **keys, **{"sinkadmin.upsert.ordering-field": "_cdc.lsn"}).table(
        uuid.uuid4(), "db.t", lambda: sample
    )
    for field, what in (("_cdc.position", "no column of it"), ("_cdc", "a struct")):
        writer = _table_writer(tmp_path, **keys, **{"sinkadmin.upsert.ordering-field": field})
        with pytest.raises(WriteRefused, match=f"ordering-field '{field}' is {what}"):
            writer.table(uuid.uuid4(), "db.t", lambda: sample)


@pytest.mark.unit
def test_keys_of_uuid_fixed_and_binary_columns_are_their_bytes_in_hexadecimal() -> None:
    """Arrow's cast to text would take the bytes for UTF-8, and refuse most of them."""
    uid = uuid.UUID("0f8fad5b-d9cb-469f-a165-70867728950e")
    uuids = pa.ExtensionArray.from_storage(pa.uuid(), pa.array([uid.bytes, None], pa.binary(16)))
    rows = pa.table(
        {
            "u": uuids,
            "f": pa.array([b"\xff\x00", b"\x01\x02"], pa.binary(2)),
            "b": pa.array([b"\xff", None], pa.binary()),
            "n": [7, 8],
        }
    )
    assert key_column(rows, ["u"]).to_pylist() == [uid.hex, None]
    assert key_column(rows.slice(1), ["f"]).to_pylist() == ["0102"]
    assert key_column(rows, ["b", "n"]).to_pylist() == ["ff\x1f7", "\x00\x1f8"]


def test_the_last_record_of_a_key_wins_by_offset_when_a_partitioned_tables_files_are_not_in_offset_order(
    tmp_path: Path,
) -> None:
    """A Kafka partition's rows go to a file per Iceberg partition, numbered as each partition is first seen:
    here a delete opens the null partition's file before the insert it deletes, and an update's partition was
    opened by another key before the insert it updates. The files' footers give their rows' offsets."""
    from connectors.config import SinkConfig
    from connectors.config.transforms import PartitionField
    from sinks.iceberg.arrow_writer import ArrowPartitionWriter, publish_decoded
    from sinks.iceberg.settings import TableTarget
    from sinks.iceberg.writes import TargetTable
    from tests.conftest import sink_config

    catalog = _sql_catalog(tmp_path, **{MERGE_MODE: MERGE_ON_READ})
    _commit(catalog, tmp_path, 1, [{"id": 2, "op": "c", "v": "old"}])
    with catalog.load_table("db.t").update_spec() as update:
        update.add_identity("v")
    table = catalog.load_table("db.t")
    config = SinkConfig.parse(
        sink_config(
            "jobs",
            "db.t",
            **{
                "value.converter": "json",
                "value.converter.schemas.enable": "false",
                "iceberg.tables.upsert-mode-enabled": "true",
                "iceberg.tables.default-id-columns": "id",
                "iceberg.tables.cdc-field": "op",
            },
        )
    )
    target = TargetTable(
        TableTarget("db.t", (PartitionField("identity", "v"),), None, ("id",)),
        table.schema(),
        table.location(),
        table.spec(),
    )
    events = {
        100: {"id": 2, "op": "d"},  # the null partition's file first
        101: {"id": 1, "op": "c", "v": "new"},
        102: {"id": 1, "op": "d"},  # ... so it is before this insert in the files' order
        103: {"id": 3, "op": "c", "v": "shipped"},
        104: {"id": 5, "op": "c", "v": "pending"},
        105: {"id": 5, "op": "u", "v": "shipped"},  # in the file key 3 opened, before the insert's
    }
    n = len(events)
    chunk = RecordChunk(
        "jobs",
        0,
        list(events),
        [0] * n,
        [None] * n,
        [json.dumps(e).encode() for e in events.values()],
        [None] * n,
        [None] * n,
    )
    writer = ArrowPartitionWriter(
        config.sink_view, lambda *_: target, lambda *_: target, uuid.uuid4(), "jobs", 0, 100, tmp_path
    )
    writer.write(chunk)
    staged = writer.finish(StagedPartition("jobs", 0, 100, 100 + n, n, None, None))
    files = sorted(publish_decoded(uuid.uuid4(), staged, {}), key=lambda f: (f.topic, f.partition, f.path))
    assert len(files) == 4
    ordered = [CommitFile(f.path, f.partition_values) for f in files]
    commit = TableCommit("mor", "commit-2", 1, tuple(ordered), {"jobs": {"0": [100, 100 + n]}}, None)
    commit_upserts(
        catalog, "db.t", commit, ordered, ["id"], "op", lambda job: [job.run_unit(i) for i in range(job.count)]
    )
    rows = {r["id"]: r["v"] for r in catalog.load_table("db.t").scan().to_arrow().to_pylist()}
    assert rows == {3: "shipped", 5: "shipped"}


def test_a_files_footer_orders_its_rows_by_offset_and_one_that_does_not_fit_is_not_read() -> None:
    from sinks.iceberg.upserts import STREAM_METADATA, _stream_order, stream_metadata, stream_of

    offsets = np.array([7, 9, 10, 11, 40], dtype=np.int64)
    footer = {k.encode(): v.encode() for k, v in stream_metadata("t", 3, offsets).items()}
    found = stream_of(footer, 5)
    assert found is not None and found[:2] == ("t", 3) and found[2].tolist() == offsets.tolist()
    assert stream_of(footer, 4) is None  # (rows the footer does not count)
    assert stream_of({STREAM_METADATA.encode(): b"{not json"}, 5) is None
    assert stream_of(None, 5) is None
    # Two files of partition 0 whose rows interleave, a file without offsets, and one of partition 1.
    a = ("t", 0, np.array([5, 8]))
    b = ("t", 0, np.array([6, 7, 9]))
    c = ("t", 1, np.array([1]))
    order = _stream_order([a, b, None, c], [2, 3, 2, 1])
    # Concatenated: a = 0-1, b = 2-4, the one without = 5-6, c = 7.
    assert order.tolist() == [0, 2, 3, 1, 4, 5, 6, 7]


@pytest.mark.parametrize("mode", [MERGE_ON_READ, COPY_ON_WRITE])
def test_deletes_of_keys_the_table_holds_twice_or_not_at_all_are_counted_by_key(tmp_path: Path, mode: str) -> None:
    catalog = _sql_catalog(tmp_path, **{MERGE_MODE: mode})
    # Key 5 twice, in two files (another writer's appends, which do not replace a key).
    for v in ("a", "b"):
        catalog.load_table("db.t").append(
            pa.table({"id": pa.array([5], pa.int64()), "op": ["c"], "v": [v], "lsn": pa.array([1], pa.int64())})
        )
    _commit(catalog, tmp_path, 1, [{"id": 5, "op": "d", "v": None}, {"id": 6, "op": "d", "v": None}])
    table = catalog.load_table("db.t")
    assert table.scan().to_arrow().num_rows == 0
    assert table.current_snapshot().summary[ABSENT_KEY_DELETES] == "1"  # (key 6)


def test_a_record_without_a_kafka_key_is_a_bad_record_when_upserts_key_by_it(tmp_path: Path) -> None:
    """Keyed by the ``_kafka_key`` metadata column, a record with a null key cannot be applied: a bad record with
    the reason, not a write that fails (the table's column is required, an identifier field)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField, StringType

    from connectors.config import SinkConfig
    from sinks.iceberg.arrow_writer import ArrowPartitionWriter
    from sinks.iceberg.settings import TableTarget
    from sinks.iceberg.writes import TargetTable
    from tests.conftest import sink_config

    config = SinkConfig.parse(
        sink_config(
            "orders",
            "db.t",
            **{
                "value.converter": "json",
                "value.converter.schemas.enable": "false",
                "iceberg.tables.upsert-mode-enabled": "true",
                "iceberg.tables.default-id-columns": "_kafka_key",
                "sinkadmin.metadata-columns": "key",
            },
        )
    )
    schema = Schema(
        NestedField(1, "v", StringType(), required=False),
        NestedField(2, "_kafka_key", StringType(), required=True),
        identifier_field_ids=[2],
    )
    target = TargetTable(TableTarget("db.t", (), None, ("_kafka_key",)), schema, str(tmp_path / "t"))
    writer = ArrowPartitionWriter(
        config.sink_view, lambda *_: target, lambda *_: target, uuid.uuid4(), "orders", 0, 10, tmp_path
    )
    values = [json.dumps({"v": v}).encode() for v in ("a", "keyless", "b")]
    writer.write(RecordChunk("orders", 0, [10, 11, 12], [0, 0, 0], [b"a", None, b"b"], values, [None] * 3, [None] * 3))
    staged = writer.finish(StagedPartition("orders", 0, 10, 13, 3, None, None))
    assert [(b.offset, b.stage) for b in staged.bad] == [(11, "TASK_PUT")]
    assert "no value for _kafka_key" in staged.bad[0].reason
    [written] = staged.files
    assert pq.read_table(written.path).to_pylist() == [{"v": "a", "_kafka_key": "a"}, {"v": "b", "_kafka_key": "b"}]


@pytest.mark.parametrize("mode", [MERGE_ON_READ, COPY_ON_WRITE])
def test_a_null_key_replaces_the_row_without_one_beside_other_keys(tmp_path: Path, mode: str) -> None:
    """The commit's keys prune the files by their bounds (In): a file whose key column is all null is kept for a
    commit with a null key, which matches the rows without one."""
    catalog = _sql_catalog(tmp_path, text_ids=True, **{MERGE_MODE: mode})
    for key, v in ((None, "n1"), ("a", "a1")):  # (two files: one of null keys only)
        catalog.load_table("db.t").append(
            pa.table({"id": pa.array([key], pa.string()), "op": ["c"], "v": [v], "lsn": pa.array([1], pa.int64())})
        )
    _commit(catalog, tmp_path, 2, [{"id": None, "op": "u", "v": "n2"}, {"id": "a", "op": "u", "v": "a2"}])
    rows = sorted((r["id"] or "", r["v"]) for r in catalog.load_table("db.t").scan().to_arrow().to_pylist())
    assert rows == [("", "n2"), ("a", "a2")]


@pytest.mark.django_db
def test_a_format_v3_table_of_a_column_spark_cannot_read_is_refused_before_it_is_created(tmp_path: Path) -> None:
    """A v3 table is written through Spark, which has no type for Iceberg's time (a Kafka Connect Time in the
    records' schema): the table is refused with the reason, not created (nor left at format 2 by an upgrade
    that failed)."""
    envelope = {
        "schema": {
            "type": "struct",
            "fields": [
                {"field": "id", "type": "int64", "optional": False},
                {"field": "opens", "type": "int32", "optional": True, "name": "org.apache.kafka.connect.data.Time"},
            ],
        },
        "payload": {"id": 1, "opens": 3600000},
    }
    writer = _table_writer(
        tmp_path,
        **{
            "iceberg.tables.auto-create-props.format-version": "3",
            "iceberg.tables.default-id-columns": "id",
            "value.converter.schemas.enable": "true",
        },
    )
    with pytest.raises(
        WriteRefused,
        match=r"db\.t the records would create \(not created\) is of format version 3.*"
        r"column 'opens' of type time, which Spark 3\.5 cannot read",
    ):
        writer.table(uuid.uuid4(), "db.t", lambda: [json.dumps(envelope).encode()])
    assert not writer.catalog.table_exists("db.t")
