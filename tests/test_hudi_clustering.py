"""Hudi clustering (sinks/hudi/clustering.py): the size-based plan, and clusterings of real tables read
back with hudi-rs, an independent reader: the same rows before and after with their commit times, the
replacecommit as Hudi writes it, a clustering the sink raced rolled back, one cut mid-completion rolled
back by the sink's next commit, and the replaced file groups cleaned afterwards."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from sinks.hudi.cleaning import HudiCleaner
from sinks.hudi.clustering import (
    ClusteringAborted,
    HudiClusterer,
    HudiClusterJob,
    finish,
    groups_in_clustering,
    pending_clusterings,
    plan_clustering,
    settle,
    staging_root,
    written,
)
from sinks.hudi.plugin import KEEP_LATEST_FILE_VERSIONS
from sinks.hudi.settings import CleanerConfig, ClusteringConfig
from sinks.hudi.table import (
    REPLACE_COMMIT,
    REQUESTED,
    FileSlice,
    HudiTable,
    HudiTableSpec,
    instant_time,
    new_file_id,
)
from tests.test_hudi_sink import Sink
from tests.test_hudi_sink import read as read_rows
from tests.test_hudi_table import incoming, read
from workers.maintenance import BetweenCommits

SPEC = HudiTableSpec(
    name="events", record_key_fields=("id",), partition_fields=("region",), hive_style_partitioning=True
)
T0 = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
CONFIG = ClusteringConfig(small_file_limit=1 << 20, target_file_max_bytes=1 << 30)


def in_process(job: HudiClusterJob) -> list[dict[str, Any]]:
    """The job's units run here, as the arrow data plane's UnitRunner runs them."""
    return [job.run_unit(n) for n in range(job.count)]


@pytest.fixture
def events(tmp_path: Path) -> HudiTable:
    return HudiTable.create_or_load(pafs.LocalFileSystem(), str(tmp_path / "events"), SPEC)


def insert(table: HudiTable, at: datetime | str, ids: range, region: str = "eu", file_id: str = "") -> str:
    """A bulk_insert commit: one new file group of ``ids`` (or a new slice of ``file_id``, as an insert
    into a small file writes)."""
    instant = at if isinstance(at, str) else instant_time(at)
    table.start(instant, {})
    path = f"region={region}"
    records = pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "region": [region] * len(ids),
            "ts": pa.array([1] * len(ids), pa.int64()),
            "note": [f"n{i}" for i in ids],
        }
    )
    previous = table.latest_slices(path).get(file_id) if file_id else None
    group = file_id or new_file_id(f"{instant}/{path}")
    stat = table.write_slice(instant, path, group, previous, incoming(records), False, "0-0-0")
    table.complete(instant, [stat], records.schema, {}, "BULK_INSERT")
    return instant


def next_moment(table: HudiTable) -> datetime:
    """When the table's next instant may be: now, or after the newest on its timeline."""
    return datetime.strptime(table.next_instant(), "%Y%m%d%H%M%S%f").replace(tzinfo=UTC)


def content(base: Path, as_of: str | None = None) -> dict[int, tuple[Any, ...]]:
    """What a reader sees, by key: the row and its commit time (the file it is in aside)."""
    return {k: (r["note"], r["_hoodie_commit_time"], r["_hoodie_partition_path"]) for k, r in read(base, as_of).items()}


def small_files(table: HudiTable) -> list[str]:
    done = []
    for n in range(6):
        done.append(insert(table, T0 + timedelta(seconds=n), range(n * 10, n * 10 + 10), "eu" if n % 3 else "us"))
    return done


# --- plans --------------------------------------------------------------------------------


def fs(file_id: str, size: int) -> FileSlice:
    return FileSlice(file_id, f"/t/p/{file_id}_0-0-0_1.parquet", "1", size)


def test_small_slices_are_packed_per_partition_and_a_group_of_one_is_left_out() -> None:
    config = ClusteringConfig(small_file_limit=100, target_file_max_bytes=120, max_bytes_per_group=200)
    groups = plan_clustering(
        {"a": [fs("a1", 90), fs("a2", 80), fs("a3", 70), fs("big", 500)], "b": [fs("b1", 10)]}, config
    )
    # a: the largest first, up to 200 bytes a group: [a1 90, a2 80] and [a3 70] (one: left out);
    # big is no small file; b has one small file.
    assert [(g.partition, [s.file_id for s in g.inputs], g.outputs) for g in groups] == [("a", ["a1", "a2"], 2)]


