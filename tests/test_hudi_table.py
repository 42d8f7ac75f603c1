"""Hudi Copy-on-Write tables written by sinks.hudi.table, read back with hudi-rs (the `hudi`
package), an independent reader: inserts, upserts by precombine, deletes, time travel, and
commits that never completed."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pytest
from hudi import HudiReadOptions, HudiTableBuilder

from sinks.hudi.table import (
    DELETE,
    SEQUENCE,
    TOMBSTONE,
    HudiTable,
    HudiTableSpec,
    WriteStat,
    bucket_file_id,
    instant_time,
    partition_path,
)

SPEC = HudiTableSpec(
    name="orders",
    record_key_fields=("id",),
    partition_fields=("region",),
    precombine_field="ts",
    hive_style_partitioning=True,
)
T0 = datetime(2026, 11, 25, 12, 0, 0, tzinfo=UTC)


def rows(*records: dict[str, Any]) -> pa.Table:
    return pa.Table.from_pylist(
        list(records),
        schema=pa.schema([("id", pa.int64()), ("region", pa.string()), ("ts", pa.int64()), ("note", pa.string())]),
    )


def incoming(upserts: pa.Table, deletes: Sequence[str] = ()) -> pa.Table:
    """A file group's records as the participants hand them to the merge: keyed, in stream order."""
    n = len(upserts)
    keyed = upserts.append_column("_hoodie_record_key", upserts.column("id").cast(pa.string()))
    keyed = keyed.append_column("_hoodie_partition_path", pa.array([""] * n, pa.string()))
    keyed = keyed.append_column(DELETE, pa.array([False] * n)).append_column(TOMBSTONE, pa.array([False] * n))
    if deletes:
        gone = pa.table(
            {
                "_hoodie_record_key": pa.array(list(deletes), pa.string()),
                "_hoodie_partition_path": pa.array([""] * len(deletes), pa.string()),
                DELETE: pa.array([True] * len(deletes)),
                TOMBSTONE: pa.array([True] * len(deletes)),
            }
        )
        keyed = pa.concat_tables([keyed, gone], promote_options="permissive")
    return keyed.append_column(SEQUENCE, pa.array(range(len(keyed)), pa.int64()))


def write(table: HudiTable, instant: str, path: str, upserts: pa.Table, deletes: Sequence[str] = ()) -> WriteStat:
    previous = next(iter(table.latest_slices(path, before=instant).values()), None)
    file_id = previous.file_id if previous else bucket_file_id(0, path)
    return table.write_slice(instant, path, file_id, previous, incoming(upserts, deletes), True, "0-0-0")


def commit(table: HudiTable, at: datetime, upserts: pa.Table, deletes: dict[str, list[str]] | None = None) -> str:
    """One commit: each partition's upserts and deletes, then the commit made visible."""
    instant = instant_time(at)
    table.start(instant, {})
    partitions = {partition_path(SPEC, [r]) for r in upserts.column("region").to_pylist()} | set(deletes or {})
    stats = []
    for path in sorted(partitions):
        region = path.split("=", 1)[1]
        mine = upserts.filter(pc.equal(upserts.column("region"), region))
        stats.append(write(table, instant, path, mine, (deletes or {}).get(path, [])))
    table.complete(instant, stats, upserts.schema, {})
    return instant


def read(base: Path, as_of: str | None = None) -> dict[int, dict[str, Any]]:
    hudi = HudiTableBuilder.from_base_uri(str(base)).build()
    options = HudiReadOptions() if as_of is None else HudiReadOptions().with_as_of_timestamp(as_of)
    batches = hudi.read(options)
    table = pa.Table.from_batches(batches, schema=hudi.get_schema_with_meta_fields()) if batches else None
    return {r["id"]: r for r in (table.to_pylist() if table is not None else [])}


@pytest.fixture
def table(tmp_path: Path) -> HudiTable:
    return HudiTable.create_or_load(pafs.LocalFileSystem(), str(tmp_path / "orders"), SPEC)


