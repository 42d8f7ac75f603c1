"""Hudi cleaning (sinks/hudi/cleaning.py): the policies' plans as Hudi's CleanPlanner makes them, and
cleans run on real tables read back with hudi-rs, an independent reader: same rows before and after,
time travel within the retention intact, the timeline's Avro entries as Hudi writes them, and a clean
killed half way finished by the next run."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import fastavro
import pyarrow.fs as pafs
import pytest

from sinks.hudi.cleaning import (
    CLEAN_METADATA_SCHEMA,
    CLEANER_PLAN_SCHEMA,
    BaseFile,
    HudiCleaner,
    earliest_to_retain,
    plan_clean,
)
from sinks.hudi.plugin import KEEP_LATEST_BY_HOURS, KEEP_LATEST_COMMITS, KEEP_LATEST_FILE_VERSIONS
from sinks.hudi.settings import CleanerConfig
from sinks.hudi.table import CLEAN, COMMIT, HudiTable, instant_time
from tests.test_hudi_clustering import next_moment
from tests.test_hudi_table import SPEC, T0, commit, read, rows
from workers.maintenance import BetweenCommits

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def instants(n: int) -> list[str]:
    return [instant_time(NOW - timedelta(minutes=n - i)) for i in range(n)]


def slices(file_id: str, at: list[str], partition: str = "p") -> list[BaseFile]:
    return [BaseFile(partition, file_id, i, f"{partition}/{file_id}_0-0-0_{i}.parquet", 10) for i in at]


def doomed(plan: Any) -> set[tuple[str, str]]:
    return {(f.file_id, f.instant) for files in plan.files.values() for f in files}


# --- plans ------------------------------------------------------------------------------


def test_keep_latest_commits_keeps_the_retained_commits_slices_and_the_last_one_before_them() -> None:
    c = instants(6)
    # Group a: rewritten by every commit. Group b: written by commit 0 only. Group c: by 0 and 2.
    files = slices("a", c) + slices("b", c[:1]) + slices("c", [c[0], c[2]])
    plan = plan_clean(files, c, [], CleanerConfig(policy=KEEP_LATEST_COMMITS, commits_retained=3), NOW)
    # The earliest commit to retain is the 3rd newest. a's slices of c0 and c1 go, c2's (the last
    # before it) stays for a query as of c3; c's c0 goes, its c2 is both; b's one slice stays,
    # whatever its age.
    assert plan.earliest_to_retain == c[3]
    assert doomed(plan) == {("a", c[0]), ("a", c[1]), ("c", c[0])}
    assert plan.last_completed == c[-1]


def test_a_pending_commit_older_than_the_retention_holds_the_cleaner_back_to_the_commit_before_it() -> None:
    c = instants(6)
    pending = instant_time(datetime.strptime(c[1], "%Y%m%d%H%M%S%f") + timedelta(seconds=1))
    # (Between c1 and c2: a query as of c1 must still read what it read, once the pending one completes.)
    assert earliest_to_retain(c, [pending], CleanerConfig(commits_retained=2), NOW) == c[1]
    plan = plan_clean(slices("a", c), c, [pending], CleanerConfig(commits_retained=2), NOW)
    assert doomed(plan) == set()  # (c0 is the last slice before c1)
    # Pending before every completed commit: nothing can be cleaned.
    early = instant_time(datetime.strptime(c[0], "%Y%m%d%H%M%S%f") - timedelta(seconds=1))
    assert earliest_to_retain(c, [early], CleanerConfig(commits_retained=2), NOW) is None


def test_a_replaced_file_group_goes_whole_once_its_replacement_is_older_than_the_retention() -> None:
    c = instants(6)
    # Group a was replaced by the clustering c2 (group z holds its rows since), b by the clustering c4.
    files = slices("a", c[:2]) + slices("z", [c[2]]) + slices("b", [c[0]]) + slices("y", [c[4]])
    replaced = {("p", "a"): c[2], ("p", "b"): c[4]}
    plan = plan_clean(files, c, [], CleanerConfig(commits_retained=3), NOW, replaced)
    # The earliest commit to retain is c3: a query as of c3 reads z, not a; as of c4, b is gone
    # but a query as of c3 still reads it.
    assert plan.earliest_to_retain == c[3]
    assert doomed(plan) == {("a", c[0]), ("a", c[1])}
    files_only = plan_clean(files, c, [], CleanerConfig(policy=KEEP_LATEST_FILE_VERSIONS), NOW, replaced)
    assert doomed(files_only) == {("a", c[0]), ("a", c[1]), ("b", c[0])}


def test_nothing_is_cleaned_before_there_are_more_commits_than_retained() -> None:
    c = instants(3)
    assert plan_clean(slices("a", c), c, [], CleanerConfig(commits_retained=3), NOW).count == 0


def test_keep_latest_file_versions_keeps_the_newest_slices_of_each_group() -> None:
    c = instants(5)
    plan = plan_clean(
        slices("a", c) + slices("b", c[:2]),
        c,
        [],
        CleanerConfig(policy=KEEP_LATEST_FILE_VERSIONS, file_versions_retained=2),
        NOW,
    )
    assert doomed(plan) == {("a", c[0]), ("a", c[1]), ("a", c[2])}


def test_keep_latest_by_hours_retains_the_commits_of_the_window() -> None:
    old = [instant_time(NOW - timedelta(hours=h)) for h in (30, 28, 26)]
    recent = [instant_time(NOW - timedelta(hours=h)) for h in (5, 1)]
    c = old + recent
    config = CleanerConfig(policy=KEEP_LATEST_BY_HOURS, hours_retained=24)
    plan = plan_clean(slices("a", c), c, [], config, NOW)
    assert plan.earliest_to_retain == recent[0]
    assert doomed(plan) == {("a", old[0]), ("a", old[1])}
    # No commit within the window: nothing to measure retention from, nothing cleaned.
    assert plan_clean(slices("a", old), old, [], config, NOW).count == 0


# --- cleans of real tables ----------------------------------------------------------------


@pytest.fixture
def orders(tmp_path: Path) -> HudiTable:
    return HudiTable.create_or_load(pafs.LocalFileSystem(), str(tmp_path / "orders"), SPEC)


def history(table: HudiTable, commits: int) -> list[str]:
    """Commits that each rewrite both partitions' file groups (one upsert per key per commit)."""
    done = []
    for i in range(commits):
        done.append(
            commit(
                table,
                T0 + timedelta(seconds=i),
                rows(
                    {"id": 1, "region": "eu", "ts": i, "note": f"v{i}"},
                    {"id": 2, "region": "us", "ts": i, "note": f"v{i}"},
                    {"id": 10 + i, "region": "eu", "ts": i, "note": "inserted"},
                ),
            )
        )
    return done


