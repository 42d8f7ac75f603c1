"""Commits that end before their interval (DESIGN step 2): on a record
threshold, when a partition's staging is full, and when a task has staged
what its writer writes in sinkadmin.commit.write-target-ms, and once a
backlog is read to its end, against the real broker, Postgres, Spark and
catalog.

The interval is ten minutes, far longer than a test runs: every commit a
test sees ended early. What is left below the threshold waits for the
interval, so each test stops first and checks that the table holds exactly
the records of the ranges the ledger committed (I1).
"""

from __future__ import annotations

import json
import time

import pytest

from connectors import actions
from connectors.models import Commit, CommitEnd, CommitState
from tests.integration.conftest import sink_config
from tests.integration.helpers import (
    create_topic,
    json_records,
    ledger_offsets,
    produce,
    running_in_threads,
    table_rows,
    topic_ids,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TEN_MINUTES = "600000"


def committed(name: str) -> list[Commit]:
    return list(Commit.objects.filter(connector_name=name, state=CommitState.COMMITTED))


def padded_records(count: int) -> list[bytes | None]:
    """``count`` JSON records of ~1 KB, with ids from 0."""
    return [json.dumps({"id": i, "note": "x" * 1000}).encode() for i in range(count)]


def assert_table_holds_exactly_the_committed_ranges(name: str, bootstrap: str) -> None:
    ids = sorted(r["id"] for r in table_rows(name, "db.events"))
    assert ids == sorted(topic_ids(bootstrap, ledger_offsets(name)))
    assert len(set(ids)) == len(ids)


def test_a_commit_ends_once_its_partitions_staged_max_records(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str
) -> None:
    create_topic(kafka_bootstrap, topic_name, 4)
    actions.create_connector(
        "bounded",
        sink_config(
            topic_name,
            "db.events",
            **{"iceberg.control.commit.interval-ms": TEN_MINUTES, "sinkadmin.commit.max-records": "300"},
        ),
    )
    waves = 3
    with running_in_threads("bounded", tasks=2):
        for wave in range(waves):
            # Past the threshold counted over both tasks, though each holds
            # only 200 of a wave: each wave ends at least one commit.
            produce(kafka_bootstrap, topic_name, json_records(wave * 400, 400), 4)
            wait_until(lambda w=wave: len(committed("bounded")) > w, 60, f"a commit ended by wave {wave}")

    commits = committed("bounded")
    # A commit ends once it holds the threshold, with what was staged by then.
    assert len(commits) >= waves and all(c.records >= 300 for c in commits)
    assert {c.ended_by for c in commits} == {CommitEnd.MAX_RECORDS}  # as the ledger (and the UI, the API) show it
    assert sum(ledger_offsets("bounded").values()) == sum(c.records for c in commits)
    assert_table_holds_exactly_the_committed_ranges("bounded", kafka_bootstrap)


@pytest.mark.parametrize("writer", ["arrow", "spark"])
def test_a_partition_whose_staging_fills_ends_the_commit_and_nothing_is_lost(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, writer: str
) -> None:
    create_topic(kafka_bootstrap, topic_name, 2)
    values = padded_records(24000)
    # ~13 MB per partition: a partition stages 1 MiB and the run of records
    # that crossed it, which is as long as librdkafka handed it over in one
    # consume batch (up to 5,000 records, a whole partition of a smaller
    # topic when the broker answered with it all at once). 12,000 a
    # partition fill its staging at least twice whatever the batching.
    produce(kafka_bootstrap, topic_name, values, 2)
    actions.create_connector(
        "full",
        sink_config(
            topic_name,
            "db.events",
            **{
                "iceberg.control.commit.interval-ms": TEN_MINUTES,
                "sinkadmin.staging.max-bytes": str(1 << 20),
                "sinkadmin.staging.buffer-bytes": str(1 << 16),
                "sinkadmin.writer": writer,
            },
        ),
    )
    with running_in_threads("full"):
        # Each partition paused at its bound and asked for the END; the
        # commit resumed it, and it filled again.
        wait_until(lambda: len(committed("full")) >= 2, 120, "two commits ended by full staging")

    assert {c.ended_by for c in committed("full")} == {CommitEnd.STAGING_FULL}
    assert_table_holds_exactly_the_committed_ranges("full", kafka_bootstrap)


def test_under_a_backlog_each_commit_holds_what_its_write_target_allows_and_nothing_is_lost(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str
) -> None:
    create_topic(kafka_bootstrap, topic_name, 2)
    # 86 MB waiting before the connector starts: a backlog of many commits,
    # as a Spark job's fixed part alone outlasts the 0.1 s write target
    # (commits then hold what the rest of a write does in as long: a few
    # MiB). The test stops long before the backlog's last commit (which
    # ends once the tasks have read it all: the test below).
    total = 80000
    produce(kafka_bootstrap, topic_name, padded_records(total), 2)
    actions.create_connector(
        "paced",
        sink_config(
            topic_name,
            "db.events",
            # (Spark, the default data plane: its write's time is what sizes a commit.)
            **{"iceberg.control.commit.interval-ms": TEN_MINUTES, "sinkadmin.commit.write-target-ms": "100"},
        ),
    )
    with running_in_threads("paced"):
        # The first commit holds what the assumed pace writes in 0.1 s (3.2
        # MiB); each later one what the last writes say: never the interval.
        wait_until(lambda: len(committed("paced")) >= 3, 180, "three commits sized by their writes")

    commits = committed("paced")
    assert {c.ended_by for c in commits} == {CommitEnd.WRITE_TARGET}
    assert all(c.records < total for c in commits)
    assert_table_holds_exactly_the_committed_ranges("paced", kafka_bootstrap)


def test_once_a_backlog_is_read_to_its_end_the_commit_ends_without_waiting_the_interval(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str
) -> None:
    create_topic(kafka_bootstrap, topic_name, 4)
    # 26 MB waiting: commits sized by the 0.1 s write target hold a few MiB,
    # so the backlog takes several. Records keep arriving a few at a time
    # meanwhile. Once the tasks have read the backlog, the commit holding its
    # tail ends as soon as both have read their partitions to their ends,
    # where it would wait out the ten-minute interval: the whole backlog is
    # committed well inside the interval. The next commit gets the whole
    # interval again.
    #
    # The tail's commit usually ends caught-up. It ends on the write target
    # instead when the write target happens to end a commit just at the
    # backlog's end; the catch-up commit after it then finds nothing new (no
    # trickled record yet) and ends empty, which leaves no ledger entry, or
    # ends caught-up with trickled records. Either way nothing waits.
    total = 24000
    backlog = produce(kafka_bootstrap, topic_name, padded_records(total), 4)
    actions.create_connector(
        "drained",
        sink_config(
            topic_name,
            "db.events",
            **{"iceberg.control.commit.interval-ms": TEN_MINUTES, "sinkadmin.commit.write-target-ms": "100"},
        ),
    )

    def backlog_committed() -> bool:
        offsets = ledger_offsets("drained")
        return all(offsets.get(tp, 0) >= end for tp, end in backlog.items())

    trickle = total
    with running_in_threads("drained", tasks=2):
        deadline = time.monotonic() + 180
        while not backlog_committed():
            assert time.monotonic() < deadline, "the backlog's tail waited for the interval"
            produce(kafka_bootstrap, topic_name, json_records(trickle, 8), 4)
            trickle += 8
            time.sleep(0.25)
        time.sleep(2)  # (the next commit waits for its interval: at most a caught-up one lands meanwhile)

    commits = sorted(committed("drained"), key=lambda c: c.started_at)
    ends = [c.ended_by for c in commits]
    assert ends[:-1] == [CommitEnd.WRITE_TARGET] * (len(commits) - 1)
    assert ends[-1] in (CommitEnd.WRITE_TARGET, CommitEnd.CAUGHT_UP)
    assert len(commits) >= 2 and sum(c.records for c in commits) >= total
    assert_table_holds_exactly_the_committed_ranges("drained", kafka_bootstrap)
