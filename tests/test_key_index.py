"""The key index of upsert lookups (sinks.iceberg.key_index): exact lookups, a cache that is only ever a cache,
and upsert commits of text keys through it that leave the table as the records say."""

from __future__ import annotations

import logging
import os
import random
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from sinks.iceberg import key_index
from sinks.iceberg.key_index import SUFFIX, FileKeys, KeyIndexCache, WantedKeys
from sinks.iceberg.tables import CommitFile, TableCommit
from sinks.iceberg.upserts import COPY_ON_WRITE, KEY_TEXT_FORMAT, MERGE_MODE, MERGE_ON_READ, commit_upserts, key_column
from tests.test_upserts import _sql_catalog


def _expected(keys: pa.Array, wanted: pa.Array) -> list[int]:
    hit = pc.is_in(keys, wanted, skip_nulls=True).fill_null(False)
    return np.nonzero(np.asarray(hit.to_numpy(zero_copy_only=False), dtype=bool))[0].tolist()


def test_a_lookup_finds_every_row_of_each_key_and_no_other() -> None:
    rng = random.Random(7)
    pool = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(300)]
    # Keys repeat (a file written before upsert mode, or rows deleted by position since), and some are null.
    keys = pa.array([rng.choice(pool) if rng.random() > 0.05 else None for _ in range(2000)])
    wanted = pa.array([*rng.sample(pool, 40), "absent", ""])
    positions, hit = FileKeys.of(keys).where(WantedKeys.of(wanted))
    assert positions.tolist() == _expected(keys, wanted)
    assert hit.to_pylist() == keys.take(pa.array(positions)).to_pylist()
    empty, none = FileKeys.of(keys).where(WantedKeys.of(pa.array(["absent"])))
    assert empty.tolist() == [] and none.to_pylist() == []


def test_keys_whose_hashes_collide_are_told_apart_by_their_text(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every key hashes alike: a lookup is then only the exact comparison, and must still be right.
    monkeypatch.setattr(key_index, "key_hashes", lambda keys: np.zeros(len(keys), dtype=np.int64))
    keys = pa.array(["a", "b", "a", "c", None, "b"])
    wanted = pa.array(["b", "z"])
    positions, hit = FileKeys.of(keys).where(WantedKeys.of(wanted))
    assert positions.tolist() == [1, 5] and hit.to_pylist() == ["b", "b"]


def test_a_key_held_many_times_and_keys_that_are_not_utf8_are_found() -> None:
    # A commit's own file keeps its superseded records of a key (deleted by position): a run of one key.
    keys = pa.array(["hot"] * 1000 + ["cold"] + ["hot"] * 5)
    positions, _ = FileKeys.of(keys).where(WantedKeys.of(pa.array(["hot"])))
    assert positions.tolist() == [*range(1000), *range(1001, 1006)]
    # Text another engine wrote that is not valid UTF-8 is compared as its bytes, as the columns' lookup does.
    raw = pa.array([b"ok", b"\xff\xfe", b"ok2"], pa.binary()).cast(pa.string(), safe=False)
    wanted = pa.array([b"\xff\xfe"], pa.binary()).cast(pa.string(), safe=False)
    assert FileKeys.of(raw).where(WantedKeys.of(wanted))[0].tolist() == [1]


def test_a_file_smaller_than_the_commit_is_searched_among_its_keys_and_finds_the_same_rows() -> None:
    """A lookup searches the commit's keys in a file's, or a file's smaller than the commit in the commit's:
    both find every row of each key and no other, a file's key held many times included."""
    rng = random.Random(11)
    pool = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(500)]
    for rows, wanted_count in [(30, 400), (400, 30), (1, 1), (5, 0)]:
        keys = pa.array([rng.choice(pool[:60]) if rng.random() > 0.1 else None for _ in range(rows)])
        wanted = pa.array(rng.sample(pool, wanted_count), pa.string())
        positions, hit = FileKeys.of(keys).where(WantedKeys.of(wanted))
        assert positions.tolist() == _expected(keys, wanted)
        assert hit.to_pylist() == keys.take(pa.array(positions)).to_pylist()


