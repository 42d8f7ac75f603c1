"""sinks.iceberg.upserts without servers: which records of a commit win, how files are rewritten or rows
deleted by position (a SQL catalog on SQLite, read back by pyiceberg), and which rows an upsert refuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sinks.iceberg.tables import CommitFile, TableCommit
from sinks.iceberg.upserts import (
    ABSENT_KEY_DELETES,
    MERGE_MODE,
    MERGE_ON_READ,
    RewriteUnit,
    UnappliableRows,
    UpsertRewrite,
    commit_upserts,
    key_column,
    winners,
)
from workers.json_decoder import JsonDecoder


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
    assert kept == {"path": None, "found": 0}
    assert rewritten["records"] == 3 and "-upsert-c0ffee-" in rewritten["path"]
    assert pq.read_table(rewritten["path"].removeprefix("file://")).column("id").to_pylist() == [0, 2, 4]
    assert pq.read_table(trimmed["path"].removeprefix("file://")).to_pylist() == [{"id": 1, "v": "newer1"}]


def _commit(catalog: Any, tmp_path: Path, number: int, rows: list[dict[str, object]]) -> None:
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
    )


def _sql_catalog(tmp_path: Path, **properties: str) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/warehouse")
    catalog.create_namespace("db")
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "op", StringType(), required=False),
        NestedField(3, "v", StringType(), required=False),
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


def test_copy_on_write_rewrites_the_files_holding_the_keys(tmp_path: Path) -> None:
    catalog = _sql_catalog(tmp_path)
    _commit(catalog, tmp_path, 1, [{"id": i, "op": "c", "v": f"v{i}"} for i in range(4)])
    _commit(catalog, tmp_path, 2, [{"id": 1, "op": "u", "v": "v1'"}, {"id": 5, "op": "d", "v": None}])
    table = catalog.load_table("db.t")
    assert {r["id"]: r["v"] for r in table.scan().to_arrow().to_pylist()} == {0: "v0", 1: "v1'", 2: "v2", 3: "v3"}
    summary = table.current_snapshot().summary
    assert summary["deleted-data-files"] == "1" and "added-position-delete-files" not in summary.additional_properties
    assert summary[ABSENT_KEY_DELETES] == "1"


def test_rows_without_a_key_or_with_an_unknown_operation_are_bad_records_with_the_reason() -> None:
    decoder = JsonDecoder(
        pa.schema([("id", pa.int64()), ("_cdc", pa.struct([("op", pa.string())]))]),
        reject=UnappliableRows(("id",), "_cdc.op"),
    )
    values = [
        b'{"id": 1, "_cdc": {"op": "I"}}',
        b'{"_cdc": {"op": "U"}}',
        b'{"id": 3, "_cdc": {"op": "t"}}',
        b'{"id": 4, "_cdc": {"op": " d"}}',
        b'{"id": 5, "_cdc": {"op": "r"}}',
        b'{"id": 6}',
    ]
    decoded = decoder.decode(values, [None] * len(values))
    assert decoded.positions == [0, 3, 4]
    assert decoded.columns.column("id").to_pylist() == [1, 4, 5]
    reasons = dict(decoded.bad)
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