def test_a_run_plans_at_most_max_num_groups() -> None:
    config = ClusteringConfig(small_file_limit=100, max_bytes_per_group=100, max_num_groups=2)
    slices = {p: [fs(f"{p}1", 40), fs(f"{p}2", 40)] for p in "abc"}
    assert [g.partition for g in plan_clustering(slices, config)] == ["a", "b"]


# --- clusterings of real tables -------------------------------------------------------------


def test_a_clustering_rewrites_small_file_groups_and_readers_see_the_same_rows(
    events: HudiTable, tmp_path: Path, turns: BetweenCommits
) -> None:
    base = tmp_path / "events"
    done = small_files(events)
    before = content(base)
    as_of_before = content(base, as_of=done[-1])
    groups_before = {p: set(events.latest_slices(p)) for p in ("region=eu", "region=us")}

    outcome = HudiClusterer(events, CONFIG, turns, in_process).run()

    assert outcome is not None and outcome.replaced_files == 6 and outcome.added_files == 2
    clustering = outcome.instant
    assert clustering > done[-1] and events.data_instants()[-1] == clustering
    # One file group per partition now; the rows, and the commits that wrote them, unchanged.
    for partition in ("region=eu", "region=us"):
        (group,) = events.latest_slices(partition).values()
        assert group.instant == clustering and group.file_id not in groups_before[partition]
    assert content(base) == before
    assert all(r["_hoodie_file_name"].endswith(f"_{clustering}.parquet") for r in read(base).values())
    # Time travel to before the clustering reads the replaced file groups, which are still there.
    assert content(base, as_of=done[-1]) == as_of_before
    # On the timeline as Hudi writes a clustering.
    metadata = events.commit_metadata(clustering, action=REPLACE_COMMIT)
    assert metadata["operationType"] == "CLUSTER"
    assert {p: set(ids) for p, ids in metadata["partitionToReplaceFileIds"].items()} == groups_before
    requested = next(iter(fastavro.reader(io.BytesIO(events.read_entry(clustering, REPLACE_COMMIT, REQUESTED)))))
    assert isinstance(requested, dict) and requested["operationType"] == "CLUSTER"
    assert sum(len(g["slices"]) for g in requested["clusteringPlan"]["inputGroups"]) == 6
    assert not Path(staging_root(events.base, clustering)).exists()
    # Nothing small left to cluster; cleaning then deletes the replaced file groups whole.
    assert HudiClusterer(events, CONFIG, turns, in_process).run() is None
    cleaned = HudiCleaner(events, CleanerConfig(policy=KEEP_LATEST_FILE_VERSIONS), turns).run()
    assert cleaned[0].deleted == 6
    assert content(base) == before
    assert len([p for p in base.rglob("*.parquet") if ".hoodie" not in p.parts]) == 2


def test_a_sink_commit_into_a_planned_file_group_makes_the_clustering_roll_back(
    events: HudiTable, tmp_path: Path, turns: BetweenCommits
) -> None:
    base = tmp_path / "events"
    small_files(events)
    clusterer = HudiClusterer(events, CONFIG, turns, in_process)
    instant, groups = turns.run(lambda: clusterer._request(clusterer.plan()))
    assert groups_in_clustering(events) == {(g.partition, s.file_id) for g in groups for s in g.inputs}
    in_process(HudiClusterJob(events.base, SPEC, instant, tuple(groups)))  # (its files aside)
    # Another writer adds rows to a planned file group meanwhile (the sink never does: its inserts
    # leave planned file groups alone; a writer that does not know the plan might).
    raced = groups[0].inputs[0]
    moment = next_moment(events)
    insert(events, moment, range(900, 905), raced.path.split("region=")[1].split("/")[0], raced.file_id)
    expected = content(base)

    with pytest.raises(ClusteringAborted, match="changed since it was read"):
        turns.run(lambda: clusterer._complete(instant, groups, [], pa.schema([])))

    assert pending_clusterings(events) == [] and events.completed(REPLACE_COMMIT) == []
    assert not (Path(staging_root(events.base, instant))).exists()
    assert content(base) == expected and 900 in expected