def entry(table: HudiTable, instant: str, state: str) -> dict[str, Any]:
    record = next(iter(fastavro.reader(io.BytesIO(table.read_entry(instant, CLEAN, state)))))
    assert isinstance(record, dict)
    return record


def base_files(base: Path) -> set[str]:
    """Base files, relative to the table's base path."""
    return {str(p.relative_to(base)) for p in base.rglob("*.parquet") if ".hoodie" not in p.parts}


def test_a_clean_deletes_old_slices_readers_see_the_same_rows_and_time_travel_within_the_retention_works(
    orders: HudiTable, tmp_path: Path, turns: BetweenCommits
) -> None:
    table = orders
    base = tmp_path / "orders"
    done = history(table, 6)
    latest_before = read(base)
    as_of_before = {i: read(base, as_of=i) for i in done[-3:]}
    files_before = base_files(base)

    outcomes = HudiCleaner(table, CleanerConfig(commits_retained=3), turns, clock=NOW.timestamp).run()

    assert len(outcomes) == 1 and outcomes[0].failed == 0
    clean = outcomes[0].instant
    # Each partition's one file group had a slice per commit: the retained three, and the one before
    # them, stay; the two oldest go.
    gone = files_before - base_files(base)
    assert outcomes[0].deleted == len(gone) == 4
    assert {path.rsplit("_", 1)[1].removesuffix(".parquet") for path in gone} == set(done[:2])
    assert read(base) == latest_before
    assert {i: read(base, as_of=i) for i in done[-3:]} == as_of_before
    # On the timeline as Hudi writes a clean: the plan (requested, inflight) and the metadata, Avro.
    assert clean > done[-1]
    plan = entry(table, clean, "requested")
    assert plan == entry(table, clean, "inflight")
    assert plan["policy"] == KEEP_LATEST_COMMITS and plan["version"] == 2
    assert plan["earliestInstantToRetain"] == {"timestamp": done[3], "action": COMMIT, "state": "COMPLETED"}
    planned = {p: sorted(i["filePath"] for i in infos) for p, infos in plan["filePathsToBeDeletedPerPartition"].items()}
    assert planned == {
        p: sorted(f"{base}/{path}" for path in gone if path.startswith(f"{p}/")) for p in ("region=eu", "region=us")
    }
    metadata = entry(table, clean, "completed")
    assert metadata["totalFilesDeleted"] == 4 and metadata["earliestCommitToRetain"] == done[3]
    assert metadata["lastCompletedCommitTimestamp"] == done[-1] and metadata["version"] == 2
    deleted = [f"{p}/{name}" for p, m in metadata["partitionMetadata"].items() for name in m["successDeleteFiles"]]
    assert sorted(deleted) == sorted(gone)
    # Nothing more to clean: no new instant.
    assert HudiCleaner(table, CleanerConfig(commits_retained=3), turns).run() == []
    assert table.instants(CLEAN) == [clean]