def test_wanted_keys_whose_hashes_collide_are_searched_in_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    # Two wanted keys hash alike: a file's hash may then match both, so the file is not searched among them.
    monkeypatch.setattr(key_index, "key_hashes", lambda keys: np.zeros(len(keys), dtype=np.int64))
    wanted = WantedKeys.of(pa.array(["b", "z", "y"]))
    assert not wanted.distinct
    positions, hit = FileKeys.of(pa.array(["z", "b"])).where(wanted)
    assert positions.tolist() == [0, 1] and hit.to_pylist() == ["z", "b"]


@pytest.mark.parametrize("kind", [pa.int8(), pa.int32(), pa.int64(), pa.uint32()])
def test_integer_keys_are_their_own_hashes_and_found_as_their_text(kind: pa.DataType) -> None:
    """An integer identifier column is indexed as its numbers (no hash, no text kept); a lookup finds each
    key's rows, and gives their keys as key_column writes them, in both directions of the search."""
    rng = random.Random(str(kind))
    top = 100 if kind == pa.int8() else 2**31 - 1
    low = 0 if kind == pa.uint32() else -top
    for rows, wanted_count in [(2000, 40), (40, 2000)]:
        values = pa.array([rng.randint(low, top) if rng.random() > 0.05 else None for _ in range(rows)], kind)
        wanted = np.unique(
            np.array(
                [rng.randint(low, top) for _ in range(wanted_count)] + values.drop_null()[:5].to_pylist(),
                dtype=np.int64,
            )
        )
        index = FileKeys.of_integers(values)
        assert index.keys is None
        positions, hit = index.where(WantedKeys.of_integers(wanted))
        text = key_column(pa.table({"id": values}), ["id"])
        assert positions.tolist() == _expected(text, pa.array(wanted).cast(pa.string()))
        assert hit.to_pylist() == text.take(pa.array(positions)).to_pylist()
    with pytest.raises(ValueError, match="integer keys are looked up in an index of integer keys"):
        FileKeys.of(pa.array(["1"])).where(WantedKeys.of_integers(np.array([1], dtype=np.int64)))


def test_a_files_integer_entry_is_kept_apart_from_its_text_one(tmp_path: Path) -> None:
    cache = KeyIndexCache(str(tmp_path), 1 << 30)
    path = "file:///t/data/f.parquet"
    cache.file_keys(path, ("id",), 3, lambda: pa.array([5, 6, 7]), integers=True)
    found = cache.file_keys(path, ("id",), 3, _never_read, integers=True)
    assert found is not None and found.keys is None
    assert found.where(WantedKeys.of_integers(np.array([6], dtype=np.int64)))[0].tolist() == [1]
    # The same file's text entry is another entry: each is read, not built again, after the other.
    text = cache.file_keys(path, ("id",), 3, lambda: pa.array(["5", "6", "7"]))
    assert text is not None and text.keys is not None
    assert cache.entry(path, ("id",), integers=True) != cache.entry(path, ("id",))
    assert cache.file_keys(path, ("id",), 3, _never_read, integers=True).keys is None
    assert cache.file_keys(path, ("id",), 3, _never_read).keys is not None


def test_keys_are_written_as_text_as_the_key_text_format_says() -> None:
    """The texts of KEY_TEXT_FORMAT "1". A change of how keys are written as text must change KEY_TEXT_FORMAT:
    the key indexes kept on disk hold keys as they were written, and would miss keys written another way."""
    from decimal import Decimal

    rows = pa.table(
        {
            "s": pa.array(["a"]),
            "i": pa.array([7], pa.int32()),
            "u": pa.array([uuid.UUID(int=1).bytes], pa.uuid()),
            "f": pa.array([b"\x01\x02"], pa.binary(2)),
            "b": pa.array([b"\xff"], pa.binary()),
            "d": pa.array([Decimal("1.50")], pa.decimal128(5, 2)),
            "t": pa.array([1_700_000_000_000_000], pa.timestamp("us", "UTC")),
        }
    )
    texts = {name: key_column(rows, [name]).to_pylist()[0] for name in rows.column_names}
    assert KEY_TEXT_FORMAT == "1"
    assert texts == {
        "s": "a",
        "i": "7",
        "u": "00000000000000000000000000000001",
        "f": "0102",
        "b": "ff",
        "d": "1.50",
        "t": "2023-11-14 22:13:20.000000Z",
    }
    assert key_column(rows, ["s", "i"]).to_pylist() == ["a\x1f7"]