def test_commits_during_the_rewrite_go_on_and_readers_see_the_clustering_only_once_it_completes(
    events: HudiTable, tmp_path: Path, turns: BetweenCommits
) -> None:
    base = tmp_path / "events"
    small_files(events)
    before = content(base)
    committed: list[str] = []

    def rewrite_while_the_sink_commits(job: HudiClusterJob) -> list[dict[str, Any]]:
        outcomes = in_process(job)
        moment = next_moment(events)
        committed.append(insert(events, moment, range(700, 705), "us"))
        # The job's files are aside: a reader sees the commit, not them.
        assert content(base) == {**before, **{k: v for k, v in content(base).items() if k >= 700}}
        return outcomes

    outcome = HudiClusterer(events, CONFIG, turns, rewrite_while_the_sink_commits).run()

    assert outcome is not None and outcome.instant < committed[0]
    assert len(content(base)) == len(before) + 5
    assert {k: v for k, v in content(base).items() if k < 700} == before
    # The commit wrote a new file group (the planned ones take no inserts); the clustering replaced
    # the six it planned.
    assert outcome.replaced_files == 6
    assert all(
        r["_hoodie_file_name"].endswith(f"_{outcome.instant}.parquet") for r in read(base).values() if r["id"] < 700
    )


class Died(Exception):
    """The coordinator's death at a failpoint: nothing after it runs."""