def test_a_commit_is_read_back_with_its_meta_columns(table: HudiTable, tmp_path: Path) -> None:
    first = commit(
        table,
        T0,
        rows({"id": 1, "region": "eu", "ts": 1, "note": "a"}, {"id": 2, "region": "us", "ts": 1, "note": "b"}),
    )
    found = read(tmp_path / "orders")
    assert sorted(found) == [1, 2]
    assert found[1]["note"] == "a" and found[1]["_hoodie_commit_time"] == first
    assert found[1]["_hoodie_record_key"] == "1" and found[1]["_hoodie_partition_path"] == "region=eu"
    assert found[1]["_hoodie_file_name"].endswith(f"_{first}.parquet")
    hudi = HudiTableBuilder.from_base_uri(str(tmp_path / "orders")).build()
    assert hudi.table_name == "orders" and hudi.table_type == "COPY_ON_WRITE"


def test_upserts_keep_the_newest_by_precombine_and_deletes_remove(table: HudiTable, tmp_path: Path) -> None:
    first = commit(
        table,
        T0,
        rows(
            {"id": 1, "region": "eu", "ts": 5, "note": "v1"},
            {"id": 2, "region": "eu", "ts": 5, "note": "v1"},
            {"id": 3, "region": "us", "ts": 5, "note": "v1"},
        ),
    )
    second = commit(
        table,
        T0 + timedelta(seconds=1),
        rows(
            {"id": 1, "region": "eu", "ts": 6, "note": "newer"},
            {"id": 3, "region": "us", "ts": 4, "note": "older: loses to the stored record"},
            {"id": 4, "region": "us", "ts": 1, "note": "inserted"},
            {"id": 4, "region": "us", "ts": 2, "note": "inserted, twice in one commit: the greater ts"},
        ),
        deletes={"region=eu": ["2"]},
    )
    found = read(tmp_path / "orders")
    assert {k: r["note"] for k, r in found.items()} == {
        1: "newer",
        3: "v1",
        4: "inserted, twice in one commit: the greater ts",
    }
    # A record carried into the new version keeps the commit that wrote it.
    assert found[3]["_hoodie_commit_time"] == first and found[1]["_hoodie_commit_time"] == second
    # Time travel: the first commit's state, from its own base files.
    assert {k: r["note"] for k, r in read(tmp_path / "orders", as_of=first).items()} == {1: "v1", 2: "v1", 3: "v1"}


def test_a_commit_that_never_completed_is_invisible_and_rolled_back(table: HudiTable, tmp_path: Path) -> None:
    commit(table, T0, rows({"id": 1, "region": "eu", "ts": 1, "note": "committed"}))
    # A writer that died mid-commit: its files are written, its instant inflight.
    dead = instant_time(T0 + timedelta(seconds=1))
    table.start(dead, {})
    write(table, dead, "region=eu", rows({"id": 1, "region": "eu", "ts": 9, "note": "never committed"}))
    assert read(tmp_path / "orders")[1]["note"] == "committed"
    # Still unread once a later commit completed: hudi-rs takes base files of completed instants,
    # not every file up to the newest one.
    later = commit(
        table, T0 + timedelta(seconds=1, milliseconds=500), rows({"id": 3, "region": "us", "ts": 1, "note": "later"})
    )
    assert later > dead and read(tmp_path / "orders")[1]["note"] == "committed"
    assert table.roll_back() == [dead]
    assert not [p for p in (tmp_path / "orders").rglob(f"*{dead}*")]
    # The next commit builds on the last completed version, not on the dead one's.
    commit(table, T0 + timedelta(seconds=2), rows({"id": 2, "region": "eu", "ts": 1, "note": "next"}))
    assert {k: r["note"] for k, r in read(tmp_path / "orders").items()} == {1: "committed", 2: "next", 3: "later"}


def test_a_table_reopened_with_another_record_key_is_refused(table: HudiTable, tmp_path: Path) -> None:
    HudiTable.create_or_load(pafs.LocalFileSystem(), str(tmp_path / "orders"), SPEC)  # same spec: fine
    other = HudiTableSpec(name="orders", record_key_fields=("uuid",), partition_fields=("region",))
    with pytest.raises(ValueError, match=re.escape("hoodie.table.recordkey.fields='id', not 'uuid'")):
        HudiTable.create_or_load(pafs.LocalFileSystem(), str(tmp_path / "orders"), other)