def _never_read() -> pa.Array:
    raise AssertionError("the data file's keys were read again")


def test_an_entry_is_built_once_then_read_instead_of_the_data_file(tmp_path: Path) -> None:
    cache = KeyIndexCache(str(tmp_path / "cache"), 1 << 30)
    keys = pa.array(["k1", "k2", "k3"])
    wanted = pa.array(["k2"])
    built = cache.file_keys("s3://b/t/data/f1.parquet", ("id",), 3, lambda: keys)
    again = cache.file_keys("s3://b/t/data/f1.parquet", ("id",), 3, _never_read)
    assert again.where(WantedKeys.of(wanted))[0].tolist() == built.where(WantedKeys.of(wanted))[0].tolist()
    assert again.where(WantedKeys.of(wanted))[0].tolist() == [1]
    # Another file, or the same file keyed by other columns, has an entry of its own.
    assert cache.entry("s3://b/t/data/f1.parquet", ("id",)) != cache.entry("s3://b/t/data/f2.parquet", ("id",))
    assert cache.entry("s3://b/t/data/f1.parquet", ("id",)) != cache.entry("s3://b/t/data/f1.parquet", ("id", "x"))


def test_an_entry_that_is_not_the_data_files_or_is_torn_is_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = KeyIndexCache(str(tmp_path), 1 << 30)
    path = "file:///t/data/f.parquet"
    cache.file_keys(path, ("id",), 2, lambda: pa.array(["a", "b"]))
    # The same path with other rows (a file that is not the one indexed) is read again.
    rebuilt = cache.file_keys(path, ("id",), 3, lambda: pa.array(["a", "b", "c"]))
    assert rebuilt.where(WantedKeys.of(pa.array(["c"])))[0].tolist() == [2]
    entry = cache.entry(path, ("id",))
    entry.write_bytes(entry.read_bytes()[:100])
    with caplog.at_level(logging.INFO, logger="sinks.iceberg.key_index"):
        torn = cache.file_keys(path, ("id",), 3, lambda: pa.array(["a", "b", "c"]))
    assert torn.where(WantedKeys.of(pa.array(["b"])))[0].tolist() == [1]
    assert "unreadable" in caplog.text
    assert cache.file_keys(path, ("id",), 3, _never_read).keys.to_pylist() == torn.keys.to_pylist()
    # Keys written as text another way (another key_text, Arrow version or column type): rebuilt.
    other = cache.file_keys(path, ("id",), 3, lambda: pa.array(["x", "y", "z"]), rendering="another")
    assert sorted(other.keys.to_pylist()) == ["x", "y", "z"]
    with pytest.raises(ValueError, match="2 keys read for 3 rows"):
        KeyIndexCache(str(tmp_path / "other"), 1 << 30).file_keys(path, ("id",), 3, lambda: pa.array(["a", "b"]))