def test_a_clustering_cut_while_completing_is_never_read_and_is_finished_by_the_sinks_next_commit(
    events: HudiTable, tmp_path: Path, turns: BetweenCommits, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = tmp_path / "events"
    small_files(events)

    def commit_during_the_rewrite(job: HudiClusterJob) -> list[dict[str, Any]]:
        outcomes = in_process(job)
        moment = next_moment(events)
        insert(events, moment, range(700, 705), "us")
        return outcomes

    def die(name: str) -> None:
        if name == "hudi.cluster_complete":
            raise Died(name)

    monkeypatch.setattr("sinks.hudi.clustering.failpoint", die)
    with pytest.raises(Died):
        HudiClusterer(events, CONFIG, turns, commit_during_the_rewrite).run()
    monkeypatch.undo()
    (cut,) = pending_clusterings(events)
    assert [p for p in base.rglob(f"*_{cut}.parquet") if ".hoodie" not in p.parts], "its files are in place"
    expected = content(base)
    # A reader sees no file of it, though a commit completed after the clustering was requested
    # (readers take base files of completed instants only).
    assert len(expected) == 65 and len(read(base)) == 65

    assert settle(events, requested=False) == ([cut], [])  # (the sink's next commit does this first)

    assert events.completed(REPLACE_COMMIT) == [cut] and pending_clusterings(events) == []
    assert content(base) == {k: (v[0], v[1], v[2]) for k, v in expected.items()}
    assert not Path(staging_root(events.base, cut)).exists()
    assert all(r["_hoodie_file_name"].endswith(f"_{cut}.parquet") for r in read(base).values() if r["id"] < 700)


def test_a_stale_coordinator_and_its_successor_completing_one_clustering_complete_it_once(
    events: HudiTable, tmp_path: Path, turns: BetweenCommits, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one that began completing it stopped after one rename (SIGSTOP, a long GC); the successor
    finishes it; the first wakes up and goes on: nothing is lost, nothing done twice."""
    base = tmp_path / "events"
    small_files(events)
    expected = content(base)
    stale = HudiClusterer(events, CONFIG, turns, in_process)
    instant, groups = turns.run(lambda: stale._request(stale.plan()))
    stats, schema = written(in_process(HudiClusterJob(events.base, SPEC, instant, tuple(groups))))
    moves = 0

    def stop_after_one_rename(source: str, target: str) -> None:
        nonlocal moves
        moves += 1
        if moves == 2:
            raise Died("frozen")
        pafs.LocalFileSystem().move(source, target)

    class OneRename(pafs.LocalFileSystem):  # type: ignore[misc]
        move = staticmethod(stop_after_one_rename)

    events.fs = OneRename()
    with pytest.raises(Died):
        turns.run(lambda: stale._complete(instant, groups, stats, schema))
    events.fs = pafs.LocalFileSystem()

    successor = HudiTable(pafs.LocalFileSystem(), events.base, SPEC)
    assert settle(successor, requested=False) == ([instant], [])
    assert content(base) == expected
    # The stale one wakes up: the plan is complete already, it changes nothing.
    assert finish(events, instant)
    assert events.completed(REPLACE_COMMIT) == [instant] and content(base) == expected


def test_a_plan_rolled_back_under_a_stale_coordinator_leaves_it_nothing_to_complete(
    events: HudiTable, tmp_path: Path, turns: BetweenCommits
) -> None:
    base = tmp_path / "events"
    small_files(events)
    expected = content(base)
    stale = HudiClusterer(events, CONFIG, turns, in_process)
    instant, groups = turns.run(lambda: stale._request(stale.plan()))
    stats, schema = written(in_process(HudiClusterJob(events.base, SPEC, instant, tuple(groups))))
    # The successor's maintenance rolls the plan back while the stale one waits for its turn.
    assert settle(events, requested=True) == ([], [instant])
    with pytest.raises(ClusteringAborted, match="no longer on the timeline"):
        turns.run(lambda: stale._complete(instant, groups, stats, schema))
    assert events.instants(REPLACE_COMMIT) == [] and content(base) == expected
    assert not [p for p in base.rglob(f"*_{instant}.parquet")]


def test_slices_the_sink_rewrote_between_planning_and_the_request_are_left_out(
    events: HudiTable, tmp_path: Path, turns: BetweenCommits
) -> None:
    """Inserts fill the smallest files first, the very ones a plan picks: a commit between the plan
    (on the maintenance thread) and the request (between two commits) must not doom the clustering."""
    base = tmp_path / "events"
    small_files(events)
    clusterer = HudiClusterer(events, CONFIG, turns, in_process)
    planned = clusterer.plan()
    rewritten = planned[0].inputs[0]
    moment = next_moment(events)
    insert(events, moment, range(800, 803), rewritten.path.split("region=")[1].split("/")[0], rewritten.file_id)
    expected = content(base)

    instant, groups = turns.run(lambda: clusterer._request(planned))

    assert rewritten.file_id not in {s.file_id for g in groups for s in g.inputs}
    assert sum(len(g.inputs) for g in groups) == 5
    stats, schema = written(in_process(HudiClusterJob(events.base, SPEC, instant, tuple(groups))))
    turns.run(lambda: clusterer._complete(instant, groups, stats, schema))
    assert events.completed(REPLACE_COMMIT) == [instant] and content(base).keys() == expected.keys()


def test_a_plan_left_requested_is_rolled_back_by_the_next_maintenance_so_cleaning_is_not_held_back(
    events: HudiTable, tmp_path: Path, turns: BetweenCommits
) -> None:
    base = tmp_path / "events"
    done = small_files(events)
    clusterer = HudiClusterer(events, CONFIG, turns, in_process)
    instant, groups = turns.run(lambda: clusterer._request(clusterer.plan()))
    in_process(HudiClusterJob(events.base, SPEC, instant, tuple(groups)))
    # (The coordinator died during the job.) Later commits rewrite file groups, as inserts do.
    for n in range(4):
        moment = next_moment(events)
        insert(events, moment, range(900 + n, 901 + n), "eu", groups[0].inputs[0].file_id)
    held = HudiCleaner(events, CleanerConfig(commits_retained=2), turns).plan()
    assert held.earliest_to_retain == done[-1]  # (the last commit before the pending plan)

    assert settle(events, requested=True) == ([], [instant])

    assert not Path(staging_root(events.base, instant)).exists() and groups_in_clustering(events) == set()
    assert HudiCleaner(events, CleanerConfig(commits_retained=2), turns).plan().earliest_to_retain > instant
    assert len(content(base)) == 64


def test_the_sinks_inserts_leave_file_groups_a_clustering_planned_alone(tmp_path: Path, turns: BetweenCommits) -> None:
    """Inserts fill small files first, except those a pending clustering will replace (as Hudi's
    UpsertPartitioner skips file groups in pending clustering): so a clustering replaces only rows it read."""
    base = tmp_path / "events"
    keys = {"hoodie.datasource.write.precombine.field": ""}
    bulk = Sink(base, **keys, **{"hoodie.datasource.write.operation": "bulk_insert"})
    for n in range(3):
        bulk.commit([(0, None, json.dumps({"id": n * 10 + i}).encode()) for i in range(10)])
    table = HudiTable(pafs.LocalFileSystem(), str(base), bulk.config.settings.spec())
    clusterer = HudiClusterer(table, CONFIG, turns, in_process)
    groups = clusterer.plan()
    planned = {s.file_id for g in groups for s in g.inputs}
    assert len(planned) == 3
    instant, groups = turns.run(lambda: clusterer._request(groups))
    outcomes = in_process(HudiClusterJob(table.base, table.spec, instant, tuple(groups)))

    inserts = Sink(base, **keys, **{"hoodie.datasource.write.operation": "insert"})
    inserts.next_offset = dict(bulk.next_offset)
    inserted = inserts.commit([(0, None, json.dumps({"id": 100 + i}).encode()) for i in range(5)])

    (stats,) = table.commit_metadata(inserted)["partitionToWriteStats"].values()
    assert {s["fileId"] for s in stats}.isdisjoint(planned) and all(s["prevCommit"] == "null" for s in stats)
    stats_of_job, schema = written(outcomes)
    turns.run(lambda: clusterer._complete(instant, groups, stats_of_job, schema))
    assert sorted(r["id"] for r in read_rows(base)) == [*range(30), *range(100, 105)]