def test_a_clean_killed_half_way_is_finished_from_its_plan_and_the_sink_goes_on_around_it(
    orders: HudiTable, tmp_path: Path, turns: BetweenCommits
) -> None:
    table = orders
    base = tmp_path / "orders"
    history(table, 5)
    cleaner = HudiCleaner(table, CleanerConfig(commits_retained=2), turns)
    plan = cleaner.plan()
    # The run that died: its plan is on the timeline, one of its files deleted.
    instant = turns.run(lambda: cleaner._request(plan))
    first = next(iter(plan.files.values()))[0]
    (base / first.path).unlink()
    # The sink is not held up by the clean in flight: its next instant follows it, and its
    # roll-back of commits that never completed leaves the clean alone.
    assert table.roll_back() == []
    later = commit(table, next_moment(table), rows({"id": 99, "region": "us", "ts": 1, "note": "after"}))
    assert later > instant and table.next_instant() > later
    expected = read(base)

    outcomes = HudiCleaner(table, CleanerConfig(commits_retained=2), turns).run()

    assert outcomes[0].instant == instant and outcomes[0].deleted == plan.count and outcomes[0].failed == 0
    assert all(not (base / f.path).exists() for files in plan.files.values() for f in files)
    assert table.completed(CLEAN) == [instant, *[o.instant for o in outcomes[1:]]]
    assert read(base) == expected
    fastavro.parse_schema(CLEAN_METADATA_SCHEMA)  # (the schemas are valid Avro)
    fastavro.parse_schema(CLEANER_PLAN_SCHEMA)


def test_a_clean_left_with_an_unreadable_plan_does_not_stop_cleaning(
    orders: HudiTable, tmp_path: Path, turns: BetweenCommits
) -> None:
    table = orders
    base = tmp_path / "orders"
    history(table, 5)
    expected = read(base)
    broken = table.next_instant()
    table.write_entry(broken, CLEAN, "requested", b"not avro")
    cleaner = HudiCleaner(table, CleanerConfig(commits_retained=2), turns)

    outcomes = cleaner.run()

    assert list(cleaner.unreadable) == [broken] and cleaner.unreadable[broken]
    assert len(outcomes) == 1 and outcomes[0].deleted == 4 and outcomes[0].instant > broken
    assert read(base) == expected
