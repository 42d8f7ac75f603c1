"""End to end against the real broker, Postgres, Spark and Iceberg catalog (I1, I2, I6)."""

from __future__ import annotations

import itertools

import pytest

from connectors import actions
from connectors.models import Commit, CommitState
from sinks.iceberg.tables import PROP_OFFSETS
from tests.integration.conftest import sink_config
from tests.integration.helpers import (
    caught_up,
    create_topic,
    json_records,
    ledger_offsets,
    produce,
    running_in_threads,
    sink_snapshots,
    table_rows,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("writer", ["arrow", "spark"])
def test_every_record_lands_exactly_once_with_one_snapshot_per_commit(
    lake: dict[str, str], kafka_bootstrap: str, topic_name: str, writer: str
) -> None:
    partitions, count = 4, 2000
    create_topic(kafka_bootstrap, topic_name, partitions)
    ends = produce(kafka_bootstrap, topic_name, json_records(0, count), partitions)
    actions.create_connector("eo", sink_config(topic_name, "db.events", **{"sinkadmin.writer": writer}))

    with running_in_threads("eo", tasks=2):
        wait_until(caught_up("eo", ends), 120, "the ledger to reach the topic's end offsets")
        more = produce(kafka_bootstrap, topic_name, json_records(count, count), partitions)
        wait_until(caught_up("eo", more), 120, "the second batch")

    rows = table_rows("eo", "db.events")
    ids = [r["id"] for r in rows]
    assert len(ids) == 2 * count
    assert sorted(ids) == list(range(2 * count))
    assert ledger_offsets("eo") == more

    committed = Commit.objects.filter(connector_name="eo", state=CommitState.COMMITTED)
    with_files = [c for c in committed if c.files_count]
    snapshots = sink_snapshots("eo", "db.events")
    assert len(snapshots) == len(with_files)
    assert {s.snapshot_id for s in snapshots} == {c.snapshot_ids["db.events"] for c in with_files}
    assert all(PROP_OFFSETS in s.summary.additional_properties for s in snapshots)
    # I1: per partition, committed ranges are contiguous from 0 and never overlap.
    for (topic, partition), end in more.items():
        ranges = sorted(
            (p.start_offset, p.end_offset)
            for c in committed
            for p in c.partitions.all()
            if (p.topic, p.partition) == (topic, partition)
        )
        assert ranges[0][0] == 0 and ranges[-1][1] == end
        assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