def test_a_cache_that_cannot_be_written_is_given_up_by_the_process(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A directory that cannot be written: the index built is used, once, and the process builds none there
    again (each would be built at every commit), saying so once."""
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    cache = KeyIndexCache(str(blocked / "cache"), 1 << 30)
    with caplog.at_level(logging.WARNING, logger="sinks.iceberg.key_index"):
        found = cache.file_keys("file:///f.parquet", ("id",), 2, lambda: pa.array(["a", "b"]))
        assert found is not None and found.where(WantedKeys.of(pa.array(["b"])))[0].tolist() == [1]
        assert cache.file_keys("file:///g.parquet", ("id",), 2, _never_read) is None
    assert caplog.text.count("cannot be kept") == 1
    key_index._UNWRITABLE.discard(cache.directory)


def test_entries_beyond_the_budget_go_least_recently_used_first(tmp_path: Path) -> None:
    keys = pa.array([f"key-{n:06d}" for n in range(2000)])
    probe = KeyIndexCache(str(tmp_path / "probe"), 1 << 30)
    probe.file_keys("f0", ("id",), len(keys), lambda: keys)
    size = probe.entry("f0", ("id",)).stat().st_size
    cache = KeyIndexCache(str(tmp_path / "cache"), int(size * 2.5))
    for n in range(2):
        cache.file_keys(f"f{n}", ("id",), len(keys), lambda: keys)
        entry = cache.entry(f"f{n}", ("id",))
        os.utime(entry, (time.time() - 100 + n, time.time() - 100 + n))
    cache.file_keys("f0", ("id",), len(keys), _never_read)  # (f0 is used: f1 is now the least recent)
    # What cannot be removed (here a directory named like an entry; another user's entry) is passed over.
    (tmp_path / "cache" / f"stray{SUFFIX}").mkdir()
    abandoned = tmp_path / "cache" / f"{key_index.PARTIAL}dead"
    abandoned.write_bytes(b"x")
    os.utime(abandoned, (time.time() - 2 * key_index.ABANDONED_SECONDS,) * 2)
    cache.file_keys("f2", ("id",), len(keys), lambda: keys)
    kept = {p.name for p in (tmp_path / "cache").iterdir()}
    assert kept == {cache.entry(n, ("id",)).name for n in ("f0", "f2")} | {f"stray{SUFFIX}"}
    assert all(name.endswith(SUFFIX) for name in kept)


def test_a_commit_with_a_null_key_looks_it_up_in_the_columns_as_before(tmp_path: Path) -> None:
    """A null key (a keyless record keyed by _kafka_key, say) matches the rows without a key, as the columns'
    lookup always has; an index leaves null keys out, so such a commit looks its keys up in the columns."""
    catalog = _catalog(tmp_path / "t", MERGE_ON_READ)
    cache = KeyIndexCache(str(tmp_path / "cache"), 1 << 30)
    indexed: dict[int, set[bool]] = {}
    number = 0

    def run_units(job: Any) -> list[dict[str, Any]]:
        indexed.setdefault(number, set()).add(job.key_cache is not None)
        return [job.run_unit(n) for n in range(job.count)]

    schema = pa.schema([("id", pa.string()), ("op", pa.string()), ("v", pa.string()), ("lsn", pa.int64())])
    for number, rows in enumerate(
        [
            [{"id": "a", "op": "c", "v": "1", "lsn": 1}, {"id": None, "op": "c", "v": "n1", "lsn": 2}],
            [{"id": None, "op": "u", "v": "n2", "lsn": 3}],
            [{"id": "a", "op": "u", "v": "2", "lsn": 4}],
        ]
    ):
        path = tmp_path / f"commit-{number}.parquet"
        pq.write_table(pa.Table.from_pylist(rows, schema), path)
        commit = TableCommit("t", f"commit-{number}", 1, (CommitFile(str(path)),), {"t": {"0": [0, 1]}}, None)
        commit_upserts(catalog, "db.t", commit, [CommitFile(str(path))], ["id"], "op", run_units, key_cache=cache)
    table = catalog.load_table("db.t").scan().to_arrow().to_pylist()
    assert sorted((r["id"] or "", r["v"]) for r in table) == [("", "n2"), ("a", "2")]
    # (The second commit's null key: looked up in the columns; the third's: in the index.)
    assert indexed[1] == {False} and indexed[2] == {True}


def test_integer_keys_are_looked_up_in_the_columns_when_their_entries_would_not_fit_the_budget(
    tmp_path: Path,
) -> None:
    """Entries of integer keys take 16 bytes a row: a table whose live files' entries exceed half the budget
    looks its keys up in the columns (entries evicted and built again at each commit would cost more)."""
    indexed: list[bool] = []

    def run_units(job: Any) -> list[dict[str, Any]]:
        indexed.append(job.key_cache is not None)
        return [job.run_unit(n) for n in range(job.count)]

    for budget, expected in [(1 << 30, True), (16 * 100, False)]:
        catalog = _sql_catalog(tmp_path / str(budget), **{MERGE_MODE: MERGE_ON_READ})
        cache = KeyIndexCache(str(tmp_path / f"cache-{budget}"), budget)
        for number, keys in enumerate([range(200), [5, 150, 999]]):
            path = tmp_path / str(budget) / f"commit-{number}.parquet"
            pq.write_table(
                pa.Table.from_pylist([{"id": k, "op": "u", "v": f"{k}@{number}", "lsn": 0} for k in keys]), path
            )
            commit = TableCommit("t", f"commit-{number}", 1, (CommitFile(str(path)),), {"t": {"0": [0, 1]}}, None)
            commit_upserts(catalog, "db.t", commit, [CommitFile(str(path))], ["id"], "op", run_units, key_cache=cache)
        rows = {r["id"]: r["v"] for r in catalog.load_table("db.t").scan().to_arrow().to_pylist()}
        assert len(rows) == 201 and rows[5] == "5@1" and rows[150] == "150@1" and rows[999] == "999@1"
        assert indexed[-1] is expected


# --- upsert commits of text keys through the index ---------------------------------------------------------


def _catalog(tmp_path: Path, mode: str) -> Any:
    return _sql_catalog(tmp_path, text_ids=True, **{MERGE_MODE: mode})


@pytest.mark.parametrize("key_type", ["uuid", "integer"])
@pytest.mark.parametrize("ordering_field", [None, "lsn"])
@pytest.mark.parametrize("mode", [MERGE_ON_READ, COPY_ON_WRITE])
def test_upserts_through_the_index_leave_the_table_the_records_say(
    tmp_path: Path, mode: str, ordering_field: str | None, key_type: str
) -> None:
    """Random commits of inserts, updates and deletes of UUID or integer keys (repeated within a commit,
    deletes of keys never written, with and without an ordering field): the table after each equals a model
    of the records, the same with the index as without it, and from the second commit on the index is read,
    not the files. (Commits and files of 20 to 60 rows: a file is searched among a commit's keys, or they in
    it, whichever is the fewer.)"""
    rng = random.Random(f"{mode}{ordering_field}{key_type}")
    pool: list[Any] = (
        [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(120)]
        if key_type == "uuid"
        else [rng.randint(-(2**40), 2**40) for _ in range(120)]
    )
    catalogs = {
        indexed: _sql_catalog(tmp_path / str(indexed), text_ids=key_type == "uuid", **{MERGE_MODE: mode})
        for indexed in (True, False)
    }
    cache = KeyIndexCache(str(tmp_path / "cache"), 1 << 30)
    model: dict[str, tuple[str, int]] = {}
    jobs: list[Any] = []

    def run_units(job: Any) -> list[dict[str, Any]]:
        jobs.append(job)
        return [job.run_unit(n) for n in range(job.count)]

    lsn = 0
    for number in range(6):
        rows = []
        for _ in range(rng.randint(20, 60)):
            lsn += 1
            key = rng.choice(pool)
            # (With the ordering field, some records carry an older position than the table's row of their key.)
            at = lsn - rng.choice([0, 0, 0, 500]) if ordering_field else lsn
            op = rng.choice(["c", "u", "u", "d"])
            rows.append({"id": key, "op": op, "v": None if op == "d" else f"{str(key)[:4]}@{at}", "lsn": at})
        for row in sorted(rows, key=lambda r: r["lsn"]) if ordering_field else rows:
            key = str(row["id"])
            if ordering_field and key in model and model[key][1] > int(str(row["lsn"])):
                continue
            if row["op"] == "d":
                model.pop(key, None)
            else:
                model[key] = (str(row["v"]), int(str(row["lsn"])))
        for indexed, catalog in catalogs.items():
            path = tmp_path / str(indexed) / f"commit-{number}.parquet"
            pq.write_table(pa.Table.from_pylist(rows), path)
            commit = TableCommit("t", f"commit-{number}", 1, (CommitFile(str(path)),), {"t": {"0": [0, 1]}}, None)
            commit_upserts(
                catalog,
                "db.t",
                commit,
                [CommitFile(str(path))],
                ["id"],
                "op",
                run_units,
                ordering_field=ordering_field,
                key_cache=cache if indexed else None,
            )
        tables = {
            indexed: {str(r["id"]): r["v"] for r in catalog.load_table("db.t").scan().to_arrow().to_pylist()}
            for indexed, catalog in catalogs.items()
        }
        assert tables[True] == {k: v for k, (v, _) in model.items()}
        assert tables[False] == tables[True]
    indexed_jobs = [job for job in jobs if job.key_cache is not None]
    assert indexed_jobs and all(job.wanted is not None for job in indexed_jobs)
    # (Integer keys are indexed as numbers: their hashes are the keys.)
    assert all((job.wanted.keys is None) == (key_type == "integer") for job in indexed_jobs)
    assert all(job.key_cache is None for job in jobs if job not in indexed_jobs)
    assert len(list((tmp_path / "cache").glob(f"*{SUFFIX}"))) >= 5
