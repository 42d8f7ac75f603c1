"""sinks.iceberg.upserts without servers: which records of a commit win, and how files are rewritten."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from sinks.iceberg.upserts import RewriteUnit, UpsertRewrite, key_column, winners


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
    assert kept == {"path": None}
    assert rewritten["records"] == 3 and "-upsert-c0ffee-" in rewritten["path"]
    assert pq.read_table(rewritten["path"].removeprefix("file://")).column("id").to_pylist() == [0, 2, 4]
    assert pq.read_table(trimmed["path"].removeprefix("file://")).to_pylist() == [{"id": 1, "v": "newer1"}]
